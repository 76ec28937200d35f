use crate::split::{Labels, Split, stratified_folds, train_test};
use crate::{ProbeParams, macro_f1};

fn labels(v: &[usize]) -> Labels {
    Labels::unnamed(v.to_vec()).unwrap()
}

#[test]
fn macro_f1_matches_hand_computation() {
    // class 0: tp 1, fp 1, fn 1 -> 0.5; class 1: tp 1, fp 1, fn 1 -> 0.5; class 2: tp 1 -> 1.
    let f = macro_f1(&[0, 1, 1, 2], &[0, 0, 1, 2], 3);
    let want = (2.0 / 3.0 + 2.0 / 3.0 + 1.0) / 3.0;
    assert!((f - want).abs() < 1e-12, "{f} vs {want}");
}

#[test]
fn stratified_split_keeps_class_shares_and_is_seeded() {
    let v: Vec<usize> = (0..100).map(|i| usize::from(i % 4 == 0)).collect();
    let l = labels(&v);
    let (tr, te) = train_test(&l, &Split::Stratified, 0.8, 7).unwrap();
    assert_eq!(tr.len() + te.len(), 100);
    assert_eq!(te.iter().filter(|&&i| v[i] == 1).count(), 5);
    assert_eq!(te.iter().filter(|&&i| v[i] == 0).count(), 15);
    let again = train_test(&l, &Split::Stratified, 0.8, 7).unwrap();
    assert_eq!((tr.clone(), te.clone()), again);
    let other = train_test(&l, &Split::Stratified, 0.8, 8).unwrap();
    assert_ne!(tr, other.0);
}

#[test]
fn folds_are_balanced_and_stratified() {
    let v: Vec<usize> = (0..90).map(|i| i % 3).collect();
    let l = labels(&v);
    let train: Vec<usize> = (0..90).collect();
    let f = stratified_folds(&l, &train, 3, 1).unwrap();
    for fold in 0..3 {
        for c in 0..3 {
            let n = (0..90).filter(|&i| f[i] == fold && v[i] == c).count();
            assert_eq!(n, 10, "fold {fold} class {c}");
        }
    }
}

#[test]
fn split_file_parses_words_and_digits() {
    let s = Split::parse("# roles\ntrain\nTEST\n\n1\n0\n").unwrap();
    use crate::Role::{Test, Train};
    assert_eq!(s, Split::Given(vec![Train, Test, Train, Test]));
    let e = Split::parse("train\nvalid\n").unwrap_err().to_string();
    assert_eq!(
        e,
        "split line 2: expected `train`, `test`, `1` or `0`, found \"valid\""
    );
}

#[test]
fn params_check_rejects_bad_values_and_sorts_grid() {
    let v = ProbeParams {
        grid: vec![1e-3, 1e-1, 1e-3],
        ..Default::default()
    }
    .check()
    .unwrap();
    assert_eq!(v.params().grid, vec![1e-1, 1e-3]);
    for bad in [
        ProbeParams {
            train_frac: 1.0,
            ..Default::default()
        },
        ProbeParams {
            folds: 1,
            ..Default::default()
        },
        ProbeParams {
            grid: vec![],
            ..Default::default()
        },
        ProbeParams {
            grid: vec![-1.0],
            ..Default::default()
        },
        ProbeParams {
            tol: f64::NAN,
            ..Default::default()
        },
    ] {
        assert!(bad.check().is_err());
    }
}

#[test]
fn solver_names_parse_print_and_serialise() {
    use crate::Solver;
    for (solver, name) in [(Solver::Lbfgs, "lbfgs"), (Solver::Linfa, "linfa")] {
        assert_eq!(solver.to_string(), name);
        assert_eq!(name.to_uppercase().parse::<Solver>(), Ok(solver));
        let json = format!("{{\"solver\": \"{name}\"}}");
        let p: ProbeParams = serde_json::from_str(&json).unwrap();
        assert_eq!(p.solver, solver);
        assert!(
            serde_json::to_string(&p)
                .unwrap()
                .contains(&format!("\"solver\":\"{name}\""))
        );
    }
    assert_eq!(
        "newton".parse::<Solver>(),
        Err("unknown solver \"newton\": use lbfgs or linfa".to_owned())
    );
    // Options written before the solver existed keep the in-house default.
    let old: ProbeParams = serde_json::from_str(r#"{"folds": 4}"#).unwrap();
    assert_eq!(old.solver, Solver::Lbfgs);
    assert!(serde_json::from_str::<ProbeParams>(r#"{"solver": "newton"}"#).is_err());
}

mod solver {
    use linfa::prelude::*;
    use linfa_logistic::MultiLogisticRegression;
    use ndarray::{Array1, Array2};
    use rand::RngCore;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::SeedableRng;

    use crate::solver::{Problem, column_stats};

    /// Agreement of probabilities between two solvers of the same convex objective
    /// (our kernel runs its GEMMs in f32).
    const PROB_TOL: f64 = 2e-3;

    fn data(n: usize, d: usize, k: usize, seed: u64) -> (Array2<f32>, Vec<usize>) {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        let mut u = || (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        let y: Vec<usize> = (0..n).map(|i| i % k).collect();
        let x = Array2::from_shape_fn((n, d), |(i, j)| {
            (u() * 3.0 + if j % k == y[i] { 1.0 } else { 0.0 } + j as f64 * 0.5) as f32
        });
        (x, y)
    }

    fn probs(theta: &[f64], x: &Array2<f64>, k: usize) -> Array2<f64> {
        let d = x.ncols();
        Array2::from_shape_fn((x.nrows(), k), |(i, q)| {
            let z: Vec<f64> = (0..k)
                .map(|c| {
                    theta[d * k + c] + (0..d).map(|j| x[[i, j]] * theta[j * k + c]).sum::<f64>()
                })
                .collect();
            let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = z.iter().map(|t| (t - m).exp()).sum();
            (z[q] - m).exp() / s
        })
    }

    fn standardise(x: &Array2<f32>) -> Array2<f32> {
        let (mu, inv) = column_stats(x.view(), &[0..x.nrows()]);
        Array2::from_shape_fn(x.dim(), |(i, j)| {
            ((f64::from(x[[i, j]]) - mu[j]) * inv[j]) as f32
        })
    }

    #[test]
    fn fit_matches_linfa_logistic_on_the_same_objective() {
        let (n, d, k, l2) = (300, 6, 3, 0.05);
        let (x, y) = data(n, d, k, 1);
        let xs = standardise(&x);
        let prob = Problem::new(xs.view(), &y, k, &[0..n], vec![0.0; d], vec![1.0; d], false);
        let ours = prob
            .fit(vec![0.0; prob.n_params()], l2, 1000, 1e-5)
            .unwrap();
        assert!(ours.stop.converged(), "{:?}", ours.stop);
        let x64 = xs.mapv(f64::from);
        let ds = Dataset::new(x64.clone(), Array1::from(y.clone()));
        let theirs = MultiLogisticRegression::default()
            .alpha(n as f64 * l2)
            .max_iterations(1000)
            .gradient_tolerance(1e-8)
            .fit(&ds)
            .unwrap();
        let p_ours = probs(&ours.theta, &x64, k);
        let p_theirs = theirs.predict_probabilities(&x64);
        let worst = (&p_ours - &p_theirs)
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(worst < PROB_TOL, "max probability difference {worst}");
    }

    #[test]
    fn folded_standardisation_equals_standardising_a_copy() {
        // Fitting rows 0..120 of raw x with their stats folded into the weights must give the
        // same predictions as fitting an explicitly standardised copy of those rows.
        let (n, d, k, l2) = (200, 5, 3, 0.01);
        let (x, y) = data(n, d, k, 2);
        let (mu, inv) = column_stats(x.view(), &[0..120]);
        let folded = Problem::new(x.view(), &y, k, &[0..120], mu.clone(), inv.clone(), false);
        let a = folded
            .fit(vec![0.0; folded.n_params()], l2, 1000, 1e-5)
            .unwrap();
        let copy = Array2::from_shape_fn(x.dim(), |(i, j)| {
            ((f64::from(x[[i, j]]) - mu[j]) * inv[j]) as f32
        });
        let plain = Problem::new(
            copy.view(),
            &y,
            k,
            &[0..120],
            vec![0.0; d],
            vec![1.0; d],
            false,
        );
        let b = plain
            .fit(vec![0.0; plain.n_params()], l2, 1000, 1e-5)
            .unwrap();
        let pa = folded.predict(&a.theta, x.view(), 120..n);
        let pb = plain.predict(&b.theta, copy.view(), 120..n);
        assert_eq!(pa, pb);
        let worst = a
            .theta
            .iter()
            .zip(&b.theta)
            .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        assert!(worst < 1e-3, "max parameter difference {worst}");
    }
}

//! The probe as a linfa model: `ParamGuard`, `Fit` on a `linfa::Dataset`, `Predict`, linfa's
//! cross-validation and metrics, and the linfa-logistic solver option.

use linfa::prelude::*;
use ndarray::{Array1, Array2, Ix1};
use repgeom_probe::{
    Error, Features, FittedProbe, Labels, LayerProbe, ProbeParams, Solver, Split, StopReason,
    accuracy, macro_f1,
};

use crate::{blobs, check};

/// The probe of one layer three ways: [`check`]'s `probe_layer` report, the plan's
/// `fit_layer` model, and linfa's `Fit` on a dataset of the plan's training rows; with the
/// test rows as a dataset.
struct Three {
    report: LayerProbe,
    plan_model: FittedProbe,
    linfa_model: FittedProbe,
    test: Dataset<f64, usize, Ix1>,
}

fn three(x: &[f32], y: &[usize], d: usize, params: ProbeParams) -> repgeom_probe::Result<Three> {
    let report = check(x, y, d, params.clone(), Split::Stratified)?;
    let plan = params
        .clone()
        .check()?
        .plan(Labels::unnamed(y.to_vec())?, &Split::Stratified)?;
    let features = Features::new(3, y.len(), d, x)?;
    let plan_model = plan.fit_layer(3, features)?;
    let rows = |idx: &[usize]| {
        let recs = Array2::from_shape_fn((idx.len(), d), |(i, j)| f64::from(x[idx[i] * d + j]));
        Dataset::new(recs, idx.iter().map(|&i| y[i]).collect::<Array1<usize>>())
    };
    let train = rows(&plan.train_rows());
    // Through linfa's blanket `Fit` for `ParamGuard` types: checks, then fits.
    let linfa_model = params.fit(&train)?;
    Ok(Three {
        report,
        plan_model,
        linfa_model,
        test: rows(plan.test_rows()),
    })
}

fn small(solver: Solver) -> ProbeParams {
    ProbeParams {
        grid: vec![1e-1, 1e-2, 1e-3],
        control: false,
        solver,
        ..Default::default()
    }
}

#[test]
fn linfa_fit_and_predict_give_probe_layers_model_and_predictions() {
    // (n, d, k, sep, seed, solver): the fixtures of the tests above.
    for (n, d, k, sep, seed, solver) in [
        (400, 32, 4, 12.0, 1, Solver::Lbfgs),
        (300, 20, 3, 3.0, 8, Solver::Lbfgs),
        (600, 300, 3, 3.0, 3, Solver::Lbfgs),
        (200, 6, 2, 8.0, 6, Solver::Linfa),
    ] {
        let case = format!("n {n} d {d} k {k} sep {sep} seed {seed} {solver}");
        let (x, y) = blobs(n, d, k, sep, seed);
        let t = three(&x, &y, d, small(solver)).unwrap();
        // The same code path: the same model, bit for bit.
        assert_eq!(t.linfa_model, t.plan_model, "{case}");
        assert_eq!(
            t.linfa_model.classes(),
            (0..k).collect::<Vec<_>>(),
            "{case}"
        );
        assert_eq!(t.linfa_model.chosen_l2(), t.report.chosen_l2, "{case}");
        assert_eq!(t.linfa_model.cv_accuracy(), t.report.cv_accuracy, "{case}");
        assert_eq!(t.linfa_model.iterations(), t.report.iterations, "{case}");
        assert_eq!(t.linfa_model.stop(), t.report.stop, "{case}");
        // linfa's Predict on the test rows scores exactly what probe_layer reported.
        let pred: Array1<usize> = t.linfa_model.predict(&t.test);
        let truth = t.test.targets().to_vec();
        let pred = pred.to_vec();
        assert_eq!(accuracy(&pred, &truth), t.report.accuracy, "{case}");
        assert_eq!(macro_f1(&pred, &truth, k), t.report.macro_f1, "{case}");
        // f32 records give the same model as their f64 copies.
        let train32 = Dataset::new(
            t.test.records().mapv(|v| v as f32),
            t.test.targets().clone(),
        );
        let a = small(solver).fit(&train32).unwrap();
        let b = small(solver)
            .fit(&Dataset::new(
                train32.records().mapv(f64::from),
                train32.targets().clone(),
            ))
            .unwrap();
        assert_eq!(a, b, "{case}");
    }
}

#[test]
fn raw_weights_and_intercepts_predict_like_the_probe() {
    let (x, y) = blobs(300, 10, 3, 6.0, 12);
    let t = three(&x, &y, 10, small(Solver::Lbfgs)).unwrap();
    let m = &t.linfa_model;
    let logits = t.test.records().dot(&m.weights()) + &m.intercept();
    let argmax: Vec<usize> = logits
        .rows()
        .into_iter()
        .map(|r| (0..r.len()).fold(0, |b, q| if r[q] > r[b] { q } else { b }))
        .collect();
    let pred: Array1<usize> = m.predict(t.test.records());
    // f64 raw-coordinate logits against the f32 kernel: equal away from near-ties.
    let differ = argmax.iter().zip(&pred).filter(|(a, b)| a != b).count();
    assert!(differ <= 1, "{differ} of {} differ", pred.len());
}

#[test]
fn the_probe_composes_with_linfa_cross_validation_and_metrics() {
    let (x, y) = blobs(240, 12, 3, 10.0, 21);
    let recs = Array2::from_shape_fn((240, 12), |(i, j)| f64::from(x[i * 12 + j]));
    let mut data = Dataset::new(recs, Array1::from(y));
    // linfa's k-fold cross-validation over two parameter sets (rows dealt i % 3, so its
    // contiguous folds hold every class).
    let params = [small(Solver::Lbfgs), small(Solver::Linfa)];
    let acc = data
        .cross_validate_single(4, &params, |pred, truth| {
            Ok(pred.confusion_matrix(truth)?.accuracy())
        })
        .unwrap();
    assert!(acc.iter().all(|&a| a >= 0.95), "{acc}");
    // linfa's confusion matrix on the probe's predictions agrees with the crate's accuracy.
    let (train, valid) = data.split_with_ratio(0.75);
    let probe = ProbeParams::default().check().unwrap().fit(&train).unwrap();
    let pred = probe.predict(&valid);
    let cm = pred.confusion_matrix(&valid).unwrap();
    let ours = accuracy(&pred.to_vec(), &valid.targets().to_vec());
    assert!(
        (f64::from(cm.accuracy()) - ours).abs() < 1e-6,
        "{cm:?} vs {ours}"
    );
}

#[test]
fn invalid_params_fail_through_linfas_param_guard_with_the_crates_message() {
    let (x, y) = blobs(60, 3, 2, 8.0, 5);
    let recs = Array2::from_shape_fn((60, 3), |(i, j)| f64::from(x[i * 3 + j]));
    let data = Dataset::new(recs, Array1::from(y));
    for (params, message) in [
        (
            ProbeParams {
                folds: 1,
                ..Default::default()
            },
            "invalid probe parameter folds = 1: must be at least 2",
        ),
        (
            ProbeParams {
                grid: vec![1e-2, -1.0],
                ..Default::default()
            },
            "invalid probe parameter grid = -1.0: strengths must be finite and positive",
        ),
        (
            ProbeParams {
                tol: 0.0,
                ..Default::default()
            },
            "invalid probe parameter tol = 0.0: must be finite and positive",
        ),
        (
            ProbeParams {
                train_frac: 1.5,
                ..Default::default()
            },
            "invalid probe parameter train_frac = 1.5: must lie strictly between 0 and 1",
        ),
    ] {
        let by_ref = ParamGuard::check_ref(&params).unwrap_err().to_string();
        let fitted = params.fit(&data).unwrap_err().to_string();
        let owned = ParamGuard::check(params).unwrap_err().to_string();
        assert_eq!([&by_ref, &fitted, &owned], [message; 3]);
    }
    // check_ref borrows the grid as given; the fit sorts it as `check` does.
    let unsorted = ProbeParams {
        grid: vec![1e-3, 1e-1, 1e-2, 1e-1],
        ..small(Solver::Lbfgs)
    };
    assert_eq!(
        ParamGuard::check_ref(&unsorted).unwrap().params().grid,
        unsorted.grid
    );
    let via_ref = unsorted.fit(&data).unwrap();
    let via_check = unsorted.clone().check().unwrap().fit(&data).unwrap();
    assert_eq!(via_ref, via_check);
    assert_eq!(via_ref.cv_accuracy().len(), 3);
}

#[test]
fn bad_datasets_and_records_give_clear_errors() {
    let ok = Array2::from_shape_fn((20, 2), |(i, j)| (i * 2 + j) as f64);
    let labels = Array1::from_shape_fn(20, |i| 10 + i % 2);
    let mut nan = ok.clone();
    nan[[4, 1]] = f64::NAN;
    let mut huge = ok.clone();
    huge[[2, 0]] = 1e300;
    let p = small(Solver::Lbfgs);
    let fit = |x: Array2<f64>, y: Array1<usize>| p.fit(&Dataset::new(x, y)).map(|_| ());
    for (result, message) in [
        (
            fit(nan, labels.clone()),
            "record [4, 1] of [20, 2] is NaN; records must be finite f32 values",
        ),
        (
            fit(huge, labels.clone()),
            "record [2, 0] of [20, 2] is 1e300; records must be finite f32 values",
        ),
        (
            fit(ok.clone(), labels.slice(ndarray::s![..19]).to_owned()),
            "dataset has 20 records but 19 targets",
        ),
        (
            fit(Array2::zeros((0, 2)), Array1::zeros(0)),
            "dataset records [0, 2] are empty",
        ),
        (
            fit(ok.clone(), Array1::from_elem(20, 7)),
            "all labels hold a single class (7); a probe needs at least two",
        ),
        (
            fit(
                ok.slice(ndarray::s![..2, ..]).to_owned(),
                labels.slice(ndarray::s![..2]).to_owned(),
            ),
            "2 training examples cannot be split into 3 cross-validation folds",
        ),
    ] {
        assert_eq!(result.unwrap_err().to_string(), message);
    }
    // Targets keep their labels; predictions of the wrong width are an error, not a guess.
    let m = p.fit(&Dataset::new(ok.clone(), labels)).unwrap();
    assert_eq!(m.classes(), [10, 11]);
    let e = m.try_predict(&Array2::<f64>::zeros((3, 5))).unwrap_err();
    assert!(
        matches!(
            e,
            Error::FeatureCount {
                expected: 2,
                found: 5
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "records have 5 features but the probe was fitted on 2"
    );
}

#[test]
fn both_solvers_give_the_same_test_accuracy_on_the_fixtures() {
    // (n, d, k, sep, seed, grid): the fixtures of the tests above with the small grid, then
    // two with the default grid (weaker strengths, and the control task).
    for (n, d, k, sep, seed, default) in [
        (400, 32, 4, 12.0, 1, false),
        (300, 20, 3, 3.0, 8, false),
        (200, 6, 2, 8.0, 6, false),
        (600, 300, 3, 3.0, 3, false),
        (300, 20, 3, 3.0, 8, true),
        (600, 300, 3, 3.0, 3, true),
    ] {
        let (x, y) = blobs(n, d, k, sep, seed);
        let run = |solver| {
            let p = if default {
                ProbeParams {
                    solver,
                    ..Default::default()
                }
            } else {
                small(solver)
            };
            check(&x, &y, d, p, Split::Stratified).unwrap()
        };
        let (a, b) = (run(Solver::Lbfgs), run(Solver::Linfa));
        let case = format!("n {n} d {d} k {k} seed {seed} default grid {default}:\n{a:?}\n{b:?}");
        let one = 1.0 / a.n_test as f64 + 1e-12;
        assert!((a.accuracy - b.accuracy).abs() <= one, "{case}");
        assert_eq!(b.iterations, 0, "linfa reports no iteration count: {case}");
        if let (Some(ca), Some(cb)) = (&a.control, &b.control) {
            assert!((ca.accuracy - cb.accuracy).abs() <= one, "{case}");
        }
    }
}

#[test]
fn linfa_solver_handles_classes_missing_from_a_fit() {
    // Labels 0..=3 with class 2 never used and class 3 on two examples (one training row,
    // so one fold's fit lacks it): linfa only models present classes; the probe keeps all.
    let (x, mut y) = blobs(120, 6, 2, 8.0, 30);
    y[7] = 3;
    y[50] = 3;
    for solver in [Solver::Lbfgs, Solver::Linfa] {
        let r = check(&x, &y, 6, small(solver), Split::Stratified).unwrap();
        assert!(r.accuracy > 0.9, "{solver}: {r:?}");
        let labels = Labels::unnamed(y.clone()).unwrap();
        let plan = small(solver)
            .check()
            .unwrap()
            .plan(labels, &Split::Stratified)
            .unwrap();
        let m = plan
            .fit_layer(0, Features::new(0, 120, 6, &x).unwrap())
            .unwrap();
        assert_eq!(m.classes(), [0, 1, 2, 3]);
        let pred: Array1<usize> = m.predict(&Array2::from_shape_vec((120, 6), x.clone()).unwrap());
        assert!(
            !pred.iter().any(|&c| c == 2),
            "{solver}: absent class predicted"
        );
        if solver == Solver::Linfa {
            assert_eq!(m.intercept()[2], f64::NEG_INFINITY);
            assert!(m.weights().column(2).iter().all(|&w| w == 0.0));
        }
    }
}

#[test]
fn linfa_solver_reports_convergence_by_the_same_gradient_test() {
    // An unreachable tolerance is never reported as converged; a reachable one is.
    let (x, y) = blobs(300, 20, 3, 3.0, 8);
    let tight = ProbeParams {
        grid: vec![1e-4],
        tol: 1e-15,
        max_iter: 50,
        ..small(Solver::Linfa)
    };
    let r = check(&x, &y, 20, tight, Split::Stratified).unwrap();
    assert!(!r.converged && r.stop == StopReason::LinfaStopped, "{r:?}");
    let easy = ProbeParams {
        grid: vec![1e-1],
        ..small(Solver::Linfa)
    };
    let r = check(&x, &y, 20, easy, Split::Stratified).unwrap();
    assert!(
        r.converged && r.stop == StopReason::GradientTolerance,
        "{r:?}"
    );
}

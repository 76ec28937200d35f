//! The covariance route against the points: any batching and any merge of shards equals one
//! pass, and every spectral metric equals its value on the gathered rows.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_testkit::assert_close;

use super::*;
use crate::input::LayerInput;
use crate::state::AccumulatorState;

/// Agreement of the covariance route with the points' route, relative to the value's size.
const ROUTE_TOL: f64 = 1e-10;
/// Agreement of two accumulations of the same tokens (rounding of the sums only).
const SPLIT_TOL: f64 = 1e-12;

/// `n` points in `d` dimensions with a decaying spectrum and a far-off mean (so centring
/// matters): row `i` is `μ + Σ_j z_ij (1 + j)^(-0.7) e_j`, seeded.
fn points(n: usize, d: usize, seed: u64) -> Mat<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Mat::from_fn(n, d, |_, j| {
        let z: f64 = StandardNormal.sample(&mut rng);
        (3.0 + 0.1 * j as f64 + z * (1.0 + j as f64).powf(-0.7)) as f32
    })
}

/// The accumulator of `x` fed in the given batch sizes (cycled).
fn fed(x: &Mat<f32>, sizes: &[usize]) -> CovarianceAccumulator {
    let mut acc = CovarianceAccumulator::new(x.ncols(), "test layer");
    let (mut start, mut k) = (0, 0);
    while start < x.nrows() {
        let m = sizes[k % sizes.len()].min(x.nrows() - start);
        acc.update(x.as_ref().subrows(start, m)).unwrap();
        start += m;
        k += 1;
    }
    acc
}

fn check_same(a: &CovarianceSpectrum, b: &CovarianceSpectrum, tol: f64, what: &str) {
    assert_eq!((a.n, a.d), (b.n, b.d), "{what}");
    for centred in [true, false] {
        let (x, y) = (
            a.singular_values(centred).unwrap(),
            b.singular_values(centred).unwrap(),
        );
        let top = x[0];
        for (i, (&u, &v)) in x.iter().zip(y).enumerate() {
            assert_close(
                u,
                v,
                tol * top,
                &format!("{what}: σ_{i} (centred {centred})"),
            );
        }
    }
}

#[test]
fn any_batching_and_any_merge_equal_one_pass() {
    let x = points(2000, 24, 1);
    let one = fed(&x, &[2000]).spectrum().unwrap();
    for sizes in [&[1][..], &[7, 300, 2], &[64], &[999, 1001]] {
        check_same(
            &fed(&x, sizes).spectrum().unwrap(),
            &one,
            SPLIT_TOL,
            &format!("batches {sizes:?}"),
        );
    }
    // Four shards of the corpus, each its own accumulator (its own shift), merged in two
    // orders and as a tree.
    let bounds = [0, 300, 1100, 1101, 2000];
    let shards: Vec<CovarianceAccumulator> = (0..4)
        .map(|s| {
            fed(
                &x.as_ref()
                    .subrows(bounds[s], bounds[s + 1] - bounds[s])
                    .to_owned(),
                &[128],
            )
        })
        .collect();
    for order in [[0, 1, 2, 3], [3, 1, 0, 2]] {
        let mut acc = CovarianceAccumulator::new(24, "merged");
        for &s in &order {
            acc.merge(&shards[s]).unwrap();
        }
        assert_eq!(acc.n(), 2000);
        check_same(
            &acc.spectrum().unwrap(),
            &one,
            SPLIT_TOL,
            &format!("merge {order:?}"),
        );
    }
    let (mut left, mut right) = (shards[0].clone(), shards[2].clone());
    left.merge(&shards[1]).unwrap();
    right.merge(&shards[3]).unwrap();
    left.merge(&right).unwrap();
    check_same(&left.spectrum().unwrap(), &one, SPLIT_TOL, "tree merge");
}

#[test]
fn every_spectral_metric_equals_its_value_on_the_points() {
    let x = points(3000, 48, 2);
    let spectrum = fed(&x, &[500, 37]).spectrum().unwrap();
    let input = LayerInput::new(x.as_ref(), "test layer", Par::Seq).unwrap();
    let configs = [
        serde_json::json!({"metric": "rankme"}),
        serde_json::json!({"metric": "rankme", "center": true}),
        serde_json::json!({"metric": "rankme", "convention": "covariance"}),
        serde_json::json!({"metric": "alpha_req"}),
        serde_json::json!({"metric": "alpha_req", "fit": "full_rank"}),
        serde_json::json!({"metric": "isotropy", "isoscore": true, "mean_cosine": false, "partition": false}),
        serde_json::json!({"metric": "condition_number"}),
        serde_json::json!({"metric": "condition_number", "of": "covariance"}),
    ];
    for config in configs {
        let m = crate::metric_from_config(config.as_object().unwrap()).unwrap();
        let (streamed, direct) = (
            m.compute_spectrum(&spectrum).unwrap(),
            m.compute(&input).unwrap(),
        );
        assert_eq!(streamed.len(), direct.len(), "{config}");
        for (s, p) in streamed.iter().zip(&direct) {
            assert_eq!((&s.metric, &s.variant), (&p.metric, &p.variant), "{config}");
            assert_close(
                s.value,
                p.value,
                ROUTE_TOL * p.value.abs().max(1.0),
                &config.to_string(),
            );
            for (key, v) in &p.extra {
                assert_close(
                    s.extra[key],
                    *v,
                    ROUTE_TOL * v.abs().max(1.0),
                    &format!("{config} {key}"),
                );
            }
        }
    }
}

#[test]
fn metrics_of_the_points_themselves_are_refused_by_name() {
    let x = points(200, 8, 3);
    let spectrum = fed(&x, &[50]).spectrum().unwrap();
    let isotropy = crate::metric("isotropy").unwrap();
    let err = isotropy
        .compute_spectrum(&spectrum)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("isotropy needs the points themselves") && err.contains("mean_cosine"),
        "{err}"
    );
    let twonn = crate::metric("intrinsic_dim_twonn").unwrap();
    let err = twonn.compute_spectrum(&spectrum).unwrap_err().to_string();
    assert!(err.contains("not a function of the spectrum"), "{err}");
}

#[test]
fn bad_batches_and_merges_are_errors() {
    let mut acc = CovarianceAccumulator::new(4, "layer 3");
    let wide = Mat::<f32>::zeros(5, 6);
    let err = acc.update(wide.as_ref()).unwrap_err().to_string();
    assert!(
        err.contains("layer 3") && err.contains("width d = 4"),
        "{err}"
    );
    let mut nan = Mat::<f32>::zeros(5, 4);
    nan[(2, 1)] = f32::NAN;
    assert!(matches!(
        acc.update(nan.as_ref()),
        Err(Error::NonFinite { row: 2, col: 1, .. })
    ));
    assert_eq!(acc.n(), 0, "a refused batch adds nothing");
    assert!(matches!(acc.spectrum(), Err(Error::TooFewPoints { .. })));
    let other = CovarianceAccumulator::new(5, "layer 4");
    assert!(matches!(
        acc.merge(&other),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn convergence_checkpoints_are_powers_of_two_and_the_end() {
    let x = points(5000, 16, 4);
    let mut conv = SpectralConvergence::new(16, "test layer");
    for start in (0..5000).step_by(333) {
        conv.update(x.as_ref().subrows(start, 333.min(5000 - start)))
            .unwrap();
    }
    let rankme = crate::metric("rankme").unwrap();
    let report = conv.report(rankme.as_ref(), 0.01).unwrap();
    assert_eq!(report.tokens, [1024, 2048, 4096, 5000]);
    // Each checkpoint is the accumulator of exactly that prefix.
    let prefix = fed(&x.as_ref().subrows(0, 2048).to_owned(), &[2048])
        .spectrum()
        .unwrap();
    let direct = rankme.compute_spectrum(&prefix).unwrap()[0].value;
    assert_close(
        report.values[1],
        direct,
        SPLIT_TOL * direct,
        "RankMe at 2048 tokens",
    );
    // The final value is the whole pass's, and a tolerance the spread exceeds is reported so.
    let whole = rankme
        .compute_spectrum(&fed(&x, &[5000]).spectrum().unwrap())
        .unwrap()[0]
        .value;
    assert_close(
        report.values[3],
        whole,
        SPLIT_TOL * whole,
        "RankMe over every token",
    );
    let spread = (report.values.iter())
        .map(|v| (v - whole).abs() / whole)
        .fold(0.0, f64::max);
    let loose = conv.report(rankme.as_ref(), 2.0 * spread).unwrap();
    assert_eq!(loose.stable_from, Some(1024));
    let rows = loose.values();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3].extra["stable_from"], 1024.0);
    assert!(conv.report(rankme.as_ref(), 0.0).is_err());
}

#[test]
fn a_state_reads_back_exactly_and_a_bad_one_is_refused() {
    let x = points(700, 10, 5);
    let acc = fed(&x, &[100]);
    let back = CovarianceAccumulator::from_state(&acc.state(), "shard.safetensors").unwrap();
    assert_eq!(back.state(), acc.state());
    let (b, a) = (back.spectrum().unwrap(), acc.spectrum().unwrap());
    for centred in [true, false] {
        assert_eq!(
            b.singular_values(centred).unwrap(),
            a.singular_values(centred).unwrap()
        );
    }
    let empty = CovarianceAccumulator::new(10, "empty");
    assert_eq!(
        CovarianceAccumulator::from_state(&empty.state(), "e")
            .unwrap()
            .n(),
        0
    );
    let refuse = |edit: &dyn Fn(&mut AccumulatorState), want: &str| {
        let mut s = acc.state();
        edit(&mut s);
        let err = CovarianceAccumulator::from_state(&s, "shard.safetensors")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard.safetensors") && err.contains(want),
            "{err}"
        );
    };
    refuse(&|s| s.kind = "cka".into(), "holds a `cka` accumulator");
    refuse(&|s| drop(s.arrays.remove("scatter")), "no array `scatter`");
    refuse(
        &|s| s.arrays.get_mut("scatter").unwrap().0 = vec![10, 9],
        "expected [10, 10]",
    );
    refuse(
        &|s| s.arrays.get_mut("sum").unwrap().1[3] = f64::NAN,
        "non-finite",
    );
    refuse(
        &|s| drop(s.arrays.remove("shift")),
        "700 tokens but no shift",
    );
}

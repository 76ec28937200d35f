//! Integration tests of repgeom-probe: every test goes through [`check`].

mod detour;
mod linfa_model;

use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use repgeom_probe::{
    Features, Labels, LayerProbe, ProbeParams, Result, Split, StopReason, wilson_interval,
};

/// Absolute tolerance on accuracies that should be (near) perfect.
const NEAR_PERFECT: f64 = 0.02;

pub(crate) fn gauss(r: &mut ChaCha8Rng) -> f64 {
    let u1 = ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `n` examples in `d` dims, `k` classes (label `i % k`), class means of norm `sep`
/// on random directions, unit Gaussian noise.
pub(crate) fn blobs(n: usize, d: usize, k: usize, sep: f64, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let means: Vec<Vec<f64>> = (0..k)
        .map(|_| {
            let v: Vec<f64> = (0..d).map(|_| gauss(&mut r)).collect();
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            v.iter().map(|x| x * sep / norm).collect()
        })
        .collect();
    let y: Vec<usize> = (0..n).map(|i| i % k).collect();
    let x = (0..n * d)
        .map(|t| (means[y[t / d]][t % d] + gauss(&mut r)) as f32)
        .collect();
    (x, y)
}

/// Probe one layer of `x` (`n × d`) with labels `y` under `params`.
pub(crate) fn check(
    x: &[f32],
    y: &[usize],
    d: usize,
    params: ProbeParams,
    split: Split,
) -> Result<LayerProbe> {
    let labels = Labels::unnamed(y.to_vec())?;
    let plan = params.check()?.plan(labels, &split)?;
    plan.probe_layer(3, Features::new(3, x.len() / d, d, x)?)
}

fn small() -> ProbeParams {
    ProbeParams {
        grid: vec![1e-1, 1e-2, 1e-3],
        ..Default::default()
    }
}

#[test]
fn separable_blobs_probe_near_perfectly() {
    let (x, y) = blobs(400, 32, 4, 12.0, 1);
    let r = check(&x, &y, 32, small(), Split::Stratified).unwrap();
    assert!(r.accuracy >= 1.0 - NEAR_PERFECT, "{r:?}");
    assert!(r.macro_f1 >= 1.0 - NEAR_PERFECT, "{r:?}");
    assert!((r.majority_baseline - 0.25).abs() < 0.01, "{r:?}");
    assert_eq!((r.n_train, r.n_test), (320, 80));
}

#[test]
fn shuffled_labels_fall_to_chance() {
    let (x, y) = blobs(1200, 40, 4, 12.0, 2);
    let mut y = y;
    let mut r = ChaCha8Rng::seed_from_u64(9);
    for i in (1..y.len()).rev() {
        y.swap(i, (r.next_u64() % (i as u64 + 1)) as usize);
    }
    let p = check(&x, &y, 40, small(), Split::Stratified).unwrap();
    // 240 test examples: chance 0.25, binomial sd 0.028; allow 4 sd.
    assert!((p.accuracy - 0.25).abs() < 0.11, "{p:?}");
}

#[test]
fn results_are_deterministic_and_thread_independent() {
    let (x, y) = blobs(600, 300, 3, 3.0, 3);
    let a = check(&x, &y, 300, small(), Split::Stratified).unwrap();
    let b = check(&x, &y, 300, small(), Split::Stratified).unwrap();
    let seq = ProbeParams {
        parallel: false,
        ..small()
    };
    let c = check(&x, &y, 300, seq, Split::Stratified).unwrap();
    // Bit-identical, so compare the exact debug text.
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(format!("{a:?}"), format!("{c:?}"));
}

#[test]
fn given_split_is_respected() {
    let (x, y) = blobs(100, 8, 2, 10.0, 4);
    let split = Split::parse(
        &(0..100)
            .map(|i| if i < 70 { "train\n" } else { "test\n" })
            .collect::<String>(),
    )
    .unwrap();
    let r = check(&x, &y, 8, small(), split).unwrap();
    assert_eq!((r.n_train, r.n_test), (70, 30));
}

#[test]
fn bad_input_gives_clear_errors() {
    let (x, y) = blobs(40, 5, 2, 5.0, 5);
    let mut nan = x.clone();
    nan[7 * 5 + 2] = f32::NAN;
    let cases: Vec<(&str, Result<LayerProbe>)> = vec![
        (
            "label count",
            check(&x, &y[..39], 5, small(), Split::Stratified),
        ),
        (
            "single class",
            check(&x, &[1; 40], 5, small(), Split::Stratified),
        ),
        (
            "nan feature",
            check(&nan, &y, 5, small(), Split::Stratified),
        ),
        (
            "ragged buffer",
            check(&x[..199], &y, 5, small(), Split::Stratified),
        ),
        (
            "split length",
            check(&x, &y, 5, small(), Split::Given(vec![])),
        ),
        (
            "bad grid",
            check(
                &x,
                &y,
                5,
                ProbeParams {
                    grid: vec![0.0],
                    ..small()
                },
                Split::Stratified,
            ),
        ),
    ];
    let text: String = cases
        .into_iter()
        .map(|(name, r)| {
            format!(
                "{name}: {}\n",
                r.map(|_| "ok".to_owned()).unwrap_or_else(|e| e.to_string())
            )
        })
        .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn tidy_rows_have_the_six_metrics_per_layer() {
    let (x, y) = blobs(200, 6, 2, 8.0, 6);
    let labels = Labels::new(y, vec!["neg".into(), "pos".into()]).unwrap();
    let plan = small()
        .check()
        .unwrap()
        .plan(labels, &Split::Stratified)
        .unwrap();
    let f = Features::new(0, 200, 6, &x).unwrap();
    let report = plan.probe_layers([(0, f), (5, f)]).unwrap();
    let text: String = report
        .tidy("toy")
        .iter()
        .map(|r| {
            let ci =
                r.ci.map_or("-".to_owned(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]"));
            let conv = r.converged.map_or("-".to_owned(), |c| c.to_string());
            format!(
                "{} {} {} {:.3} {ci} {conv}\n",
                r.model, r.layer, r.metric, r.value
            )
        })
        .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn wilson_intervals_match_newcombe_1998() {
    // Newcombe (1998), Statistics in Medicine 17:857, Table II, method 3 (Wilson score interval
    // without continuity correction), to the 4 decimals published.
    for (k, n, lo, hi) in [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ] {
        let (a, b) = wilson_interval(k, n);
        assert!(
            (a - lo).abs() < 5e-5 && (b - hi).abs() < 5e-5,
            "{k}/{n}: ({a}, {b}) vs ({lo}, {hi})"
        );
    }
    let (a, b) = wilson_interval(10, 10);
    assert!(a < 1.0 && b == 1.0, "({a}, {b})");
}

#[test]
fn accuracy_intervals_and_control_task_are_reported() {
    let (x, y) = blobs(400, 32, 4, 12.0, 1);
    let r = check(&x, &y, 32, small(), Split::Stratified).unwrap();
    let hits = (r.accuracy * r.n_test as f64).round() as usize;
    assert_eq!(r.accuracy_ci, wilson_interval(hits, r.n_test));
    assert!(r.accuracy_ci.0 <= r.accuracy && r.accuracy <= r.accuracy_ci.1);
    let c = r.control.clone().expect("the control task runs by default");
    // Permuted labels carry no information: the control sits near chance (80 test examples,
    // chance 0.25, binomial sd 0.048; allow 4 sd) and selectivity is large.
    assert!((c.accuracy - 0.25).abs() < 0.2, "{c:?}");
    assert!(r.selectivity().unwrap() > 0.5, "{r:?}");
    assert!(c.accuracy_ci.0 <= c.accuracy && c.accuracy <= c.accuracy_ci.1);
    // Seeded: the same seed repeats bit for bit, another seed permutes differently.
    let again = check(&x, &y, 32, small(), Split::Stratified).unwrap();
    assert_eq!(format!("{r:?}"), format!("{again:?}"));
    let other = check(
        &x,
        &y,
        32,
        ProbeParams { seed: 1, ..small() },
        Split::Stratified,
    )
    .unwrap();
    assert_ne!(other.control, r.control);
    // Turned off, no control and no control rows.
    let off = check(
        &x,
        &y,
        32,
        ProbeParams {
            control: false,
            ..small()
        },
        Split::Stratified,
    )
    .unwrap();
    assert!(off.control.is_none() && off.selectivity().is_none());
    assert_eq!(off.accuracy, r.accuracy);
}

#[test]
fn a_fit_stopped_short_is_never_reported_as_converged() {
    // A gradient tolerance far below what f32 kernels resolve cannot be met: whichever way
    // L-BFGS stops (a failed line search, a stalled loss or the iteration cap), the fit is
    // reported as not converged, with the reason.
    let (x, y) = blobs(300, 20, 3, 3.0, 8);
    let params = ProbeParams {
        grid: vec![1e-4],
        tol: 1e-15,
        max_iter: 5000,
        control: false,
        ..ProbeParams::default()
    };
    let r = check(&x, &y, 20, params, Split::Stratified).unwrap();
    assert!(!r.converged, "{r:?}");
    assert_ne!(r.stop, StopReason::GradientTolerance, "{r:?}");
    assert!(
        r.iterations < 5000,
        "stopped by the line search or a stall: {r:?}"
    );
    // At a reachable tolerance the same fit converges.
    let ok = check(
        &x,
        &y,
        20,
        ProbeParams {
            grid: vec![1e-1],
            control: false,
            ..ProbeParams::default()
        },
        Split::Stratified,
    )
    .unwrap();
    assert!(
        ok.converged && ok.stop == StopReason::GradientTolerance,
        "{ok:?}"
    );
}

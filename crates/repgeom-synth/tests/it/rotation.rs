//! The `rotation` detour changes PGA and nothing that a rotation of the hidden space cannot
//! change: every registered per-layer metric that claims rotation invariance (and needs no
//! readout) gives the same value on the direct layer and on its rotated detour.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::Par;
use repgeom_metrics::{LayerInput, all_metrics};
use repgeom_synth::{ModelParams, Regime, SyntheticSpace};

/// Relative tolerance: the two layers differ by an orthogonal map applied in `f64` and then
/// rounded to `f32`.
const TOL: f64 = 1e-4;

#[test]
fn every_rotation_invariant_spectral_metric_is_unchanged_by_the_rotation_detour() {
    let p = ModelParams {
        d: 64,
        k: Some(8),
        n_points: 200,
        ..ModelParams::default()
    }
    .check()
    .unwrap();
    let s = SyntheticSpace::generate(&p, &mut ChaCha8Rng::seed_from_u64(11));
    // The same streams for both layers: the rotated detour is the direct layer, rotated.
    let draw = |regime| s.layer(regime, &mut ChaCha8Rng::seed_from_u64(12)).unwrap();
    let direct = draw(Regime::Direct);
    let rotated = draw(Regime::Rotation {
        dims: 4,
        angle: 1.0,
    });
    let mut checked = Vec::new();
    for metric in all_metrics() {
        let info = metric.info();
        if !info.rotation_invariant || info.needs_readout || info.needs_null {
            continue;
        }
        let run = |x: &repgeom_linalg::Mat<f32>| {
            metric
                .compute(&LayerInput::new(x.as_ref(), info.name, Par::Seq).unwrap())
                .unwrap()
        };
        let (a, b) = (run(&direct), run(&rotated));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.value - y.value).abs() <= TOL * x.value.abs().max(1.0),
                "{} {}: direct {} vs rotation {}",
                info.name,
                x.variant,
                x.value,
                y.value
            );
        }
        checked.push(info.name);
    }
    // The spectral family is all there (a registry change cannot empty this test).
    for name in [
        "rankme",
        "alpha_req",
        "isotropy",
        "condition_number",
        "intrinsic_dim_twonn",
    ] {
        assert!(checked.contains(&name), "{name} not checked: {checked:?}");
    }
}

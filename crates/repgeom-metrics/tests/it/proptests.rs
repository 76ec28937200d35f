//! Property tests (issue 8): for random widths, point counts, data and rotations, every metric
//! that claims rotation invariance gives the same values after an orthogonal rotation of the
//! hidden space, and PGA's z is unchanged when the same rotation is applied to the
//! activations, the readout basis and the null bases.

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::pga::pga;
use repgeom_metrics::{Error, LayerInput, MetricValue, PairInput, all_metrics, all_pair_metrics};
use repgeom_null::{NullBases, NullParams, haar_basis};

/// Values before and after a rotation, relative to max(1, |value|): the rotated activations
/// are rounded to f32, which perturbs distances at the 1e-7 level.
const VALUE_TOL: f64 = 1e-4;
/// z = (rho - mean) / std divides by the null's spread, which amplifies that perturbation.
const Z_TOL: f64 = 1e-3;

use repgeom_metrics::conformance::Fixture as Model;

/// n points in d dimensions with a decaying spectrum and a mean offset, a k-dim readout basis
/// and `n_null` null bases, all from `seed`.
fn model(n: usize, d: usize, k: usize, n_null: usize, seed: u64) -> Model {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mix = haar_basis(d, d, seed ^ 0x5eed, 0);
    let z: Vec<f64> = (0..n * d)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let acts = Mat::from_fn(n, d, |i, j| {
        let mut v = 1.5 + 0.2 * j as f64;
        for l in 0..d {
            v += z[i * d + l] * (2.0 / (1.0 + l as f64)) * mix[(l, j)];
        }
        v as f32
    });
    let readout = haar_basis(d, k, seed.wrapping_add(1), 0);
    let params = NullParams {
        n_null,
        seed: seed.wrapping_add(2),
    }
    .check()
    .unwrap();
    let null = NullBases::draw(d, k, &params).unwrap();
    Model {
        acts,
        readout,
        null,
    }
}

fn input<'a>(m: &'a Model, what: &str) -> LayerInput<'a> {
    LayerInput::new(m.acts.as_ref(), what, Par::Seq)
        .and_then(|i| i.with_readout(m.readout.as_ref()))
        .and_then(|i| i.with_null(&m.null))
        .unwrap()
}

/// Asserts two metric outputs agree row by row within [`VALUE_TOL`] ([`Z_TOL`] for z-scores,
/// which divide by the null's spread).
fn check(a: &[MetricValue], b: &[MetricValue], name: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.len(), b.len(), "{}: row count", name);
    for (x, y) in a.iter().zip(b) {
        prop_assert_eq!(&x.variant, &y.variant);
        let rel = if x.metric.ends_with("_z") {
            Z_TOL
        } else {
            VALUE_TOL
        };
        let tol = rel * x.value.abs().max(1.0);
        prop_assert!(
            (x.value - y.value).abs() <= tol,
            "{} {}: {} vs {} after rotation",
            name,
            x.variant,
            x.value,
            y.value
        );
    }
    Ok(())
}

/// (n, d, k, seed, rotation seed) small enough for a fast suite.
fn shapes() -> impl Strategy<Value = (usize, usize, usize, u64, u64)> {
    (12usize..28, 5usize..12, any::<u64>(), any::<u64>())
        .prop_flat_map(|(n, d, s, r)| (Just(n), Just(d), 1..d, Just(s), Just(r)))
}

proptest! {
    // A fixed seed: the suite explores the same 32 cases on every run, so CI never depends on
    // the draw (a failing case is still printed with its inputs).
    #![proptest_config(ProptestConfig {
        cases: 32,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7265_7067),
        ..ProptestConfig::default()
    })]

    #[test]
    fn rotation_invariant_metrics_ignore_rotations((n, d, k, seed, rot) in shapes()) {
        let m = model(n, d, k, 6, seed);
        let r = m.rotated(rot);
        for metric in all_metrics() {
            let info = metric.info();
            if !info.rotation_invariant {
                continue;
            }
            match (metric.compute(&input(&m, "before")), metric.compute(&input(&r, "after"))) {
                (Ok(before), Ok(after)) => check(&before, &after, info.name)?,
                // d < 6 leaves α-ReQ's default fit (ranks 4..) fewer than 3 ranks: it must
                // refuse on both sides alike.
                (Err(Error::Degenerate { .. }), Err(Error::Degenerate { .. })) => {}
                (b, a) => prop_assert!(false, "{}: before {:?}, after {:?}", info.name, b.err(), a.err()),
            }
        }
    }

    #[test]
    fn rotation_invariant_pair_metrics_ignore_rotations((n, d, k, seed, rot) in shapes()) {
        let a = model(n, d, k, 6, seed);
        let b = model(n, d + 2, k, 6, seed.wrapping_add(17));
        let (ra, rb) = (a.rotated(rot), b.rotated(rot.wrapping_add(1)));
        for metric in all_pair_metrics() {
            let info = metric.info();
            if !info.rotation_invariant {
                continue;
            }
            let (ia, ib) = (input(&a, "A"), input(&b, "B"));
            let before = metric.compute(&PairInput::new(&ia, &ib).unwrap()).unwrap();
            let (ira, irb) = (input(&ra, "A rotated"), input(&rb, "B rotated"));
            let after = metric.compute(&PairInput::new(&ira, &irb).unwrap()).unwrap();
            check(&before, &after, info.name)?;
        }
    }

    #[test]
    fn pga_z_is_unchanged_by_a_shared_rotation((n, d, k, seed, rot) in shapes(), ccr in 0usize..3) {
        let m = model(n, d, k, 8, seed);
        let r = m.rotated(rot);
        let ccr = ccr.min(d - k);
        let run = |x: &Model| {
            pga(x.acts.as_ref(), x.readout.as_ref(), &x.null, ccr, "prop", Par::Seq, &|| ())
        };
        match (run(&m), run(&r)) {
            (Ok(p), Ok(q)) => {
                for (field, u, v) in [
                    ("rho_readout", p.rho_readout, q.rho_readout),
                    ("null_mean", p.summary.null_mean, q.summary.null_mean),
                    ("null_std", p.summary.null_std, q.summary.null_std),
                ] {
                    prop_assert!((u - v).abs() <= VALUE_TOL, "{}: {} vs {}", field, u, v);
                }
                prop_assert!(
                    (p.summary.z - q.summary.z).abs() <= Z_TOL * p.summary.z.abs().max(1.0),
                    "z: {} vs {}",
                    p.summary.z,
                    q.summary.z
                );
            }
            // A degenerate draw (e.g. all-tied projected distances) must be refused the same
            // way in both frames, never turned into a number in one of them.
            (Err(e), Err(f)) => prop_assert_eq!(
                std::mem::discriminant(&e),
                std::mem::discriminant(&f),
                "{} vs {}",
                e,
                f
            ),
            (p, q) => prop_assert!(false, "definedness differs: {:?} vs {:?}", p.map(|r| r.summary.z), q.map(|r| r.summary.z)),
        }
    }
}

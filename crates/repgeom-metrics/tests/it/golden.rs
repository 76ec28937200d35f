//! The spectral metric variants against values computed independently with NumPy/SciPy
//! (`fixtures/spectral/make_reference.py`, output committed as `reference.json`), and the
//! α-ReQ default on simulated power-law spectra of known exponent.

use std::path::PathBuf;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::{
    AlphaFit, AlphaReq, Isotropy, LayerInput, Metric, MetricValue, RankMe, RankMeConvention,
};

/// Relative tolerance against NumPy: both sides compute in `f64` from the same `f32` data,
/// by different algorithms (LAPACK SVD / eigh vs Gram eigenvalues), so they agree to ~1e-9;
/// 1e-6 leaves room for the smallest singular values, which the Gram route resolves less finely.
const NUMPY_REL: f64 = 1e-6;
/// The bar for the default α-ReQ fit on a spectrum with a known power law.
const ALPHA_TOL: f64 = 0.1;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn one(metric: &dyn Metric, acts: MatRef<'_, f32>, variant: &str) -> MetricValue {
    let input = LayerInput::new(acts, "golden layer", Par::Seq).expect("valid layer");
    metric
        .compute(&input)
        .expect("metric computes")
        .into_iter()
        .find(|v| v.variant == variant)
        .unwrap_or_else(|| panic!("no variant {variant:?}"))
}

fn check(found: f64, expected: f64, what: &str) {
    let err = (found - expected).abs() / expected.abs().max(f64::MIN_POSITIVE);
    assert!(
        err <= NUMPY_REL,
        "{what}: found {found}, NumPy {expected} (relative error {err:e})"
    );
}

#[test]
fn spectral_variants_match_numpy() {
    let text = std::fs::read_to_string(root().join("fixtures/spectral/reference.json")).unwrap();
    let reference: serde_json::Value = serde_json::from_str(&text).unwrap();
    let garrido = RankMe::default();
    let centred = RankMe {
        center: true,
        ..RankMe::default()
    };
    let covariance = RankMe {
        convention: RankMeConvention::Covariance,
        ..RankMe::default()
    };
    let full_rank = AlphaReq {
        fit: AlphaFit::FullRank,
        ..AlphaReq::default()
    };
    let partition = Isotropy {
        partition: true,
        ..Isotropy::default()
    };
    let mut checked = 0;
    for file in ["acts.npy", "acts_wide.npy"] {
        let acts = repgeom_io::read_activations(&root().join("fixtures/spectral").join(file), None)
            .unwrap();
        for (l, want) in acts.layers.iter().zip(reference[file].as_array().unwrap()) {
            let m = &l.acts;
            let x = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
            let at = |key: &str| want[key].as_f64().unwrap();
            let what = |name: &str| format!("{file} layer {}: {name}", l.layer);
            check(
                one(&garrido, x, "").value,
                at("rankme_garrido"),
                &what("rankme garrido"),
            );
            check(
                one(&centred, x, "centred").value,
                at("rankme_garrido_centred"),
                &what("rankme garrido centred"),
            );
            check(
                one(&covariance, x, "covariance").value,
                at("rankme_covariance"),
                &what("rankme covariance"),
            );
            let a = one(&AlphaReq::default(), x, "");
            check(a.value, at("alpha_agrawal2022"), &what("alpha agrawal2022"));
            check(a.extra["r2"], at("r2_agrawal2022"), &what("r2 agrawal2022"));
            let rank = at("numerical_rank");
            assert_eq!(a.extra["fit_end"], rank.min(100.0), "{}", what("fit_end"));
            let a = one(&full_rank, x, "full_rank");
            check(a.value, at("alpha_full_rank"), &what("alpha full_rank"));
            check(a.extra["r2"], at("r2_full_rank"), &what("r2 full_rank"));
            assert_eq!(a.extra["fit_end"], rank, "{}", what("full-rank fit_end"));
            check(
                one(&partition, x, "partition").value,
                at("isotropy_partition"),
                &what("isotropy partition"),
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4, "every reference layer is checked");
}

/// `n` points whose population covariance has eigenvalues `i^-alpha` (`i = 1..=d`), along the
/// coordinate axes (the spectrum is rotation invariant), drawn with a fixed seed.
fn power_law_points(n: usize, d: usize, alpha: f64, seed: u64) -> Mat<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut x = Mat::<f32>::zeros(n, d);
    for i in 0..n {
        for j in 0..d {
            let z: f64 = StandardNormal.sample(&mut rng);
            x[(i, j)] = (z * ((j + 1) as f64).powf(-alpha / 2.0)) as f32;
        }
    }
    x
}

#[test]
fn default_alpha_req_recovers_simulated_power_laws() {
    let d = 256;
    let full_rank = AlphaReq {
        fit: AlphaFit::FullRank,
        ..AlphaReq::default()
    };
    let mut worst_full: f64 = 0.0;
    for (s, alpha) in [0.8, 1.0, 1.5].into_iter().enumerate() {
        for (r, n_over_d) in [0.5, 1.0, 2.0, 4.0].into_iter().enumerate() {
            let n = (n_over_d * d as f64) as usize;
            let x = power_law_points(n, d, alpha, (10 * s + r) as u64);
            let found = one(&AlphaReq::default(), x.as_ref(), "").value;
            assert!(
                (found - alpha).abs() <= ALPHA_TOL,
                "alpha {alpha}, N/d {n_over_d}: the default fit gives {found}"
            );
            let old = one(&full_rank, x.as_ref(), "full_rank").value;
            worst_full = worst_full.max((old - alpha).abs());
        }
    }
    // The full-rank fit is driven by the finite-sample tail: far off at N ≈ d.
    assert!(worst_full > 0.5, "full-rank fit's worst error {worst_full}");
}

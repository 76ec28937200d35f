//! The literature's comparison metrics (mutual k-NN, CKNNA, SVCCA, PWCCA, Procrustes, RSA,
//! TwoNN) against the committed NumPy/SciPy reference (`fixtures/pair/`), and the properties
//! of their permutation nulls.

use std::path::PathBuf;

use repgeom_linalg::{Mat, MatRef, Par};

use super::*;

/// Values from `f64` factorisations of the same `f32` data (Gram eigendecompositions here, QR
/// and SVD in the reference).
const TOL: f64 = 1e-7;
/// Spearman of RDMs stored in `f32` here and `f64` in SciPy (rank ties may differ).
const RHO_TOL: f64 = 1e-5;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/pair")
        .join(name)
}

fn read(name: &str) -> Mat<f32> {
    let acts = repgeom_io::read_activations(&fixture(name), None).unwrap();
    let l = &acts.layers[0].acts;
    MatRef::from_row_major_slice(&l.data, l.rows, l.cols).to_owned()
}

struct Reference {
    a: Mat<f32>,
    b: Mat<f32>,
    json: serde_json::Value,
}

fn load() -> Reference {
    Reference {
        a: read("a.npy"),
        b: read("b.npy"),
        json: serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap())
            .unwrap(),
    }
}

/// Runs pair metric `config` on the fixture and compares row `variant` with reference `key`.
fn check(r: &Reference, config: serde_json::Value, variant: &str, key: &str, tol: f64) {
    let metric: Box<dyn PairMetric> = serde_json::from_value(config.clone()).unwrap();
    let input = PairInput::new(
        LayerInput::new(r.a.as_ref(), "a.npy", Par::Seq).unwrap(),
        LayerInput::new(r.b.as_ref(), "b.npy", Par::Seq).unwrap(),
    )
    .unwrap();
    let rows = metric.compute(&input).unwrap();
    let row = rows
        .iter()
        .find(|v| v.variant == variant)
        .unwrap_or_else(|| panic!("{config}: no variant {variant:?}"));
    let expect = r.json[key].as_f64().unwrap();
    assert!(
        (row.value - expect).abs() <= tol,
        "{config} {variant}: got {}, NumPy reference {expect} (tol {tol})",
        row.value
    );
}

#[test]
fn pair_metrics_match_numpy_reference() {
    let r = load();
    use serde_json::json;
    let no_null = |m: &str| json!({"metric": m, "n_perm": 0});
    // Neighbour sets are exact (the reference's smallest k-th/k+1-th gap is far above f32
    // rounding), so mutual k-NN matches to rounding of the mean.
    assert!(r.json["knn_min_gap"].as_f64().unwrap() > 1e-6);
    check(&r, no_null("mutual_knn"), "", "mutual_knn_k10", 1e-12);
    // CKNNA's kernel values are f32 cosines, as the reference code's float32.
    check(&r, no_null("cknna"), "", "cknna_k10", 1e-5);
    check(&r, json!({"metric": "svcca"}), "", "svcca_099", TOL);
    check(&r, json!({"metric": "pwcca"}), "", "pwcca", TOL);
    check(
        &r,
        json!({"metric": "procrustes"}),
        "squared",
        "procrustes_squared",
        TOL,
    );
    check(
        &r,
        json!({"metric": "procrustes"}),
        "angular",
        "procrustes_angular",
        TOL,
    );
    check(
        &r,
        json!({"metric": "rsa"}),
        "euclidean",
        "rsa_euclidean",
        RHO_TOL,
    );
    check(
        &r,
        json!({"metric": "rsa", "rdm": "correlation"}),
        "correlation",
        "rsa_correlation",
        RHO_TOL,
    );
}

#[test]
fn twonn_matches_numpy_reference() {
    let r = load();
    for (acts, fraction, key) in [
        (&r.a, 0.9, "twonn_a_09"),
        (&r.b, 0.9, "twonn_b_09"),
        (&r.a, 0.5, "twonn_a_05"),
    ] {
        let m = IntrinsicDimTwoNn { fraction };
        let input = LayerInput::new(acts.as_ref(), key, Par::Seq).unwrap();
        let got = m.compute(&input).unwrap()[0].value;
        let expect = r.json[key].as_f64().unwrap();
        assert!((got - expect).abs() <= 1e-9, "{key}: {got} vs {expect}");
    }
}

#[test]
fn twonn_recovers_the_dimension_of_a_flat_cloud() {
    // 2000 uniform points on a 3-dimensional affine subspace of R^10: TwoNN ≈ 3.
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let basis = repgeom_null::haar_basis(10, 3, 5, 0);
    let x = Mat::<f32>::from_fn(2000, 10, |_, _| 0.0);
    let mut x = x;
    for i in 0..2000 {
        let c: [f64; 3] = [rng.random(), rng.random(), rng.random()];
        for j in 0..10 {
            x[(i, j)] = (1.0 + (0..3).map(|l| c[l] * basis[(j, l)]).sum::<f64>()) as f32;
        }
    }
    let input = LayerInput::new(x.as_ref(), "flat", Par::Seq).unwrap();
    let got = IntrinsicDimTwoNn::default().compute(&input).unwrap()[0].value;
    assert!((got - 3.0).abs() < 0.2, "TwoNN of a 3-d cloud: {got}");
}

#[test]
fn twonn_rejects_duplicates_and_bad_fractions() {
    let x = Mat::<f32>::from_fn(10, 3, |i, j| ((i / 2) * 3 + j) as f32);
    let input = LayerInput::new(x.as_ref(), "dups", Par::Seq).unwrap();
    let err = IntrinsicDimTwoNn::default()
        .compute(&input)
        .unwrap_err()
        .to_string();
    assert!(err.contains("duplicate"), "{err}");
    for fraction in [0.0, 1.0, -0.5, f64::NAN] {
        assert!(
            IntrinsicDimTwoNn { fraction }.check().is_err(),
            "{fraction}"
        );
    }
}

fn pair_rows(
    metric: &dyn PairMetric,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    par: Par,
) -> Vec<MetricValue> {
    let input = PairInput::new(
        LayerInput::new(a, "A", par).unwrap(),
        LayerInput::new(b, "B", par).unwrap(),
    )
    .unwrap();
    metric.compute(&input).unwrap()
}

#[test]
fn permutation_nulls_separate_aligned_from_shuffled_points() {
    let r = load();
    // Shuffled points: B's rows in another order than A's, so no alignment beyond chance.
    let n = r.b.nrows();
    let shuffled = Mat::<f32>::from_fn(n, r.b.ncols(), |i, j| r.b[((i * 37 + 11) % n, j)]);
    for name in ["mutual_knn", "cknna"] {
        let metric = pair_metric(name).unwrap();
        let aligned = &pair_rows(metric.as_ref(), r.a.as_ref(), r.b.as_ref(), Par::Seq)[0];
        let z = aligned.extra["z"];
        assert!(z > 10.0, "{name}: aligned z = {z}");
        assert_eq!(aligned.extra["p_upper"], 1.0 / 101.0, "{name}: p floor");
        assert!(aligned.extra["p_lower"] > 0.99, "{name}");
        let null = &pair_rows(metric.as_ref(), r.a.as_ref(), shuffled.as_ref(), Par::Seq)[0];
        let z = null.extra["z"];
        assert!(z.abs() < 4.0, "{name}: shuffled z = {z}");
        assert!(null.extra["p_two_sided"] > 1e-3, "{name}");
        // Seeded: the null is identical at any thread count and changes with the seed.
        let again = &pair_rows(metric.as_ref(), r.a.as_ref(), r.b.as_ref(), Par::rayon(2))[0];
        assert_eq!(aligned, again, "{name}: threads");
        let mut config = serde_json::to_value(&metric).unwrap();
        config["seed"] = 1.into();
        let reseeded: Box<dyn PairMetric> = serde_json::from_value(config).unwrap();
        let other = &pair_rows(reseeded.as_ref(), r.a.as_ref(), r.b.as_ref(), Par::Seq)[0];
        assert_eq!(
            aligned.value, other.value,
            "{name}: value does not depend on the seed"
        );
        assert_ne!(
            aligned.null_mean, other.null_mean,
            "{name}: null depends on the seed"
        );
    }
}

#[test]
fn mutual_knn_chance_level_and_identity() {
    let r = load();
    let m = MutualKnn {
        n_perm: 0,
        ..MutualKnn::default()
    };
    let same = &pair_rows(&m, r.a.as_ref(), r.a.as_ref(), Par::Seq)[0];
    assert_eq!(same.value, 1.0);
    assert_eq!(same.extra["chance"], 10.0 / 199.0);
    // k ≥ N is refused with a message naming N.
    let big = MutualKnn {
        k: 200,
        ..m.clone()
    };
    let input = PairInput::new(
        LayerInput::new(r.a.as_ref(), "A", Par::Seq).unwrap(),
        LayerInput::new(r.b.as_ref(), "B", Par::Seq).unwrap(),
    )
    .unwrap();
    let err = big.compute(&input).unwrap_err().to_string();
    assert!(err.contains("k < N = 200"), "{err}");
}

#[test]
fn cca_family_identities() {
    let r = load();
    // A representation against an invertible linear map of itself: every canonical
    // correlation is 1, so PWCCA = 1; SVCCA of A and a rotation of A is 1 and their
    // Procrustes distance 0.
    let d = r.a.ncols();
    let mix = repgeom_null::haar_basis(d, d, 9, 0);
    let a64 = repgeom_linalg::to_f64(r.a.as_ref());
    let rot = repgeom_linalg::to_f32(
        repgeom_linalg::project(a64.as_ref(), mix.as_ref(), Par::Seq).as_ref(),
    );
    let scaled = Mat::<f32>::from_fn(r.a.nrows(), d, |i, j| r.a[(i, j)] * (1.0 + j as f32));
    for (name, other, expect) in [
        // SVCCA's SVD step is invariant to rotations only (scaling columns changes which
        // directions hold 99% of the variance).
        ("svcca", &rot, 1.0),
        ("pwcca", &scaled, 1.0),
        ("procrustes", &rot, 0.0),
    ] {
        let m = pair_metric(name).unwrap();
        let v = pair_rows(m.as_ref(), r.a.as_ref(), other.as_ref(), Par::Seq)
            .last()
            .unwrap()
            .value;
        assert!((v - expect).abs() < 1e-5, "{name}: {v}");
    }
}

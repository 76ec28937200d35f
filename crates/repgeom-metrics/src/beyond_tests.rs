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
    let (ia, ib) = (
        LayerInput::new(r.a.as_ref(), "a.npy", Par::Seq).unwrap(),
        LayerInput::new(r.b.as_ref(), "b.npy", Par::Seq).unwrap(),
    );
    let input = PairInput::new(&ia, &ib).unwrap();
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
    let (ia, ib) = (
        LayerInput::new(a, "A", par).unwrap(),
        LayerInput::new(b, "B", par).unwrap(),
    );
    let settings = crate::calibrate::CompareSettings::default();
    let out = crate::calibrate::compare(metric, &[&ia], &[&ib], &[(0, 0)], &settings).unwrap();
    out.pairs.into_iter().map(|r| r.value).collect()
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
    let (ia, ib) = (
        LayerInput::new(r.a.as_ref(), "A", Par::Seq).unwrap(),
        LayerInput::new(r.b.as_ref(), "B", Par::Seq).unwrap(),
    );
    let input = PairInput::new(&ia, &ib).unwrap();
    let err = big.compute(&input).unwrap_err().to_string();
    assert!(err.contains("k < N = 200"), "{err}");
}

/// Boundary ties are reported, not hidden: continuous data has none; every point duplicated
/// (a corpus with repeated tokens) makes each point's 1-NN its twin at similarity 1, and with
/// k = 2 the second and third neighbours (two copies of the next point) tie for every point.
#[test]
fn neighbour_metrics_report_boundary_ties() {
    let r = load();
    for m in [
        Box::new(MutualKnn {
            n_perm: 0,
            ..MutualKnn::default()
        }) as Box<dyn PairMetric>,
        Box::new(Cknna {
            n_perm: 0,
            ..Cknna::default()
        }),
    ] {
        let v = &pair_rows(m.as_ref(), r.a.as_ref(), r.b.as_ref(), Par::Seq)[0];
        assert_eq!(
            (v.extra["tied_a"], v.extra["tied_b"]),
            (0.0, 0.0),
            "{}",
            v.metric
        );
    }
    let n = 100;
    let twice = Mat::<f32>::from_fn(2 * n, r.a.ncols(), |i, j| r.a[(i % n, j)]);
    let m = MutualKnn {
        k: 2,
        n_perm: 0,
        ..MutualKnn::default()
    };
    let v = &pair_rows(&m, twice.as_ref(), r.b.subrows(0, 2 * n), Par::Seq)[0];
    assert_eq!(v.extra["tied_a"], 1.0);
    assert_eq!(v.extra["tied_b"], 0.0);
}

/// Ties are shared, not broken by position: with duplicated points (and quantised values
/// that tie many similarities), relabelling the points the same way on both sides leaves
/// mutual k-NN and CKNNA unchanged; and a hand case gives the expectation over tie-breaks.
#[test]
fn neighbour_ties_do_not_depend_on_the_point_order() {
    let r = load();
    let n = 60;
    // A's points each twice (not dropped: B's are all distinct), B rounded to one decimal:
    // many exact ties on both sides.
    let a = Mat::<f32>::from_fn(2 * n, r.a.ncols(), |i, j| r.a[(i % n, j)]);
    let b = Mat::<f32>::from_fn(2 * n, r.b.ncols(), |i, j| {
        (r.b[(i, j)] * 10.0).round() / 10.0
    });
    let mut perm: Vec<usize> = (0..2 * n).collect();
    perm.reverse();
    perm.rotate_left(17);
    let pa = Mat::<f32>::from_fn(2 * n, a.ncols(), |i, j| a[(perm[i], j)]);
    let pb = Mat::<f32>::from_fn(2 * n, b.ncols(), |i, j| b[(perm[i], j)]);
    for m in [
        Box::new(MutualKnn {
            k: 2,
            n_perm: 0,
            ..MutualKnn::default()
        }) as Box<dyn PairMetric>,
        Box::new(Cknna {
            k: 2,
            n_perm: 0,
            ..Cknna::default()
        }),
    ] {
        let v = &pair_rows(m.as_ref(), a.as_ref(), b.as_ref(), Par::Seq)[0];
        let w = &pair_rows(m.as_ref(), pa.as_ref(), pb.as_ref(), Par::Seq)[0];
        assert!(v.extra["tied_a"] > 0.5, "{}: ties planted", v.metric);
        assert!(
            (v.value - w.value).abs() < 1e-12,
            "{}: {} vs {} after relabelling",
            v.metric,
            v.value,
            w.value
        );
    }
    // Hand case, k = 1: in A, points 1 and 2 are identical, so point 0's nearest neighbour is
    // a tie between them (and 1 and 2 are each other's); in B they differ. The value must be
    // the mean over points of the expected overlap under uniform random tie-breaks, which the
    // brute force below enumerates.
    let a = Mat::<f32>::from_fn(4, 2, |i, j| match (i, j) {
        (0, _) => 1.0,
        (1 | 2, 0) => 1.0,
        (1 | 2, _) => 0.9,
        (3, 0) => -1.0,
        _ => 0.3,
    });
    let b = Mat::<f32>::from_fn(4, 2, |i, j| match (i, j) {
        (0, _) => 1.0,
        (1, 0) => 1.0,
        (1, _) => 0.95,
        (2, 0) => 1.0,
        (2, _) => 0.7,
        (3, 0) => -1.0,
        _ => 0.3,
    });
    let m = MutualKnn {
        k: 1,
        n_perm: 0,
        ..MutualKnn::default()
    };
    let v = pair_rows(&m, a.as_ref(), b.as_ref(), Par::Seq)[0].value;
    // By brute force: each of A's rows tied between two candidates gets weight 1/2 on each.
    let cos = |x: &Mat<f32>, i: usize, j: usize| {
        let dot = |u: usize, v: usize| {
            (0..2)
                .map(|c| f64::from(x[(u, c)] * x[(v, c)]))
                .sum::<f64>()
        };
        dot(i, j) / (dot(i, i) * dot(j, j)).sqrt()
    };
    let nearest = |x: &Mat<f32>, i: usize| -> Vec<usize> {
        let s: Vec<(usize, f64)> = (0..4)
            .filter(|&j| j != i)
            .map(|j| (j, cos(x, i, j)))
            .collect();
        let best = s.iter().map(|t| t.1).fold(f64::MIN, f64::max);
        s.iter().filter(|t| t.1 == best).map(|t| t.0).collect()
    };
    let expected: f64 = (0..4)
        .map(|i| {
            let (na, nb) = (nearest(&a, i), nearest(&b, i));
            let hits = na.iter().filter(|j| nb.contains(j)).count() as f64;
            hits / (na.len() * nb.len()) as f64
        })
        .sum::<f64>()
        / 4.0;
    assert!((v - expected).abs() < 1e-12, "{v} vs {expected}");
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
        Par::Seq,
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

/// One planted layer for the spectrum null: `N = 240` points in `d = 48`, readout = the first
/// `k = 6` coordinates (rotated by a fixed Haar frame). Class structure (4 classes) lives in
/// `structure` coordinates; every other coordinate holds independent Gaussian content of
/// standard deviation `sd(j)`.
fn planted(structure_in_readout: bool, readout_sd: f64) -> (Mat<f32>, Mat<f64>) {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let (n, d, k) = (240, 48, 6);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let means: Vec<f64> = (0..4 * k)
        .map(|_| 3.0 * Distribution::<f64>::sample(&StandardNormal, &mut rng))
        .collect();
    let frame = repgeom_null::haar_basis(d, d, 23, 0);
    let mut x = Mat::<f64>::zeros(n, d);
    // Structure in coordinates 0..k (readout) or k..2k (complement).
    let s0 = if structure_in_readout { 0 } else { k };
    for i in 0..n {
        for j in 0..d {
            let g: f64 = StandardNormal.sample(&mut rng);
            x[(i, j)] = if (s0..s0 + k).contains(&j) {
                means[(i % 4) * k + (j - s0)] + g
            } else if j < k {
                readout_sd * g
            } else {
                g * 3.0
            };
        }
    }
    let acts = repgeom_linalg::to_f32(
        repgeom_linalg::project(x.as_ref(), frame.transpose(), Par::Seq).as_ref(),
        Par::Seq,
    );
    let readout = frame.as_ref().subcols(0, k).to_owned();
    (acts, readout)
}

fn z_under_both_nulls(acts: &Mat<f32>, readout: &Mat<f64>) -> (f64, f64, MetricValue) {
    let null = repgeom_null::NullBases::draw(
        acts.ncols(),
        readout.ncols(),
        &repgeom_null::NullParams {
            n_null: 60,
            seed: 4,
        }
        .check()
        .unwrap(),
    )
    .unwrap();
    let input = LayerInput::new(acts.as_ref(), "planted", Par::Seq)
        .unwrap()
        .with_readout(readout.as_ref())
        .unwrap()
        .with_null(&null)
        .unwrap();
    let haar = Pga::default().compute(&input).unwrap()[0].value;
    let rows = PgaSpectrum::default().compute(&input).unwrap();
    (haar, rows[0].value, rows[0].clone())
}

#[test]
fn spectrum_null_removes_a_z_due_to_variance_alone() {
    // Readout: large independent variance, no class structure; the classes lie elsewhere.
    let (acts, readout) = planted(false, 12.0);
    let (haar, spectrum, row) = z_under_both_nulls(&acts, &readout);
    assert!(haar > 4.0, "Haar z {haar}");
    assert!(spectrum.abs() < 3.0, "spectrum z {spectrum}");
    // The null matched what it says it matched.
    let target = row.extra["captured_variance_readout"];
    assert!(target > 0.5, "{target}");
    assert!((row.extra["captured_variance_null_mean"] - target).abs() <= 0.01 * target);
    // The matched draws capture far more than the Haar draws' k/d = 6/48.
    assert!(row.extra["captured_variance_null_mean"] > 0.5);
    assert_eq!(row.variant, "ccr1_spectrum");
}

/// A layer whose readout (`k = 16` of `d = 48`) carries 8-class structure in half of its
/// coordinates and almost nothing in the other half, while the 32 other coordinates hold
/// Gaussian noise: the readout is aligned with the distance structure, and its captured
/// variance is matched by null subspaces that mix the top directions with noise.
fn planted_aligned() -> (Mat<f32>, Mat<f64>) {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let (n, d, k, classes) = (240, 48, 16, 8);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(29);
    let mut gauss = || Distribution::<f64>::sample(&StandardNormal, &mut rng);
    let means: Vec<f64> = (0..classes * k).map(|_| 2.0 * gauss()).collect();
    // Half of the readout: class structure (variance ~9 per coordinate); the other half
    // nearly empty; outside: unit Gaussian noise. The readout's share of the variance is then
    // matched by subspaces leaning on the top directions, which mix structure and noise.
    let x = Mat::<f64>::from_fn(n, d, |i, j| {
        if j < k / 2 {
            means[(i % classes) * k + j] * 3.0 + 0.5 * gauss()
        } else if j < k {
            0.1 * gauss()
        } else {
            2.0 * gauss()
        }
    });
    let frame = repgeom_null::haar_basis(d, d, 31, 0);
    let acts = repgeom_linalg::to_f32(
        repgeom_linalg::project(x.as_ref(), frame.transpose(), Par::Seq).as_ref(),
        Par::Seq,
    );
    (acts, frame.as_ref().subcols(0, k).to_owned())
}

#[test]
fn spectrum_null_keeps_a_z_due_to_readout_alignment() {
    // Readout: the class structure, with the variance of any other k directions.
    let (acts, readout) = planted_aligned();
    let (haar, spectrum, _) = z_under_both_nulls(&acts, &readout);
    assert!(haar > 4.0, "Haar z {haar}");
    // Smaller than under Haar (the matched subspaces lean on the same top directions), but
    // clearly above the null: the readout holds the structure, not just the variance.
    assert!(spectrum > 2.0, "spectrum z {spectrum} (Haar {haar})");
}

#[test]
fn spectrum_null_is_the_haar_null_when_nothing_needs_matching() {
    // Isotropic layer: every subspace captures k/d of the variance up to sampling, so the
    // tilts are small and both nulls give similar z.
    let (acts, readout) = planted(false, 3.0);
    let (haar, spectrum, row) = z_under_both_nulls(&acts, &readout);
    let target = row.extra["captured_variance_readout"];
    assert!((target - 6.0 / 48.0).abs() < 0.05, "{row:?}");
    assert!((haar - spectrum).abs() < 3.0, "{haar} vs {spectrum}");
}

//! Property tests of the numeric core (issue 8): Spearman is Pearson of average ranks,
//! rho(x, x) = 1, and the rotation invariance that every cosine-distance metric relies on.

use proptest::prelude::*;

use crate::{
    Error, Mat, MatRef, Par, average_ranks, cosine_distances, pearson, project, singular_values,
    spearman, to_f64,
};

/// Agreement of two formulas for the same rank statistic, both accumulated in f64.
const RANK_TOL: f64 = 1e-9;
/// Cosine distances before and after an orthogonal rotation: f32 normalisation and GEMM
/// perturb each distance by a few f32 ulps of 1.
const ROTATION_TOL: f64 = 1e-5;
/// Singular values before and after a rotation, relative to the largest.
const SVD_TOL: f64 = 1e-9;

/// Values with many ties (small integers) or few (a wide range), as f32.
fn values(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    prop_oneof![
        prop::collection::vec((-4i32..4).prop_map(|v| v as f32), n.clone()),
        prop::collection::vec(-1e3f32..1e3, n),
    ]
}

/// An orthogonal d x d matrix: a product of d Householder reflections I - 2 v vᵀ / |v|².
fn orthogonal(d: usize, vs: &[f64]) -> Mat<f64> {
    let mut q = Mat::<f64>::identity(d, d);
    for v in vs.chunks_exact(d).take(d) {
        let nrm2: f64 = v.iter().map(|x| x * x).sum();
        if nrm2 < 1e-6 {
            continue;
        }
        // q <- q (I - 2 v vᵀ / |v|²)
        for i in 0..d {
            let dot: f64 = (0..d).map(|j| q[(i, j)] * v[j]).sum();
            for j in 0..d {
                q[(i, j)] -= 2.0 * dot * v[j] / nrm2;
            }
        }
    }
    q
}

/// Points (n x d) and an orthogonal d x d rotation, from one proptest draw.
fn points_and_rotation() -> impl Strategy<Value = (Mat<f32>, Mat<f64>)> {
    (3usize..12, 2usize..7).prop_flat_map(|(n, d)| {
        (
            prop::collection::vec(-10f32..10.0, n * d),
            prop::collection::vec(-1f64..1.0, d * d),
        )
            .prop_map(move |(x, v)| {
                // Offset every point from the origin so no row is (nearly) zero.
                let m = Mat::from_fn(n, d, |i, j| x[i * d + j] + if j == 0 { 25.0 } else { 0.0 });
                (m, orthogonal(d, &v))
            })
    })
}

fn rotate(x: MatRef<'_, f32>, q: MatRef<'_, f64>) -> Mat<f64> {
    project(to_f64(x).as_ref(), q, Par::Seq)
}

proptest! {
    // A fixed seed: the same 128 cases on every run, so CI never depends on the draw.
    #![proptest_config(ProptestConfig {
        cases: 128,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7265_7067),
        ..ProptestConfig::default()
    })]

    #[test]
    fn spearman_is_pearson_of_average_ranks((a, b) in (2usize..60).prop_flat_map(|n| (values(n..n + 1), values(n..n + 1)))) {
        let ra = average_ranks(&a);
        let rb = average_ranks(&b);
        match (spearman(&a, &b, "prop"), pearson(&ra, &rb, "prop")) {
            (Ok(s), Ok(p)) => prop_assert!((s - p).abs() <= RANK_TOL, "spearman {s} vs pearson of ranks {p}"),
            // Constant input: both refuse, neither returns a number.
            (Err(Error::Constant { .. }), Err(Error::Constant { .. })) => {}
            (s, p) => prop_assert!(false, "disagree on definedness: {s:?} vs {p:?}"),
        }
    }

    #[test]
    fn average_ranks_sum_and_order(a in values(1..60)) {
        let r = average_ranks(&a);
        let n = a.len() as f64;
        prop_assert!((r.iter().sum::<f64>() - n * (n + 1.0) / 2.0).abs() <= RANK_TOL);
        for i in 0..a.len() {
            for j in 0..a.len() {
                if a[i] < a[j] {
                    prop_assert!(r[i] < r[j]);
                } else if a[i] == a[j] {
                    prop_assert!(r[i] == r[j]);
                }
            }
        }
    }

    #[test]
    fn spearman_of_x_with_itself_is_one(a in values(2..80)) {
        match spearman(&a, &a, "prop") {
            Ok(rho) => prop_assert!((rho - 1.0).abs() <= RANK_TOL, "rho(x, x) = {rho}"),
            Err(Error::Constant { .. }) => prop_assert!(a.iter().all(|&v| v == a[0])),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn spearman_depends_only_on_ranks((a, b) in (2usize..60).prop_flat_map(|n| (values(n..n + 1), values(n..n + 1)))) {
        // Average ranks are half-integers below 2^24: exact in f32.
        let ra: Vec<f32> = average_ranks(&a).iter().map(|&r| r as f32).collect();
        if let (Ok(s1), Ok(s2)) = (spearman(&a, &b, "prop"), spearman(&ra, &b, "prop")) {
            prop_assert!((s1 - s2).abs() <= RANK_TOL, "{s1} vs {s2}");
        }
    }

    #[test]
    fn cosine_distances_are_rotation_invariant((x, q) in points_and_rotation()) {
        let before = cosine_distances(x.as_ref(), "prop", Par::Seq).unwrap();
        let xr = rotate(x.as_ref(), q.as_ref());
        let after = cosine_distances(xr.as_ref(), "prop rotated", Par::Seq).unwrap();
        prop_assert_eq!(before.len(), after.len());
        for (u, v) in before.iter().zip(&after) {
            prop_assert!((f64::from(*u) - f64::from(*v)).abs() <= ROTATION_TOL, "{u} vs {v}");
        }
    }

    #[test]
    fn singular_values_are_rotation_invariant((x, q) in points_and_rotation()) {
        let x64 = to_f64(x.as_ref());
        let s1 = singular_values(x64.as_ref(), "prop", Par::Seq).unwrap();
        let xr = rotate(x.as_ref(), q.as_ref());
        let s2 = singular_values(xr.as_ref(), "prop rotated", Par::Seq).unwrap();
        let scale = s1.first().copied().unwrap_or(1.0).max(1.0);
        for (u, v) in s1.iter().zip(&s2) {
            prop_assert!((u - v).abs() <= SVD_TOL * scale, "{u} vs {v}");
        }
    }

    #[test]
    fn householder_products_are_orthogonal(d in 1usize..8, v in prop::collection::vec(-1f64..1.0, 64)) {
        let q = orthogonal(d, &v[..d * d]);
        let dev = crate::orthonormal_basis_check(q.as_ref());
        prop_assert!(dev <= 1e-12, "max |QᵀQ - I| = {dev}");
    }
}

use super::*;

#[test]
fn bases_are_orthonormal_and_reproducible() {
    let params = NullParams { n_null: 5, seed: 7 }.check().unwrap();
    let a = NullBases::draw(30, 4, &params).unwrap();
    let b = NullBases::draw(30, 4, &params).unwrap();
    for (qa, qb) in a.bases().iter().zip(b.bases()) {
        assert!(repgeom_linalg::orthonormal_basis_check(qa.as_ref()) < 1e-12);
        assert!(qa == qb, "same seed must give identical bases");
    }
    let other =
        NullBases::draw(30, 4, &NullParams { n_null: 5, seed: 8 }.check().unwrap()).unwrap();
    assert!(a.bases()[0] != other.bases()[0]);
}

#[test]
fn draws_are_identical_at_any_thread_count() {
    let params = NullParams { n_null: 8, seed: 3 }.check().unwrap();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let a = one.install(|| NullBases::draw(20, 3, &params).unwrap());
    let b = two.install(|| NullBases::draw(20, 3, &params).unwrap());
    assert!(a.bases() == b.bases());
}

#[test]
fn projector_trace_averages_to_k_over_d() {
    // For a Haar subspace, E[‖Qᵀe₁‖²] = k/d. Average over many draws of a 10-in-40 subspace.
    let params = NullParams {
        n_null: 400,
        seed: 11,
    }
    .check()
    .unwrap();
    let bases = NullBases::draw(40, 10, &params).unwrap();
    let mean: f64 = bases
        .bases()
        .iter()
        .map(|q| (0..10).map(|j| q[(0, j)] * q[(0, j)]).sum::<f64>())
        .sum::<f64>()
        / 400.0;
    // Standard error of the mean is about sqrt(var/400) ≈ 0.006 here.
    assert!((mean - 0.25).abs() < 0.03, "mean share {mean}");
}

#[test]
fn array_round_trip() {
    let params = NullParams { n_null: 3, seed: 1 }.check().unwrap();
    let a = NullBases::draw(6, 2, &params).unwrap();
    let (shape, data) = a.to_array();
    let b = NullBases::from_array(&shape, &data, 6, 2, 1e-9).unwrap();
    assert!(a.bases() == b.bases());
    let err = NullBases::from_array(&shape, &data, 6, 3, 1e-9).unwrap_err();
    assert_eq!(
        err.to_string(),
        "null bases have shape [3, 6, 2], expected [n_null, 6, 3]"
    );
    let mut bad = data.clone();
    bad[0] *= 2.0;
    assert!(matches!(
        NullBases::from_array(&shape, &bad, 6, 2, 1e-9),
        Err(Error::NotOrthonormal { index: 0, .. })
    ));
}

#[test]
fn summary_matches_hand_computation() {
    let s = summarize(3.0, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    // mean 2.5, sample var = (2.25+0.25+0.25+2.25)/3 = 5/3
    assert!((s.null_mean - 2.5).abs() < 1e-15);
    assert!((s.null_std - (5.0f64 / 3.0).sqrt()).abs() < 1e-15);
    assert!((s.z - 0.5 / (5.0f64 / 3.0).sqrt()).abs() < 1e-15);
    assert!((s.p_value - 3.0 / 5.0).abs() < 1e-15);
    assert!(matches!(
        summarize(1.0, &[2.0, 2.0]),
        Err(Error::DegenerateNull { .. })
    ));
    assert!(NullParams { n_null: 1, seed: 0 }.check().is_err());
}

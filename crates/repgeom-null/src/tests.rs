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

#[test]
fn tails_count_both_sides_with_the_plus_one_correction() {
    let null = [0.1, 0.2, 0.3, 0.4];
    let check = |x: f64, upper: f64, lower: f64, two: f64| {
        let t = tails(x, &null);
        assert!((t.p_upper - upper).abs() < 1e-15, "upper at {x}: {t:?}");
        assert!((t.p_lower - lower).abs() < 1e-15, "lower at {x}: {t:?}");
        assert!(
            (t.p_two_sided - two).abs() < 1e-15,
            "two-sided at {x}: {t:?}"
        );
        // The upper tail is the p of summarize.
        assert_eq!(summarize(x, &null).unwrap().p_value, t.p_upper);
    };
    // Far below the null: the lower tail is at its floor 1/(n+1), the two-sided at 2/(n+1).
    check(-5.0, 1.0, 0.2, 0.4);
    check(5.0, 0.2, 1.0, 0.4);
    // Ties count on both sides.
    check(0.2, 0.8, 0.6, 1.0);
    check(0.25, 0.6, 0.6, 1.0);
}

#[test]
fn benjamini_hochberg_matches_r_p_adjust() {
    // R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05, 0.5), "BH")
    //    0.06 0.06 0.06 0.06 0.06 0.50
    let q = benjamini_hochberg(&[0.05, 0.01, 0.5, 0.03, 0.02, 0.04]);
    let expected = [0.06, 0.06, 0.5, 0.06, 0.06, 0.06];
    for (g, e) in q.iter().zip(expected) {
        assert!((g - e).abs() < 1e-12, "{q:?}");
    }
    // R: p.adjust(c(0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205), "BH")
    let p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205];
    let expected = [
        0.008,
        0.032,
        0.0672,
        0.0672,
        0.0672,
        0.08,
        0.0845714285714,
        0.205,
    ];
    for (g, e) in benjamini_hochberg(&p).iter().zip(expected) {
        assert!((g - e).abs() < 1e-9, "{g} vs {e}");
    }
    let q = benjamini_hochberg(&[f64::NAN, 0.01]);
    assert!(q[0].is_nan() && (q[1] - 0.01).abs() < 1e-15);
}

#[test]
fn quantile_matches_numpy_linear() {
    // numpy.quantile([3, 1, 4, 1, 5], [0, 0.025, 0.5, 0.975, 1]) = [1, 1, 3, 4.9, 5]
    let v = [3.0, 1.0, 4.0, 1.0, 5.0];
    for (q, e) in [
        (0.0, 1.0),
        (0.025, 1.0),
        (0.5, 3.0),
        (0.975, 4.9),
        (1.0, 5.0),
    ] {
        assert!((quantile(&v, q) - e).abs() < 1e-12, "q = {q}");
    }
    assert!(quantile(&[], 0.5).is_nan());
}

/// The stated SE of z against the spread of z over replicate normal null samples: 4000
/// replicates of `n` standard normal draws, observed value fixed at `x`.
#[test]
fn z_standard_error_matches_replicate_nulls() {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    for (x, n) in [(0.0, 100), (-3.0, 50), (-12.0, 100), (-32.0, 100)] {
        let reps = 4000;
        let mut zs = Vec::with_capacity(reps);
        for r in 0..reps {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
            rng.set_stream(r as u64);
            let null: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
            zs.push(summarize(x, &null).unwrap().z);
        }
        let mean = zs.iter().sum::<f64>() / reps as f64;
        let sd = (zs.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / (reps - 1) as f64).sqrt();
        let se = z_standard_error(x, n);
        // 4000 replicates estimate sd to about 1.5% (more for heavy-tailed z at large |x|).
        assert!(
            (sd / se - 1.0).abs() < 0.06,
            "x = {x}, n = {n}: sd {sd} vs SE {se}"
        );
    }
}

#[test]
fn captured_variance_agrees_with_the_spectrum_matched_target_and_match() {
    use repgeom_linalg::{Mat, Par};
    // A layer with a decaying spectrum: column j has standard deviation 1 / (1 + j).
    let (n, d, k) = (60, 12, 3);
    let x = Mat::<f64>::from_fn(n, d, |i, j| {
        let v = ((i * 7 + j * 13) % 11) as f64 - 5.0 + 0.1 * (i as f64).sin();
        v / (1.0 + j as f64)
    });
    let mut x = x;
    for j in 0..d {
        let m = x.col(j).iter().sum::<f64>() / n as f64;
        x.col_mut(j).iter_mut().for_each(|v| *v -= m);
    }
    let readout = haar_basis(d, k, 5, 0);
    let haar = NullBases::draw(d, k, &NullParams { n_null: 6, seed: 2 }.check().unwrap()).unwrap();
    let cv = captured_variance(x.as_ref(), readout.as_ref(), &haar).unwrap();
    assert_eq!(cv.null.len(), 6);
    assert!(cv.null.iter().all(|&s| s > 0.0 && s < 1.0));
    let m = spectrum_matched(&haar, x.as_ref(), readout.as_ref(), 0.01, Par::Seq).unwrap();
    // The draws matched side by side give the sequential bits.
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let par = pool.install(|| {
            spectrum_matched(
                &haar,
                x.as_ref(),
                readout.as_ref(),
                0.01,
                Par::rayon(threads),
            )
            .unwrap()
        });
        assert!(par.bases.bases() == m.bases.bases(), "{threads} threads");
        assert_eq!((&par.captured, &par.beta), (&m.captured, &m.beta));
    }
    assert!(
        (m.target - cv.readout).abs() < 1e-12,
        "{} vs {}",
        m.target,
        cv.readout
    );
    let matched = captured_variance(x.as_ref(), readout.as_ref(), &m.bases).unwrap();
    for s in &matched.null {
        assert!(
            (s - cv.readout).abs() <= 0.01 * cv.readout,
            "{s} vs {}",
            cv.readout
        );
    }
    assert!(matched.null_sd() < 0.01 * cv.readout);
    // A layer without variance is an error, not a NaN share.
    let zero = Mat::<f64>::zeros(n, d);
    assert!(captured_variance(zero.as_ref(), readout.as_ref(), &haar).is_err());
}

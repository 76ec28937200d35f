//! Unit tests: hand-computed cases for every metric, through one `check` helper per area.

use repgeom_linalg::{Mat, Par};

use crate::{
    AlphaFit, AlphaReq, CkaLinear, ConditionNumber, DistanceSpearman, Isotropy, LayerInput, Metric,
    MetricValue, PairInput, PairMetric, PcReadoutShare, RankMe, RankMeConvention, SpectrumKind,
    isoscore, rankme,
};

/// Absolute tolerance for closed-form results computed in `f64` from `f32` inputs.
const EXACT: f64 = 1e-6;
/// RankMe's ε = 1e-7 shifts its value from the ideal integer by about r·ε·log(ε).
const RANKME_EPS: f64 = 2e-4;

/// The 8 × 8 Sylvester–Hadamard matrix: columns 1..8 are ±1, mean zero and orthogonal.
fn hadamard8() -> Mat<f64> {
    Mat::from_fn(8, 8, |i, j| {
        if (i & j).count_ones() % 2 == 0 {
            1.0
        } else {
            -1.0
        }
    })
}

/// 8 points whose centred covariance has eigenvalues `scales[j]² · 8/7` along the axes.
fn axis_cloud(scales: &[f64]) -> Mat<f32> {
    let h = hadamard8();
    Mat::from_fn(8, scales.len(), |i, j| (h[(i, j + 1)] * scales[j]) as f32)
}

/// Runs one metric on `acts` (optionally with a readout basis) and returns its values.
fn check(metric: &dyn Metric, acts: &Mat<f32>, readout: Option<&Mat<f64>>) -> Vec<MetricValue> {
    let mut input = LayerInput::new(acts.as_ref(), "test layer", Par::Seq).expect("valid input");
    if let Some(b) = readout {
        input = input.with_readout(b.as_ref()).expect("valid readout");
    }
    metric.compute(&input).expect("metric computes")
}

use repgeom_testkit::assert_close;

#[test]
fn rankme_by_hand() {
    // p = (0.75, 0.25): exp(-(0.75 ln 0.75 + 0.25 ln 0.25)) = 1.754765…
    assert_close(
        rankme(&[3.0, 1.0], 1e-7).unwrap(),
        1.7547652933937916,
        EXACT,
        "rankme(3, 1)",
    );
    assert!(rankme(&[0.0, 0.0], 1e-7).is_none());
}

#[test]
fn rankme_of_identity_spectrum_is_its_rank() {
    // Uncentred 8 × 6 matrix [I_4 0; 0 0]: four unit singular values.
    let x = Mat::from_fn(8, 6, |i, j| if i == j && i < 4 { 1.0f32 } else { 0.0 });
    let v = check(&RankMe::default(), &x, None);
    assert_close(v[0].value, 4.0, RANKME_EPS, "rankme of I_4");
    assert_eq!(v[0].extra["max_rank"] as usize, 6);
}

#[test]
fn alpha_req_recovers_a_planted_power_law() {
    // Covariance eigenvalues ∝ j^-2 exactly: α = 2, R² = 1, with the full-rank fit.
    let scales: Vec<f64> = (1..=6).map(|j| 1.0 / j as f64).collect();
    let full = AlphaReq {
        fit: AlphaFit::FullRank,
        ..AlphaReq::default()
    };
    let v = check(&full, &axis_cloud(&scales), None);
    assert_eq!(v[0].variant, "full_rank");
    assert_close(v[0].value, 2.0, EXACT, "alpha");
    assert_close(v[0].extra["r2"], 1.0, EXACT, "r2");
    assert_eq!((v[0].extra["fit_start"], v[0].extra["fit_end"]), (1.0, 6.0));
    assert_eq!(v[0].extra["weight_power"], 0.0);
    // A sub-range fit reports it.
    let v = check(
        &AlphaReq {
            fit_start: Some(2),
            fit_end: Some(5),
            ..full.clone()
        },
        &axis_cloud(&scales),
        None,
    );
    assert_close(v[0].value, 2.0, EXACT, "alpha on 2..=5");
    assert_eq!((v[0].extra["fit_start"], v[0].extra["fit_end"]), (2.0, 5.0));
    // The default (reference) fit starts at rank 4: on 6 axes that leaves 3 points.
    let v = check(&AlphaReq::default(), &axis_cloud(&scales), None);
    assert_eq!(v[0].variant, "");
    assert_close(v[0].value, 2.0, EXACT, "alpha on 4..=6, weights 1/i");
    assert_eq!((v[0].extra["fit_start"], v[0].extra["fit_end"]), (4.0, 6.0));
    assert_eq!(v[0].extra["weight_power"], 1.0);
}

#[test]
fn alpha_req_default_needs_three_ranks_from_the_fourth() {
    // Five axes: ranks 4..=5 are only two points, so the reference fit refuses clearly.
    let scales: Vec<f64> = (1..=5).map(|j| 1.0 / j as f64).collect();
    let acts = axis_cloud(&scales);
    let input = LayerInput::new(acts.as_ref(), "test layer", Par::Seq).unwrap();
    let e = AlphaReq::default().compute(&input).unwrap_err().to_string();
    assert!(e.contains("4..=5") && e.contains("numerical rank 5"), "{e}");
    // A fit_end below fit_start + 2 is refused before any data is seen.
    let bad = AlphaReq {
        fit_end: Some(5),
        ..AlphaReq::default()
    };
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("fit_start + 2 = 6")
    );
}

#[test]
fn weighted_power_law_fit_by_hand() {
    // Ranks 1, 2, 3 with log λ = (0, -1, -1.2) (not on a line), weights 1/i. The weighted
    // normal equations [Σw Σwx; Σwx Σwx²](c, s) = (Σwy, Σwxy), x = ln i, solved by Cramer's
    // rule, give the slope s; α = -s.
    let y = [0.0f64, -1.0, -1.2];
    let lambdas: Vec<f64> = y.iter().map(|v| v.exp()).collect();
    let (mut sw, mut swx, mut swxx, mut swy, mut swxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (i, yi) in y.iter().enumerate() {
        let (w, x) = (1.0 / (i + 1) as f64, ((i + 1) as f64).ln());
        sw += w;
        swx += w * x;
        swxx += w * x * x;
        swy += w * yi;
        swxy += w * x * yi;
    }
    let slope = (sw * swxy - swx * swy) / (sw * swxx - swx * swx);
    let fit = crate::power_law_fit_weighted(&lambdas, 1, 3, 1.0);
    assert_close(fit.alpha, -slope, EXACT, "three-point weighted slope");
    // The unweighted fit of the same points differs (the weights matter here).
    let plain = crate::power_law_fit(&lambdas, 1, 3);
    assert!(
        (plain.alpha - fit.alpha).abs() > 1e-3,
        "{plain:?} vs {fit:?}"
    );
    // Weights do not move an exact power law.
    let exact: Vec<f64> = (1..=10).map(|i| (i as f64).powf(-1.3)).collect();
    for p in [0.0, 1.0, 2.0] {
        let fit = crate::power_law_fit_weighted(&exact, 3, 10, p);
        assert_close(fit.alpha, 1.3, EXACT, "exact power law, any weights");
        assert_close(fit.r2, 1.0, EXACT, "exact power law r2");
    }
}

#[test]
fn rankme_covariance_convention_by_hand() {
    // Axis cloud with scales (3, 1): covariance eigenvalues ∝ (9, 1), p = (0.9, 0.1).
    let v = check(
        &RankMe {
            convention: RankMeConvention::Covariance,
            ..RankMe::default()
        },
        &axis_cloud(&[3.0, 1.0]),
        None,
    );
    let expected = (-(0.9f64 * 0.9f64.ln() + 0.1 * 0.1f64.ln())).exp();
    assert_eq!(v[0].variant, "covariance");
    assert_close(v[0].value, expected, 1e-5, "rankme covariance (9, 1)");
    // Garrido's convention on the same (mean-zero) cloud: singular values (3, 1).
    let v = check(&RankMe::default(), &axis_cloud(&[3.0, 1.0]), None);
    assert_eq!(v[0].variant, "");
    assert_close(
        v[0].value,
        1.7547652933937916,
        1e-5,
        "rankme garrido (3, 1)",
    );
}

#[test]
fn partition_isotropy_by_hand() {
    // Rows ±a·e1, ±b·e2 (a = 1, b = 2): eigenvectors e1, e2. Z(±e1) = 2 + 2 cosh(1)... in
    // detail Z(e1) = e^1 + e^-1 + 2 (the e2 rows give e^0), Z(e2) = e^2 + e^-2 + 2.
    let x = Mat::from_fn(4, 2, |i, j| match (i, j) {
        (0, 0) => 1.0f32,
        (1, 0) => -1.0,
        (2, 1) => 2.0,
        (3, 1) => -2.0,
        _ => 0.0,
    });
    let only_partition = Isotropy {
        isoscore: false,
        mean_cosine: false,
        partition: true,
    };
    let v = check(&only_partition, &x, None);
    assert_eq!(v[0].variant, "partition");
    let z1 = 1f64.exp() + (-1f64).exp() + 2.0;
    let z2 = 2f64.exp() + (-2f64).exp() + 2.0;
    assert_close(v[0].value, z1 / z2, EXACT, "I(W) of the ± cross");
    // Both signs count: rows a·e1 and 2a·e1 only on one side make Z(e1) ≠ Z(-e1).
    let x = Mat::from_fn(4, 2, |i, j| match (i, j) {
        (0, 0) => 1.0f32,
        (1, 0) => 2.0,
        (2, 1) => 0.5,
        (3, 1) => -0.5,
        _ => 0.0,
    });
    let v = check(&only_partition, &x, None);
    let zs = [
        1f64.exp() + 2f64.exp() + 2.0,        // +e1
        (-1f64).exp() + (-2f64).exp() + 2.0,  // -e1
        0.5f64.exp() + (-0.5f64).exp() + 2.0, // ±e2
    ];
    let expected = zs[1] / zs[0];
    assert_close(v[0].value, expected, EXACT, "I(W) with a one-sided axis");
    // Large activations do not overflow (log-space): a 1000x scale stays finite and in (0, 1].
    let big = Mat::from_fn(4, 2, |i, j| x[(i, j)] * 1000.0);
    let v = check(&only_partition, &big, None);
    assert!(v[0].value >= 0.0 && v[0].value <= 1.0, "{}", v[0].value);
}

#[test]
fn partition_isotropy_is_identical_at_any_thread_count() {
    let x = Mat::from_fn(40, 12, |i, j| {
        ((i * 7 + j * 3) % 11) as f32 - 5.0 + j as f32 * 0.1
    });
    let metric = Isotropy {
        partition: true,
        ..Isotropy::default()
    };
    let run = |par| {
        let input = LayerInput::new(x.as_ref(), "t", par).unwrap();
        metric.compute(&input).unwrap()
    };
    let (a, b) = (run(Par::Seq), run(Par::rayon(2)));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.value.to_bits(), y.value.to_bits(), "{}", x.variant);
    }
}

#[test]
fn isoscore_by_hand() {
    assert_close(
        isoscore(&[1.0, 1.0, 1.0, 1.0]).unwrap(),
        1.0,
        EXACT,
        "isotropic",
    );
    assert_close(
        isoscore(&[5.0, 0.0, 0.0, 0.0]).unwrap(),
        0.0,
        EXACT,
        "one direction",
    );
    // Worked in docs/metrics.md: (3, 1) gives 0.6; (4, 2, 1, 0) gives 4/9.
    assert_close(isoscore(&[3.0, 1.0]).unwrap(), 0.6, EXACT, "(3, 1)");
    assert_close(
        isoscore(&[4.0, 2.0, 1.0, 0.0]).unwrap(),
        4.0 / 9.0,
        EXACT,
        "(4, 2, 1, 0)",
    );
    // Equal axis variances: IsoScore 1 through the metric.
    let v = check(
        &Isotropy {
            isoscore: true,
            mean_cosine: false,
            partition: false,
        },
        &axis_cloud(&[2.0; 6]),
        None,
    );
    assert_close(v[0].value, 1.0, EXACT, "isoscore of an isotropic cloud");
}

#[test]
fn mean_cosine_by_hand() {
    // Rows e1, e2, e1, e2: of 6 pairs, 2 have cosine 1 and 4 have cosine 0.
    let x = Mat::from_fn(4, 2, |i, j| if i % 2 == j { 1.0f32 } else { 0.0 });
    let v = check(
        &Isotropy {
            isoscore: false,
            mean_cosine: true,
            partition: false,
        },
        &x,
        None,
    );
    assert_eq!(v[0].variant, "mean_cosine");
    assert_close(v[0].value, 1.0 / 3.0, EXACT, "mean cosine");
}

#[test]
fn condition_number_by_hand() {
    let scales: Vec<f64> = (1..=6).map(|j| 1.0 / j as f64).collect();
    let v = check(&ConditionNumber::default(), &axis_cloud(&scales), None);
    assert_close(v[0].value, 6.0, EXACT, "sigma_1 / sigma_6");
    let v = check(
        &ConditionNumber {
            of: SpectrumKind::Covariance,
        },
        &axis_cloud(&scales),
        None,
    );
    assert_close(v[0].value, 36.0, 1e-5, "lambda_1 / lambda_6");
    // Rank deficiency: the ratio is over the numerically non-zero values, and says so.
    let mut x = axis_cloud(&scales);
    for i in 0..8 {
        x[(i, 5)] = 0.0;
    }
    let v = check(&ConditionNumber::default(), &x, None);
    assert_close(v[0].value, 5.0, EXACT, "sigma_1 / sigma_5");
    assert_eq!((v[0].extra["rank"], v[0].extra["max_rank"]), (5.0, 6.0));
}

#[test]
fn pc_readout_share_by_hand() {
    // Principal axes are e1..e6 in order; the readout spans e1 and e3.
    let scales = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0];
    let basis = Mat::from_fn(6, 2, |i, j| {
        if (j == 0 && i == 0) || (j == 1 && i == 2) {
            1.0
        } else {
            0.0
        }
    });
    let v = check(&PcReadoutShare { m: 3 }, &axis_cloud(&scales), Some(&basis));
    let shares: Vec<f64> = v.iter().map(|r| r.value).collect();
    for (found, expected) in shares.iter().zip([1.0, 0.0, 1.0]) {
        assert_close(*found, expected, EXACT, "share");
    }
    assert_eq!(v[1].variant, "pc2");
    assert_close(v[0].extra["random_expectation"], 2.0 / 6.0, EXACT, "k/d");
    assert_close(
        v[0].extra["explained_variance"],
        36.0 / 91.0,
        EXACT,
        "explained variance",
    );
}

fn pair_check(metric: &dyn PairMetric, a: &Mat<f32>, b: &Mat<f32>) -> Vec<MetricValue> {
    let ia = LayerInput::new(a.as_ref(), "A", Par::Seq).unwrap();
    let ib = LayerInput::new(b.as_ref(), "B", Par::Seq).unwrap();
    metric
        .compute(&PairInput::new(&ia, &ib).unwrap())
        .expect("pair metric computes")
}

#[test]
fn cka_by_hand() {
    // X = two orthogonal ±1 columns, Y = the first of them: CKA = 64 / (√128 · 8) = 1/√2.
    let x = axis_cloud(&[1.0, 1.0]);
    let y = axis_cloud(&[1.0]);
    let v = pair_check(&CkaLinear::default(), &x, &y);
    assert_close(
        v[0].value,
        std::f64::consts::FRAC_1_SQRT_2,
        EXACT,
        "biased CKA",
    );
    for debiased in [false, true] {
        let m = CkaLinear {
            debiased,
            ..CkaLinear::default()
        };
        let scales: Vec<f64> = (1..=6).map(|j| 1.0 / j as f64).collect();
        let a = axis_cloud(&scales);
        assert_close(pair_check(&m, &a, &a)[0].value, 1.0, EXACT, "CKA(X, X)");
        // Isotropic scaling and a width change (zero-padded copy) leave CKA at 1.
        let b = Mat::from_fn(8, 9, |i, j| if j < 6 { 3.0 * a[(i, j)] } else { 0.0 });
        assert_close(pair_check(&m, &a, &b)[0].value, 1.0, EXACT, "CKA(X, 3X)");
    }
}

#[test]
fn unbiased_hsic_matches_the_u_statistic() {
    // Brute force over ordered 4-tuples of distinct indices (Song et al. 2012, eq. 4).
    let n = 6;
    let k = Mat::from_fn(n, n, |i, j| {
        ((i * 7 + j * 7 + i * j) % 5) as f64 + 0.5 * (i == j) as u8 as f64
    });
    let l = Mat::from_fn(n, n, |i, j| {
        ((i + j) % 3) as f64 - 1.0 + (i * j) as f64 * 0.1
    });
    let mut sum = 0.0;
    let mut count = 0.0;
    for i in 0..n {
        for j in 0..n {
            for q in 0..n {
                for r in 0..n {
                    let idx = [i, j, q, r];
                    let distinct = (0..4).all(|a| (a + 1..4).all(|b| idx[a] != idx[b]));
                    if distinct {
                        sum += k[(i, j)] * l[(i, j)] + k[(i, j)] * l[(q, r)]
                            - 2.0 * k[(i, j)] * l[(i, q)];
                        count += 1.0;
                    }
                }
            }
        }
    }
    let brute = sum / count;
    let fast = repgeom_linalg::hsic_unbiased(k.as_ref(), l.as_ref()).unwrap();
    assert_close(fast, brute, 1e-10, "unbiased HSIC");
}

#[test]
fn distance_spearman_of_a_model_with_itself_is_one() {
    let scales: Vec<f64> = (1..=6).map(|j| 1.0 / j as f64).collect();
    let a = axis_cloud(&scales);
    let m = DistanceSpearman {
        ccr: 0,
        readout: false,
        random: false,
        ..DistanceSpearman::default()
    };
    let v = pair_check(&m, &a, &a);
    assert_eq!(v.len(), 1);
    assert_close(v[0].value, 1.0, EXACT, "full-space agreement with itself");
}

#[test]
fn degenerate_inputs_are_errors() {
    let three = Mat::from_fn(3, 5, |i, j| (i + j) as f32);
    let err = LayerInput::new(three.as_ref(), "tiny", Par::Seq)
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs at least 4 points, got 3"), "{err}");
    let constant = Mat::from_fn(10, 5, |_, j| j as f32);
    let err = LayerInput::new(constant.as_ref(), "flat", Par::Seq)
        .unwrap_err()
        .to_string();
    assert!(err.contains("all 10 points are identical"), "{err}");
    let mut nan = Mat::from_fn(10, 5, |i, j| (i * j) as f32);
    nan[(2, 3)] = f32::NAN;
    let err = LayerInput::new(nan.as_ref(), "bad", Par::Seq)
        .unwrap_err()
        .to_string();
    assert!(err.contains("row 2, column 3"), "{err}");
    // A readout-needing metric without a readout names what is missing.
    let x = axis_cloud(&[3.0, 2.0, 1.0]);
    let input = LayerInput::new(x.as_ref(), "layer 0", Par::Seq).unwrap();
    let err = PcReadoutShare::default()
        .compute(&input)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pc_readout_share needs the readout basis"),
        "{err}"
    );
}

/// `LayerInput::ccr` computes each level once and hands every caller the same matrix, equal to
/// `repgeom_linalg::ccr` of the layer.
#[test]
fn layer_input_computes_each_ccr_level_once() {
    let x = Mat::<f32>::from_fn(40, 6, |i, j| ((i * 7 + j * j * 3) % 11) as f32 + j as f32);
    let input = LayerInput::new(x.as_ref(), "x", Par::Seq).unwrap();
    for c in [1, 0, 2, 1] {
        let first = input.ccr(c).unwrap();
        let again = input.ccr(c).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "CCR-{c} computed twice"
        );
        let want = repgeom_linalg::ccr(x.as_ref(), c, Par::Seq).unwrap();
        assert!(*first == want, "CCR-{c} differs from repgeom_linalg::ccr");
    }
}

/// `LayerInput::memo` runs each key's work once and hands every caller the same result; an
/// error is returned and not kept; k-NN's neighbour lists go through it, so a table of pairs
/// searches each layer once.
#[test]
fn layer_input_memo_computes_each_key_once() {
    let x = Mat::<f32>::from_fn(40, 6, |i, j| ((i * 7 + j * j * 3) % 11) as f32 + j as f32);
    let input = LayerInput::new(x.as_ref(), "x", Par::Seq).unwrap();
    let runs = std::sync::atomic::AtomicUsize::new(0);
    let make = |v: usize| {
        runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(vec![v])
    };
    let a = input.memo(("test", 1, false), || make(1)).unwrap();
    let again = input.memo(("test", 1, false), || make(2)).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &again) && *again == [1]);
    let other = input.memo(("test", 1, true), || make(3)).unwrap();
    assert_eq!(*other, [3]);
    assert_eq!(runs.load(std::sync::atomic::Ordering::Relaxed), 2);
    let failed: crate::Result<std::sync::Arc<Vec<usize>>> = input.memo(("fails", 0, false), || {
        Err(crate::Error::InvalidOption {
            name: "k".into(),
            value: "0".into(),
            reason: "test".into(),
        })
    });
    assert!(failed.is_err());
    assert_eq!(*input.memo(("fails", 0, false), || make(4)).unwrap(), [4]);
    // the neighbour lists: one search per (k, center), whatever the pair
    let one = crate::knn::cosine_neighbours(&input, 3, false).unwrap();
    let two = crate::knn::cosine_neighbours(&input, 3, false).unwrap();
    assert!(std::sync::Arc::ptr_eq(&one, &two));
    assert!(!std::sync::Arc::ptr_eq(
        &one,
        &crate::knn::cosine_neighbours(&input, 3, true).unwrap()
    ));
}

/// The one-call API's parameters are written with the same flat keys as the `pga` metric and
/// a manifest's `[analysis]`; an unknown key is refused.
#[test]
fn pga_params_read_the_pga_options_inline() {
    let p: crate::PgaParams =
        serde_json::from_str(r#"{"k": 5, "n_null": 20, "ccr": [0, 2], "max_pairs": 400}"#).unwrap();
    assert_eq!((p.k, p.n_null, p.pga.ccr.clone()), (5, 20, vec![0, 2]));
    assert_eq!(p.pga.engine.max_pairs, Some(400));
    let back: crate::PgaParams = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
    let err = serde_json::from_str::<crate::PgaParams>(r#"{"k": 5, "max_pair": 400}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_pair"), "{err}");
    assert!(p.clone().check().is_ok());
    let seeded = crate::PgaParams {
        pga: crate::Pga {
            engine: crate::pga::EngineOptions {
                pair_seed: 3,
                ..Default::default()
            },
            ..crate::Pga::default()
        },
        ..p
    };
    assert!(seeded.check().is_err());
}

/// A layer's and a null's caches are filled from tasks on the pool that ask for them at once,
/// and the work that fills them runs on the same pool: a thread waiting for its share of that
/// work runs other tasks meanwhile, one of which may ask for the same cache. No cache may
/// then wait on itself (a blocking `OnceLock::get_or_init`, or a lock held across the work,
/// did: `repgeom sweep --threads 16` hung, now and then, on a compare table's cells). Four
/// layers whose caches take many tasks to fill, asked for by 64 tasks at once, 20 times; on
/// its own thread with a deadline, so that a hang fails the test (with a blocking
/// `get_or_init` in place of `get_or_make`, 10 rounds hung in 2 runs of 3).
#[test]
fn caches_asked_for_from_many_pool_tasks_never_wait_on_themselves() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        pool.install(|| {
            for round in 0..20 {
                let xs: Vec<Mat<f32>> = (0..4)
                    .map(|l| {
                        Mat::from_fn(400, 640, |i, j| {
                            ((i * 7 + j * j * 3 + round + l) % 23) as f32 + (i % 5 * j) as f32
                        })
                    })
                    .collect();
                let layers: Vec<LayerInput<'_>> = (xs.iter())
                    .map(|x| LayerInput::new(x.as_ref(), "x", Par::rayon(0)).unwrap())
                    .collect();
                let params = repgeom_null::NullParams {
                    n_null: 64,
                    seed: round as u64,
                };
                let null = repgeom_null::NullBases::draw(64, 8, &params.check().unwrap()).unwrap();
                let got = repgeom_linalg::map_in_order(64, Par::rayon(0), |t| {
                    let layer = &layers[t % 4];
                    let q = &null.bases_f32()[t];
                    let sq = layer.centred_gram_frobenius_sq();
                    let c = layer.ccr(1).unwrap();
                    (sq.to_bits(), c.nrows() + q.ncols())
                });
                assert!(got.iter().zip(&got[4..]).all(|(a, b)| a == b));
            }
        });
        done.send(()).unwrap();
    });
    let waited = finished.recv_timeout(std::time::Duration::from_secs(120));
    assert!(
        waited.is_ok(),
        "a cache waited on itself: the tasks never finished"
    );
}

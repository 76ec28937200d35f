//! PGA against the committed NumPy/SciPy reference (`fixtures/pga/`), and its invariances.

use std::path::PathBuf;

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_null::NullBases;

use super::*;

/// Tolerance on Spearman correlations against SciPy (f64 pdist) given our f32 distance GEMMs.
const RHO_TOL: f64 = 1e-6;
/// Tolerance on z-scores (z amplifies rho errors by 1/null_std).
const Z_TOL: f64 = 1e-3;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/pga")
        .join(name)
}

struct Reference {
    layers: Vec<Mat<f32>>,
    /// `W_U` in `f32`, and its top-8 subspace.
    w_u: Mat<f32>,
    basis: Mat<f64>,
    null: NullBases,
    json: serde_json::Value,
}

fn load() -> Reference {
    let acts = repgeom_io::read_activations(&fixture("acts.npy"), None).unwrap();
    let layers = acts
        .layers
        .iter()
        .map(|l| MatRef::from_row_major_slice(&l.acts.data, l.acts.rows, l.acts.cols).to_owned())
        .collect();
    let w = repgeom_io::read_array_f64(&fixture("readout.npy")).unwrap();
    let w32: Vec<f32> = w.data.iter().map(|&v| v as f32).collect();
    let w_u = MatRef::from_row_major_slice(&w32, w.shape[0], w.shape[1]).to_owned();
    let basis = repgeom_linalg::readout_subspace(w_u.as_ref(), 8, Par::Seq).unwrap();
    let nb = repgeom_io::read_array_f64(&fixture("null_bases.npy")).unwrap();
    let null = NullBases::from_array(&nb.shape, &nb.data, 64, 8, 1e-9).unwrap();
    let json =
        serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap();
    Reference {
        layers,
        w_u,
        basis,
        null,
        json,
    }
}

/// The workspace's one tolerance rule; `what` names the SciPy or NumPy reference compared.
use repgeom_testkit::assert_close as close;

#[test]
fn matches_scipy_reference() {
    let r = load();
    for case in r.json["results"].as_array().unwrap() {
        let layer = case["layer"].as_u64().unwrap() as usize;
        let ccr = case["ccr"].as_u64().unwrap() as usize;
        let what = format!("layer {layer} ccr {ccr}");
        let got = pga(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            ccr,
            &what,
            Par::Seq,
            &|| {},
        )
        .unwrap();
        close(
            got.rho_readout,
            case["rho_readout"].as_f64().unwrap(),
            RHO_TOL,
            &what,
        );
        for (i, (g, e)) in got
            .null_rhos
            .iter()
            .zip(case["null_rhos"].as_array().unwrap())
            .enumerate()
        {
            close(
                *g,
                e.as_f64().unwrap(),
                RHO_TOL,
                &format!("{what} null draw {i}"),
            );
        }
        close(
            got.summary.null_mean,
            case["null_mean"].as_f64().unwrap(),
            RHO_TOL,
            &what,
        );
        close(
            got.summary.null_std,
            case["null_std"].as_f64().unwrap(),
            RHO_TOL,
            &what,
        );
        close(got.summary.z, case["z"].as_f64().unwrap(), Z_TOL, &what);
        close(
            got.summary.p_value,
            case["p_value"].as_f64().unwrap(),
            1e-12,
            &what,
        );
    }
}

#[test]
fn ccr_sweep_equals_separate_calls() {
    let r = load();
    let sweep = pga_ccr_sweep(
        r.layers[1].as_ref(),
        r.basis.as_ref(),
        &r.null,
        &[0, 1, 3],
        "l1",
        Par::Seq,
        &|| {},
    )
    .unwrap();
    for (c, s) in [0, 1, 3].iter().zip(&sweep) {
        let one = pga(
            r.layers[1].as_ref(),
            r.basis.as_ref(),
            &r.null,
            *c,
            "l1",
            Par::Seq,
            &|| {},
        )
        .unwrap();
        assert_eq!(s.ccr, *c);
        close(s.summary.z, one.summary.z, 1e-12, "sweep vs single");
    }
}

#[test]
fn identical_at_one_and_two_threads() {
    let r = load();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let run = |pool: &rayon::ThreadPool, par: Par| {
        pool.install(|| {
            pga_ccr_sweep(
                r.layers[0].as_ref(),
                r.basis.as_ref(),
                &r.null,
                &[1, 3],
                "l0",
                par,
                &|| {},
            )
            .unwrap()
        })
    };
    let a = run(&one, Par::Seq);
    let b = run(&two, Par::rayon(2));
    assert!(a == b, "PGA differs between 1 and 2 threads");
}

/// CCR-1 on a layer large enough (N·d ≥ 256²) for faer to parallelise `X u` on its own, which
/// would sum one partial result per thread: every field, the captured variance included, is
/// the same bits at 1, 2, 3 and 16 threads.
#[test]
fn identical_at_any_thread_count_above_the_matvec_threshold() {
    let (n, d, k) = (520, 128, 8);
    let acts = Mat::<f32>::from_fn(n, d, |i, j| {
        ((i * 37 + j * 11) % 97) as f32 / 97.0 - 0.5 + 0.3 * (i as f32 * 0.01 + j as f32).sin()
    });
    let w_u = Mat::<f32>::from_fn(300, d, |i, j| ((i * 13 + j * 7) as f32 * 0.017).sin());
    let basis = repgeom_linalg::readout_subspace(w_u.as_ref(), k, Par::Seq).unwrap();
    let params = repgeom_null::NullParams {
        n_null: 10,
        seed: 0,
    }
    .check()
    .unwrap();
    let null = NullBases::draw(d, k, &params).unwrap();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let par = if threads == 1 {
            Par::Seq
        } else {
            Par::rayon(threads)
        };
        pool.install(|| {
            pga_ccr_sweep(
                acts.as_ref(),
                basis.as_ref(),
                &null,
                &[1, 2],
                "t",
                par,
                &|| {},
            )
            .unwrap()
        })
    };
    let one = run(1);
    for threads in [2, 3, 16] {
        assert!(
            run(threads) == one,
            "PGA differs between 1 and {threads} threads"
        );
    }
}

/// A readout basis computed beside the layer's preparation and null draws gives the results
/// of the same basis given up front, on every engine path (exact Haar, which overlaps the two;
/// sampled pairs and the spectrum null, which do not; one thread), and the basis itself.
#[test]
fn overlapped_readout_equals_a_given_basis() {
    let r = load();
    let check = |par: Par, opts: EngineOptions, ccrs: &[usize]| {
        let given = pga_ccr_sweep_with(
            r.layers[2].as_ref(),
            r.basis.as_ref(),
            &r.null,
            ccrs,
            "l2",
            par,
            &|| {},
            &opts,
        );
        let overlapped = pga_ccr_sweep_overlapped(
            r.layers[2].as_ref(),
            || {
                Ok::<_, Error>(repgeom_linalg::readout_subspace(
                    r.w_u.as_ref(),
                    8,
                    Par::Seq,
                )?)
            },
            &r.null,
            ccrs,
            "l2",
            par,
            &|| {},
            &opts,
        );
        match (given, overlapped) {
            (Ok(given), Ok((basis, overlapped))) => {
                assert!(basis == r.basis, "{opts:?}: the computed basis is returned");
                assert!(overlapped == given, "{par:?} {opts:?} {ccrs:?}");
            }
            (given, overlapped) => panic!("{opts:?}: {given:?} vs {:?}", overlapped.map(|o| o.1)),
        }
    };
    let exact = EngineOptions::default();
    let sampled = EngineOptions {
        max_pairs: Some(500),
        ..EngineOptions::default()
    };
    let spectrum = EngineOptions {
        null: NullKind::Spectrum,
        ..EngineOptions::default()
    };
    check(Par::rayon(2), exact.clone(), &[1, 0, 3]);
    check(Par::Seq, exact.clone(), &[1, 0, 3]);
    check(Par::rayon(2), exact, &[2]);
    check(Par::rayon(2), sampled, &[0, 1]);
    check(Par::rayon(2), spectrum, &[1]);
}

/// The readout closure's own error comes back unchanged; a computed basis that does not fit
/// the null bases is a shape error naming both.
#[test]
fn overlapped_readout_errors_are_passed_on() {
    #[derive(Debug, PartialEq)]
    enum Failure {
        Readout(&'static str),
        Pga(String),
    }
    impl From<Error> for Failure {
        fn from(e: Error) -> Self {
            Failure::Pga(e.to_string())
        }
    }
    let r = load();
    let run = |readout: Mat<f64>, fail: bool| {
        pga_ccr_sweep_overlapped(
            r.layers[0].as_ref(),
            move || {
                if fail {
                    Err(Failure::Readout("no W_U"))
                } else {
                    Ok(readout)
                }
            },
            &r.null,
            &[1],
            "l0",
            Par::rayon(2),
            &|| {},
            &EngineOptions::default(),
        )
        .map(|(_, results)| results)
    };
    assert_eq!(
        run(r.basis.clone(), true).unwrap_err(),
        Failure::Readout("no W_U")
    );
    let narrow = r.basis.as_ref().subcols(0, 5).to_owned();
    match run(narrow, false).unwrap_err() {
        Failure::Pga(message) => assert!(
            message.contains("null bases [") && message.contains("readout basis [64, 5]"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let mut nan = r.basis.clone();
    nan[(3, 2)] = f64::NAN;
    match run(nan, false).unwrap_err() {
        Failure::Pga(message) => assert!(message.contains("readout basis for l0"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn z_unchanged_by_a_rotation_of_everything() {
    // Rotate activations, readout basis and null bases by the same orthogonal matrix.
    let r = load();
    let d = 64;
    let rot = repgeom_null::haar_basis(d, d, 99, 0);
    let rotate32 = |x: &Mat<f32>| {
        let x64 = repgeom_linalg::to_f64(x.as_ref());
        repgeom_linalg::to_f32(
            repgeom_linalg::project(x64.as_ref(), rot.as_ref(), Par::Seq).as_ref(),
            Par::Seq,
        )
    };
    // Basis B (d×k) becomes Rᵀ B so that (X R)(Rᵀ B) = X B.
    let rot_t = rot.transpose().to_owned();
    let rotate_basis = |b: &Mat<f64>| repgeom_linalg::project(rot_t.as_ref(), b.as_ref(), Par::Seq);
    let (shape, _) = r.null.to_array();
    let mut data = Vec::new();
    for q in r.null.bases() {
        let rq = rotate_basis(q);
        for i in 0..d {
            for j in 0..8 {
                data.push(rq[(i, j)]);
            }
        }
    }
    let null_rot = NullBases::from_array(&shape, &data, d, 8, 1e-9).unwrap();
    let base = pga(
        r.layers[1].as_ref(),
        r.basis.as_ref(),
        &r.null,
        1,
        "l1",
        Par::Seq,
        &|| {},
    )
    .unwrap();
    let rotated = pga(
        rotate32(&r.layers[1]).as_ref(),
        rotate_basis(&r.basis).as_ref(),
        &null_rot,
        1,
        "l1 rotated",
        Par::Seq,
        &|| {},
    )
    .unwrap();
    close(rotated.rho_readout, base.rho_readout, 1e-5, "rotated rho");
    close(rotated.summary.z, base.summary.z, 1e-2, "rotated z");
}

#[test]
fn degenerate_inputs_are_clear_errors() {
    let r = load();
    let check = |acts: MatRef<'_, f32>, basis: MatRef<'_, f64>, expect: &str| {
        let err = pga(
            acts,
            basis,
            &r.null,
            1,
            "acts.npy: layer.0 [..]",
            Par::Seq,
            &|| {},
        )
        .unwrap_err();
        assert_eq!(err.to_string(), expect);
    };
    let few = r.layers[0].as_ref().subrows(0, 3);
    check(
        few,
        r.basis.as_ref(),
        "acts.npy: layer.0 [..]: needs at least 4 points, got 3",
    );
    let mut nan = r.layers[0].clone();
    nan[(5, 7)] = f32::NAN;
    check(
        nan.as_ref(),
        r.basis.as_ref(),
        "acts.npy: layer.0 [..]: non-finite value (NaN or Inf) at row 5, column 7",
    );
    let narrow = r.layers[0].as_ref().subcols(0, 32);
    check(
        narrow,
        r.basis.as_ref(),
        "acts.npy: layer.0 [..] against the readout basis: shape mismatch: activations [300, 32] (d = 32) vs readout basis [64, 8] (d = 64)",
    );
    let mut zero = r.layers[0].clone();
    zero.row_mut(2).fill(0.0);
    check(
        zero.as_ref(),
        r.basis.as_ref(),
        "acts.npy: layer.0 [..]: row 2 has zero norm, so cosine distances to it are undefined",
    );
    // A row equal to the mean of the points is zero after centring.
    let mut zero = r.layers[0].clone();
    let n = zero.nrows() as f32;
    for j in 0..64 {
        let mean = (1..zero.nrows()).map(|i| zero[(i, j)]).sum::<f32>() / (n - 1.0);
        zero[(0, j)] = mean;
    }
    let err = pga(
        zero.as_ref(),
        r.basis.as_ref(),
        &r.null,
        0,
        "z",
        Par::Seq,
        &|| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("row 0 has zero norm"), "{err}");
}

#[test]
fn sampled_pairs_estimate_lands_within_its_standard_error() {
    let r = load();
    for layer in [0, 1, 2] {
        let exact = pga(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            1,
            "l",
            Par::Seq,
            &|| {},
        )
        .unwrap();
        let opts = EngineOptions {
            max_pairs: Some(8000),
            pair_seed: 3,
            ..Default::default()
        };
        let est = pga_ccr_sweep_with(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            &[1],
            "l",
            Par::Seq,
            &|| {},
            &opts,
        )
        .unwrap()
        .remove(0);
        assert_eq!(est.n_pairs, 8000);
        let se = est.rho_se.unwrap();
        assert!(
            (est.rho_readout - exact.rho_readout).abs() <= 3.0 * se,
            "layer {layer}: sampled {} vs exact {} (se {se})",
            est.rho_readout,
            exact.rho_readout
        );
        // The sign of z (the finding) survives sampling on this fixture.
        assert_eq!(
            est.summary.z.signum(),
            exact.summary.z.signum(),
            "layer {layer}: z {} vs {}",
            est.summary.z,
            exact.summary.z
        );
    }
}

#[test]
fn sampled_pairs_are_distinct_and_valid() {
    let pairs = sample_pairs(50, 600, 1);
    assert_eq!(pairs.len(), 600);
    let mut seen = std::collections::BTreeSet::new();
    for &(i, j) in &pairs {
        assert!(i < j && j < 50, "bad pair ({i}, {j})");
        assert!(seen.insert((i, j)), "duplicate pair ({i}, {j})");
    }
    // Every pair index maps back to itself.
    for p in 0..repgeom_linalg::condensed_len(50) as u64 {
        let (i, j) = pair_of_index(50, p);
        assert_eq!(
            repgeom_linalg::pair_index(50, i as usize, j as usize) as u64,
            p
        );
    }
}

/// The progress callback is called once per null draw of every level, whether the readout's
/// draw runs among them (a known basis) or after them (one decomposed beside the first
/// level), sequentially or on a pool; and the rows are the same either way.
#[test]
fn progress_counts_the_null_draws_only() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let r = load();
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let ccrs = [0, 1];
    let expected = ccrs.len() * r.null.len();
    let mut rows = Vec::new();
    for par in [Par::Seq, Par::rayon(2)] {
        let calls = AtomicUsize::new(0);
        let on_draw = || {
            calls.fetch_add(1, Ordering::Relaxed);
        };
        let (layer, opts) = (r.layers[0].as_ref(), EngineOptions::default());
        let sweep = |pending: bool| {
            let rows = two.install(|| {
                if !pending {
                    return pga_ccr_sweep_with(
                        layer,
                        r.basis.as_ref(),
                        &r.null,
                        &ccrs,
                        "l0",
                        par,
                        &on_draw,
                        &opts,
                    );
                }
                pga_ccr_sweep_overlapped(
                    layer,
                    || Ok::<_, Error>(r.basis.clone()),
                    &r.null,
                    &ccrs,
                    "l0",
                    par,
                    &on_draw,
                    &opts,
                )
                .map(|(_, rows)| rows)
            });
            let label = if pending { "pending" } else { "given" };
            assert_eq!(
                calls.swap(0, Ordering::Relaxed),
                expected,
                "{par:?}, {label}"
            );
            rows.unwrap()
        };
        let given = sweep(false);
        assert!(
            given == sweep(true),
            "{par:?}: the readout's draw wherever it runs"
        );
        rows.push(given);
    }
    assert!(rows[0] == rows[1], "sequential and parallel");
}

#[test]
fn memory_budget_limits_workers_or_fails_before_allocating() {
    let r = load();
    let est = memory_estimate(300, 64, 8);
    // Room for exactly one worker: same numbers as unlimited.
    let opts = EngineOptions {
        max_memory: Some(est.peak(1)),
        ..Default::default()
    };
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let limited = two
        .install(|| {
            pga_ccr_sweep_with(
                r.layers[0].as_ref(),
                r.basis.as_ref(),
                &r.null,
                &[1],
                "l0",
                Par::rayon(2),
                &|| {},
                &opts,
            )
        })
        .unwrap();
    let free = pga(
        r.layers[0].as_ref(),
        r.basis.as_ref(),
        &r.null,
        1,
        "l0",
        Par::Seq,
        &|| {},
    )
    .unwrap();
    assert!(limited[0] == free);
    let tiny = EngineOptions {
        max_memory: Some(1 << 20),
        ..Default::default()
    };
    let err = pga_ccr_sweep_with(
        r.layers[0].as_ref(),
        r.basis.as_ref(),
        &r.null,
        &[1],
        "l0",
        Par::Seq,
        &|| {},
        &tiny,
    )
    .unwrap_err();
    assert!(err.to_string().contains("--max-pairs"), "{err}");
}

fn stats_reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("reference_stats.json")).unwrap())
        .unwrap()
}

/// Tolerance on exact p-values and BH q-values (ratios of small integers).
const P_TOL: f64 = 1e-12;
/// Euclidean distances come from an `f32` Gram product (`s_i + s_j − 2⟨x_i, x_j⟩`), whose
/// cancellation can swap pairs SciPy's `f64` pdist separates: a looser bound than `RHO_TOL`.
const EUCLID_RHO_TOL: f64 = 2e-5;
const EUCLID_Z_TOL: f64 = 5e-3;

/// Both tails, Δρ, SE(z) and the BH q-values against NumPy/SciPy
/// (`fixtures/pga/make_stats_reference.py`), one family per CCR level.
#[test]
fn tails_effect_size_and_q_values_match_scipy() {
    let r = load();
    let reference = stats_reference();
    let mut results: Vec<(usize, PgaResult)> = Vec::new();
    for layer in 0..3 {
        let all = pga_ccr_sweep(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            &[0, 1, 3],
            "l",
            Par::Seq,
            &|| {},
        )
        .unwrap();
        results.extend(all.into_iter().map(|res| (layer, res)));
    }
    assert!(results.iter().all(|(_, res)| res.q_value.is_none()));
    assign_q_values(&mut results.iter_mut().map(|(_, res)| res).collect::<Vec<_>>());
    for case in reference["cosine_stats"].as_array().unwrap() {
        let (layer, ccr) = (
            case["layer"].as_u64().unwrap() as usize,
            case["ccr"].as_u64().unwrap() as usize,
        );
        let (_, got) = results
            .iter()
            .find(|(l, res)| *l == layer && res.ccr == ccr)
            .unwrap();
        let what = format!("layer {layer} ccr {ccr}");
        let f = |k: &str| case[k].as_f64().unwrap();
        close(
            got.summary.p_value,
            f("p_value"),
            P_TOL,
            &format!("{what} p_value"),
        );
        close(got.p_lower, f("p_lower"), P_TOL, &format!("{what} p_lower"));
        close(
            got.p_two_sided,
            f("p_two_sided"),
            P_TOL,
            &format!("{what} p_two_sided"),
        );
        close(
            got.q_value.unwrap(),
            f("q_value"),
            P_TOL,
            &format!("{what} q_value"),
        );
        close(
            got.delta_rho,
            f("delta_rho"),
            RHO_TOL,
            &format!("{what} delta_rho"),
        );
        close(got.z_se, f("z_se"), Z_TOL, &format!("{what} z_se"));
        assert_eq!(got.distance, Distance::Cosine);
    }
}

/// The Euclidean variant against SciPy's `pdist(., 'euclidean')`, every draw.
#[test]
fn euclidean_distance_matches_scipy_reference() {
    let r = load();
    let reference = stats_reference();
    let opts = EngineOptions {
        distance: Distance::Euclidean,
        ..Default::default()
    };
    for case in reference["euclidean"].as_array().unwrap() {
        let (layer, ccr) = (
            case["layer"].as_u64().unwrap() as usize,
            case["ccr"].as_u64().unwrap() as usize,
        );
        let what = format!("euclidean layer {layer} ccr {ccr}");
        let got = pga_ccr_sweep_with(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            &[ccr],
            &what,
            Par::Seq,
            &|| {},
            &opts,
        )
        .unwrap()
        .remove(0);
        assert_eq!(got.distance, Distance::Euclidean);
        close(
            got.rho_readout,
            case["rho_readout"].as_f64().unwrap(),
            EUCLID_RHO_TOL,
            &what,
        );
        for (i, (g, e)) in got
            .null_rhos
            .iter()
            .zip(case["null_rhos"].as_array().unwrap())
            .enumerate()
        {
            close(
                *g,
                e.as_f64().unwrap(),
                EUCLID_RHO_TOL,
                &format!("{what} draw {i}"),
            );
        }
        close(
            got.summary.z,
            case["z"].as_f64().unwrap(),
            EUCLID_Z_TOL,
            &format!("{what} z"),
        );
        for k in ["p_value", "p_lower", "p_two_sided"] {
            let g = match k {
                "p_value" => got.summary.p_value,
                "p_lower" => got.p_lower,
                _ => got.p_two_sided,
            };
            close(g, case[k].as_f64().unwrap(), P_TOL, &format!("{what} {k}"));
        }
        // The sampled engine estimates the same Euclidean statistic.
        let est = pga_ccr_sweep_with(
            r.layers[layer].as_ref(),
            r.basis.as_ref(),
            &r.null,
            &[ccr],
            &what,
            Par::Seq,
            &|| {},
            &EngineOptions {
                max_pairs: Some(8000),
                pair_seed: 5,
                distance: Distance::Euclidean,
                ..Default::default()
            },
        )
        .unwrap()
        .remove(0);
        let se = est.rho_se.unwrap();
        assert!(
            (est.rho_readout - got.rho_readout).abs() <= 3.0 * se,
            "{what}: sampled {} vs exact {} (se {se})",
            est.rho_readout,
            got.rho_readout
        );
    }
}

/// SE(z) = sqrt((1 + z²/2)/n) against the spread of z over replicate null seeds on the
/// fixture: 32 seeds of 50 Haar draws each, at a strongly negative z (layer 1, CCR-1) and
/// at z ≈ 0 (layer 2). With 32 replicates the observed spread itself is uncertain by about
/// 13% (and the null correlations are not exactly normal), hence the band.
#[test]
fn z_standard_error_matches_replicate_null_seeds() {
    let r = load();
    for layer in [1, 2] {
        let zs: Vec<(f64, f64)> = (0..32u64)
            .map(|seed| {
                let params = repgeom_null::NullParams { n_null: 50, seed }
                    .check()
                    .unwrap();
                let null = NullBases::draw(64, 8, &params).unwrap();
                let res = pga(
                    r.layers[layer].as_ref(),
                    r.basis.as_ref(),
                    &null,
                    1,
                    "l",
                    Par::Seq,
                    &|| {},
                )
                .unwrap();
                (res.summary.z, res.z_se)
            })
            .collect();
        let n = zs.len() as f64;
        let mean = zs.iter().map(|z| z.0).sum::<f64>() / n;
        let sd = (zs.iter().map(|z| (z.0 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let se = zs.iter().map(|z| z.1).sum::<f64>() / n;
        assert!(
            (0.6..=1.6).contains(&(sd / se)),
            "layer {layer}: z over seeds has mean {mean:.3}, sd {sd:.3}; stated SE {se:.3}"
        );
    }
}

/// The sequence bootstrap: seeded, identical at 1 and 2 threads, an ordered interval that
/// brackets the full-data estimate on a clear effect, and clear errors for bad sequence ids.
#[test]
fn bootstrap_is_deterministic_and_brackets_the_estimate() {
    let r = load();
    let groups: Vec<usize> = (0..300).map(|i| i / 10).collect();
    let boot = BootstrapOptions {
        replicates: 12,
        seed: 9,
        level: 0.9,
    };
    let run = |threads: usize, par: Par, groups: Option<&[usize]>, boot: &BootstrapOptions| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            bootstrap_ci(
                r.layers[1].as_ref(),
                r.basis.as_ref(),
                &r.null,
                &[0, 1],
                groups,
                "l1",
                par,
                &EngineOptions::default(),
                boot,
            )
        })
    };
    let a = run(1, Par::Seq, Some(&groups), &boot).unwrap();
    let b = run(2, Par::rayon(2), Some(&groups), &boot).unwrap();
    assert_eq!(a, b, "bootstrap differs between 1 and 2 threads");
    assert_eq!(a.len(), 2);
    let full = pga(
        r.layers[1].as_ref(),
        r.basis.as_ref(),
        &r.null,
        1,
        "l1",
        Par::Seq,
        &|| {},
    )
    .unwrap();
    let ci = a[1];
    assert_eq!(ci.unit, BootstrapUnit::Sequences);
    assert_eq!(ci.replicates, 12);
    assert!(ci.rho_lo <= ci.rho_hi && ci.z_lo <= ci.z_hi, "{ci:?}");
    assert!(ci.z_hi < 0.0, "the detour layer's z stays negative: {ci:?}");
    assert!(
        ci.rho_lo <= full.rho_readout + 0.05 && full.rho_readout - 0.05 <= ci.rho_hi,
        "{ci:?} vs {}",
        full.rho_readout
    );
    let other = run(
        1,
        Par::Seq,
        Some(&groups),
        &BootstrapOptions {
            seed: 10,
            ..boot.clone()
        },
    )
    .unwrap();
    assert_ne!(a, other, "another seed resamples differently");
    let points = run(1, Par::Seq, None, &boot).unwrap();
    assert_eq!(points[0].unit, BootstrapUnit::Points);

    let err = |groups: &[usize], boot: &BootstrapOptions| {
        run(1, Par::Seq, Some(groups), boot)
            .unwrap_err()
            .to_string()
    };
    let msg = err(&groups[..10], &boot);
    assert!(
        msg.contains("10 sequence ids") && msg.contains("300 points"),
        "{msg}"
    );
    let msg = err(&[0; 300], &boot);
    assert!(msg.contains("at least 2 sequences"), "{msg}");
    let msg = err(
        &groups,
        &BootstrapOptions {
            replicates: 1,
            ..boot.clone()
        },
    );
    assert!(msg.contains("at least 2 replicates"), "{msg}");
}

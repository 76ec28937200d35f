//! `repgeom pga` on the committed SciPy reference fixture.

use crate::{repgeom, root};

const FIXTURE: [&str; 8] = [
    "pga",
    "--acts",
    "fixtures/pga/acts.npy",
    "--readout",
    "fixtures/pga/readout.npy",
    "-k",
    "8",
    "--null-bases",
];

fn pga(extra: &[&str]) -> crate::Run {
    let mut args: Vec<&str> = FIXTURE.to_vec();
    args.push("fixtures/pga/null_bases.npy");
    args.extend_from_slice(extra);
    repgeom(&args)
}

#[test]
fn table_output() {
    let run = pga(&["--ccr", "0,1,3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn json_matches_scipy_reference() {
    let run = pga(&["--ccr", "0,1,3", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/pga/reference.json")).unwrap(),
    )
    .unwrap();
    let rows: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 9);
    let keys: Vec<&str> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = repgeom_columns();
    expected.sort_unstable();
    let mut got = keys.clone();
    got.sort_unstable();
    assert_eq!(
        got, expected,
        "JSON rows must have exactly the documented fields"
    );
    for case in reference["results"].as_array().unwrap() {
        let row = rows
            .iter()
            .find(|r| r["layer"] == case["layer"] && r["ccr"] == case["ccr"])
            .expect("row for every reference case");
        for (field, tol) in [
            ("rho_readout", 1e-6),
            ("null_mean", 1e-6),
            ("null_std", 1e-6),
            ("z", 1e-3),
        ] {
            let (g, e) = (row[field].as_f64().unwrap(), case[field].as_f64().unwrap());
            assert!(
                (g - e).abs() <= tol,
                "{field} layer {} ccr {}: {g} vs {e}",
                case["layer"],
                case["ccr"]
            );
        }
    }
}

fn repgeom_columns() -> Vec<&'static str> {
    vec![
        "layer",
        "n_points",
        "d",
        "k",
        "ccr",
        "rho_readout",
        "null_mean",
        "null_std",
        "z",
        "p_value",
        "p_lower",
        "p_two_sided",
        "delta_rho",
        "z_se",
        "q_value",
        "k_policy",
        "distance",
        "readout_fold_norm",
        "readout_center",
        "null",
        "captured_variance_readout",
        "captured_variance_null_mean",
        "captured_variance_null_sd",
    ]
}

/// The appended statistics against NumPy/SciPy (`fixtures/pga/make_stats_reference.py`): both
/// tails, Δρ, SE(z), and BH q-values over the three layers of the run, per CCR level.
#[test]
fn appended_statistics_match_scipy_reference() {
    let run = pga(&["--ccr", "0,1,3", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/pga/reference_stats.json")).unwrap(),
    )
    .unwrap();
    let rows: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for case in reference["cosine_stats"].as_array().unwrap() {
        let row = rows
            .iter()
            .find(|r| r["layer"] == case["layer"] && r["ccr"] == case["ccr"])
            .unwrap();
        for (field, tol) in [
            ("p_lower", 1e-12),
            ("p_two_sided", 1e-12),
            ("q_value", 1e-12),
            ("delta_rho", 1e-6),
            ("z_se", 1e-3),
        ] {
            let (g, e) = (row[field].as_f64().unwrap(), case[field].as_f64().unwrap());
            assert!((g - e).abs() <= tol, "{field} {case}: {g} vs {e}");
        }
        assert_eq!(row["k_policy"], "fixed");
        assert_eq!(row["distance"], "cosine");
        assert_eq!(row["readout_fold_norm"], 0);
        assert_eq!(row["readout_center"], 0);
    }
}

fn json_rows(run: &crate::Run) -> Vec<serde_json::Value> {
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const DRAWN: [&str; 10] = [
    "pga",
    "--acts",
    "fixtures/pga/acts.npy",
    "--readout",
    "fixtures/pga/readout.npy",
    "--n-null",
    "10",
    "--layers",
    "1",
    "--format",
];

fn drawn(extra: &[&str]) -> crate::Run {
    let mut args = DRAWN.to_vec();
    args.push("json");
    args.extend_from_slice(extra);
    repgeom(&args)
}

#[test]
fn k_list_and_k_frac_give_one_row_per_k_and_record_the_policy() {
    let list = json_rows(&drawn(&["-k", "8,4"]));
    let ks: Vec<u64> = list.iter().map(|r| r["k"].as_u64().unwrap()).collect();
    assert_eq!(ks, [4, 8], "one row per k, sorted");
    assert!(list.iter().all(|r| r["k_policy"] == "fixed"));
    let single = json_rows(&drawn(&["-k", "8"]));
    assert_eq!(
        list[1]["z"], single[0]["z"],
        "k = 8 in a list equals k = 8 alone"
    );
    // q-values: k = 4 and k = 8 form one family at CCR-1.
    assert!(list.iter().all(|r| r["q_value"].as_f64().is_some()));

    let frac = json_rows(&drawn(&["--k-frac", "0.125"]));
    assert_eq!(frac[0]["k"], 8, "round(0.125 · 64)");
    assert_eq!(frac[0]["k_policy"], "frac=0.125");
    assert_eq!(frac[0]["z"], single[0]["z"]);

    let both = drawn(&["-k", "8", "--k-frac", "0.1"]);
    assert_ne!(both.code, 0);
    let bad = drawn(&["--k-frac", "1.5"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("--k-frac 1.5"), "{}", bad.stderr);
    let tiny = drawn(&["--k-frac", "0.001"]);
    assert_ne!(tiny.code, 0);
    assert!(tiny.stderr.contains("k = round("), "{}", tiny.stderr);
}

#[test]
fn euclidean_distance_is_recorded_and_changes_the_statistic() {
    let cos = json_rows(&drawn(&["-k", "8"]));
    let euc = json_rows(&drawn(&["-k", "8", "--distance", "euclidean"]));
    assert_eq!(euc[0]["distance"], "euclidean");
    assert_ne!(cos[0]["rho_readout"], euc[0]["rho_readout"]);
    let bad = drawn(&["-k", "8", "--distance", "manhattan"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("manhattan"), "{}", bad.stderr);
}

#[test]
fn spectrum_null_is_recorded_matches_the_captured_variance_and_keeps_the_haar_columns() {
    let haar = json_rows(&drawn(&["-k", "8", "--ccr", "0,1"]));
    let spec = json_rows(&drawn(&["-k", "8", "--ccr", "0,1", "--null", "spectrum"]));
    assert_eq!(haar.len(), spec.len());
    for (h, s) in haar.iter().zip(&spec) {
        assert_eq!(h["null"], "haar");
        assert_eq!(s["null"], "spectrum");
        // Same readout, same layer: same rho and the same captured share of the readout.
        assert_eq!(h["rho_readout"], s["rho_readout"]);
        assert_eq!(
            h["captured_variance_readout"],
            s["captured_variance_readout"]
        );
        let target = s["captured_variance_readout"].as_f64().unwrap();
        let matched = s["captured_variance_null_mean"].as_f64().unwrap();
        assert!(
            (matched - target).abs() <= 0.01 * target,
            "{matched} vs {target}"
        );
        // The Haar draws capture about k/d = 8/64 of the variance, not the readout's share.
        let haar_mean = h["captured_variance_null_mean"].as_f64().unwrap();
        assert!((haar_mean - 0.125).abs() < 0.05, "{haar_mean}");
    }
    let bad = drawn(&["-k", "8", "--null", "gaussian"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("gaussian"), "{}", bad.stderr);
    let tol = drawn(&["-k", "8", "--null", "spectrum", "--spectrum-tol", "1.5"]);
    assert_ne!(tol.code, 0);
    assert!(tol.stderr.contains("--spectrum-tol 1.5"), "{}", tol.stderr);
}

#[test]
fn save_null_rhos_writes_every_draw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("null.csv");
    let rows = json_rows(&drawn(&[
        "-k",
        "4,8",
        "--ccr",
        "0,1",
        "--save-null-rhos",
        path.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "layer,k,ccr,draw,rho");
    assert_eq!(lines.len(), 1 + 2 * 2 * 10, "layers × k × ccr × draws");
    // The mean of the saved draws is the row's null_mean.
    for row in &rows {
        let (k, c) = (row["k"].to_string(), row["ccr"].to_string());
        let draws: Vec<f64> = lines[1..]
            .iter()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f[0] == "1" && f[1] == k && f[2] == c)
            .map(|f| f[4].parse().unwrap())
            .collect();
        assert_eq!(draws.len(), 10);
        let mean = draws.iter().sum::<f64>() / 10.0;
        assert!((mean - row["null_mean"].as_f64().unwrap()).abs() < 1e-12);
    }
}

/// A real extraction (tiny GPT-NeoX checkpoint) records each point's sequence: the bootstrap
/// resamples sequences; the readout options fold the final norm's gain and centre W_U.
#[test]
fn readout_options_and_sequence_bootstrap_on_an_extracted_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    let words = "the quick brown fox predicts the next token of the readout geometry while \
                 a lazy dog sleeps under the warm sun and dreams of numbers ";
    std::fs::write(&text, words.repeat(12)).unwrap();
    let acts = dir.path().join("acts.safetensors");
    let ckpt = root().join("fixtures/extract/gptneox_parallel");
    let ckpt = ckpt.to_str().unwrap();
    let ex = repgeom(&[
        "extract",
        "--model",
        ckpt,
        "--text",
        text.to_str().unwrap(),
        "--n-points",
        "80",
        "--seq-len",
        "16",
        "--out",
        acts.to_str().unwrap(),
    ]);
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    let acts = acts.to_str().unwrap();
    let base = |extra: &[&str]| {
        let mut args = vec![
            "pga",
            "--acts",
            acts,
            "--readout",
            ckpt,
            "-k",
            "4",
            "--n-null",
            "10",
            "--layers",
            "2",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        json_rows(&repgeom(&args))
    };
    let plain = base(&[]);
    let folded = base(&["--readout-fold-norm"]);
    let centred = base(&["--readout-center"]);
    assert_eq!(folded[0]["readout_fold_norm"], 1);
    assert_eq!(folded[0]["readout_center"], 0);
    assert_eq!(centred[0]["readout_center"], 1);
    assert_ne!(
        plain[0]["rho_readout"], folded[0]["rho_readout"],
        "γ changes the subspace"
    );
    assert_ne!(plain[0]["rho_readout"], centred[0]["rho_readout"]);

    let boot = base(&["--bootstrap", "4", "--bootstrap-seed", "3"]);
    assert_eq!(boot[0]["bootstrap_unit"], "sequences");
    let (lo, hi) = (
        boot[0]["z_lo"].as_f64().unwrap(),
        boot[0]["z_hi"].as_f64().unwrap(),
    );
    assert!(lo <= hi, "{lo} {hi}");
    assert_eq!(
        boot[0]["z"], plain[0]["z"],
        "the point estimate is unchanged"
    );
    assert_eq!(
        boot,
        base(&["--bootstrap", "4", "--bootstrap-seed", "3"]),
        "seeded"
    );

    // The gain lives in a checkpoint directory, not in a matrix file.
    let run = repgeom(&[
        "pga",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "-k",
        "8",
        "--readout-fold-norm",
    ]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("final norm"), "{}", run.stderr);
}

#[test]
fn bootstrap_without_sequence_ids_warns_and_resamples_points() {
    let run = drawn(&["-k", "8", "--bootstrap", "3"]);
    let rows = json_rows(&run);
    assert_eq!(rows[0]["bootstrap_unit"], "points");
    assert!(
        run.stderr.contains("no sequence per point"),
        "{}",
        run.stderr
    );
    for c in ["z_lo", "z_hi", "rho_lo", "rho_hi"] {
        assert!(rows[0][c].as_f64().is_some(), "{c}");
    }
}

#[test]
fn layers_selection_csv_and_atomic_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("res.csv");
    let run = pga(&["--layers", "1-2", "--out", out.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "layer,n_points,d,k,ccr,rho_readout,null_mean,null_std,z,p_value,\
         p_lower,p_two_sided,delta_rho,z_se,q_value,k_policy,distance,readout_fold_norm,readout_center,\
         null,captured_variance_readout,captured_variance_null_mean,captured_variance_null_sd"
    );
    assert_eq!(lines.len(), 3);
    assert!(lines[1].starts_with("1,300,64,8,1,"));
    assert!(lines[2].starts_with("2,300,64,8,1,"));
    // Nothing but the output itself was left in the directory (no temp files).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn saved_null_bases_reproduce_a_seeded_run() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("null.npy");
    let base = [
        "pga",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "-k",
        "8",
        "--n-null",
        "12",
        "--seed",
        "5",
        "--format",
        "csv",
    ];
    let mut first: Vec<&str> = base.to_vec();
    first.extend(["--save-null-bases", saved.to_str().unwrap()]);
    let a = repgeom(&first);
    assert_eq!(a.code, 0, "{}", a.stderr);
    let b = repgeom(&[
        "pga",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "-k",
        "8",
        "--null-bases",
        saved.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn saved_readout_basis_and_null_bases_reproduce_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let basis = dir.path().join("basis.npy");
    let null = dir.path().join("null.npy");
    let (basis, null) = (basis.to_str().unwrap(), null.to_str().unwrap());
    // The fixture with readout options, as JSON.
    let run = |readout: &[&str], extra: &[&str]| {
        let mut args = vec!["pga", "--acts", "fixtures/pga/acts.npy", "--format", "json"];
        args.extend_from_slice(readout);
        args.extend_from_slice(extra);
        let run = repgeom(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run
    };
    let drawn = [
        "--readout",
        "fixtures/pga/readout.npy",
        "--n-null",
        "12",
        "--seed",
        "5",
    ];
    // A -k list saves the widest basis; the later run reads all its columns.
    let first = run(&drawn, &["-k", "4,8", "--save-readout-basis", basis]);
    run(&drawn, &["-k", "8", "--save-null-bases", null]);
    let again = run(&["--readout-basis", basis, "--null-bases", null], &[]);
    let strip = |run: &crate::Run| -> Vec<serde_json::Value> {
        json_rows(run)
            .into_iter()
            .filter(|r| r["k"] == 8)
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("k_policy");
                r.as_object_mut().unwrap().remove("q_value"); // its family differs: 2 rows vs 1
                r
            })
            .collect()
    };
    let (want, got) = (strip(&first), strip(&again));
    assert_eq!(want.len(), 3, "one k = 8 row per layer of the fixture");
    assert_eq!(want, got);
    assert_eq!(json_rows(&again)[0]["k_policy"], "basis");
}

/// Each bad input: non-zero exit, a message naming what is wrong, and no output file.
fn check_error(args: &[&str], expect: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    let mut all = args.to_vec();
    all.extend(["--out", out.to_str().unwrap()]);
    let run = repgeom(&all);
    assert_ne!(run.code, 0, "expected failure for {args:?}");
    for e in expect {
        assert!(
            run.stderr.contains(e),
            "stderr of {args:?} lacks {e:?}:\n{}",
            run.stderr
        );
    }
    assert!(!out.exists(), "no output may be written on failure");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temp files left"
    );
}

#[test]
fn bad_inputs_fail_clearly() {
    let acts = "fixtures/pga/acts.npy";
    check_error(
        &[
            "pga",
            "--acts",
            acts,
            "--readout",
            "fixtures/pga/readout.npy",
            "-k",
            "64",
        ],
        &["k = 64", "d = 64", "readout.npy"],
    );
    check_error(
        &[
            "pga",
            "--acts",
            acts,
            "--readout",
            "fixtures/pga/null_bases.npy",
        ],
        &["null_bases.npy"],
    );
    check_error(
        &[
            "pga",
            "--acts",
            "fixtures/pga/missing.npy",
            "--readout",
            acts,
        ],
        &["missing.npy"],
    );
    check_error(
        &[
            "pga",
            "--acts",
            acts,
            "--readout",
            "fixtures/pga/readout.npy",
            "-k",
            "8",
            "--layers",
            "7",
        ],
        &["7"],
    );
}

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
    ]
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
        "layer,n_points,d,k,ccr,rho_readout,null_mean,null_std,z,p_value"
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

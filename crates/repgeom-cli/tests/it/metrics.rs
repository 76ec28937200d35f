//! `repgeom metrics` and `repgeom compare` on the committed fixture.

use crate::repgeom;

#[test]
fn list() {
    let run = repgeom(&["metrics", "--list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn all_metrics_on_one_layer() {
    let run = repgeom(&[
        "metrics",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "-k",
        "8",
        "--n-null",
        "20",
        "--all",
        "--layers",
        "1",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn compare_diagonal() {
    let run = repgeom(&[
        "compare",
        "--a",
        "fixtures/pga/acts.npy",
        "--readout-a",
        "fixtures/pga/readout.npy",
        "--b",
        "fixtures/pga/acts.npy",
        "--readout-b",
        "fixtures/pga/readout.npy",
        "-k",
        "8",
        "--n-null",
        "10",
        "--diagonal",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

/// `--quiet` silences notes in every command; without it, the note says what `--all` left out.
#[test]
fn quiet_silences_notes() {
    let args = [
        "metrics",
        "--acts",
        "fixtures/pga/acts.npy",
        "--all",
        "--layers",
        "0-1",
    ];
    let quiet = repgeom(&args);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("note:"), "{}", quiet.stderr);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repgeom"))
        .args(["--threads", "2"])
        .args(args)
        .current_dir(crate::root())
        .output()
        .expect("run repgeom");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note: --all without --readout skips"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), quiet.stdout);
}

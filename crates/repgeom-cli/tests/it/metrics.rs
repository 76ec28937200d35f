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

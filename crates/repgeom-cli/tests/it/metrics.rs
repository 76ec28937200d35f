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

/// `compare --plot`: the layer × layer heat map (figure 10) of every metric, as SVG and PNG;
/// a cell is dotted where its permutation p is at most 0.05 (a layer against itself here).
#[test]
fn compare_plots_the_layer_table() {
    let dir = tempfile::tempdir().unwrap();
    for ext in ["svg", "png"] {
        let plot = dir.path().join(format!("layers.{ext}"));
        let run = repgeom(&[
            "compare",
            "--a",
            "fixtures/pga/acts.npy",
            "--b",
            "fixtures/pga/acts.npy",
            "--layers-a",
            "0-2",
            "--layers-b",
            "0-2",
            "--metric",
            "cka_linear",
            "--metric",
            "mutual_knn",
            "--n-perm",
            "50",
            "--plot",
            plot.to_str().unwrap(),
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let bytes = std::fs::read(&plot).unwrap();
        if ext == "png" {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            continue;
        }
        let svg = String::from_utf8(bytes).unwrap();
        for text in ["cka_linear biased", "mutual_knn", "acts layer (depth)"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.contains("2 (1.00)"), "relative depth ticks");
        // The diagonal of both metrics is at the p floor 1/51.
        assert!(
            svg.matches("<circle").count() >= 6,
            "significant cells dotted"
        );
    }
    let bad = repgeom(&[
        "compare",
        "--a",
        "fixtures/pga/acts.npy",
        "--b",
        "fixtures/pga/acts.npy",
        "--metric",
        "cka_linear",
        "--plot",
        "layers.pdf",
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains(".svg or .png"), "{}", bad.stderr);
}

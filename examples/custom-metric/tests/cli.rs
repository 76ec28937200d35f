//! The plugin appears in the full CLI once linked: `repgeom-custom` is repgeom plus this crate.

use std::process::Command;

fn repgeom_custom(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_repgeom-custom"))
        .args(["--quiet"])
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run repgeom-custom");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn plugin_is_listed_and_computed_by_the_cli() {
    let (code, stdout, stderr) = repgeom_custom(&["metrics", "--list"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("participation_ratio"), "{stdout}");
    assert!(
        stdout.contains("rankme"),
        "built-in metrics stay listed: {stdout}"
    );
    let (code, stdout, stderr) = repgeom_custom(&[
        "metrics",
        "--acts",
        "fixtures/pga/acts.npy",
        "--metric",
        "participation_ratio",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 4, "header and one row per layer: {stdout}");
    assert!(rows[1].contains("participation_ratio"), "{stdout}");
}

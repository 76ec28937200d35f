//! The README's library example builds and runs: PGA finds the planted alignment.

#[test]
fn the_example_runs_and_finds_the_alignment() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repgeom-library-example"))
        .output()
        .expect("the example runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let z: f64 = text
        .split(", z ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no z in {text:?}"));
    assert!(
        z > 2.0,
        "the readout keeps the planted distance structure: {text}"
    );
    assert!(
        text.contains("rankme: ") && text.contains("intrinsic_dim_twonn: "),
        "{text}"
    );
}

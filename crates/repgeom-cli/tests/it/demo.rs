//! `repgeom demo`: the planted regimes of the synthetic zoo come out with the planted signs.

use crate::repgeom;

#[test]
fn planted_signs() {
    let run = repgeom(&["demo", "--n-null", "30", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.len() >= 20, "demo zoo too small: {} rows", rows.len());
    let mut seen = std::collections::BTreeSet::new();
    for r in &rows {
        let (planted, ccr, z) = (
            r["planted"].as_str().unwrap(),
            r["ccr"].as_u64().unwrap(),
            r["z"].as_f64().unwrap(),
        );
        let what = format!("{} layer {} ccr {ccr}: z = {z}", r["model"], r["layer"]);
        match (planted, ccr) {
            ("direct", _) => assert!(z > 2.0, "{what}"),
            ("detour", 1) => assert!(z < -2.0, "{what}"),
            ("detour", _) => assert!(z > 2.0, "{what}"),
            // The rotation detour moves the readout's dominant directions into the dark:
            // below the null at CCR-1, and removing principal directions does not undo it.
            ("rotation", 1) => assert!(z < -2.0, "{what}"),
            ("rotation", _) => assert!(z < 2.0, "{what}"),
            ("isotropic", _) => assert!(z.abs() < 4.0, "{what}"),
            other => panic!("unexpected regime {other:?}"),
        }
        seen.insert(planted.to_string());
    }
    assert!(
        seen.contains("direct") && seen.contains("rotation"),
        "zoo must plant both regimes: {seen:?}"
    );
}

#[test]
fn selftest_passes_and_prints_every_check_with_its_figure() {
    let run = repgeom(&["selftest"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("SYNTHETIC DATA"), "{}", run.stdout);
    let lines: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("PASS"))
        .collect();
    assert_eq!(lines.len(), 31, "{}", run.stdout);
    assert!(!run.stdout.contains("FAIL"), "{}", run.stdout);
    assert!(
        run.stdout.contains("31 of 31 checks passed"),
        "{}",
        run.stdout
    );
    for group in ["layer identification", "specificity", "planted PGA"] {
        assert!(run.stdout.contains(group), "{group}");
    }
}

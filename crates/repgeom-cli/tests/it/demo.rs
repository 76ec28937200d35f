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
    assert_eq!(lines.len(), 30, "{}", run.stdout);
    assert!(
        run.stdout.contains("fail*  layer identification  svcca"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("FAIL"), "{}", run.stdout);
    assert!(
        run.stdout.contains("30 of 30 checks passed in"),
        "{}",
        run.stdout
    );
    for group in ["layer identification", "specificity", "planted PGA"] {
        assert!(run.stdout.contains(group), "{group}");
    }
}

/// `selftest --bench --out DIR`: the field's tests after the plain checks, every held one
/// passing, each group with its source, written as selftest.json and an HTML card.
#[test]
fn selftest_bench_writes_json_and_card() {
    let dir = tempfile::tempdir().unwrap();
    let run = repgeom(&["selftest", "--bench", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    for group in [
        "independence",
        "PCA deletion",
        "layer monotonicity",
        "scale confound",
    ] {
        assert!(run.stdout.contains(group), "{group}");
    }
    assert!(!run.stdout.contains("FAIL"), "{}", run.stdout);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("selftest.json")).unwrap()).unwrap();
    assert_eq!(json["format"], "repgeom.selftest.v1");
    assert_eq!(json["passed"], true);
    let checks = json["checks"].as_array().unwrap();
    let of = |g: &str| {
        checks
            .iter()
            .filter(|c| c["group"] == g)
            .collect::<Vec<_>>()
    };
    // Independence: n = 32 … 256, the debiased mean within 2 se of 0, the biased one shrinking.
    let ind = of("independence");
    assert_eq!(ind.len(), 4);
    let biased: Vec<f64> = ind
        .iter()
        .map(|c| c["values"]["biased_mean"].as_f64().unwrap())
        .collect();
    assert!(biased.windows(2).all(|w| w[1] < w[0]), "{biased:?}");
    for c in &ind {
        let (m, se) = (
            c["values"]["debiased_mean"].as_f64().unwrap(),
            c["values"]["debiased_se"].as_f64().unwrap(),
        );
        assert!(m.abs() <= 2.0 * se, "{c}");
        assert!(c["source"].as_str().unwrap().contains("MONAI"));
    }
    // PCA deletion is reported, not held: linear CKA does not notice the probe's direction go.
    let cka = of("PCA deletion")
        .into_iter()
        .find(|c| c["subject"].as_str().unwrap().starts_with("cka_linear"))
        .unwrap();
    assert_eq!(
        (cka["held"].as_bool(), cka["passed"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(of("layer monotonicity").len(), 7);
    assert_eq!(of("scale confound").len(), 5);
    let html = std::fs::read_to_string(dir.path().join("selftest.html")).unwrap();
    assert!(html.contains("<h2>scale confound</h2>") && html.contains("Klabunde"));
}

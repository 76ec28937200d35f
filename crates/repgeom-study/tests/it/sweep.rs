use std::path::Path;

use repgeom_study::{Manifest, Study, SyntheticSpec, merge, part_path, sweep};

fn tiny() -> Study {
    let mut m = Manifest::synthetic_default();
    m.synthetic = Some(SyntheticSpec {
        widths: vec![64, 256],
        n_layers: 3,
        steps: vec![100, 1000],
        n_points: 48,
        ..SyntheticSpec::default()
    });
    m.pairs = vec![["synthetic-d64".into(), "synthetic-d256".into()]];
    m.analysis.n_null = 6;
    m.analysis.pga.set("ccr", [1, 5]).unwrap();
    Study::new(m, "tiny").unwrap()
}

fn run(study: &Study, dir: &Path, shard: Option<(usize, usize)>) -> repgeom_study::SweepStats {
    sweep(study, dir, shard, &|_| {}, &|_| {}, &|_| {}).unwrap()
}

fn csv(dir: &Path) -> Vec<u8> {
    let (table, report) = merge(dir).unwrap();
    assert!(report.complete(), "missing {:?}", report.missing);
    let p = dir.join("results.csv");
    table.write_csv(&p).unwrap();
    std::fs::read(p).unwrap()
}

#[test]
fn resume_and_shards_give_the_same_table() {
    let study = tiny();
    let full = tempfile::tempdir().unwrap();
    let s = run(&study, full.path(), None);
    assert_eq!((s.computed, s.skipped), (study.units.len(), 0));
    let reference = csv(full.path());

    // A rerun computes nothing.
    let s = run(&study, full.path(), None);
    assert_eq!((s.computed, s.skipped), (0, study.units.len()));

    // Losing some parts (as a kill would) recomputes exactly those.
    for u in study.units.iter().step_by(5) {
        std::fs::remove_file(part_path(full.path(), &u.id)).unwrap();
    }
    let lost = study.units.iter().step_by(5).count();
    assert_eq!(run(&study, full.path(), None).computed, lost);
    assert_eq!(csv(full.path()), reference);

    // Three shards into one directory give the same bytes; a missing shard is reported.
    let sharded = tempfile::tempdir().unwrap();
    run(&study, sharded.path(), Some((0, 3)));
    run(&study, sharded.path(), Some((2, 3)));
    let (_, report) = merge(sharded.path()).unwrap();
    assert_eq!(
        report.missing.len(),
        repgeom_study::shard(&study.units, 1, 3).len()
    );
    run(&study, sharded.path(), Some((1, 3)));
    assert_eq!(csv(sharded.path()), reference);

    // The table holds what the figures need, all marked synthetic.
    let (table, _) = merge(full.path()).unwrap();
    let metrics = table.metrics();
    for m in [
        "pga_z",
        "rho_readout",
        "pc_readout_share",
        "rankme",
        "probe_accuracy",
        "val_loss",
        "distance_spearman",
        "cka_linear",
        "mutual_knn",
    ] {
        assert!(metrics.contains(m), "{m} missing from {metrics:?}");
    }
    assert!(table.rows().iter().all(|r| r.synthetic));
}

#[test]
fn merge_refuses_parts_made_with_other_settings() {
    let study = tiny();
    let dir = tempfile::tempdir().unwrap();
    run(&study, dir.path(), Some((0, 4)));
    // Same directory, different n_null: the plan changes, the old parts are stale.
    let mut m = study.manifest.clone();
    m.analysis.n_null = 7;
    let other = Study::new(m, "tiny").unwrap();
    repgeom_study::write_plan(dir.path(), &other).unwrap();
    let e = merge(dir.path()).unwrap_err().to_string();
    assert!(e.contains("config hash") && e.contains("expects"), "{e}");
    // The sweep itself recomputes stale units instead of mixing them.
    let s = run(&other, dir.path(), Some((0, 4)));
    assert_eq!(s.skipped, 0);
    assert!(merge(dir.path()).is_ok());
}

#[test]
fn merge_without_plan_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let e = merge(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("plan.json") && e.contains("repgeom sweep"),
        "{e}"
    );
}

#[test]
fn spectrum_null_rows_are_recorded_in_their_own_variants() {
    let mut m = tiny().manifest;
    m.analysis.pga.set("null", "spectrum").unwrap();
    m.pairs.clear();
    let study = Study::new(m, "tiny spectrum").unwrap();
    let dir = tempfile::tempdir().unwrap();
    run(&study, dir.path(), None);
    let (table, report) = merge(dir.path()).unwrap();
    assert!(report.complete());
    let pga: Vec<_> = table
        .rows()
        .iter()
        .filter(|r| r.metric.starts_with("pga_") || r.metric == "rho_readout")
        .collect();
    assert!(!pga.is_empty());
    assert!(
        pga.iter().all(|r| r.variant.ends_with("_spectrum")),
        "every PGA row names its null"
    );
    for r in pga.iter().filter(|r| r.metric == "pga_captured_variance") {
        let (t, mean) = (r.value, r.null_mean.unwrap());
        assert!((mean - t).abs() <= 0.01 * t, "{t} vs {mean}");
    }
    assert!(pga.iter().any(|r| r.metric == "pga_captured_variance"));
}

/// `analysis.cross` chooses the cross units' metrics and their options; the study's seed
/// fills a metric's `seed`, and rows carry the other model.
#[test]
fn cross_metrics_come_from_the_manifest() {
    let mut m = tiny().manifest;
    m.analysis.seed = 7;
    // The per-layer cross units alone (no cross_table: its aggregates and cells are other rows).
    m.analysis.cross_n_perm = None;
    m.analysis.cross_aggregate = Vec::new();
    m.analysis.cross = toml::from_str::<toml::Table>(
        r#"cross = ["cka_linear", { metric = "mutual_knn", k = 5, n_perm = 20 }]"#,
    )
    .unwrap()["cross"]
        .clone()
        .try_into()
        .unwrap();
    let study = Study::new(m, "tiny cross").unwrap();
    let cross: Vec<_> = study
        .units
        .iter()
        .filter(|u| matches!(u.unit.kind, repgeom_study::UnitKind::Cross { .. }))
        .cloned()
        .collect();
    assert!(!cross.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let stats = run(&study, dir.path(), None);
    assert_eq!(stats.computed, study.units.len());
    let (table, _) = merge(dir.path()).unwrap();
    let rows: Vec<_> = table
        .rows()
        .iter()
        .filter(|r| !r.other_model.is_empty())
        .collect();
    let names: std::collections::BTreeSet<_> = rows.iter().map(|r| r.metric.as_str()).collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["cka_linear", "mutual_knn"]
    );
    let knn: Vec<_> = rows.iter().filter(|r| r.metric == "mutual_knn").collect();
    assert_eq!(knn.len(), cross.len());
    for r in knn {
        assert_eq!(r.other_model, "synthetic-d256");
        // The permutation null is recorded: independent clouds sit near chance, k/(N-1).
        let (mean, sd) = (r.null_mean.unwrap(), r.null_std.unwrap());
        assert!((mean - 5.0 / 47.0).abs() < 0.05, "null mean {mean}");
        assert!(sd > 0.0 && r.p_value.is_some(), "{r:?}");
    }
    // The same options with another seed give another null (the study's seed reached it).
    let mut m = study.manifest.clone();
    m.analysis.seed = 8;
    let other = Study::new(m, "tiny cross").unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    run(&other, dir2.path(), None);
    let (t2, _) = merge(dir2.path()).unwrap();
    let null_means = |t: &repgeom_report::ResultsTable| -> Vec<f64> {
        t.rows()
            .iter()
            .filter(|r| r.metric == "mutual_knn")
            .map(|r| r.null_mean.unwrap())
            .collect()
    };
    assert_ne!(null_means(&table), null_means(&t2));
}

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
    m.analysis.ccr = vec![1, 5];
    Study::new(m, "tiny").unwrap()
}

fn run(study: &Study, dir: &Path, shard: Option<(usize, usize)>) -> repgeom_study::SweepStats {
    sweep(study, dir, shard, &|_| {}, &|_| {}).unwrap()
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
    m.analysis.null = repgeom_null::NullKind::Spectrum;
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

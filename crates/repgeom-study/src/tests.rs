use crate::{Manifest, Study, SyntheticSpec, parse_shard, shard, shard_from_env};

fn small() -> Manifest {
    let mut m = Manifest::synthetic_default();
    m.synthetic = Some(SyntheticSpec {
        widths: vec![64, 256],
        n_layers: 3,
        steps: vec![100, 1000],
        n_points: 64,
        ..SyntheticSpec::default()
    });
    m.pairs = vec![["synthetic-d64".into(), "synthetic-d256".into()]];
    m.analysis.n_null = 8;
    m
}

fn check(cond: bool, what: &str) {
    assert!(cond, "{what}");
}

#[test]
fn plan_is_deterministic_and_ids_unique() {
    let a = Study::new(small(), "t").unwrap();
    let b = Study::new(small(), "t").unwrap();
    assert_eq!(a.units, b.units);
    let ids: std::collections::BTreeSet<_> = a.units.iter().map(|u| &u.id).collect();
    check(ids.len() == a.units.len(), "unit ids are unique");
    // 2 models x 3 layers: non-final checkpoint pga only; final: pga, pcshare, 4 spectral, probe,
    // and 3 k-sensitivity units (k = d/32, d/16, d/4 beside the zoo's d/8); val_loss per
    // checkpoint; cross for the d64 model at its final checkpoint.
    let per_model = 3 + 3 * 10 + 2;
    assert_eq!(a.units.len(), 2 * per_model + 3);
}

#[test]
fn hash_changes_only_with_what_matters() {
    let a = Study::new(small(), "t").unwrap();
    let mut m = small();
    m.title = "another title".into();
    m.report.small_max_d = 100;
    let b = Study::new(m, "t").unwrap();
    assert_eq!(
        a.units, b.units,
        "title and figure settings do not change numbers"
    );
    let mut m = small();
    m.analysis.n_null = 9;
    let c = Study::new(m, "t").unwrap();
    check(
        a.units
            .iter()
            .zip(&c.units)
            .all(|(x, y)| x.config_hash != y.config_hash),
        "n_null changes every hash",
    );
    let mut m = small();
    m.analysis.max_memory = Some(1 << 20);
    let d = Study::new(m, "t").unwrap();
    assert_eq!(a.units, d.units, "a memory budget never changes a number");
    let mut m = small();
    m.analysis.max_pairs = Some(500);
    let e = Study::new(m, "t").unwrap();
    check(
        a.units
            .iter()
            .zip(&e.units)
            .all(|(x, y)| x.config_hash != y.config_hash),
        "pair sampling changes every hash",
    );
    // The Haar null written out keeps every hash (earlier runs stay valid); the spectrum null
    // changes every PGA unit's.
    let mut m = small();
    m.analysis.null = repgeom_null::NullKind::Haar;
    assert_eq!(a.units, Study::new(m, "t").unwrap().units);
    let mut m = small();
    m.analysis.null = repgeom_null::NullKind::Spectrum;
    let s = Study::new(m, "t").unwrap();
    check(
        a.units
            .iter()
            .zip(&s.units)
            .all(|(x, y)| x.config_hash != y.config_hash),
        "the null changes every hash",
    );
    // The cross metrics enter the cross units' hashes only; the default list written out
    // keeps every hash.
    let with = |cross: Vec<crate::CrossMetric>| {
        let mut m = small();
        m.analysis.cross = cross;
        Study::new(m, "t").unwrap().units
    };
    let default = with(crate::default_cross());
    let mut m = small();
    m.analysis.cross = crate::default_cross();
    let text = toml::to_string(&m).unwrap();
    check(
        !text.contains("cross ="),
        "the default list is not written out",
    );
    let reread: Manifest = toml::from_str(&text).unwrap();
    assert_eq!(Study::new(reread, "t").unwrap().units, default);
    let knn = with(vec![crate::CrossMetric::Name("mutual_knn".into())]);
    for (x, y) in default.iter().zip(&knn) {
        let is_cross = matches!(x.unit.kind, crate::UnitKind::Cross { .. });
        check(
            (x.config_hash != y.config_hash) == is_cross,
            &format!("{}: only cross units change with analysis.cross", x.id),
        );
    }
}

/// The PGA units honour the manifest's engine options: a memory budget with room for one
/// draw at a time gives the same numbers, one below a single draw fails with a message that
/// suggests `max_pairs`, and pair sampling changes the numbers. (Before, sweep units called
/// the engine without the budget or the pair sample.)
#[test]
fn pga_units_use_the_engine_options() {
    let pga_units = |s: &Study| -> Vec<crate::PlannedUnit> {
        s.units
            .iter()
            .filter(|u| matches!(u.unit.kind, crate::UnitKind::Pga { .. }))
            .filter(|u| u.unit.model == "synthetic-d64" && u.unit.checkpoint == "step100")
            .cloned()
            .collect()
    };
    let run = |m: Manifest| -> Result<Vec<repgeom_report::Row>, String> {
        let s = Study::new(m, "t").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let todo = pga_units(&s);
        assert!(
            !todo.is_empty(),
            "the plan has PGA units of synthetic-d64 at step100"
        );
        std::fs::create_dir_all(crate::parts_dir(dir.path())).unwrap();
        crate::run_units(&s, &todo, dir.path(), &|_| {}).map_err(|e| e.to_string())?;
        let mut files: Vec<_> = std::fs::read_dir(crate::parts_dir(dir.path()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), todo.len(), "one part file per unit");
        Ok(files
            .iter()
            .flat_map(|p| crate::read_part(p).unwrap().rows)
            .collect())
    };
    let base = run(small()).unwrap();
    // N = 64 points of width 64 and the zoo's k = d/8 = 8: room for exactly one draw.
    let est = repgeom_metrics::pga::memory_estimate(64, 64, 8);
    let mut m = small();
    m.analysis.max_memory = Some(est.peak(1));
    assert_eq!(
        run(m).unwrap(),
        base,
        "one draw at a time changes no number"
    );
    let mut m = small();
    m.analysis.max_memory = Some(est.shared);
    let err = run(m).unwrap_err();
    check(
        err.contains("max_pairs"),
        &format!("a budget below one draw fails and suggests max_pairs: {err}"),
    );
    let mut m = small();
    m.analysis.max_pairs = Some(300);
    check(run(m).unwrap() != base, "pair sampling changes the numbers");
    // The bootstrap adds its interval rows and leaves the others as they were.
    let mut m = small();
    m.analysis.bootstrap = Some(20);
    let boot = run(m).unwrap();
    let plain: Vec<_> = boot
        .iter()
        .filter(|r| !r.metric.ends_with("_lo") && !r.metric.ends_with("_hi"))
        .cloned()
        .collect();
    assert_eq!(plain, base, "the bootstrap changes no other row");
    let value = |metric: &str, layer: u32| {
        boot.iter()
            .find(|r| r.metric == metric && r.layer == layer && r.variant == "ccr1")
            .unwrap_or_else(|| panic!("row {metric} at layer {layer}"))
            .value
    };
    for layer in 0..3 {
        check(
            value("pga_z_lo", layer) <= value("pga_z_hi", layer)
                && value("rho_readout_lo", layer) <= value("rho_readout_hi", layer),
            "each interval is ordered",
        );
    }
}

#[test]
fn shards_partition_the_plan() {
    let s = Study::new(small(), "t").unwrap();
    for n in [1, 2, 3, 7] {
        let mut all: Vec<String> = (0..n)
            .flat_map(|i| shard(&s.units, i, n))
            .map(|u| u.id)
            .collect();
        all.sort();
        let mut expect: Vec<String> = s.units.iter().map(|u| u.id.clone()).collect();
        expect.sort();
        assert_eq!(all, expect, "n = {n}");
    }
}

#[test]
fn shard_specs() {
    assert_eq!(parse_shard("2/5").unwrap(), (2, 5));
    for bad in ["5/5", "1", "a/2", "0/0", "-1/3"] {
        check(parse_shard(bad).is_err(), bad);
    }
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(shard_from_env(env(&[])).unwrap(), None);
    assert_eq!(
        shard_from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "4")
        ]))
        .unwrap(),
        Some((3, 4))
    );
    assert_eq!(
        shard_from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "2")
        ]))
        .unwrap(),
        Some((3, 4))
    );
    check(
        shard_from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]))
        .is_err(),
        "task id out of range",
    );
}

#[test]
fn manifest_errors_name_the_place() {
    let mut m = small();
    m.pairs = vec![["synthetic-d64".into(), "nope".into()]];
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("study.toml") && e.contains("nope"), &e);
    let mut m = small();
    m.analysis.ccr = vec![1, 1];
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("analysis.ccr"), &e);
    let mut m = small();
    m.analysis.spectral = vec!["rankmee".into()];
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("rankmee"), &e);
    let mut m = small();
    m.analysis.spectrum_tol = Some(0.05);
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(
        e.contains("analysis.spectrum_tol") && e.contains("spectrum"),
        &e,
    );
    let mut m = small();
    m.analysis.null = repgeom_null::NullKind::Spectrum;
    m.analysis.spectrum_tol = Some(1.5);
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("analysis.spectrum_tol") && e.contains("1.5"), &e);
    for (cross, needle) in [
        (r#"["distance_spearman", "mutual_knnn"]"#, "mutual_knnn"),
        (r#"[{ metric = "mutual_knn", k = 0 }]"#, "k"),
        (r#"[{ metric = "mutual_knn", kk = 3 }]"#, "kk"),
        (r#"[{ k = 3 }]"#, "metric"),
        (
            r#"["cka_linear", { metric = "cka_linear", debiased = true }]"#,
            "twice",
        ),
    ] {
        let mut m = small();
        m.analysis.cross =
            toml::from_str::<toml::Table>(&format!("cross = {cross}")).unwrap()["cross"]
                .clone()
                .try_into()
                .unwrap();
        let e = Study::new(m, "study.toml").unwrap_err().to_string();
        check(
            e.contains("study.toml") && e.contains("analysis.cross") && e.contains(needle),
            &format!("{cross}: {e}"),
        );
    }
    let e = toml::from_str::<Manifest>("[analysis]\nnull = \"gauss\"\n")
        .unwrap_err()
        .to_string();
    check(e.contains("gauss"), &e);
}

#[test]
fn example_manifest_parses() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/study.toml");
    let m = Manifest::load(&path).unwrap();
    m.check("examples/study.toml").unwrap();
    check(!m.models.is_empty(), "the example names file models");
    let e = toml::from_str::<Manifest>("[analysis]\nkk = 3\n")
        .unwrap_err()
        .to_string();
    check(e.contains("kk"), &e);
}

#[test]
fn paper_manifest_parses_and_names_hub_revisions() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/paper.toml");
    let m = Manifest::load(&path).unwrap();
    m.check("examples/paper.toml").unwrap();
    check(m.models.len() == 10, "7 Pythia + OLMo, Phi, Gemma");
    check(
        m.models
            .iter()
            .all(|x| x.hub.is_some() && x.readout.is_none()),
        "every model by hub id",
    );
    check(
        m.models
            .iter()
            .flat_map(|x| &x.checkpoints)
            .all(|c| c.revision.is_some() && c.activations.is_none() && c.val_loss.is_none()),
        "every checkpoint by revision, loss computed",
    );
}

/// Hub models: each bad combination names the model, checkpoint and what to do.
#[test]
fn hub_manifest_errors() {
    let base = r#"
[extract]
text = "corpus.txt"
loss = true

[[model]]
label = "m"
family = "f"
d = 8
n_layers = 2
hub = "org/name"

[[model.checkpoint]]
name = "step1"
revision = "step1"
"#;
    let bad = |edit: &dyn Fn(&mut Manifest)| {
        let mut m: Manifest = toml::from_str(base).unwrap();
        m.check("t.toml").unwrap();
        edit(&mut m);
        m.check("t.toml").unwrap_err().to_string()
    };
    let lines = [
        bad(&|m| m.models[0].readout = Some("r".into())),
        bad(&|m| m.models[0].hub = None),
        bad(&|m| m.models[0].hub = Some("no-slash".into())),
        bad(&|m| m.models[0].checkpoints[0].activations = Some("a.npy".into())),
        bad(&|m| m.models[0].checkpoints[0].revision = None),
        bad(&|m| m.models[0].checkpoints[0].val_loss = Some(3.0)),
        bad(&|m| m.extract = None),
        bad(&|m| {
            m.models[0].readout = Some("r".into());
            m.models[0].hub = None;
        }),
    ];
    let expected = [
        "manifest t.toml: model \"m\": gives both `hub` and `readout`: the readout comes from the hub model",
        "manifest t.toml: model \"m\": needs `hub = \"org/name\"` or `readout = \"path\"`",
        "manifest t.toml: model \"m\": hub = \"no-slash\" is not a hub model id (org/name)",
        "manifest t.toml: model \"m\": checkpoint \"step1\" gives both `revision` and `activations`",
        "manifest t.toml: model \"m\": checkpoint \"step1\" needs `revision` (with the model's `hub`) or `activations`",
        "manifest t.toml: model \"m\": checkpoint \"step1\": val_loss is computed ([extract] loss = true); remove the typed-in value",
        "manifest t.toml: model \"m\": checkpoint \"step1\" gives a `revision`: add an [extract] table (text, n_points, seq_len)",
        "manifest t.toml: model \"m\": checkpoint \"step1\" gives a `revision` but the model has no `hub` id",
    ];
    assert_eq!(lines, expected);
}

#[test]
fn part_files_round_trip_every_float_bit_for_bit() {
    let study = Study::new(small(), "t").unwrap();
    let unit = &study.units[0];
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(crate::parts_dir(dir.path())).unwrap();
    let values = [
        0.1,
        -0.0,
        1e-310,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0 / 3.0,
    ];
    let rows: Vec<repgeom_report::Row> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            repgeom_report::Row::new("m", "f", 8, 0, 1, format!("x{i}"), "", v).with_null(
                v,
                0.5,
                1.0 / 7.0,
            )
        })
        .collect();
    let path = crate::write_part(dir.path(), unit, &rows).unwrap();
    let back = crate::read_part(&path).unwrap();
    assert_eq!(back.config_hash, unit.config_hash);
    for (a, b) in rows.iter().zip(&back.rows) {
        assert_eq!(a.value.to_bits(), b.value.to_bits(), "{}", a.metric);
        assert_eq!(a.null_mean.map(f64::to_bits), b.null_mean.map(f64::to_bits));
        assert_eq!(a.p_value.map(f64::to_bits), b.p_value.map(f64::to_bits));
    }
    check(
        crate::is_done(dir.path(), unit),
        "a part with the current hash counts as done",
    );
    check(
        !crate::is_done(dir.path(), &study.units[1]),
        "another unit is not done",
    );
    std::fs::write(&path, "{ truncated").unwrap();
    check(
        !crate::is_done(dir.path(), unit),
        "a corrupt part is recomputed",
    );
}

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
    // Without the built-in study's layer table (cross_table units are tested on their own).
    m.analysis.cross_n_perm = None;
    m.analysis.cross_aggregate = Vec::new();
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
    m.analysis.pga.set("max_memory", 1 << 20).unwrap();
    let d = Study::new(m, "t").unwrap();
    assert_eq!(a.units, d.units, "a memory budget never changes a number");
    let mut m = small();
    m.analysis.pga.set("max_pairs", 500).unwrap();
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
    m.analysis.pga.set("null", "haar").unwrap();
    assert_eq!(a.units, Study::new(m, "t").unwrap().units);
    let mut m = small();
    m.analysis.pga.set("null", "spectrum").unwrap();
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
    m.analysis.pga.set("max_memory", est.peak(1)).unwrap();
    assert_eq!(
        run(m).unwrap(),
        base,
        "one draw at a time changes no number"
    );
    let mut m = small();
    m.analysis.pga.set("max_memory", est.shared).unwrap();
    let err = run(m).unwrap_err();
    check(
        err.contains("max_pairs"),
        &format!("a budget below one draw fails and suggests max_pairs: {err}"),
    );
    let mut m = small();
    m.analysis.pga.set("max_pairs", 300).unwrap();
    check(run(m).unwrap() != base, "pair sampling changes the numbers");
    // The bootstrap adds its interval rows and leaves the others as they were.
    let mut m = small();
    m.analysis.pga.set("bootstrap", 20).unwrap();
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
    m.analysis.pga.set("ccr", [1, 1]).unwrap();
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("analysis.ccr"), &e);
    let mut m = small();
    m.analysis.spectral = vec!["rankmee".into()];
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(e.contains("rankmee"), &e);
    let mut m = small();
    m.analysis.pga.set("spectrum_tol", 0.05).unwrap();
    let e = Study::new(m, "study.toml").unwrap_err().to_string();
    check(
        e.contains("analysis.spectrum_tol") && e.contains("spectrum"),
        &e,
    );
    let mut m = small();
    m.analysis.pga.set("null", "spectrum").unwrap();
    m.analysis.pga.set("spectrum_tol", 1.5).unwrap();
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
    // Word points, so that the four families pair with each other.
    let e = m.extract.as_ref().unwrap();
    check(
        e.params.pool == repgeom_extract::Pool::Words(repgeom_extract::WordPool::Last),
        "word points",
    );
    let family = |label: &str| {
        let x = m.models.iter().find(|x| x.label == label).unwrap();
        x.family.clone()
    };
    let cross_family = (m.pairs.iter())
        .filter(|[a, b]| family(a) != family(b))
        .count();
    check(cross_family == 6, "each of four families with each other");
}

/// `[extract] points` and `word_pool`: read by the extraction library's names, entering the
/// inputs hash and the activations' cache key only for words (token studies keep their keys),
/// and refused with the library's words when they do not name a design.
#[test]
fn extract_points_names_the_design() {
    let parse = |extra: &str| {
        toml::from_str::<Manifest>(&format!("[extract]\ntext = \"t.txt\"\n{extra}"))
            .map(|m| m.extract.unwrap())
            .map_err(|e| e.to_string())
    };
    let tokens = parse("").unwrap();
    check(
        parse("points = \"tokens\"").unwrap() == tokens,
        "tokens is the default",
    );
    check(tokens.design_keys().is_none(), "no key for tokens");
    let words = parse("points = \"words\"\nword_pool = \"mean\"").unwrap();
    check(
        words.params().pool == repgeom_extract::Pool::Words(repgeom_extract::WordPool::Mean),
        "words, mean",
    );
    check(
        words.design_keys() == Some(serde_json::json!({"points": "words", "word_pool": "mean"})),
        "words enter the keys",
    );
    for (bad, want) in [
        (
            "word_pool = \"mean\"",
            "word_pool applies to points = words only",
        ),
        ("points = \"lines\"", "expected one of tokens, words"),
        (
            "points = \"words\"\nword_pool = \"first\"",
            "expected one of last, mean",
        ),
    ] {
        let e = parse(bad).unwrap_err();
        check(e.contains(want), &format!("{bad}: {e}"));
    }
    let e = parse("pointz = \"words\"").unwrap_err();
    check(e.contains("`points`, `word_pool`"), &e);
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
        bad(&|m| m.models[0].checkpoints[0].revision = Some("../../../../escaped_ref".into())),
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
        "manifest t.toml: model \"m\": checkpoint \"step1\": revision: refused `../../../../escaped_ref` has a `..` component, from a revision (branch, tag or commit): names from a hub, a repo or a manifest must stay inside the cache",
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
    let path = crate::write_part(dir.path(), unit, &rows, Default::default()).unwrap();
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

/// The plan hash of the small study with `[analysis]` written as `analysis` (its `n_null`,
/// k-sensitivity and cross metrics kept as `small()` sets them).
fn plan_hash_with(analysis: &str) -> String {
    let mut m = small();
    let mut a: crate::Analysis = toml::from_str(analysis).unwrap();
    a.n_null = m.analysis.n_null;
    a.k_sensitivity = m.analysis.k_sensitivity.clone();
    a.cross = m.analysis.cross.clone();
    m.analysis = a;
    Study::new(m, "t").unwrap().plan_hash()
}

/// Earlier runs keep their hashes: the plan hash of the small study under each way of writing
/// the PGA settings in `[analysis]`, pinned (values from before the settings became the `pga`
/// metric's own options). A change here makes every existing sweep recompute, so it must be
/// deliberate (and bump `FORMAT`). Re-pinned once when the cross units' hashes gained
/// `cross_version` (one comparison per pair, model B's null from `seed + 1`): only the cross
/// units of a resumed sweep recompute; the equalities between ways of writing stay. Re-pinned
/// again for `cross_version` 2 (the cross rows carry every column `repgeom compare` reports).
#[test]
fn plan_hashes_of_earlier_manifests_are_pinned() {
    let cases: &[(&str, &str)] = &[
        ("", "a844bf8aa8db3f16"),
        ("bootstrap = 20", "6c6377532d3413b1"),
        ("max_pairs = 300", "f2f2d943706b4a50"),
        ("max_pairs = 300\nseed = 7", "e4903197976924fe"),
        ("distance = \"euclidean\"", "44a560387ff9b063"),
        ("null = \"haar\"", "a844bf8aa8db3f16"),
        ("null = \"spectrum\"", "5fb9d655d3b0c916"),
        (
            "null = \"spectrum\"\nspectrum_tol = 0.05",
            "36a510b311ca4fbb",
        ),
        ("ccr = [5, 1]", "083023c5d4bbcbe2"),
        ("max_memory = 1048576", "a844bf8aa8db3f16"),
        // Sizes are read through the one parser every front end uses (`--max-memory 1MiB`).
        ("max_memory = \"1MiB\"", "a844bf8aa8db3f16"),
    ];
    let wrong: Vec<String> = (cases.iter())
        .map(|(analysis, want)| (analysis, want, plan_hash_with(analysis)))
        .filter(|(_, want, got)| got != *want)
        .map(|(analysis, want, got)| {
            format!("[analysis] {analysis:?}: plan hash {got}, pinned {want}")
        })
        .collect();
    check(wrong.is_empty(), &wrong.join("\n"));
}

/// `[analysis]` takes the `pga` metric's options under their own names, parsed by the metric:
/// the same text as metric options gives the same `Pga`, seeds aside (the study's default them
/// to `analysis.seed`); an unknown key names the metric's options.
#[test]
fn analysis_takes_the_pga_metrics_own_options() {
    let parse = |t: &str| toml::from_str::<crate::Analysis>(t).map_err(|e| e.to_string());
    let a = parse(
        "seed = 3\nccr = [1, 5]\ndistance = \"euclidean\"\nmax_pairs = 400\nbootstrap = 50\nnull = \"spectrum\"\nspectrum_tol = 0.02",
    )
    .unwrap();
    let metric: repgeom_metrics::Pga = serde_json::from_str(
        r#"{"ccr": [1, 5], "distance": "euclidean", "max_pairs": 400, "pair_seed": 3,
            "bootstrap": {"replicates": 50, "seed": 3}, "null": "spectrum", "spectrum_tol": 0.02}"#,
    )
    .unwrap();
    assert_eq!(a.pga(), metric);
    // Given seeds win over `analysis.seed`; the study's CCR default is its own.
    let a = parse("seed = 3\npair_seed = 9\nbootstrap = { replicates = 50, seed = 4 }").unwrap();
    let p = a.pga();
    check(
        p.engine.pair_seed == 9 && p.bootstrap.unwrap().seed == 4,
        "given seeds are kept",
    );
    assert_eq!(p.ccr, crate::STUDY_CCR.to_vec());
    // The written keys read back unchanged through a plan file.
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::from_str::<crate::Analysis>(&json).unwrap(), a);
    let e = parse("max_pair = 400").unwrap_err();
    check(
        e.contains("max_pair") && e.contains("spectrum_tol") && e.contains("n_null"),
        &e,
    );
}

/// Hashes move with what the PGA options change, and only with that: the bootstrap written as a
/// table with the study's seed is `bootstrap = B`; a pair seed equal to `seed` is the default;
/// any other pga option away from its default enters the hash.
#[test]
fn pga_options_enter_the_hash_only_when_they_change_numbers() {
    let hash = plan_hash_with;
    let cases: &[(&str, &str, bool)] = &[
        ("bootstrap = 20", "bootstrap = { replicates = 20 }", true),
        (
            "bootstrap = 20",
            "bootstrap = { replicates = 20, seed = 0 }",
            true,
        ),
        (
            "bootstrap = 20",
            "bootstrap = { replicates = 20, seed = 1 }",
            false,
        ),
        (
            "bootstrap = 20",
            "bootstrap = { replicates = 20, level = 0.9 }",
            false,
        ),
        ("max_pairs = 300", "max_pairs = 300\npair_seed = 0", true),
        ("max_pairs = 300", "max_pairs = 300\npair_seed = 5", false),
        ("", "max_memory = 1000000", true),
    ];
    for (x, y, same) in cases {
        check(
            (hash(x) == hash(y)) == *same,
            &format!("{x:?} vs {y:?}: expected same hash = {same}"),
        );
    }
}

/// Probe texts: AG News's `\` line breaks become spaces unless `backslash_to_space = false`;
/// line breaks always do.
#[test]
fn probe_texts_replace_backslashes_only_when_asked() {
    let labels =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/io/ag_news.csv");
    let spec = |b: bool| crate::ProbeSpec {
        labels: crate::DataSource::File(labels.clone()),
        label_column: None,
        text_column: None,
        n_examples: Some(1),
        seq_len: 16,
        backslash_to_space: b,
    };
    // A file needs no hub.
    let hub = repgeom_hub::Hub::from_env();
    let texts = |b: bool| {
        crate::stage::probe_texts(&hub, &spec(b))
            .unwrap()
            .texts
            .text
    };
    let (on, off) = (texts(true), texts(false));
    check(on.contains("dwindling band") && !on.contains('\\'), &on);
    check(off.contains("dwindling\\band"), &off);
    // The default, and written out only when off (so earlier hashes stay).
    let parsed: crate::ProbeSpec = toml::from_str("labels = \"x.csv\"").unwrap();
    check(parsed.backslash_to_space, "on by default");
    check(
        !serde_json::to_string(&spec(true))
            .unwrap()
            .contains("backslash"),
        "left out when on",
    );
}

/// A `cross` unit's rows are its cell of the pair's comparison over every analysed layer of
/// both models: bit for bit the `cross_table` unit's cell (nulls and every extra included),
/// whether or not the table is computed in the same run.
#[test]
fn cross_units_are_cells_of_the_pair_table() {
    use repgeom_metrics::calibrate::Aggregate;
    let mut m = small();
    m.analysis.cross_n_perm = Some(20);
    m.analysis.cross_aggregate = vec![Aggregate::Max];
    let s = Study::new(m, "t").unwrap();
    let run = |kinds: &dyn Fn(&crate::UnitKind) -> bool| {
        let todo: Vec<_> = (s.units.iter())
            .filter(|u| kinds(&u.unit.kind))
            .cloned()
            .collect();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(crate::parts_dir(dir.path())).unwrap();
        crate::run_units(&s, &todo, dir.path(), &|_| {}).unwrap();
        let mut rows: Vec<repgeom_report::Row> = std::fs::read_dir(crate::parts_dir(dir.path()))
            .unwrap()
            .flat_map(|e| crate::read_part(&e.unwrap().path()).unwrap().rows)
            .collect();
        rows.sort_by(|x, y| {
            let key = |r: &repgeom_report::Row| (r.layer, r.metric.clone(), r.variant.clone());
            key(x).cmp(&key(y))
        });
        rows
    };
    let is_cross = |k: &crate::UnitKind| matches!(k, crate::UnitKind::Cross { .. });
    let both = run(&|k| is_cross(k) || matches!(k, crate::UnitKind::CrossTable { .. }));
    let alone = run(&is_cross);
    let (cells, cross): (Vec<_>, Vec<_>) = (both.iter())
        .filter(|r| !r.metric.ends_with("_max"))
        .partition(|r| r.extra.contains_key("other_layer"));
    assert!(!cross.is_empty());
    let (a, b) = (
        s.model("synthetic-d64").unwrap(),
        s.model("synthetic-d256").unwrap(),
    );
    // Every extra of the comparison (z, both tails, ...) but the cell's place in the table.
    let extras = |r: &repgeom_report::Row| -> Vec<(String, u64)> {
        (r.extra.iter())
            .filter(|(k, _)| *k != "other_layer")
            .map(|(k, v)| (k.clone(), v.to_bits()))
            .collect()
    };
    let same = |x: &repgeom_report::Row, y: &repgeom_report::Row| {
        (x.value.to_bits(), x.null_mean.map(f64::to_bits))
            == (y.value.to_bits(), y.null_mean.map(f64::to_bits))
            && (x.null_std.map(f64::to_bits), x.p_value.map(f64::to_bits))
                == (y.null_std.map(f64::to_bits), y.p_value.map(f64::to_bits))
            && extras(x) == extras(y)
    };
    for &r in &cross {
        let ol = b.nearest_layer(repgeom_report::relative_depth(r.layer, a.n_layers));
        let cell = (cells.iter().copied())
            .find(|c| {
                (c.layer, c.extra["other_layer"] as usize) == (r.layer, ol)
                    && (&c.metric, &c.variant) == (&r.metric, &r.variant)
            })
            .unwrap_or_else(|| panic!("no cell for {r:?}"));
        check(same(r, cell), &format!("{r:?}\nvs the table's\n{cell:?}"));
    }
    // Without the table in the run: the same rows.
    check(alone.len() == cross.len(), "the same cross rows");
    for (x, &y) in alone.iter().zip(&cross) {
        check(same(x, y), &format!("{x:?} vs {y:?}"));
    }
}

/// `analysis.cross_aggregate`: one `cross_table` unit per pair whose rows are the calibrated
/// aggregates of each cross metric over the whole layer table, equal to what
/// `calibrate::compare` gives on the same layers; refused without a null; the setting enters
/// only the cross units' hashes.
#[test]
fn cross_aggregate_units() {
    use repgeom_metrics::calibrate::Aggregate;
    let mut m = small();
    m.analysis.cross_aggregate = vec![Aggregate::Max];
    let err = Study::new(m.clone(), "t").unwrap_err().to_string();
    check(
        err.contains("analysis.cross_aggregate") && err.contains("cross_n_perm"),
        &format!("an aggregate without a null is refused: {err}"),
    );
    m.analysis.cross_n_perm = Some(20);
    m.analysis.cross_aggregate = vec![Aggregate::Max, Aggregate::Hungarian];
    let s = Study::new(m, "t").unwrap();
    let tables: Vec<_> = (s.units.iter())
        .filter(|u| matches!(u.unit.kind, crate::UnitKind::CrossTable { .. }))
        .cloned()
        .collect();
    assert_eq!(tables.len(), 1, "one table unit for the one pair");
    let base = Study::new(small(), "t").unwrap();
    for u in &base.units {
        let same = s.units.iter().find(|x| x.id == u.id).unwrap();
        let is_cross = matches!(u.unit.kind, crate::UnitKind::Cross { .. });
        check(
            (u.config_hash != same.config_hash) == is_cross,
            &format!("{}: only cross units change with cross_n_perm", u.id),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(crate::parts_dir(dir.path())).unwrap();
    crate::run_units(&s, &tables, dir.path(), &|_| {}).unwrap();
    let rows: Vec<repgeom_report::Row> = std::fs::read_dir(crate::parts_dir(dir.path()))
        .unwrap()
        .flat_map(|e| crate::read_part(&e.unwrap().path()).unwrap().rows)
        .collect();
    // Default cross metrics: distance_spearman (3 variants, 2 with a permutation null: the
    // readout row keeps its random-subspace null) and cka_linear; two aggregates each.
    let names: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| (r.metric.clone(), r.variant.clone()))
        .collect();
    check(
        names.contains(&("cka_linear_max".into(), "biased".into()))
            && names.contains(&("cka_linear_hungarian".into(), "biased".into()))
            && names.contains(&("distance_spearman_max".into(), "full".into())),
        &format!("aggregate rows by metric and variant: {names:?}"),
    );
    // Every cell of the table (figure 10): cka_linear over 3 × 3 layers, each with its own
    // layer pair and permutation p.
    let (cells, aggregates): (Vec<_>, Vec<_>) = rows
        .iter()
        .partition(|r| r.extra.contains_key("other_layer"));
    let cka: std::collections::BTreeSet<_> = (cells.iter())
        .filter(|r| r.metric == "cka_linear" && r.p_value.is_some())
        .map(|r| (r.layer, r.extra["other_layer"] as u32))
        .collect();
    check(cka.len() == 9, &format!("3 x 3 cka_linear cells: {cka:?}"));
    for r in aggregates {
        let p = r.p_value.expect("every aggregate row has its p-value");
        check(
            (1.0 / 21.0..=1.0).contains(&p) && r.null_mean.is_some(),
            &format!("{} {}: add-one p over 20 draws, {p}", r.metric, r.variant),
        );
        check(r.other_model == "synthetic-d256", "other model named");
        check(
            [
                "z",
                "z_se",
                "p_two_sided",
                "tau",
                "n_perm",
                "duplicates_dropped",
            ]
            .iter()
            .all(|k| r.extra.contains_key(*k)),
            &format!(
                "{} {}: every column of the aggregate, {:?}",
                r.metric, r.variant, r.extra
            ),
        );
    }
}

/// Options the engine would refuse are refused by the manifest's check, before any unit runs,
/// with the library's message (one threshold per rule: `max_pairs >= 3`, `n_null >= 2`, ...).
#[test]
fn analysis_options_are_refused_up_front_with_the_librarys_rules() {
    let refused = |analysis: &str| {
        let mut m = small();
        m.analysis = toml::from_str(analysis).unwrap();
        m.check("t.toml").unwrap_err().to_string()
    };
    let cases = [
        (
            "max_pairs = 2",
            "at least 3 pairs are needed for a correlation",
        ),
        ("bootstrap = 1", "at least 2 replicates are needed"),
        (
            "bootstrap = { replicates = 50, level = 1.5 }",
            "strictly between 0 and 1",
        ),
        ("n_null = 1", "at least 2 draws are needed"),
        ("ccr = []", "give at least one CCR level"),
        ("ccr = [1, 1]", "CCR levels must be distinct"),
        (
            "null = \"spectrum\"\nspectrum_tol = 2.0",
            "must lie in (0, 1)",
        ),
    ];
    for (analysis, want) in cases {
        let e = refused(analysis);
        check(e.contains(want), &format!("{analysis:?}: {e}"));
    }
    let mut ok = small();
    ok.analysis = toml::from_str("max_pairs = 3\nmax_memory = \"1MiB\"").unwrap();
    ok.check("t.toml").unwrap();
    assert_eq!(ok.analysis.pga().engine.max_memory, Some(1 << 20));
    let e = toml::from_str::<crate::Analysis>("max_memory = \"4QB\"").unwrap_err();
    check(e.to_string().contains("bad size unit"), &e.to_string());
}

/// The activations of hub checkpoints keep their cache keys: the inputs hash of an `[extract]`
/// table under each way of writing it, pinned (values from before `[extract]` became the
/// extraction library's own parameters). `batch_size` is speed only; `skip_first` enters only
/// away from its default.
#[test]
fn extract_inputs_hashes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::write(&corpus, "one two three\nfour five six\n").unwrap();
    let hash = |extract: &str| {
        let text = format!(
            "[extract]\ntext = {corpus:?}\n{extract}\n\n[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 8\nk = 2\nn_layers = 2\nhub = \"org/name\"\n\n[[model.checkpoint]]\nname = \"step1\"\nrevision = \"step1\"\n"
        );
        let m: Manifest = toml::from_str(&text).unwrap();
        let inputs = Study::new(m, "t").unwrap().inputs.unwrap();
        inputs[..16].to_string()
    };
    let cases: &[(&str, &str)] = &[
        ("", "55c2248b333c9bcb"),
        ("batch_size = 2", "55c2248b333c9bcb"),
        ("n_points = 512\nseq_len = 64\nseed = 3", "9f68c9dbb1a48400"),
        ("points_per_sequence = 4", "a8f8d310cf4130f9"),
        ("loss = true", "34822490cf78cd2f"),
        (
            "loss = true\nloss_tokens = 100\nval_fraction = 0.2",
            "0c18333107bf8a15",
        ),
        ("skip_first = true", "55c2248b333c9bcb"),
        ("skip_first = false", "18fb541aa95ad4f0"),
        ("dtype = \"f32\"", "55c2248b333c9bcb"),
    ];
    let moved: Vec<String> = cases
        .iter()
        .map(|(extract, want)| (extract, want, hash(extract)))
        .filter(|(_, want, got)| got != *want)
        .map(|(extract, want, got)| {
            format!("[extract] {extract:?}: inputs hash {got}, pinned {want}")
        })
        .collect();
    check(moved.is_empty(), &moved.join("\n"));
}

/// `[extract] dtype = "stored"` (bf16/f16 products, on either device) changes the numbers, so
/// it is in the inputs hash, unlike the device.
#[test]
fn stored_dtype_is_an_extraction_setting() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::write(&corpus, "one two three\nfour five six\n").unwrap();
    let study = |extract: &str| {
        let text = format!(
            "[extract]\ntext = {corpus:?}\n{extract}\n\n[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 8\nk = 2\nn_layers = 2\nhub = \"org/name\"\n\n[[model.checkpoint]]\nname = \"step1\"\nrevision = \"step1\"\n"
        );
        Study::new(toml::from_str::<Manifest>(&text).unwrap(), "t.toml").unwrap()
    };
    let (f32, stored) = (study(""), study("dtype = \"stored\""));
    check(
        f32.inputs != stored.inputs,
        "dtype stored is in the inputs hash",
    );
    let e = toml::from_str::<Manifest>(
        "[extract]\ntext = \"c.txt\"\ndtype = \"bf16\"\n\n[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 8\nk = 2\nn_layers = 2\nhub = \"org/name\"\n\n[[model.checkpoint]]\nname = \"s\"\nrevision = \"s\""
    )
    .unwrap_err()
    .to_string();
    check(
        e.contains("unknown variant `bf16`") && e.contains("f32"),
        &e,
    );
}

/// `[extract]` is read by the extraction library's parameters: an unknown key lists theirs and
/// the study's own, a wrong type names the key, and the library's checks run up front.
#[test]
fn extract_takes_the_extraction_parameters() {
    let model = "[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 8\nk = 2\nn_layers = 2\nhub = \"org/name\"\n\n[[model.checkpoint]]\nname = \"s\"\nrevision = \"s\"";
    let parse = |t: &str| {
        toml::from_str::<Manifest>(&format!("[extract]\ntext = \"c.txt\"\n{t}\n\n{model}"))
    };
    let e = parse("npoints = 5").unwrap_err().to_string();
    check(
        e.contains("unknown field `npoints`, expected one of `seq_len`, `n_points`, `seed`, `points_per_sequence`, `skip_first`, `loss`, `loss_tokens`, `batch_size`, `dtype`, or one of the study's own: `text`, `val_fraction`"),
        &e,
    );
    let e = parse("seq_len = \"long\"").unwrap_err().to_string();
    check(e.contains("invalid type: string \"long\""), &e);
    let m = parse("seq_len = 1").unwrap();
    let e = m.check("t.toml").unwrap_err().to_string();
    check(
        e.contains("seq_len") && e.contains("must be at least 2"),
        &e,
    );
    let m = parse("n_points = 7\nskip_first = false\nval_fraction = 0.3").unwrap();
    let x = m.extract.as_ref().unwrap();
    check(
        x.params.n_points == Some(7) && !x.params.skip_first && x.val_fraction == 0.3,
        "keys reach the parameters",
    );
    // A plan file writes the table back; it reads back equal.
    let back: Manifest = toml::from_str(&toml::to_string(&m).unwrap()).unwrap();
    check(back == m, "[extract] round-trips through TOML");
}

/// `analysis.spectral_tokens`: `"all"` or a positive count; needs `[extract]` and spectral
/// metrics with a covariance form.
#[test]
fn spectral_tokens_is_checked_up_front() {
    let parse = |t: &str| toml::from_str::<crate::Analysis>(t).map_err(|e| e.to_string());
    assert_eq!(
        parse("spectral_tokens = \"all\"").unwrap().spectral_tokens,
        Some(crate::SpectralTokens::All)
    );
    assert_eq!(
        parse("spectral_tokens = 100000").unwrap().spectral_tokens,
        Some(crate::SpectralTokens::AtMost(100_000))
    );
    for bad in ["spectral_tokens = 0", "spectral_tokens = \"some\""] {
        let e = parse(bad).unwrap_err();
        check(
            e.contains("expected \"all\" or a positive number of tokens"),
            &e,
        );
    }
    let mut m = small();
    m.analysis.spectral_tokens = Some(crate::SpectralTokens::All);
    let e = m.check("t.toml").unwrap_err().to_string();
    check(
        e.contains("analysis.spectral_tokens") && e.contains("add an [extract] table"),
        &e,
    );
    let model = "[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 8\nk = 2\nn_layers = 2\nhub = \"org/name\"\n\n[[model.checkpoint]]\nname = \"s\"\nrevision = \"s\"";
    let with = |spectral: &str| {
        let m: Manifest = toml::from_str(&format!(
            "[analysis]\nspectral = {spectral}\nspectral_tokens = \"all\"\n\n[extract]\ntext = \"c.txt\"\n\n{model}"
        ))
        .unwrap();
        m.check("t.toml").map_err(|e| e.to_string())
    };
    assert!(with("[\"rankme\", \"isotropy\"]").is_ok());
    let e = with("[\"rankme\", \"intrinsic_dim_twonn\"]").unwrap_err();
    check(
        e.contains("intrinsic_dim_twonn needs the points themselves"),
        &e,
    );
    let e = with("[]").unwrap_err();
    check(e.contains("needs spectral metrics"), &e);
}

/// The manifest's `device`: read from the top level, written back only when not the CPU, never
/// in a unit's hash; a study on a device this machine lacks fails before any unit, writing no
/// part; a part file records the device it was computed on.
#[test]
fn device_is_a_setting_of_the_run() {
    let cpu = small();
    let mut cuda = small();
    cuda.device = repgeom_cuda::Device::Cuda(99);
    let (a, b) = (
        Study::new(cpu, "t").unwrap(),
        Study::new(cuda.clone(), "t").unwrap(),
    );
    assert_eq!(
        a.plan_hash(),
        b.plan_hash(),
        "the device is not in any hash"
    );
    let text = toml::to_string(&cuda).unwrap();
    assert!(text.contains("device = \"cuda:99\""), "{text}");
    let back: Manifest = toml::from_str(&text).unwrap();
    assert_eq!(back.device, repgeom_cuda::Device::Cuda(99));
    assert!(!toml::to_string(&small()).unwrap().contains("device"));
    let err = toml::from_str::<Manifest>(&text.replace("cuda:99", "tpu")).unwrap_err();
    assert!(err.to_string().contains("unknown device `tpu`"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(crate::parts_dir(dir.path())).unwrap();
    let err = crate::run_units(&b, &b.units, dir.path(), &|_| {}).unwrap_err();
    assert!(err.to_string().starts_with("device cuda:99: "), "{err}");
    let parts = std::fs::read_dir(crate::parts_dir(dir.path()))
        .unwrap()
        .count();
    assert_eq!(parts, 0, "no unit ran");

    let unit = &b.units[0];
    let path = crate::write_part(dir.path(), unit, &[], repgeom_cuda::Device::Cuda(1)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"device\": \"cuda:1\""), "{text}");
    assert_eq!(
        crate::read_part(&path).unwrap().device,
        repgeom_cuda::Device::Cuda(1)
    );
    let cpu_part = crate::write_part(dir.path(), unit, &[], repgeom_cuda::Device::Cpu).unwrap();
    assert!(
        !std::fs::read_to_string(&cpu_part)
            .unwrap()
            .contains("device")
    );
}

/// A group's units on pools of 1, 2, 3 and 16 threads, each with parallel work of its own:
/// every unit once, given the pool, never more units at once than threads (a thread waiting
/// inside one unit's parallel work starts no other) or than the memory allows, and after
/// failures the error of the first failing unit in order.
#[test]
fn a_groups_units_each_run_once_on_the_pool_and_one_per_thread() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rayon::prelude::*;

    use crate::run::for_each_unit;
    for threads in [1, 2, 3, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for (n, at_once) in [
            (0, 40),
            (1, 40),
            (5, 40),
            (40, 40),
            (40, 2),
            (40, 1),
            (5, 0),
        ] {
            let seen = Mutex::new(Vec::new());
            let (live, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            pool.install(|| {
                for_each_unit(n, at_once, |i| {
                    most.fetch_max(live.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    // Parallel work that other threads steal and this one waits for.
                    let sum: u64 = (0..64u64)
                        .into_par_iter()
                        .map(|j| {
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            j
                        })
                        .sum();
                    live.fetch_sub(1, Ordering::SeqCst);
                    // The pool a unit's `Par::rayon(0)` sizes itself from.
                    let pool_size = rayon::current_num_threads();
                    seen.lock().unwrap().push((i, pool_size, sum));
                    Ok(())
                })
            })
            .unwrap();
            let mut seen = seen.into_inner().unwrap();
            seen.sort_by_key(|(i, _, _)| *i);
            let expected: Vec<(usize, usize, u64)> = (0..n).map(|i| (i, threads, 2016)).collect();
            check(
                seen == expected,
                &format!("{n} units on {threads} threads: {seen:?}"),
            );
            let most = most.into_inner();
            check(
                most <= threads.min(at_once.max(1)),
                &format!("{most} of {n} units at once on {threads} threads, {at_once} allowed"),
            );
        }
        let failing = |i: usize| i == 7 || i == 9 || i == 30;
        let result = pool.install(|| {
            for_each_unit(40, 40, |i| match failing(i) {
                true => Err(crate::Error::BadShard {
                    spec: i.to_string(),
                    reason: "fails".into(),
                }),
                false => Ok(()),
            })
        });
        check(
            matches!(&result, Err(crate::Error::BadShard { spec, .. }) if spec == "7"),
            &format!("the first failing unit's error on {threads} threads: {result:?}"),
        );
    }
}

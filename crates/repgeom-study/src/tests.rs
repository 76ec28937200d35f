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
    // 2 models x 3 layers: non-final checkpoint pga only; final: pga, pcshare, 4 spectral, probe;
    // val_loss per checkpoint; cross for the d64 model at its final checkpoint.
    let per_model = 3 + 3 * 7 + 2;
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

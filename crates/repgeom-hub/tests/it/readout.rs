//! `read_readout`, the one resolver of a model's readout: a hub id gives the matrix the same
//! checkpoint gives from a local folder, fetching only the shards it needs; a local path never
//! asks the hub; a readout the loader refuses keeps the loader's message.

use std::path::{Path, PathBuf};

use repgeom_hub::{Error, Hub, ResolvedReadout, read_readout};
use repgeom_io::{ReadoutOptions, ReadoutPrep};

use crate::{Setup, root, tiny_repo};

fn prep(fold_norm: bool, center: bool) -> ReadoutPrep {
    ReadoutPrep {
        options: ReadoutOptions::default(),
        fold_norm,
        center,
    }
}

/// Reads `reference` through `hub`, recording the files whose download was reported.
fn read(
    hub: &Hub,
    reference: &str,
    revision: Option<&str>,
    prep: &ReadoutPrep,
) -> (repgeom_hub::Result<ResolvedReadout>, Vec<String>) {
    let mut files: Vec<String> = Vec::new();
    let r = read_readout(reference, revision, prep, hub, &mut |p| {
        if !files.iter().any(|f| f == p.file) {
            files.push(p.file.to_string());
        }
    });
    (r, files)
}

/// The same prepared readout read from the fixture folder directly.
fn local(dir: &str, prep: &ReadoutPrep) -> repgeom_io::Readout {
    repgeom_io::read_readout_prepared(&root().join(dir), prep).unwrap()
}

fn assert_same(got: &repgeom_io::Readout, want: &repgeom_io::Readout) {
    assert_eq!(got.tensor, want.tensor);
    assert_eq!(got.rows_in_file, want.rows_in_file);
    assert_eq!(
        (got.matrix.rows, got.matrix.cols),
        (want.matrix.rows, want.matrix.cols)
    );
    let bits = |m: &repgeom_io::Matrix| m.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got.matrix), bits(&want.matrix), "bit for bit");
}

fn snapshot_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn hub_id_fetches_only_the_readout_shard_and_reads_what_the_folder_gives() {
    let s = Setup::new(vec![tiny_repo()]);
    let p = prep(false, true);
    let (r, reported) = read(&s.client(), "test-org/tiny-neox", Some("step1"), &p);
    let r = r.unwrap();
    assert!(
        r.path.starts_with(s.model_dir().join("snapshots")),
        "{}",
        r.path.display()
    );
    assert_eq!(r.readout.source, r.path);
    assert_same(&r.readout, &local("fixtures/extract/gptneox_parallel", &p));
    // embed_out.weight is in the second shard; the first is never fetched.
    assert_eq!(
        snapshot_files(&r.path),
        [
            "config.json",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json"
        ]
    );
    let shard = |n: u8| format!("model-0000{n}-of-00002.safetensors");
    assert!(reported.contains(&shard(2)) && !reported.contains(&shard(1)));
}

#[test]
fn folding_the_final_norm_fetches_the_whole_checkpoint() {
    let s = Setup::new(vec![tiny_repo()]);
    let p = prep(true, false);
    let (r, _) = read(&s.client(), "test-org/tiny-neox", Some("step1"), &p);
    let r = r.unwrap();
    assert_same(&r.readout, &local("fixtures/extract/gptneox_parallel", &p));
    // The gain (gpt_neox.final_layer_norm.weight) is in the first shard.
    assert!(snapshot_files(&r.path).contains(&"model-00001-of-00002.safetensors".to_string()));
    // Folding changed the matrix: this is not the plain readout.
    let plain = local("fixtures/extract/gptneox_parallel", &prep(false, false));
    assert_ne!(r.readout.matrix.data, plain.matrix.data);
}

#[test]
fn a_local_folder_is_read_in_place_without_asking_the_hub() {
    let s = Setup::new(vec![tiny_repo()]);
    let dir = root().join("fixtures/extract/gptneox_serial_bf16");
    let p = prep(true, true);
    let (r, reported) = read(&s.client(), &dir.to_string_lossy(), None, &p);
    let r = r.unwrap();
    assert_eq!(r.path, dir);
    assert_same(
        &r.readout,
        &local("fixtures/extract/gptneox_serial_bf16", &p),
    );
    assert!(reported.is_empty());
    assert_eq!(s.take_requests(), Vec::<String>::new());
    assert!(!s.model_dir().exists());
}

#[test]
fn errors_keep_the_resolver_s_and_the_loader_s_messages() {
    let s = Setup::new(vec![tiny_repo()]);
    let hub = s.client();
    let dir = root().join("fixtures/extract/gptneox_serial_bf16");
    let dir_s = dir.to_string_lossy().into_owned();

    // The reference: ModelRef::parse's errors, unchanged.
    let (err, _) = read(&hub, &dir_s, Some("step1"), &prep(false, false));
    let err = err.unwrap_err();
    assert!(matches!(err, Error::RevisionOfLocalPath { .. }), "{err:?}");
    let (err, _) = read(
        &hub,
        "no-such-dir/acts.safetensors",
        None,
        &prep(false, false),
    );
    let err = err.unwrap_err();
    assert_eq!(
        err.to_string(),
        repgeom_hub::ModelRef::parse("no-such-dir/acts.safetensors", None)
            .unwrap_err()
            .to_string()
    );
    // The hub: a revision it does not have.
    let (err, _) = read(
        &hub,
        "test-org/tiny-neox",
        Some("step9"),
        &prep(false, false),
    );
    assert!(
        matches!(err, Err(Error::RevisionNotFound { .. })),
        "{err:?}"
    );

    // The loader: a tensor the checkpoint lacks is Error::Readout with repgeom-io's message
    // (and its source chain), for a local folder and for a hub snapshot alike.
    let bad = ReadoutPrep {
        options: ReadoutOptions {
            vocab_rows: None,
            tensor: Some("no.such.tensor".into()),
        },
        fold_norm: false,
        center: false,
    };
    let (err, _) = read(&hub, &dir_s, None, &bad);
    let err = err.unwrap_err();
    let want = repgeom_io::read_readout_prepared(&dir, &bad).unwrap_err();
    assert!(matches!(err, Error::Readout { .. }), "{err:?}");
    assert_eq!(err.to_string(), want.to_string());
    assert_eq!(
        std::error::Error::source(&err).map(ToString::to_string),
        std::error::Error::source(&want).map(ToString::to_string)
    );
    let (err, _) = read(&hub, "test-org/tiny-neox", Some("step2"), &bad);
    let err = err.unwrap_err();
    let snap: PathBuf = s.model_dir().join("snapshots");
    assert!(matches!(err, Error::Readout { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&*snap.to_string_lossy()),
        "names the snapshot folder: {err}"
    );
}

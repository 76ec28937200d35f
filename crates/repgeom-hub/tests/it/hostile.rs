//! A hostile hub or repo cannot make the client write or read outside the cache: every name of
//! `fixtures/hub/hostile-names.json` as a shard in an index file, as a listed file of a model
//! and of a dataset, and as a revision; each refused with an error naming it and its origin,
//! and nothing new anywhere around the cache.

use std::collections::BTreeSet;
use std::path::PathBuf;

use repgeom_hub::test_server::{TestHub, TestRepo};
use repgeom_hub::{DatasetRef, Error, Files, Hub, HubConfig, RetryPolicy};

use crate::files_of;

/// The sharded GPT-NeoX fixture with its index's readout shard renamed to `shard` (the
/// listing stays clean: only the index is hostile).
fn index_naming(shard: &str) -> Vec<(String, Vec<u8>)> {
    let mut files = files_of("fixtures/extract/gptneox_parallel");
    for (p, b) in &mut files {
        if p == "model.safetensors.index.json" {
            let mut js: serde_json::Value = serde_json::from_slice(b).unwrap();
            js["weight_map"]["embed_out.weight"] = serde_json::Value::String(shard.into());
            *b = js.to_string().into_bytes();
        }
    }
    files
}

/// A world: `<root>/w/x/y/z/cache` is the hub cache, four folders below a root whose every
/// entry is compared before and after.
struct World {
    hub: TestHub,
    root: tempfile::TempDir,
}

impl World {
    fn new(repos: Vec<TestRepo>) -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("w/x/y/z/cache")).unwrap();
        World {
            hub: TestHub::start(repos),
            root,
        }
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("w/x/y/z/cache")
    }

    fn client(&self) -> Hub {
        Hub::new(HubConfig {
            endpoint: self.hub.endpoint().to_string(),
            cache: self.cache(),
            token: None,
            offline: false,
            refresh: false,
            attempts: 2,
            retry: RetryPolicy::default().with_sleep(|_| {}).with_notes(|_| {}),
        })
    }

    /// What appeared outside the cache since `before`.
    fn new_outside(&self, before: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
        repgeom_testkit::everything(self.root.path())
            .difference(before)
            .filter(|p| !p.starts_with("w/x/y/z/cache"))
            .cloned()
            .collect()
    }
}

/// The checked error, or a panic saying what came instead.
#[track_caller]
fn refused(r: repgeom_hub::Result<impl std::fmt::Debug>, name: &str, origin: &str) -> String {
    match r {
        Err(Error::UnsafeName {
            name: bad,
            origin: o,
        }) => {
            assert_eq!(bad.name, name.chars().take(300).collect::<String>());
            assert!(o.contains(origin), "origin {o:?} should name {origin:?}");
            Error::UnsafeName {
                name: bad,
                origin: o,
            }
            .to_string()
        }
        other => panic!("{name:?}: expected UnsafeName from {origin}, got {other:?}"),
    }
}

#[test]
fn a_hostile_shard_name_in_an_index_file_is_refused_and_nothing_is_written_outside() {
    let names = repgeom_testkit::hostile_names();
    assert!(names.len() >= 20);
    let mut repo = TestRepo::new("evil/model");
    for (i, n) in names.iter().enumerate() {
        repo.branch(&format!("b{i}"), index_naming(n));
    }
    let w = World::new(vec![repo]);
    let before = repgeom_testkit::everything(w.root.path());
    let hub = w.client();
    for (i, n) in names.iter().enumerate() {
        for need in [Files::Full, Files::Readout, Files::Weights] {
            let r = hub.snapshot("evil/model", &format!("b{i}"), &need, &mut |_| {});
            refused(r, n, "model evil/model@b");
        }
    }
    assert_eq!(w.new_outside(&before), Vec::<PathBuf>::new());
    // Nothing of the refused shard reached the cache: no blob or pointer but the metadata's.
    let cached = repgeom_testkit::everything(&w.cache());
    assert!(
        cached
            .iter()
            .all(|p| !p.to_string_lossy().contains("00002-of-00002")),
        "{cached:?}"
    );
}

#[test]
fn the_issue_s_shard_and_revision_messages() {
    let mut repo = TestRepo::new("evil/model");
    repo.branch(
        "step1000",
        index_naming("../../../../escaped-00001.safetensors"),
    );
    let w = World::new(vec![repo]);
    let hub = w.client();
    let e = hub.snapshot("evil/model", "step1000", &Files::Full, &mut |_| {});
    insta::assert_snapshot!(refused(e, "../../../../escaped-00001.safetensors", "index"), @"refused `../../../../escaped-00001.safetensors` has a `..` component, from model evil/model@step1000: model.safetensors.index.json: names from a hub, a repo or a manifest must stay inside the cache");
    let e = hub.snapshot(
        "evil/model",
        "../../../../escaped_ref",
        &Files::Full,
        &mut |_| {},
    );
    insta::assert_snapshot!(refused(e, "../../../../escaped_ref", "revision"), @"refused `../../../../escaped_ref` has a `..` component, from the revision asked of model evil/model: names from a hub, a repo or a manifest must stay inside the cache");
}

#[test]
fn a_hostile_name_in_a_file_listing_is_refused() {
    let names = repgeom_testkit::hostile_names();
    let mut repo = TestRepo::new("evil/model");
    let mut data = TestRepo::dataset("evil/data");
    for (i, n) in names.iter().enumerate() {
        let mut files = files_of("fixtures/extract/gptneox_parallel");
        files.push((n.clone(), b"payload".to_vec()));
        repo.branch(&format!("b{i}"), files);
        data.branch(
            &format!("b{i}"),
            vec![
                ("data/test-00000-of-00001.parquet".into(), b"PAR1".to_vec()),
                (format!("{n}.parquet"), b"PAR1".to_vec()),
            ],
        );
    }
    let w = World::new(vec![repo, data]);
    let before = repgeom_testkit::everything(w.root.path());
    let hub = w.client();
    for (i, n) in names.iter().enumerate() {
        let rev = format!("b{i}");
        let r = hub.snapshot("evil/model", &rev, &Files::Full, &mut |_| {});
        refused(
            r,
            n,
            &format!(
                "the file list of model evil/model@{}",
                hub_commit(&hub, &rev)
            ),
        );
        let r = hub.list_files("evil/model", &rev);
        refused(r, n, "the file list of model evil/model@");
        let want = DatasetRef::new("evil/data", "test").revision(&rev);
        let r = hub.dataset(&want, &mut |_| {});
        let bad = format!("{n}.parquet");
        match r {
            // A name whose `.parquet` suffix makes it safe (`a/` -> `a/.parquet`) is listed
            // like any other, and only the data files are fetched.
            Ok(files) => {
                assert!(repgeom_io::RelPath::new(&bad).is_ok(), "{bad:?} passed");
                assert_eq!(files.files.len(), 1);
            }
            r => {
                refused(r, &bad, "the file list of dataset evil/data@");
            }
        }
    }
    assert_eq!(w.new_outside(&before), Vec::<PathBuf>::new());
}

/// The commit a branch of the test hub resolves to (listings are asked at the commit).
fn hub_commit(hub: &Hub, rev: &str) -> String {
    hub.resolve("evil/model", rev).unwrap()
}

#[test]
fn a_hostile_revision_is_refused_before_any_request() {
    let names = repgeom_testkit::hostile_names();
    let w = World::new(vec![
        TestRepo::new("evil/model"),
        TestRepo::dataset("evil/data"),
    ]);
    let before = repgeom_testkit::everything(w.root.path());
    let hub = w.client();
    for n in &names {
        refused(
            hub.snapshot("evil/model", n, &Files::Full, &mut |_| {}),
            n,
            "the revision asked of model evil/model",
        );
        refused(
            hub.resolve("evil/model", n),
            n,
            "the revision asked of model",
        );
        refused(
            hub.list_files("evil/model", n),
            n,
            "the revision asked of model",
        );
        refused(
            hub.download("evil/model", n, "config.json", &mut |_| {}),
            n,
            "the revision asked of model",
        );
        let want = DatasetRef::new("evil/data", "test").revision(n);
        refused(
            hub.dataset(&want, &mut |_| {}),
            n,
            "the revision asked of dataset evil/data",
        );
        refused(
            repgeom_hub::ModelRef::parse("evil/model", Some(n)),
            n,
            "the revision given for evil/model",
        );
        // A revision is written below refs/: the cache refuses it even when asked directly.
        let cache = repgeom_hub::RepoCache::new(&w.cache(), "evil/model");
        refused(cache.write_ref(n, &"a".repeat(40)), n, "revision");
        assert_eq!(cache.commit_of(n), None);
    }
    assert!(w.hub.requests().is_empty(), "{:?}", w.hub.requests());
    assert_eq!(w.new_outside(&before), Vec::<PathBuf>::new());
    assert_eq!(repgeom_testkit::everything(&w.cache()), BTreeSet::new());
}

/// A file asked for by name goes through the same check.
#[test]
fn a_hostile_file_asked_for_is_refused() {
    let mut repo = TestRepo::new("evil/model");
    repo.branch("main", files_of("fixtures/extract/gptneox_parallel"));
    let w = World::new(vec![repo]);
    let hub = w.client();
    for n in repgeom_testkit::hostile_names() {
        refused(
            hub.download("evil/model", "main", &n, &mut |_| {}),
            &n,
            "the file asked for",
        );
    }
}

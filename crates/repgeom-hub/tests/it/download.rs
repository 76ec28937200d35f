//! Downloads through the test hub.

use repgeom_hub::{Error, Files, HubConfig};

use crate::{Setup, root, snapshot, tiny_repo, tree};

#[test]
fn full_snapshot_has_python_layout_and_only_needed_files() {
    let s = Setup::new(vec![tiny_repo()]);
    let (snap, progress) = snapshot(&s.client(), "step1", &Files::Full);
    let snap = snap.unwrap();
    // generation_config.json is not needed and not fetched.
    insta::assert_snapshot!("step1_files", snap.files.join("\n"));
    insta::assert_snapshot!("step1_cache_tree", tree(&s.model_dir()).join("\n"));
    insta::assert_snapshot!("step1_requests", s.take_requests().join("\n"));
    // refs/step1 holds the commit, no newline, as huggingface_hub writes it.
    let reff = std::fs::read_to_string(s.model_dir().join("refs/step1")).unwrap();
    assert_eq!(reff, snap.commit);
    assert_eq!(snap.dir, s.model_dir().join("snapshots").join(&snap.commit));
    // Contents are the fixture's, byte for byte, through the symlinks.
    for f in &snap.files {
        let want = std::fs::read(root().join("fixtures/extract/gptneox_parallel").join(f)).unwrap();
        assert_eq!(std::fs::read(snap.dir.join(f)).unwrap(), want, "{f}");
    }
    // Every downloaded file's last progress report is complete.
    assert_eq!(progress.len(), 5, "{progress:?}");
    assert!(
        progress
            .iter()
            .all(|(_, done, total)| done == total && *total > 0)
    );
}

#[test]
fn cache_is_reused_without_any_request() {
    let s = Setup::new(vec![tiny_repo()]);
    snapshot(&s.client(), "step1", &Files::Full).0.unwrap();
    s.take_requests();
    // A new client (a new process) on the same cache: no request at all.
    let (again, progress) = snapshot(&s.client(), "step1", &Files::Full);
    let again = again.unwrap();
    assert_eq!(s.take_requests(), Vec::<String>::new());
    assert!(progress.is_empty());
    // By commit hash: no request either.
    let (by_commit, _) = snapshot(&s.client(), &again.commit, &Files::Full);
    assert_eq!(by_commit.unwrap().dir, again.dir);
    assert_eq!(s.take_requests(), Vec::<String>::new());
    // `refresh` re-resolves the branch and lists files, but downloads nothing.
    let hub = repgeom_hub::Hub::new(HubConfig {
        refresh: true,
        ..s.config()
    });
    snapshot(&hub, "step1", &Files::Full).0.unwrap();
    insta::assert_snapshot!("refresh_requests", s.take_requests().join("\n"));
}

#[test]
fn same_blob_under_two_revisions_is_downloaded_once() {
    let s = Setup::new(vec![tiny_repo()]);
    snapshot(&s.client(), "step2", &Files::Full).0.unwrap();
    s.take_requests();
    snapshot(&s.client(), "step3", &Files::Full).0.unwrap();
    // step3 has the same files as step2: only the API calls, no file transfer.
    insta::assert_snapshot!("step3_after_step2_requests", s.take_requests().join("\n"));
}

#[test]
fn readout_needs_only_the_shard_with_the_readout() {
    let s = Setup::new(vec![tiny_repo()]);
    let (snap, _) = snapshot(&s.client(), "step1", &Files::Readout);
    let snap = snap.unwrap();
    insta::assert_snapshot!("step1_readout_files", snap.files.join("\n"));
    // Offline, a full snapshot then names the missing shard.
    let offline = repgeom_hub::Hub::new(HubConfig {
        offline: true,
        ..s.config()
    });
    let err = snapshot(&offline, "step1", &Files::Full).0.unwrap_err();
    assert!(matches!(err, Error::Offline { .. }), "{err:?}");
    insta::assert_snapshot!(
        "offline_missing_shard",
        crate::redact(&err.to_string()).replace(&*s.cache.path().to_string_lossy(), "<cache>")
    );
}

#[test]
fn offline_uses_the_cache_and_names_what_is_missing() {
    let s = Setup::new(vec![tiny_repo()]);
    let offline = repgeom_hub::Hub::new(HubConfig {
        offline: true,
        ..s.config()
    });
    let err = snapshot(&offline, "step1", &Files::Full).0.unwrap_err();
    insta::assert_snapshot!(
        "offline_empty_cache",
        err.to_string()
            .replace(&*s.cache.path().to_string_lossy(), "<cache>")
    );
    snapshot(&s.client(), "step1", &Files::Full).0.unwrap();
    s.take_requests();
    let snap = snapshot(&offline, "step1", &Files::Full).0.unwrap();
    assert_eq!(snap.files.len(), 5);
    assert_eq!(s.take_requests(), Vec::<String>::new());
    assert!(matches!(
        offline.refs("test-org/tiny-neox"),
        Err(Error::Offline { .. })
    ));
    assert_eq!(s.take_requests(), Vec::<String>::new());
}

/// One line per bad input: the error message the user sees.
#[test]
fn bad_inputs_name_model_revision_and_file() {
    let s = Setup::new(vec![tiny_repo(), {
        let mut g = repgeom_hub::test_server::TestRepo::new("test-org/gated").gated("secret");
        g.branch("main", vec![("config.json".into(), b"{}".to_vec())]);
        g
    }]);
    let hub = s.client();
    let mut lines = Vec::new();
    let mut show = |what: &str, r: repgeom_hub::Result<repgeom_hub::Snapshot>| {
        lines.push(format!(
            "{what}: {}",
            r.map(|_| "ok".to_string())
                .unwrap_or_else(|e| e.to_string())
                .replace(s.hub.endpoint(), "<endpoint>")
        ));
    };
    let noop = &mut |_: &repgeom_hub::DownloadProgress<'_>| {};
    show(
        "unknown revision",
        hub.snapshot("test-org/tiny-neox", "step999", &Files::Full, noop),
    );
    show(
        "unknown model",
        hub.snapshot("test-org/nope", "main", &Files::Full, noop),
    );
    show(
        "bad id",
        hub.snapshot("not an id", "main", &Files::Full, noop),
    );
    show(
        "missing file",
        hub.snapshot(
            "test-org/tiny-neox",
            "step1",
            &Files::Only(vec!["nope.json".into()]),
            noop,
        ),
    );
    show(
        "pytorch only",
        hub.snapshot("test-org/tiny-neox", "pt-only", &Files::Full, noop),
    );
    let only = |f: &str| Files::Only(vec![f.into()]);
    show(
        "gated, no token",
        hub.snapshot("test-org/gated", "main", &only("config.json"), noop),
    );
    let wrong = repgeom_hub::Hub::new(HubConfig {
        token: Some("wrong".into()),
        ..s.config()
    });
    show(
        "gated, wrong token",
        wrong.snapshot("test-org/gated", "main", &only("config.json"), noop),
    );
    let right = repgeom_hub::Hub::new(HubConfig {
        token: Some("secret".into()),
        ..s.config()
    });
    show(
        "gated, token",
        right.snapshot("test-org/gated", "main", &only("config.json"), noop),
    );
    insta::assert_snapshot!("bad_inputs", lines.join("\n"));
    // Nothing half-written: no blob, no partial file for the failures.
    let blobs = s.cache.path().join("models--test-org--gated/blobs");
    assert_eq!(crate::tree(&blobs).len(), 1, "{:?}", crate::tree(&blobs));
}

#[test]
fn dropped_connection_is_resumed_with_a_range_request() {
    let s = Setup::new(vec![tiny_repo()]);
    s.hub
        .drop_after("model-00001-of-00002.safetensors", 40_000, 1);
    let snap = snapshot(&s.client(), "step1", &Files::Full).0.unwrap();
    let reqs = s.take_requests();
    let cdn: Vec<&String> = reqs.iter().filter(|r| r.starts_with("GET /cdn/")).collect();
    insta::assert_snapshot!(
        "resume_requests",
        cdn.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let want = std::fs::read(
        root().join("fixtures/extract/gptneox_parallel/model-00001-of-00002.safetensors"),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(snap.dir.join("model-00001-of-00002.safetensors")).unwrap(),
        want
    );
}

#[test]
fn a_download_that_keeps_failing_leaves_only_a_partial_which_the_next_run_resumes() {
    let s = Setup::new(vec![tiny_repo()]);
    s.hub
        .drop_after("model-00001-of-00002.safetensors", 30_000, 100);
    let err = snapshot(&s.client(), "step1", &Files::Full).0.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Download {
                offset: 90_000,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    let blobs: Vec<String> = crate::tree(&s.model_dir().join("blobs"));
    // config, tokenizer and the index are in; the shard is only a partial.
    assert!(blobs.iter().any(|b| b == "<sha64>.incomplete"), "{blobs:?}");
    assert_eq!(blobs.len(), 4, "{blobs:?}");
    s.hub.drop_after("model-00001-of-00002.safetensors", 0, 0);
    s.take_requests();
    let snap = snapshot(&s.client(), "step1", &Files::Full).0.unwrap();
    let reqs = s.take_requests();
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("GET /cdn/<sha64> range=bytes=90000-")),
        "{reqs:?}"
    );
    let want = std::fs::read(
        root().join("fixtures/extract/gptneox_parallel/model-00001-of-00002.safetensors"),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(snap.dir.join("model-00001-of-00002.safetensors")).unwrap(),
        want
    );
    assert!(
        !crate::tree(&s.model_dir().join("blobs"))
            .iter()
            .any(|b| b.ends_with(".incomplete"))
    );
}

#[test]
fn a_corrupt_partial_is_deleted_never_promoted() {
    let s = Setup::new(vec![tiny_repo()]);
    let hub = s.client();
    let files = hub.list_files("test-org/tiny-neox", "step2").unwrap();
    let st = files
        .iter()
        .find(|f| f.path == "model.safetensors")
        .unwrap();
    let blobs = s.model_dir().join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    // A partial of full length with wrong bytes: nothing left to download, checksum fails.
    std::fs::write(
        blobs.join(format!("{}.incomplete", st.etag())),
        vec![0u8; st.size as usize],
    )
    .unwrap();
    let err = snapshot(&hub, "step2", &Files::Full).0.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(!blobs.join(st.etag()).exists());
    assert!(!blobs.join(format!("{}.incomplete", st.etag())).exists());
    // The next run downloads it cleanly.
    snapshot(&hub, "step2", &Files::Full).0.unwrap();
    assert!(blobs.join(st.etag()).is_file());
}

#[test]
fn refs_and_paginated_listing() {
    let s = Setup::new(vec![tiny_repo()]);
    let hub = s.client();
    let refs = hub.refs("test-org/tiny-neox").unwrap();
    let names: Vec<&str> = refs.branches.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["step1", "step2", "step3", "main", "pt-only"]);
    s.hub.set_page_size(2);
    let files = hub.list_files("test-org/tiny-neox", "step1").unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths.len(), 6, "{paths:?}");
    assert!(
        s.take_requests()
            .iter()
            .filter(|r| r.contains("/tree/"))
            .count()
            >= 3
    );
}

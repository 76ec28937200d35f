//! repgeom-hub against the test hub on 127.0.0.1: downloads, the cache layout, reuse,
//! offline mode, resume, the readout resolver, and the errors a user meets.

mod audit;
mod dataset;
mod download;
mod hostile;
mod readout;
mod retry;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use repgeom_hub::test_server::{TestHub, TestRepo};
use repgeom_hub::{DownloadProgress, Files, Hub, HubConfig, Result, RetryPolicy, Snapshot};

/// The workspace root (fixtures are addressed relative to it).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub(crate) fn files_of(dir: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join(dir)).unwrap() {
        let p = e.unwrap().path();
        out.push((
            p.file_name().unwrap().to_string_lossy().to_string(),
            std::fs::read(&p).unwrap(),
        ));
    }
    out
}

/// `test-org/tiny-neox`: `step1` (sharded GPT-NeoX), `step2` (single-file bf16 GPT-NeoX),
/// `step3` and `main` (the same weights as `step2`), `pt-only` (only `pytorch_model.bin`).
pub(crate) fn tiny_repo() -> TestRepo {
    let mut r = TestRepo::new("test-org/tiny-neox");
    r.branch("step1", files_of("fixtures/extract/gptneox_parallel"));
    r.branch("step2", files_of("fixtures/extract/gptneox_serial_bf16"));
    r.branch("step3", files_of("fixtures/extract/gptneox_serial_bf16"));
    r.branch("main", files_of("fixtures/extract/gptneox_serial_bf16"));
    let mut pt = files_of("fixtures/extract/gptneox_serial_bf16");
    pt.retain(|(p, _)| !p.ends_with(".safetensors"));
    pt.push(("pytorch_model.bin".into(), vec![7u8; 300]));
    r.branch("pt-only", pt);
    r
}

/// What a [`Recorder`]'s retry policy was asked to wait, and the notes it wrote.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    pub(crate) waits: Arc<Mutex<Vec<Duration>>>,
    pub(crate) notes: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// The default policy, but recording its waits instead of sleeping, and its notes
    /// instead of printing them.
    pub(crate) fn policy(&self) -> RetryPolicy {
        let (waits, notes) = (self.waits.clone(), self.notes.clone());
        RetryPolicy::default()
            .with_sleep(move |d| waits.lock().unwrap().push(d))
            .with_notes(move |n| notes.lock().unwrap().push(n.to_string()))
    }

    pub(crate) fn waits(&self) -> Vec<u64> {
        self.waits
            .lock()
            .unwrap()
            .iter()
            .map(|d| d.as_secs())
            .collect()
    }

    pub(crate) fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap().clone()
    }
}

/// A test hub, a fresh cache, and clients on them.
pub(crate) struct Setup {
    pub(crate) hub: TestHub,
    pub(crate) cache: tempfile::TempDir,
    pub(crate) retries: Recorder,
}

impl Setup {
    pub(crate) fn new(repos: Vec<TestRepo>) -> Self {
        Setup {
            hub: TestHub::start(repos),
            cache: tempfile::tempdir().unwrap(),
            retries: Recorder::default(),
        }
    }

    pub(crate) fn config(&self) -> HubConfig {
        HubConfig {
            endpoint: self.hub.endpoint().to_string(),
            cache: self.cache.path().to_path_buf(),
            token: None,
            offline: false,
            refresh: false,
            attempts: 3,
            retry: self.retries.policy(),
        }
    }

    pub(crate) fn client(&self) -> Hub {
        Hub::new(self.config())
    }

    /// The model's folder in the cache.
    pub(crate) fn model_dir(&self) -> PathBuf {
        self.cache.path().join("models--test-org--tiny-neox")
    }

    /// Requests since the last call, with the port and commit hashes replaced.
    pub(crate) fn take_requests(&self) -> Vec<String> {
        let reqs = self.hub.requests();
        self.hub.clear_requests();
        reqs.into_iter().map(|r| redact(&r)).collect()
    }
}

/// Replaces 40- and 64-hex-digit runs with `<sha40>`/`<sha64>`.
pub(crate) fn redact(s: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        match run.len() {
            40 => out.push_str("<sha40>"),
            64 => out.push_str("<sha64>"),
            _ => out.push_str(run),
        }
        run.clear();
    };
    for c in s.chars() {
        if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Takes a snapshot, recording the last progress report of each file.
pub(crate) fn snapshot(
    hub: &Hub,
    rev: &str,
    need: &Files,
) -> (Result<Snapshot>, Vec<(String, u64, u64)>) {
    let mut seen: Vec<(String, u64, u64)> = Vec::new();
    let res = hub.snapshot(
        "test-org/tiny-neox",
        rev,
        need,
        &mut |p: &DownloadProgress<'_>| match seen.iter_mut().find(|(f, _, _)| f == p.file) {
            Some(e) => (e.1, e.2) = (p.done, p.total),
            None => seen.push((p.file.to_string(), p.done, p.total)),
        },
    );
    (res, seen)
}

/// Every path under `dir`, relative, sorted, with symlink targets (`a -> b`).
pub(crate) fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for p in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push(redact(&format!("{rel} -> {}", t.display())));
            } else if meta.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(redact(&rel));
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    // Sorted once, as redacted (the directory order does not matter): the order of the real
    // names would follow the files' hashes, and a snapshot would change with a fixture's
    // bytes though the tree's shape did not.
    out.sort();
    out
}

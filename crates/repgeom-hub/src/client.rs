//! The hub client: revision resolution, file listing, and resumable downloads into the cache.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use ureq::Agent;
use ureq::http::Response;

use repgeom_io::RelPath;

use crate::cache::{
    RepoCache, RepoType, blob_name, file_name, is_commit, normalize_etag, ref_name,
};
use crate::retry::{Attempt, RetryPolicy};
use crate::{Error, Result};

/// The public hub, used when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Where the hub client looks and what it may do. [`HubConfig::from_env`] reads the same
/// environment variables as Python's `huggingface_hub`.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Base URL of the hub (`HF_ENDPOINT`), without a trailing slash.
    pub endpoint: String,
    /// The cache root (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub cache: PathBuf,
    /// Access token (`HF_TOKEN`), sent as `Authorization: Bearer` to the endpoint only.
    pub token: Option<String>,
    /// Cache only, no network (`HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// Ask the hub again where a branch or tag points even when the cache already has a
    /// complete snapshot for it (by default a cached ref is trusted: no request at all).
    pub refresh: bool,
    /// Download attempts per file, each resuming where the last one stopped (a connection
    /// dropped part-way through the body).
    pub attempts: usize,
    /// How every request retries rate limits, `503`s and connection failures
    /// ([`RetryPolicy::from_env`]: `REPGEOM_HUB_MAX_RETRY_WAIT`).
    pub retry: RetryPolicy,
}

impl HubConfig {
    /// The configuration the environment asks for.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let truthy = |k: &str| {
            var(k).is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            })
        };
        HubConfig {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
                .trim_end_matches('/')
                .to_string(),
            cache: default_cache_dir(),
            token: var("HF_TOKEN").or_else(|| {
                let home = var("HF_HOME").map(PathBuf::from).or_else(|| {
                    var("HOME").map(|h| PathBuf::from(h).join(".cache").join("huggingface"))
                })?;
                fs::read_to_string(home.join("token"))
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
            }),
            offline: truthy("HF_HUB_OFFLINE"),
            refresh: false,
            attempts: 5,
            retry: RetryPolicy::from_env(),
        }
    }
}

/// The cache root, as `huggingface_hub` computes it: `HF_HUB_CACHE`, else `HF_HOME/hub`,
/// else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
pub fn default_cache_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(c) = var("HF_HUB_CACHE") {
        return c;
    }
    if let Some(h) = var("HF_HOME") {
        return h.join("hub");
    }
    let base = var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("huggingface").join("hub")
}

/// Which files of a revision a run needs; everything else is never downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Files {
    /// `config.json`, `tokenizer.json` and every safetensors weight file: extraction.
    Full,
    /// `config.json`, `tokenizer.json` and only the weight shards that hold the readout
    /// (output or tied input embedding): PGA and metrics from existing activations.
    Readout,
    /// `config.json` and every safetensors weight file (no tokenizer): weight audits.
    Weights,
    /// Exactly these paths.
    Only(Vec<String>),
}

/// A revision's files in the cache, ready to open as a checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The model id.
    pub model: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// `snapshots/<commit>` in the cache.
    pub dir: PathBuf,
    /// The files the run needed, all present under `dir`.
    pub files: Vec<String>,
}

/// One progress report of a download.
#[derive(Debug, Clone, Copy)]
pub struct DownloadProgress<'a> {
    /// The file path inside the repository.
    pub file: &'a str,
    /// Bytes on disk so far (including a resumed partial file).
    pub done: u64,
    /// Bytes in total.
    pub total: u64,
}

/// A branch or tag of a model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GitRef {
    /// The branch or tag name (`main`, `step3000`).
    pub name: String,
    /// The commit it points to.
    #[serde(rename = "targetCommit")]
    pub commit: String,
}

/// A model's branches and tags, as `/api/models/{id}/refs` lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Refs {
    /// Branches.
    #[serde(default)]
    pub branches: Vec<GitRef>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<GitRef>,
}

/// One file of a revision, as `/api/models/{id}/tree/{rev}` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path inside the repository (checked: it stays inside the snapshot folder).
    pub path: RelPath,
    /// Size in bytes (of the real file, for LFS files).
    pub size: u64,
    /// The git blob id.
    pub oid: String,
    /// LFS pointer details, for large files.
    pub lfs: Option<LfsInfo>,
}

/// LFS details of a large file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LfsInfo {
    /// SHA-256 of the content: the file's ETag and blob name.
    pub oid: String,
    /// Size in bytes.
    pub size: u64,
}

impl RepoFile {
    /// The name its blob has in the cache: the LFS SHA-256, else the git blob id.
    pub fn etag(&self) -> &str {
        self.lfs.as_ref().map_or(&self.oid, |l| &l.oid)
    }
}

/// A listed file as the hub sends it, before its names are checked.
#[derive(Deserialize)]
struct RawFile {
    path: String,
    size: u64,
    oid: String,
    #[serde(default)]
    lfs: Option<LfsInfo>,
}

#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    file: Option<RawFile>,
}

/// The files of one page of a `/tree` listing (JSON), every name checked: a path that would
/// leave the snapshot folder, or a blob id that would leave `blobs/`, is an
/// [`Error::UnsafeName`] naming `origin`. Folders are skipped.
///
/// ```
/// let page = r#"[{"type": "file", "path": "config.json", "size": 2, "oid": "abc"},
///                {"type": "directory", "path": "data", "size": 0, "oid": "def"}]"#;
/// let files = repgeom_hub::parse_listing(page, "a test").unwrap();
/// assert_eq!(files.len(), 1);
/// let evil = r#"[{"type": "file", "path": "../x", "size": 2, "oid": "abc"}]"#;
/// assert!(repgeom_hub::parse_listing(evil, "a test").is_err());
/// ```
pub fn parse_listing(page: &str, origin: &str) -> Result<Vec<RepoFile>> {
    let entries: Vec<TreeEntry> = serde_json::from_str(page).map_err(|e| Error::Protocol {
        url: origin.into(),
        reason: format!("bad JSON: {e}"),
    })?;
    check_listing(entries, origin)
}

fn check_listing(entries: Vec<TreeEntry>, origin: &str) -> Result<Vec<RepoFile>> {
    entries
        .into_iter()
        .filter(|e| e.kind == "file")
        .filter_map(|e| e.file)
        .map(|raw| raw.check(&|| origin.to_string()))
        .collect()
}

impl RawFile {
    /// Checks the names the hub sent: the path (joined below the snapshot folder) and the
    /// blob id (a file name in `blobs/`).
    fn check(self, origin: &dyn Fn() -> String) -> Result<RepoFile> {
        let path = file_name(&self.path, origin)?;
        let file = RepoFile {
            path,
            size: self.size,
            oid: self.oid,
            lfs: self.lfs,
        };
        blob_name(file.etag(), || {
            format!("{}, the blob id of {}", origin(), file.path)
        })?;
        Ok(file)
    }
}

/// A client for one hub endpoint and one cache; see the crate docs.
#[derive(Debug)]
pub struct Hub {
    cfg: HubConfig,
    agent: Agent,
}

/// Checks that `id` looks like a hub model id: `name` or `org/name` of `[A-Za-z0-9._-]`.
pub fn check_id(id: &str) -> Result<()> {
    let ok_part = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    let parts: Vec<&str> = id.split('/').collect();
    if (1..=2).contains(&parts.len()) && parts.iter().all(|p| ok_part(p)) && !id.contains("--") {
        Ok(())
    } else {
        Err(Error::BadId { id: id.into() })
    }
}

/// Percent-encodes one path segment (RFC 3986 unreserved characters pass through).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn encode_path(p: &str) -> String {
    p.split('/').map(encode).collect::<Vec<_>>().join("/")
}

fn header(resp: &Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn body_text(resp: Response<ureq::Body>) -> String {
    let mut s = String::new();
    let _ = resp
        .into_body()
        .into_with_config()
        .limit(4096)
        .reader()
        .read_to_string(&mut s);
    s.chars().take(300).collect()
}

impl Hub {
    /// A client with this configuration.
    pub fn new(cfg: HubConfig) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(120)))
            .user_agent(concat!("repgeom-hub/", env!("CARGO_PKG_VERSION")))
            .build();
        Hub {
            cfg,
            agent: Agent::new_with_config(config),
        }
    }

    /// A client configured from the environment ([`HubConfig::from_env`]).
    pub fn from_env() -> Self {
        Hub::new(HubConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    /// The cache folder of model `id`.
    pub fn repo_cache(&self, id: &str) -> RepoCache {
        RepoCache::new(&self.cfg.cache, id)
    }

    /// One request, retried as [`HubConfig::retry`] says on `429`, `503`, refused
    /// connections and timeouts; `what` names it in retry notes and errors. Any other answer
    /// is returned as it came.
    fn request(
        &self,
        what: &str,
        method: &str,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<Response<ureq::Body>> {
        let policy = &self.cfg.retry;
        policy.run(what, url, || {
            match self.request_once(method, url, range_from) {
                Ok(resp) if matches!(resp.status().as_u16(), 429 | 503) => {
                    let status = resp.status();
                    let retry_after =
                        header(&resp, "retry-after").and_then(|v| policy.retry_after(&v));
                    Attempt::Retry {
                        last: format!(
                            "HTTP {} {}",
                            status.as_u16(),
                            status.canonical_reason().unwrap_or_default()
                        )
                        .trim_end()
                        .to_string(),
                        retry_after,
                    }
                }
                Ok(resp) => Attempt::Done(Ok(resp)),
                Err(e) if transient(&e) => Attempt::Retry {
                    last: e.to_string(),
                    retry_after: None,
                },
                Err(e) => Attempt::Done(Err(Error::Network {
                    url: url.into(),
                    reason: e.to_string(),
                })),
            }
        })
    }

    fn request_once(
        &self,
        method: &str,
        url: &str,
        range_from: Option<u64>,
    ) -> std::result::Result<Response<ureq::Body>, ureq::Error> {
        let to_endpoint = url.starts_with(&self.cfg.endpoint);
        let token = self.cfg.token.as_ref().filter(|_| to_endpoint);
        if method == "HEAD" {
            let mut r = self.agent.head(url).header("Accept-Encoding", "identity");
            if let Some(t) = token {
                r = r.header("Authorization", &format!("Bearer {t}"));
            }
            r.call()
        } else {
            let mut r = self.agent.get(url).header("Accept-Encoding", "identity");
            if let Some(t) = token {
                r = r.header("Authorization", &format!("Bearer {t}"));
            }
            if let Some(from) = range_from.filter(|&f| f > 0) {
                r = r.header("Range", &format!("bytes={from}-"));
            }
            r.call()
        }
    }

    fn get_json<T: for<'de> Deserialize<'de>>(
        &self,
        what: &str,
        url: &str,
    ) -> Result<(T, Option<String>)> {
        let resp = self.request(what, "GET", url, None)?;
        let status = resp.status().as_u16();
        if status != 200 {
            let code = header(&resp, "x-error-code").unwrap_or_default();
            return Err(Error::Http {
                url: url.into(),
                status,
                body: format!("{code} {}", body_text(resp)).trim().to_string(),
            });
        }
        let link = header(&resp, "link");
        let mut s = String::new();
        resp.into_body()
            .into_with_config()
            .limit(256 << 20)
            .reader()
            .read_to_string(&mut s)
            .map_err(|e| Error::Network {
                url: url.into(),
                reason: e.to_string(),
            })?;
        let v = serde_json::from_str(&s).map_err(|e| Error::Protocol {
            url: url.into(),
            reason: format!("bad JSON: {e}"),
        })?;
        Ok((v, link))
    }

    /// The "no such repository" error of a model or dataset.
    fn not_found(&self, kind: RepoType, id: &str) -> Error {
        match kind {
            RepoType::Model => Error::ModelNotFound {
                model: id.into(),
                endpoint: self.cfg.endpoint.clone(),
                token_set: self.cfg.token.is_some(),
            },
            RepoType::Dataset => Error::DatasetNotFound {
                dataset: id.into(),
                endpoint: self.cfg.endpoint.clone(),
                token_set: self.cfg.token.is_some(),
            },
        }
    }

    /// Maps the hub's "not found"/"unauthorized" answers of the API to named errors.
    fn api_error(&self, err: Error, kind: RepoType, id: &str, revision: &str) -> Error {
        match err {
            Error::Http { status: 401, .. } => self.not_found(kind, id),
            Error::Http {
                status: 404,
                ref body,
                ..
            } if body.contains("RevisionNotFound") || body.contains("Invalid rev id") => {
                Error::RevisionNotFound {
                    model: id.into(),
                    revision: revision.into(),
                    endpoint: self.cfg.endpoint.clone(),
                }
            }
            Error::Http { status: 404, .. } => self.not_found(kind, id),
            Error::Http { status: 403, .. } => Error::Unauthorized {
                model: id.into(),
                revision: revision.into(),
                status: 403,
                token_set: self.cfg.token.is_some(),
            },
            other => other,
        }
    }

    fn offline_guard(&self, kind: RepoType, id: &str, revision: &str, what: &str) -> Result<()> {
        if self.cfg.offline {
            return Err(Error::Offline {
                model: id.into(),
                revision: revision.into(),
                cache: RepoCache::of(kind, &self.cfg.cache, id).dir(),
                missing: vec![what.into()],
            });
        }
        Ok(())
    }

    /// The commit a branch, tag or commit hash names, asked of the hub
    /// (`/api/models/{id}/revision/{rev}`), and recorded in the cache's `refs/`.
    pub fn resolve(&self, id: &str, revision: &str) -> Result<String> {
        self.resolve_repo(RepoType::Model, id, revision)
    }

    /// [`Hub::resolve`] for a model or a dataset (`/api/datasets/{id}/revision/{rev}`).
    pub fn resolve_repo(&self, kind: RepoType, id: &str, revision: &str) -> Result<String> {
        check_id(id)?;
        revision_name(kind, id, revision)?;
        self.offline_guard(
            kind,
            id,
            revision,
            &format!("the commit of `{revision}` (network needed)"),
        )?;
        let url = format!(
            "{}/api/{}/{}/revision/{}",
            self.cfg.endpoint,
            kind.plural(),
            id,
            encode(revision)
        );
        #[derive(Deserialize)]
        struct Info {
            sha: String,
        }
        let (info, _) = self
            .get_json::<Info>(&format!("{id}: the commit of `{revision}`"), &url)
            .map_err(|e| self.api_error(e, kind, id, revision))?;
        if !is_commit(&info.sha) {
            return Err(Error::Protocol {
                url,
                reason: format!("`sha` is not a commit hash: {:?}", info.sha),
            });
        }
        RepoCache::of(kind, &self.cfg.cache, id).write_ref(revision, &info.sha)?;
        Ok(info.sha)
    }

    /// The model's branches and tags (`/api/models/{id}/refs`).
    pub fn refs(&self, id: &str) -> Result<Refs> {
        check_id(id)?;
        self.offline_guard(
            RepoType::Model,
            id,
            "*",
            "the list of branches (network needed)",
        )?;
        let url = format!("{}/api/models/{}/refs", self.cfg.endpoint, id);
        let (refs, _) = self
            .get_json::<Refs>(&format!("{id}: branches and tags"), &url)
            .map_err(|e| self.api_error(e, RepoType::Model, id, "*"))?;
        Ok(refs)
    }

    /// Every file of a revision (`/api/models/{id}/tree/{rev}?recursive=true`, following
    /// `Link: rel="next"` pages).
    pub fn list_files(&self, id: &str, revision: &str) -> Result<Vec<RepoFile>> {
        self.list_repo_files(RepoType::Model, id, revision)
    }

    /// [`Hub::list_files`] for a model or a dataset (`/api/datasets/{id}/tree/{rev}`).
    pub fn list_repo_files(
        &self,
        kind: RepoType,
        id: &str,
        revision: &str,
    ) -> Result<Vec<RepoFile>> {
        check_id(id)?;
        revision_name(kind, id, revision)?;
        self.offline_guard(kind, id, revision, "the list of files (network needed)")?;
        let mut url = format!(
            "{}/api/{}/{}/tree/{}?recursive=true",
            self.cfg.endpoint,
            kind.plural(),
            id,
            encode(revision)
        );
        let mut files = Vec::new();
        loop {
            let (entries, link) = self
                .get_json::<Vec<TreeEntry>>(&format!("{id}@{revision}: file list"), &url)
                .map_err(|e| self.api_error(e, kind, id, revision))?;
            let origin = format!("the file list of {} {id}@{revision}", kind.singular());
            files.extend(check_listing(entries, &origin)?);
            match link.as_deref().and_then(next_link) {
                Some(next) => url = next,
                None => break,
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// The files of `revision` that `need` names, in the cache (downloading what is
    /// missing), and the snapshot folder that holds them.
    ///
    /// With a commit hash, or a branch or tag already recorded in the cache, a complete
    /// snapshot is returned without any request (set [`HubConfig::refresh`] to re-resolve
    /// branches). Offline, a missing piece is an [`Error::Offline`] naming it.
    pub fn snapshot(
        &self,
        id: &str,
        revision: &str,
        need: &Files,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<Snapshot> {
        check_id(id)?;
        revision_name(RepoType::Model, id, revision)?;
        let cache = self.repo_cache(id);
        let cached = if is_commit(revision) || self.cfg.offline || !self.cfg.refresh {
            cache.commit_of(revision)
        } else {
            None
        };
        let snap = |commit: &str, files: Vec<String>| Snapshot {
            model: id.into(),
            revision: revision.into(),
            commit: commit.into(),
            dir: cache.snapshot_dir(commit),
            files,
        };
        if let Some(commit) = &cached {
            match local_files(&cache, commit, need) {
                Ok(files) => return Ok(snap(commit, files)),
                Err(missing) if self.cfg.offline => {
                    return Err(Error::Offline {
                        model: id.into(),
                        revision: revision.into(),
                        cache: cache.dir(),
                        missing,
                    });
                }
                Err(_) => {}
            }
        } else if self.cfg.offline {
            return Err(Error::Offline {
                model: id.into(),
                revision: revision.into(),
                cache: cache.dir(),
                missing: vec![format!(
                    "refs/{revision} (this revision was never downloaded)"
                )],
            });
        }
        let commit = match cached {
            Some(c) if is_commit(revision) => c,
            _ => self.resolve(id, revision)?,
        };
        let tree = self.list_files(id, &commit).map_err(|e| match e {
            Error::RevisionNotFound { .. } => Error::RevisionNotFound {
                model: id.into(),
                revision: revision.into(),
                endpoint: self.cfg.endpoint.clone(),
            },
            other => other,
        })?;
        let entry = |path: &str| tree.iter().find(|f| f.path == *path);
        let missing = |file: &str| Error::FileNotFound {
            model: id.into(),
            revision: revision.into(),
            file: file.into(),
        };
        let mut wanted: Vec<&RepoFile> = Vec::new();
        match need {
            Files::Only(list) => {
                for f in list {
                    wanted.push(entry(f).ok_or_else(|| missing(f))?);
                }
            }
            Files::Full | Files::Readout | Files::Weights => {
                let meta: &[&str] = match need {
                    Files::Weights => &["config.json"],
                    _ => &["config.json", "tokenizer.json"],
                };
                for f in meta {
                    wanted.push(entry(f).ok_or_else(|| missing(f))?);
                }
                if let Some(index) = entry("model.safetensors.index.json") {
                    let p = self.fetch(&cache, id, revision, &commit, index, progress)?;
                    wanted.push(index);
                    let origin = || format!("model {id}@{revision}: {}", index.path);
                    for shard in shards_needed(&p, need, &origin)? {
                        wanted.push(entry(&shard).ok_or_else(|| missing(&shard))?);
                    }
                } else if let Some(single) = entry("model.safetensors") {
                    wanted.push(single);
                } else {
                    let st: Vec<&RepoFile> = tree
                        .iter()
                        .filter(|f| !f.path.contains('/') && f.path.ends_with(".safetensors"))
                        .collect();
                    if st.is_empty() {
                        let pt: Vec<String> = tree
                            .iter()
                            .filter(|f| {
                                f.path.ends_with(".bin")
                                    || f.path.ends_with(".pt")
                                    || f.path.ends_with(".pth")
                            })
                            .map(|f| f.path.to_string())
                            .collect();
                        return Err(if pt.is_empty() {
                            Error::NoWeights {
                                model: id.into(),
                                revision: revision.into(),
                                files: tree.iter().map(|f| f.path.to_string()).collect(),
                            }
                        } else {
                            Error::NoSafetensors {
                                model: id.into(),
                                revision: revision.into(),
                                found: pt,
                            }
                        });
                    }
                    wanted.extend(st);
                }
            }
        }
        let mut names = Vec::new();
        for f in wanted {
            self.fetch(&cache, id, revision, &commit, f, progress)?;
            if !names.contains(&f.path.to_string()) {
                names.push(f.path.to_string());
            }
        }
        Ok(snap(&commit, names))
    }

    /// One file of a revision, in the cache; its path in the snapshot folder.
    pub fn download(
        &self,
        id: &str,
        revision: &str,
        file: &str,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<PathBuf> {
        let name = file_name(file, || "the file asked for".into())?;
        let s = self.snapshot(id, revision, &Files::Only(vec![file.into()]), progress)?;
        Ok(name.under(&s.dir))
    }

    /// Puts one listed file into the cache (blob + snapshot link); no request when its blob
    /// is already there.
    pub(crate) fn fetch(
        &self,
        cache: &RepoCache,
        id: &str,
        revision: &str,
        commit: &str,
        file: &RepoFile,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<PathBuf> {
        let blob_ok = |etag: &RelPath, size: u64| {
            fs::metadata(cache.blob(etag)).is_ok_and(|m| m.is_file() && m.len() == size)
        };
        let what = format!("{id}@{revision}: {}", file.path);
        let listed = blob_name(file.etag(), || format!("{what} (its listed blob id)"))?;
        let snap_file = cache.snapshot_file(commit, &file.path);
        if blob_ok(&listed, file.size) {
            if !snap_file.is_file() {
                cache.link(commit, &file.path, &listed)?;
            }
            return Ok(snap_file);
        }
        let url = format!(
            "{}/{}{}/resolve/{}/{}",
            self.cfg.endpoint,
            cache.kind.url_prefix(),
            id,
            commit,
            encode_path(&file.path)
        );
        let head = self.request(&what, "HEAD", &url, None)?;
        let status = head.status().as_u16();
        let not_found = || Error::FileNotFound {
            model: id.into(),
            revision: revision.into(),
            file: file.path.to_string(),
        };
        let location = match status {
            200 => url.clone(),
            301 | 302 | 303 | 307 | 308 => {
                let loc = header(&head, "location").ok_or_else(|| Error::Protocol {
                    url: url.clone(),
                    reason: "redirect without Location".into(),
                })?;
                if loc.starts_with('/') {
                    format!("{}{}", self.cfg.endpoint, loc)
                } else {
                    loc
                }
            }
            401 | 403 => {
                return Err(Error::Unauthorized {
                    model: id.into(),
                    revision: revision.into(),
                    status,
                    token_set: self.cfg.token.is_some(),
                });
            }
            404 => return Err(not_found()),
            _ => {
                return Err(Error::Http {
                    url,
                    status,
                    body: body_text(head),
                });
            }
        };
        let etag = header(&head, "x-linked-etag")
            .or_else(|| header(&head, "etag"))
            .map(|e| normalize_etag(&e))
            .unwrap_or_else(|| file.etag().to_string());
        let size = header(&head, "x-linked-size")
            .or_else(|| header(&head, "content-length"))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(file.size);
        if let Some(c) = header(&head, "x-repo-commit")
            && c != commit
        {
            return Err(Error::Protocol {
                url,
                reason: format!("X-Repo-Commit {c} is not the resolved commit {commit}"),
            });
        }
        let etag = blob_name(&etag, || format!("{what} (the ETag the hub sent)"))?;
        // One process downloads a blob at a time (other array tasks wait, then find it).
        let lock_path = cache.lock(&etag);
        if let Some(p) = lock_path.parent() {
            fs::create_dir_all(p).map_err(Error::io(p))?;
        }
        let lock = File::create(&lock_path).map_err(Error::io(&lock_path))?;
        lock.lock().map_err(Error::io(&lock_path))?;
        if !blob_ok(&etag, size) {
            self.download_blob(cache, id, revision, file, &location, &etag, size, progress)?;
        }
        drop(lock);
        cache.link(commit, &file.path, &etag)?;
        Ok(snap_file)
    }

    /// Downloads into `blobs/<etag>.incomplete`, resuming with `Range`, verifies size and
    /// (for SHA-256 ETags) checksum, then renames to `blobs/<etag>`.
    fn download_blob(
        &self,
        cache: &RepoCache,
        id: &str,
        revision: &str,
        file: &RepoFile,
        url: &str,
        etag: &RelPath,
        size: u64,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<()> {
        let blob = cache.blob(etag);
        let blobs = blob.parent().expect("blob has a parent");
        fs::create_dir_all(blobs).map_err(Error::io(blobs))?;
        let part = blobs.join(format!("{etag}.incomplete"));
        let mut reason = String::new();
        let mut attempts = 0;
        let len = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        while len(&part) < size && attempts < self.cfg.attempts.max(1) {
            attempts += 1;
            let have = len(&part);
            let what = if have > 0 {
                format!("{id}@{revision}: {} from byte {have}", file.path)
            } else {
                format!("{id}@{revision}: {}", file.path)
            };
            let resp = match self.request(&what, "GET", url, Some(have)) {
                Ok(r) => r,
                // The policy's bounds are spent: another attempt would only wait again.
                Err(e @ Error::RetriesExhausted { .. }) => return Err(e),
                Err(e) => {
                    reason = e.to_string();
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let mut out = match status {
                206 => OpenOptions::new().append(true).create(true).open(&part),
                200 => File::create(&part),
                416 => {
                    // The partial file is longer than the file: start again.
                    File::create(&part).map_err(Error::io(&part))?;
                    reason = "server refused the range (416)".into();
                    continue;
                }
                401 | 403 => {
                    return Err(Error::Unauthorized {
                        model: id.into(),
                        revision: revision.into(),
                        status,
                        token_set: self.cfg.token.is_some(),
                    });
                }
                _ => {
                    reason = format!("HTTP {status}: {}", body_text(resp));
                    continue;
                }
            }
            .map_err(Error::io(&part))?;
            let mut done = if status == 206 { have } else { 0 };
            progress(&DownloadProgress {
                file: &file.path,
                done,
                total: size,
            });
            let mut reader = resp.into_body().into_reader();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        // A write error (disk full) is not retried: it names the file and
                        // leaves the partial download for the next run.
                        out.write_all(&buf[..n]).map_err(Error::io(&part))?;
                        done += n as u64;
                        progress(&DownloadProgress {
                            file: &file.path,
                            done,
                            total: size,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        reason = e.to_string();
                        break;
                    }
                }
            }
            out.sync_all().map_err(Error::io(&part))?;
        }
        let have = len(&part);
        if have < size {
            return Err(Error::Download {
                model: id.into(),
                revision: revision.into(),
                file: file.path.to_string(),
                attempts,
                offset: have,
                size,
                reason: if reason.is_empty() {
                    "connection closed early".into()
                } else {
                    reason
                },
            });
        }
        let corrupt = |what: String| {
            let _ = fs::remove_file(&part);
            Error::Corrupt {
                model: id.into(),
                revision: revision.into(),
                file: file.path.to_string(),
                what,
            }
        };
        if have != size {
            return Err(corrupt(format!("size: got {have} bytes, expected {size}")));
        }
        if etag.len() == 64 && etag.bytes().all(|b| b.is_ascii_hexdigit()) {
            let got = sha256_file(&part)?;
            if !got.eq_ignore_ascii_case(etag) {
                return Err(corrupt(format!("SHA-256: got {got}, expected {etag}")));
            }
        }
        fs::rename(&part, &blob).map_err(Error::io(&blob))
    }
}

/// Whether a request error is worth another attempt: the connection failed, was refused or
/// reset, or timed out (as `huggingface_hub` retries `ConnectionError` and `Timeout`).
fn transient(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
    )
}

/// `<url>; rel="next"` from a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, rest) = part.split_once(';')?;
        rest.contains("rel=\"next\"").then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
    })
}

/// Hex SHA-256 of a file's bytes.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(Error::io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(Error::io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `weight_map` (tensor name → shard file) of a sharded checkpoint's
/// `model.safetensors.index.json`.
pub(crate) fn read_weight_map(index: &Path) -> Result<serde_json::Map<String, serde_json::Value>> {
    let text = fs::read_to_string(index).map_err(Error::io(index))?;
    let js: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Format {
        path: index.into(),
        reason: format!("bad JSON: {e}"),
    })?;
    if let serde_json::Value::Object(mut top) = js
        && let Some(serde_json::Value::Object(map)) = top.remove("weight_map")
    {
        return Ok(map);
    }
    Err(Error::Format {
        path: index.into(),
        reason: "no `weight_map` object".into(),
    })
}

/// Weight shards a run needs, from a downloaded `model.safetensors.index.json`; a shard name
/// that would leave the snapshot folder is refused, naming `origin()`.
fn shards_needed(index: &Path, need: &Files, origin: &dyn Fn() -> String) -> Result<Vec<RelPath>> {
    let map = &read_weight_map(index)?;
    let mut shards: Vec<String> = Vec::new();
    // The names the readout loader may take, from its architecture table (one list of them).
    let (untied_names, tied_names) = repgeom_io::readout_tensor_names();
    let untied = map.keys().any(|k| untied_names.contains(&k.as_str()));
    let pick = |name: &str| match need {
        Files::Readout if untied => untied_names.contains(&name),
        Files::Readout => tied_names.contains(&name),
        _ => true,
    };
    for (name, file) in map {
        if let Some(f) = file.as_str()
            && pick(name)
            && !shards.iter().any(|s| s == f)
        {
            shards.push(f.to_string());
        }
    }
    if shards.is_empty() {
        // No known readout name: take every shard and let the readout reader explain.
        for f in map.values().filter_map(|v| v.as_str()) {
            if !shards.iter().any(|s| s == f) {
                shards.push(f.to_string());
            }
        }
    }
    shards.sort();
    shards.iter().map(|s| file_name(s, origin)).collect()
}

/// Checks a revision before it names anything in the cache or a URL.
fn revision_name(kind: RepoType, id: &str, revision: &str) -> Result<()> {
    if is_commit(revision) {
        return Ok(());
    }
    ref_name(revision, || {
        format!("the revision asked of {} {id}", kind.singular())
    })
    .map(|_| ())
}

/// The files `need` asks for when the snapshot of `commit` already has them all; else the
/// missing ones.
fn local_files(cache: &RepoCache, commit: &str, need: &Files) -> Result<Vec<String>, Vec<String>> {
    let dir = cache.snapshot_dir(commit);
    let mut have = Vec::new();
    let mut missing = Vec::new();
    let mut want = |f: &str| match RelPath::new(f) {
        Ok(p) if cache.has_file(commit, &p) => have.push(f.to_string()),
        Ok(_) => missing.push(f.to_string()),
        Err(e) => missing.push(format!("{f:?} (refused: {e})")),
    };
    match need {
        Files::Only(list) => list.iter().for_each(|f| want(f)),
        Files::Full | Files::Readout | Files::Weights => {
            want("config.json");
            if *need != Files::Weights {
                want("tokenizer.json");
            }
            let index = dir.join("model.safetensors.index.json");
            if index.is_file() {
                want("model.safetensors.index.json");
                let origin = || format!("{}", index.display());
                match shards_needed(&index, need, &origin) {
                    Ok(shards) => shards.iter().for_each(|s| want(s)),
                    Err(e) => missing.push(e.to_string()),
                }
            } else if dir.join("model.safetensors").is_file() {
                want("model.safetensors");
            } else {
                missing.push(
                    "model.safetensors (or model.safetensors.index.json and its shards)".into(),
                );
            }
        }
    }
    if missing.is_empty() {
        Ok(have)
    } else {
        Err(missing)
    }
}

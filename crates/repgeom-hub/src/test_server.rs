//! A HuggingFace-Hub-compatible HTTP server on 127.0.0.1 for tests (feature `test-server`).
//!
//! It speaks the part of the hub's protocol that clients use to download models and
//! datasets (the same calls under `/api/datasets/` and `/datasets/{id}/resolve/`), as the
//! public hub does: `GET /api/models/{id}/revision/{rev}`, `GET /api/models/{id}/tree/{rev}`
//! (paginated with `Link: rel="next"`), `GET /api/models/{id}/refs`, and `HEAD`/`GET
//! /{id}/resolve/{rev}/{file}` with `X-Repo-Commit`, `ETag`, and for large (LFS) files a
//! `302` to a content URL with `X-Linked-Etag`/`X-Linked-Size`; content URLs honour
//! `Range: bytes=N-`. Errors carry the hub's `X-Error-Code` (`RepoNotFound`,
//! `RevisionNotFound`, `EntryNotFound`). Tests can require a token for a model (a gated
//! model), make the server drop the connection part-way through a file, make it answer
//! `429` (with `Retry-After`) or `503` the first N times a path is asked for
//! ([`TestHub::fail_first`]), and read the log of requests. It stops when dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::RepoType;
use crate::client::hex;

/// One model or dataset served by a [`TestHub`]: branches, each a commit with files.
#[derive(Debug, Clone, Default)]
pub struct TestRepo {
    id: String,
    kind: RepoType,
    /// Branch name -> commit.
    branches: Vec<(String, String)>,
    /// Commit -> files (path -> bytes).
    commits: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    token: Option<String>,
}

impl TestRepo {
    /// An empty model `id` (`org/name`).
    pub fn new(id: &str) -> Self {
        TestRepo {
            id: id.into(),
            ..Default::default()
        }
    }

    /// An empty dataset `id` (`org/name`), served under `/api/datasets/` and `/datasets/`.
    pub fn dataset(id: &str) -> Self {
        TestRepo {
            id: id.into(),
            kind: RepoType::Dataset,
            ..Default::default()
        }
    }

    /// Adds branch `name` holding `files` (path, bytes) as a new commit; returns the commit
    /// hash (derived from the model, branch and contents, so it is stable across runs).
    pub fn branch(&mut self, name: &str, files: Vec<(String, Vec<u8>)>) -> String {
        let mut h = Sha256::new();
        h.update(self.id.as_bytes());
        h.update([0]);
        h.update(name.as_bytes());
        let files: BTreeMap<String, Vec<u8>> = files.into_iter().collect();
        for (p, b) in &files {
            h.update([0]);
            h.update(p.as_bytes());
            h.update(Sha256::digest(b));
        }
        let commit = hex(&h.finalize())[..40].to_string();
        self.commits.insert(commit.clone(), files);
        self.branches.retain(|(b, _)| b != name);
        self.branches.push((name.into(), commit.clone()));
        commit
    }

    /// Adds branch `name` with every file of directory `dir` (not recursive).
    pub fn branch_from_dir(&mut self, name: &str, dir: &Path) -> std::io::Result<String> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_file() {
                let name = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .to_string();
                files.push((name, std::fs::read(&p)?));
            }
        }
        Ok(self.branch(name, files))
    }

    /// Makes the model gated: file downloads need `Authorization: Bearer <token>`.
    pub fn gated(mut self, token: &str) -> Self {
        self.token = Some(token.into());
        self
    }

    fn commit_of(&self, rev: &str) -> Option<&str> {
        if self.commits.contains_key(rev) {
            return self.commits.get_key_value(rev).map(|(k, _)| k.as_str());
        }
        self.branches
            .iter()
            .find(|(b, _)| b == rev)
            .map(|(_, c)| c.as_str())
    }
}

fn is_lfs(path: &str) -> bool {
    [".safetensors", ".bin", ".pt", ".npy", ".parquet"]
        .iter()
        .any(|x| path.ends_with(x))
}

/// The test server's blob id for a small file (a stand-in for git's SHA-1: 40 hex digits).
fn git_oid(bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex(&h.finalize())[..40].to_string()
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[derive(Default)]
struct State {
    repos: Vec<TestRepo>,
    log: Vec<String>,
    /// file path -> (bytes to send before dropping, times left).
    faults: BTreeMap<String, (usize, usize)>,
    /// Refusals, in the order given: the first whose pattern the path contains answers.
    refusals: Vec<Refusal>,
    /// How many requests the refusals answered.
    refused: usize,
    page_size: usize,
}

struct Refusal {
    pattern: String,
    status: u16,
    retry_after: Option<String>,
    left: usize,
}

/// A hub on 127.0.0.1 serving [`TestRepo`]s; see the module docs.
pub struct TestHub {
    endpoint: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHub")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl TestHub {
    /// Starts serving `repos` on a free port of 127.0.0.1.
    pub fn start(repos: Vec<TestRepo>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let endpoint = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(Mutex::new(State {
            repos,
            page_size: 1000,
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop, endpoint) = (state.clone(), stop.clone(), endpoint.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (state, endpoint) = (state.clone(), endpoint.clone());
                    std::thread::spawn(move || serve(conn, &state, &endpoint));
                }
            })
        };
        TestHub {
            endpoint,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`: the value for `HF_ENDPOINT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Every request so far, as `METHOD /path?query` (plus ` range=bytes=N-` for ranges).
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().expect("state").log.clone()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.state.lock().expect("state").log.clear();
    }

    /// The next `times` downloads of `file` (its path in the repository) send only `bytes`
    /// bytes of the body, then close the connection.
    pub fn drop_after(&self, file: &str, bytes: usize, times: usize) {
        self.state
            .lock()
            .expect("state")
            .faults
            .insert(file.into(), (bytes, times));
    }

    /// The next `times` requests that match `pattern` are answered `status` (`429` or `503`,
    /// say) with `Retry-After: <retry_after>` when given. A request matches when `pattern` is
    /// part of `METHOD /path` (the path decoded, without the query) followed, for a range
    /// request, by ` range=bytes=N-`: for instance `"/resolve/"` (the `HEAD` and `GET` of
    /// files), `"GET /cdn/"` (the content of large files), `"range="` (resumed downloads
    /// only), `"/api/"` (API calls). Rules are tried in the order given.
    pub fn fail_first(&self, pattern: &str, times: usize, status: u16, retry_after: Option<&str>) {
        self.state.lock().expect("state").refusals.push(Refusal {
            pattern: pattern.into(),
            status,
            retry_after: retry_after.map(str::to_string),
            left: times,
        });
    }

    /// How many requests [`TestHub::fail_first`] rules have refused so far.
    pub fn refused(&self) -> usize {
        self.state.lock().expect("state").refused
    }

    /// Entries per page of `/tree` listings (default 1000, as the hub).
    pub fn set_page_size(&self, n: usize) {
        self.state.lock().expect("state").page_size = n.max(1);
    }

    /// Adds or replaces a model or dataset while serving.
    pub fn put_repo(&self, repo: TestRepo) {
        let mut s = self.state.lock().expect("state");
        s.repos.retain(|r| r.id != repo.id || r.kind != repo.kind);
        s.repos.push(repo);
    }
}

impl Drop for TestHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close.
    cut: Option<usize>,
    /// The file whose fault `cut` consumes.
    fault: Option<String>,
}

impl Reply {
    fn new(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            cut: None,
            fault: None,
        }
    }
    fn json(v: serde_json::Value) -> Self {
        let mut r = Reply::new(200);
        r.headers
            .push(("Content-Type".into(), "application/json".into()));
        r.body = v.to_string().into_bytes();
        r
    }
    fn error(status: u16, code: &str, msg: &str) -> Self {
        let mut r = Reply::new(status);
        r.headers.push(("X-Error-Code".into(), code.into()));
        r.headers
            .push(("Content-Type".into(), "application/json".into()));
        r.body = serde_json::json!({ "error": msg }).to_string().into_bytes();
        r
    }
    fn header(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn serve(mut conn: TcpStream, state: &Mutex<State>, endpoint: &str) {
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_string(), t.to_string()),
        _ => return,
    };
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    {
        let mut s = state.lock().expect("state");
        let mut entry = format!("{method} {target}");
        if let Some(r) = &range {
            entry.push_str(&format!(" range={r}"));
        }
        s.log.push(entry);
    }
    let reply = refusal(state, &method, &target, range.as_deref())
        .unwrap_or_else(|| route(&method, &target, &headers, state, endpoint));
    if let Some(file) = &reply.fault {
        let mut s = state.lock().expect("state");
        if let Some((_, left)) = s.faults.get_mut(file) {
            *left = left.saturating_sub(1);
        }
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    let _ = conn.write_all(head.as_bytes());
    if method != "HEAD" {
        let n = reply.cut.unwrap_or(reply.body.len()).min(reply.body.len());
        let _ = conn.write_all(&reply.body[..n]);
    }
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Both);
}

/// The answer of the first [`TestHub::fail_first`] rule that this request matches, if any
/// (counting it down).
fn refusal(state: &Mutex<State>, method: &str, target: &str, range: Option<&str>) -> Option<Reply> {
    let path = decode(target.split_once('?').map_or(target, |(p, _)| p));
    let entry = match range {
        Some(r) => format!("{method} {path} range={r}"),
        None => format!("{method} {path}"),
    };
    let mut s = state.lock().expect("state");
    let r = s
        .refusals
        .iter_mut()
        .find(|r| r.left > 0 && entry.contains(&r.pattern))?;
    r.left -= 1;
    let mut reply = Reply::new(r.status);
    let retry_after = r.retry_after.clone();
    s.refused += 1;
    reply.body = b"refused by the test hub (fail_first)".to_vec();
    if let Some(v) = retry_after {
        reply = reply.header("Retry-After", v);
    }
    Some(reply)
}

fn route(
    method: &str,
    target: &str,
    headers: &BTreeMap<String, String>,
    state: &Mutex<State>,
    endpoint: &str,
) -> Reply {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = decode(path);
    let s = state.lock().expect("state");
    let find_repo =
        |id: &str, kind: RepoType| s.repos.iter().find(|r| r.id == id && r.kind == kind);
    if let Some(rest) = path.strip_prefix("/cdn/") {
        // Content by SHA-256, as the hub's CDN serves LFS files.
        for repo in &s.repos {
            for files in repo.commits.values() {
                for (p, b) in files {
                    if sha256(b) == rest {
                        return content(method, p, b, headers, &s);
                    }
                }
            }
        }
        return Reply::error(404, "EntryNotFound", "no such object");
    }
    let api = path
        .strip_prefix("/api/models/")
        .map(|r| (r, RepoType::Model))
        .or_else(|| {
            path.strip_prefix("/api/datasets/")
                .map(|r| (r, RepoType::Dataset))
        });
    if let Some((rest, kind)) = api {
        let Some((id, op, rev)) = split_api(rest) else {
            return Reply::error(404, "RepoNotFound", "Repository not found");
        };
        let Some(repo) = find_repo(&id, kind) else {
            return Reply::error(404, "RepoNotFound", "Repository not found");
        };
        if op == "refs" {
            let branches: Vec<serde_json::Value> = repo
                .branches
                .iter()
                .map(|(b, c)| serde_json::json!({"name": b, "ref": format!("refs/heads/{b}"), "targetCommit": c}))
                .collect();
            return Reply::json(
                serde_json::json!({"branches": branches, "tags": [], "converts": []}),
            );
        }
        let Some(commit) = repo.commit_of(&rev) else {
            return Reply::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
        };
        let files = &repo.commits[commit];
        match op.as_str() {
            "revision" => {
                let siblings: Vec<serde_json::Value> = files
                    .keys()
                    .map(|p| serde_json::json!({"rfilename": p}))
                    .collect();
                return Reply::json(
                    serde_json::json!({"id": id, "sha": commit, "siblings": siblings}),
                );
            }
            "tree" => {
                let cursor: usize = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("cursor="))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let all: Vec<serde_json::Value> = files
                    .iter()
                    .map(|(p, b)| {
                        let mut v = serde_json::json!({"type": "file", "oid": git_oid(b), "size": b.len(), "path": p});
                        if is_lfs(p) {
                            v["lfs"] = serde_json::json!({"oid": sha256(b), "size": b.len(), "pointerSize": 134});
                        }
                        v
                    })
                    .collect();
                let end = (cursor + s.page_size).min(all.len());
                let mut r =
                    Reply::json(serde_json::Value::Array(all[cursor.min(end)..end].to_vec()));
                if end < all.len() {
                    r = r.header(
                        "Link",
                        format!("<{endpoint}/api/{}/{id}/tree/{rev}?recursive=true&cursor={end}>; rel=\"next\"", kind.plural()),
                    );
                }
                return r;
            }
            _ => return Reply::error(404, "EntryNotFound", "unknown API"),
        }
    }
    // /{org}/{name}/resolve/{rev}/{file}, /datasets/{org}/{name}/resolve/{rev}/{file}
    let (files_path, kind) = match path.strip_prefix("/datasets/") {
        Some(rest) => (rest, RepoType::Dataset),
        None => (path.trim_start_matches('/'), RepoType::Model),
    };
    let segs: Vec<&str> = files_path.splitn(5, '/').collect();
    if segs.len() == 5 && segs[2] == "resolve" {
        let id = format!("{}/{}", segs[0], segs[1]);
        let Some(repo) = find_repo(&id, kind) else {
            return Reply::error(404, "RepoNotFound", "Repository not found");
        };
        if let Some(token) = &repo.token {
            match headers.get("authorization") {
                None => {
                    return Reply::error(401, "GatedRepo", "Access to this model is restricted");
                }
                Some(a) if a != &format!("Bearer {token}") => {
                    return Reply::error(403, "GatedRepo", "You have no access to this model");
                }
                _ => {}
            }
        }
        let Some(commit) = repo.commit_of(segs[3]) else {
            return Reply::error(
                404,
                "RevisionNotFound",
                &format!("Invalid rev id: {}", segs[3]),
            );
        };
        let file = segs[4];
        let Some(bytes) = repo.commits[commit].get(file) else {
            return Reply::error(404, "EntryNotFound", &format!("{file} does not exist"));
        };
        if is_lfs(file) {
            let sha = sha256(bytes);
            // The content lives on another host name, as the hub's CDN does: clients must not
            // follow this redirect for metadata (huggingface_hub follows same-host redirects)
            // nor send the token there.
            let cdn = endpoint.replace("127.0.0.1", "localhost");
            return Reply::new(302)
                .header("Location", format!("{cdn}/cdn/{sha}"))
                .header("X-Repo-Commit", commit)
                .header("X-Linked-Etag", format!("\"{sha}\""))
                .header("X-Linked-Size", bytes.len().to_string())
                .header("ETag", format!("\"{}\"", git_oid(bytes)));
        }
        let r = content(method, file, bytes, headers, &s);
        return r
            .header("X-Repo-Commit", commit)
            .header("ETag", format!("\"{}\"", git_oid(bytes)));
    }
    Reply::error(404, "EntryNotFound", "not found")
}

/// `org/name/op/rev` or `org/name/refs` → (id, op, rev).
fn split_api(rest: &str) -> Option<(String, String, String)> {
    let segs: Vec<&str> = rest.splitn(4, '/').collect();
    match segs.as_slice() {
        [org, name, "refs"] => Some((format!("{org}/{name}"), "refs".into(), String::new())),
        [org, name, op, rev] => Some((format!("{org}/{name}"), op.to_string(), rev.to_string())),
        _ => None,
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn content(
    method: &str,
    path: &str,
    bytes: &[u8],
    headers: &BTreeMap<String, String>,
    s: &State,
) -> Reply {
    let total = bytes.len();
    let start = headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split('-').next())
        .and_then(|n| n.parse::<usize>().ok());
    let mut r = match start {
        Some(st) if st >= total => {
            return Reply::new(416).header("Content-Range", format!("bytes */{total}"));
        }
        Some(st) => {
            let mut r = Reply::new(206)
                .header("Content-Range", format!("bytes {st}-{}/{total}", total - 1));
            r.body = bytes[st..].to_vec();
            r
        }
        None => {
            let mut r = Reply::new(200);
            r.body = bytes.to_vec();
            r
        }
    };
    r = r.header("Accept-Ranges", "bytes");
    if method == "GET" {
        // Faults are consumed by GETs only (`serve` counts them down).
        if let Some((cut, _)) = s.faults.get(path).filter(|(_, left)| *left > 0) {
            r.cut = Some(*cut);
            r.fault = Some(path.to_string());
        }
    }
    r
}

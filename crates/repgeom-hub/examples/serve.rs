//! The test hub as a program: serves checkpoint folders as hub repositories on 127.0.0.1, for
//! timing and trying `repgeom sweep` from hub ids without the network.
//!
//! ```sh
//! cargo run --release -p repgeom-hub --features test-server --example serve -- \
//!     org/name@step1000=path/to/checkpoint [org/other@main=dir ...]
//! ```
//!
//! Prints `HF_ENDPOINT=http://127.0.0.1:PORT` on its first line, then serves until killed.
//! Each folder's files (not recursive) are one commit of that branch. Not for production use.

use std::io::Write;

use repgeom_hub::test_server::{TestHub, TestRepo};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut repos: Vec<TestRepo> = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        let (repo, dir) = arg
            .split_once('=')
            .ok_or_else(|| format!("{arg:?}: expected org/name@revision=DIR"))?;
        let (id, rev) = repo.split_once('@').unwrap_or((repo, "main"));
        let i = match ids.iter().position(|r| r == id) {
            Some(i) => i,
            None => {
                ids.push(id.to_string());
                repos.push(TestRepo::new(id));
                repos.len() - 1
            }
        };
        repos[i].branch_from_dir(rev, std::path::Path::new(dir))?;
    }
    if repos.is_empty() {
        return Err("usage: serve org/name@revision=DIR ...".into());
    }
    let hub = TestHub::start(repos);
    let mut out = std::io::stdout();
    writeln!(out, "HF_ENDPOINT={}", hub.endpoint())?;
    out.flush()?;
    loop {
        std::thread::park();
    }
}

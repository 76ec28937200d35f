//! End-to-end tests of the `repgeom` binary: one `check` helper runs it and captures output.

mod demo;
mod errors;
mod extract;
mod hub;
mod merge;
mod metrics;
mod parity;
mod pga;
mod sweep;
mod threads;
mod trained;

use std::path::PathBuf;
use std::process::Command;

/// Output of one run of the binary.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `repgeom` with `args` from the workspace root, quietly, on 2 threads.
pub(crate) fn repgeom(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_repgeom"))
        .args(["--quiet", "--threads", "2"])
        .args(args)
        .current_dir(root())
        .output()
        .expect("run repgeom");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The workspace root (fixtures are addressed relative to it).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

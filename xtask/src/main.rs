//! `cargo xtask`: project automation.
//!
//! - `cargo xtask paper [--manifest M] [--out DIR] [--work DIR] [--threads N]`: run (or resume)
//!   the study sweep, merge it, and write the results table, every figure (SVG + PNG), the
//!   summary and `index.html` into DIR (default `target/paper`). Without `--manifest` it runs
//!   the built-in synthetic study. Part files live in the work directory (default
//!   `target/paper-work`), so an interrupted run resumes where it stopped.
//! - `cargo xtask paper --check`: regenerate the default study from scratch in a temporary
//!   directory and fail if the committed `docs/figures/` differ (SVGs, `results.csv`,
//!   `summary.md`).
//! - `cargo xtask bench [NAME...]`: `cargo bench --workspace` (or the named benches);
//!   `bench pair` adds the NumPy references of the pair metrics and the spectrum null;
//!   `bench pga` times the `repgeom pga` command end to end beside NumPy/SciPy;
//!   `bench threads` times `repgeom pga` and `repgeom extract` at 2 threads and every core (and,
//!   below 16 cores, 16 workers on them);
//!   `bench calibrate` times the calibrated aggregate over layer pairs beside
//!   calibrated-similarity; `bench streaming` measures the peak memory of streaming CKA
//!   (`repgeom extract --cka-pairs`) at 100 k and 1 M tokens.
//! - `cargo xtask gpu kernels`: compile the CUDA kernels with NVRTC for the oldest supported
//!   and the Hopper compute capability (no GPU needed; CI runs it); `gpu bundle`: the stripped
//!   release binary to carry to a GPU machine; `gpu check`: the GPU check (docs/gpu.md).
//! - `cargo xtask validate`: every check CI runs, cheapest first: `cargo fmt --check`,
//!   `cargo clippy --workspace --all-targets -D warnings`, `cargo test --workspace` (the
//!   README's test command) and `paper --check`; stops at the first failure.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool reports on its streams

mod bench;
mod gpu;
mod paper;
mod validate;

use std::path::{Path, PathBuf};

use anyhow::bail;

pub(crate) const USAGE: &str = "usage:
  cargo xtask paper [--manifest study.toml] [--out DIR (default target/paper)] [--work DIR (default target/paper-work)] [--threads N]
  cargo xtask paper --check        # fail if committed docs/figures/ are stale
  cargo xtask bench [BENCH...]     # cargo bench --workspace, or only the named benches
  cargo xtask bench scaling [--quick]  # PGA time and peak memory against N and d, with growth exponents
  cargo xtask bench extract        # extraction tokens/s (Pythia-70M shape) beside transformers
  cargo xtask bench calibrate [--perms K]  # calibrated max over 12x12 layer pairs beside calibrated-similarity
  cargo xtask bench streaming      # peak memory of streaming CKA over 100k and 1M tokens (512-wide)
  cargo xtask bench streaming 70m  # --spectra all over 1M tokens of a 70M-shaped model: time and memory against no accumulators and the point extraction
  cargo xtask bench pair           # pair metrics and the spectrum null beside their NumPy references
  cargo xtask bench pga            # `repgeom pga` end to end on the standard workload beside NumPy/SciPy
  cargo xtask bench threads        # `repgeom pga` (4 layers, d 4096) and extract (70M shape) at 2 threads, every core and 16 workers
  cargo xtask gpu kernels          # compile the CUDA kernels with NVRTC (no GPU needed)
  cargo xtask gpu bundle           # the stripped release binary, gzipped: target/gpu-bundle/repgeom.gz, to carry to a GPU machine
  cargo xtask gpu check            # bundle, then fixtures/gpu/check.py: parity and speed on this machine's GPU
  cargo xtask validate             # fmt --check, clippy -D warnings, cargo test --workspace, paper --check";

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("paper") => paper::paper(&args[1..]),
        Some("bench") => bench::bench(&args[1..]),
        Some("validate") => validate::validate(),
        Some("gpu") => gpu::gpu(&args[1..]),
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n{USAGE}"),
    }
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_owned()
}

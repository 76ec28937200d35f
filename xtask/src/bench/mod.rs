//! `cargo xtask bench`: the criterion benches, and the comparisons beside NumPy, SciPy and
//! transformers (one submodule each), with the helpers they share.

mod calibrate;
mod extract;
mod pair;
mod pga;
mod scaling;
mod streaming;
mod threads;

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::root;
use calibrate::bench_calibrate;
use extract::bench_extract;
use pair::bench_pair;
use pga::bench_pga;
use scaling::scaling;
use streaming::bench_streaming;
use threads::bench_threads;

pub(crate) fn bench(names: &[String]) -> anyhow::Result<()> {
    if names.first().map(String::as_str) == Some("scaling") {
        return scaling(&names[1..]);
    }
    if names.first().map(String::as_str) == Some("extract") {
        return bench_extract();
    }
    if names.first().map(String::as_str) == Some("calibrate") {
        return bench_calibrate(&names[1..]);
    }
    if names.first().map(String::as_str) == Some("streaming") {
        return bench_streaming(&names[1..]);
    }
    if names.first().map(String::as_str) == Some("pair") {
        return bench_pair();
    }
    if names.first().map(String::as_str) == Some("pga") {
        return bench_pga();
    }
    if names.first().map(String::as_str) == Some("threads") {
        return bench_threads();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(root()).args(["bench", "--workspace"]);
    for n in names {
        cmd.args(["--bench", n]);
    }
    let status = cmd.status().context("run cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    println!(
        "bench: criterion reports are in {}",
        root().join("target/criterion").display()
    );
    Ok(())
}

/// Cargo's target directory (`CARGO_TARGET_DIR` when it is set).
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The criterion directory.
pub(crate) fn criterion_dir() -> PathBuf {
    target_dir().join("criterion")
}

/// Builds example `name` of package `package` in release and returns its path.
pub(crate) fn build_release_example(package: &str, name: &str) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["build", "--release", "-p", package, "--example", name])
        .status()
        .with_context(|| format!("build the {name} example"))?;
    if !status.success() {
        bail!("building {name} failed ({status})");
    }
    Ok(target_dir().join("release/examples").join(name))
}

/// Builds the release CLI and returns its path.
pub(crate) fn build_release_cli() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["build", "--release", "-p", "repgeom-cli"])
        .status()
        .context("build the release CLI")?;
    if !status.success() {
        bail!("building repgeom failed ({status})");
    }
    Ok(target_dir().join("release/repgeom"))
}

//! `cargo xtask gpu kernels`: compiles repgeom's CUDA kernels with NVRTC (no GPU needed), for
//! the oldest compute capability they support and for the H100/H200's, and fails on any
//! error; CI runs it with NVRTC from PyPI.
//!
//! `cargo xtask gpu bundle`: the release `repgeom`, stripped, in `target/gpu-bundle/` (about
//! 50 MB), to carry to a GPU machine without a Rust toolchain, where
//! `python3 fixtures/gpu/check.py --bin target/gpu-bundle/repgeom` runs the GPU check.
//!
//! `cargo xtask gpu check`: both, then the check, on a machine with a GPU and Rust.

use anyhow::{Context, bail};

/// The architectures the kernels are checked for: the oldest CUDA 13 supports (Turing), and Hopper's.
const ARCHS: [&str; 2] = ["compute_75", "compute_90"];

pub(crate) fn gpu(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("kernels") => {
            for arch in ARCHS {
                let ptx = repgeom_cuda::compile_kernels(arch)
                    .with_context(|| format!("compiling repgeom's kernels for {arch}"))?;
                println!("{arch}: {} bytes of PTX", ptx.len());
            }
            Ok(())
        }
        Some("bundle") => bundle().map(|_| ()),
        Some("check") => {
            let bin = bundle()?;
            let status = std::process::Command::new("python3")
                .arg(crate::root().join("fixtures/gpu/check.py"))
                .arg("--bin")
                .arg(&bin)
                .args(&args[1..])
                .status()
                .context("running python3 fixtures/gpu/check.py")?;
            anyhow::ensure!(
                status.success(),
                "the GPU check failed (its table says where)"
            );
            Ok(())
        }
        _ => bail!("usage: cargo xtask gpu kernels | bundle | check [check.py's options]"),
    }
}

/// Builds the release binary and writes a stripped copy to `target/gpu-bundle/repgeom`.
fn bundle() -> anyhow::Result<std::path::PathBuf> {
    let root = crate::root();
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-p",
            "repgeom-cli",
            "--bin",
            "repgeom",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo build --release")?;
    anyhow::ensure!(status.success(), "cargo build --release failed");
    let dir = root.join("target/gpu-bundle");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join("repgeom");
    let status = std::process::Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(root.join("target/release/repgeom"))
        .status()
        .context("running strip (binutils)")?;
    anyhow::ensure!(status.success(), "strip failed");
    let size = std::fs::metadata(&out)?.len();
    println!("{} ({:.1} MB)", out.display(), size as f64 / 1e6);
    Ok(out)
}

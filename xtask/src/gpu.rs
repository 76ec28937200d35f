//! `cargo xtask gpu kernels`: compiles repgeom's CUDA kernels with NVRTC (no GPU needed), for
//! the oldest compute capability they support and for the H100/H200's, and fails on any
//! error or warning; CI runs it with NVRTC from PyPI.

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
        _ => bail!("usage: cargo xtask gpu kernels"),
    }
}

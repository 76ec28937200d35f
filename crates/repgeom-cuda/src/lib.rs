//! `repgeom-cuda` is where repgeom's computations choose their device: [`Device`] (`cpu`,
//! `cuda`, `cuda:N`), the one reading of `--device`, a manifest's `device` and Python's
//! `device=`, and [`Gpu`], an open CUDA device with repgeom's kernels, on which the PGA engine
//! runs its null draws ([`Gpu::pga_draws`]).
//!
//! Key design decision: nothing CUDA is needed to build or to run on a CPU. The CUDA driver,
//! NVRTC and cuBLAS are loaded when a device is first opened (cudarc's dynamic loading, each
//! library first looked for by full path in the usual toolkit folders, so that a toolkit
//! outside the loader's cache is found and a missing one is named with every place looked
//! in), and the kernels (`kernels.cu`) are compiled by NVRTC for the device at hand. Every
//! kernel computes what the CPU path computes, in the same precision: `f32` products, `f64`
//! row norms, the same sort keys, and Spearman's rho from exact integer sums
//! ([`repgeom_linalg::TieSums`]), so the numbers agree with the CPU's to the rounding of
//! the `f32` products.
//!
//! It also holds the operations of a decoder's forward pass on the device ([`Weight`],
//! [`Act`], `Gpu::linear`, `Gpu::attention`, `Gpu::norm`, `Gpu::loss`, `forward.cu`), which
//! `repgeom-extract` strings together per family.
//!
//! It is not a tensor library: it holds the few operations and kernels repgeom's engines
//! need, and no file I/O, no model structure and no statistics beyond the sums the CPU path
//! defines.
#![deny(missing_docs)]

mod assemble;
mod device;
mod error;
mod forward;
mod gpu;
mod libs;
mod pairs;
mod pga;

pub use assemble::{KernelResources, assemble_kernels};
pub use device::{DEVICE_NAMES, Device};
pub use error::{Error, Result};
pub use forward::{Act, ActFn, AttentionSpec, Heads, HostData, Rope, Uploads, Weight, loss_bytes};
pub use gpu::{
    Gpu, KERNELS, MIN_COMPUTE_CAPABILITY, OpTime, PROFILE_ENV, compile_kernels, profile_line,
};
pub use libs::CUDA_LIBRARIES;

#[cfg(test)]
mod tests;

//! Assembling the kernels for a real GPU architecture without a GPU: NVRTC compiles
//! [`KERNELS`](crate::KERNELS) with the flags the device path uses and runs ptxas on the PTX,
//! as the driver does when it loads the module on a device of that architecture, and ptxas's
//! report gives each kernel's registers, static shared memory and spills: what decides whether
//! a launch of a given size can run at all.
#![allow(unsafe_code)] // NVRTC's program API (create, compile, log, destroy); SAFETY notes below.

use std::ffi::CString;

use crate::gpu::{KERNELS, nvrtc_options};
use crate::libs::{self, NVRTC};
use crate::{Error, Result};

/// One kernel's resources as ptxas assembled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel's name (`extern "C"`, so as in the source).
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory per block, in bytes.
    pub shared_bytes: u64,
    /// Bytes spilled to local memory per thread (stores and loads).
    pub spill_bytes: u64,
}

/// Assembles [`KERNELS`](crate::KERNELS) for the real architecture `arch` (e.g. `sm_90`)
/// through NVRTC and ptxas, loading NVRTC first, and returns every kernel's resources. Needs
/// no GPU: CI checks with it that the kernels assemble for the oldest supported architecture
/// and for Hopper's, within the limits every launch repgeom makes fits in.
pub fn assemble_kernels(arch: &str) -> Result<Vec<KernelResources>> {
    libs::load(&NVRTC, 0)?;
    let fail = |log: String| Error::Compile {
        arch: arch.into(),
        log,
    };
    let source = CString::new(KERNELS).map_err(|e| fail(e.to_string()))?;
    let prog = cudarc::nvrtc::result::create_program(&source, Some(c"repgeom_kernels.cu"))
        .map_err(|e| fail(format!("{e:?}")))?;
    let mut options = nvrtc_options(arch);
    options.push("--ptxas-options=--verbose".into());
    // SAFETY: `prog` was created above from `source`, which outlives it, and is destroyed once,
    // after its last use below.
    let compiled = unsafe { cudarc::nvrtc::result::compile_program(prog, &options) };
    // SAFETY: as above.
    let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
        .map(|chars| {
            let bytes: Vec<u8> = chars
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    // SAFETY: as above; `prog` is not used after this.
    let _ = unsafe { cudarc::nvrtc::result::destroy_program(prog) };
    compiled.map_err(|_| fail(log.clone()))?;
    let kernels = ptxas_report(&log);
    if kernels.is_empty() {
        return Err(fail(format!("no kernel in ptxas's report:\n{log}")));
    }
    Ok(kernels)
}

/// The kernels of ptxas's `--verbose` report, in its order:
///
/// ```text
/// ptxas info    : Compiling entry function 'radix_scan' for 'sm_90'
/// ptxas info    : Function properties for radix_scan
/// ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem
/// ```
pub(crate) fn ptxas_report(log: &str) -> Vec<KernelResources> {
    // the number just before `unit` in `line` (e.g. "32 registers")
    let before = |line: &str, unit: &str| -> Option<u64> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            out.push(KernelResources {
                name: name.into(),
                registers: 0,
                shared_bytes: 0,
                spill_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("spill stores") {
                k.spill_bytes = before(line, "bytes spill stores").unwrap_or(0)
                    + before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains(" registers") {
                k.registers = before(line, "registers").unwrap_or(0) as u32;
                k.shared_bytes = before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

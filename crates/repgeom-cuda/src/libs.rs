//! Finding the CUDA libraries: by full path in the usual folders first (a toolkit's `lib64`
//! is often not in the loader's cache), then by name. A library loaded by full path is found
//! again by its name (the loader matches its soname), which is how cudarc's own loading by
//! name picks it up.
#![allow(unsafe_code)] // loading the CUDA libraries; see the SAFETY note below.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::{Error, Result};

/// A library repgeom loads: what it is and its file name (the CUDA 13 sonames).
pub(crate) struct Lib {
    pub(crate) what: &'static str,
    pub(crate) file: &'static str,
    pub(crate) hint: &'static str,
}

const TOOLKIT_HINT: &str = "Set CUDA_HOME to the CUDA 13 toolkit's folder (the one holding lib64), \
                            or add its lib64 to LD_LIBRARY_PATH.";

/// The driver (installed with the NVIDIA driver, not the toolkit).
pub(crate) const DRIVER: Lib = Lib {
    what: "CUDA driver",
    file: "libcuda.so.1",
    hint: "Is the NVIDIA driver installed, and is this a machine (or a job) with a GPU?",
};
/// NVRTC, which compiles the kernels.
pub(crate) const NVRTC: Lib = Lib {
    what: "NVRTC",
    file: "libnvrtc.so.13",
    hint: TOOLKIT_HINT,
};
/// cuBLASLt, which cuBLAS loads.
pub(crate) const CUBLASLT: Lib = Lib {
    what: "cuBLASLt",
    file: "libcublasLt.so.13",
    hint: TOOLKIT_HINT,
};
/// cuBLAS, for the matrix products.
pub(crate) const CUBLAS: Lib = Lib {
    what: "cuBLAS",
    file: "libcublas.so.13",
    hint: TOOLKIT_HINT,
};

/// The files of the libraries repgeom loads, the driver's first (its soname; the toolkit's
/// three are CUDA 13's): what a CUDA installation, or a stand-in for one, must provide.
pub const CUDA_LIBRARIES: [&str; 4] = [DRIVER.file, NVRTC.file, CUBLASLT.file, CUBLAS.file];

/// The folders of a toolkit installed at `root` that may hold its libraries.
const TOOLKIT_LIBS: [&str; 3] = ["lib64", "lib", "targets/x86_64-linux/lib"];

/// The folders looked in besides the loader's path, in order: `$CUDA_HOME`, `$CUDA_PATH`,
/// `$CUDA_ROOT` (their `lib64`, `lib` and `targets/x86_64-linux/lib`), `/usr/local/cuda`,
/// every CUDA 13 toolkit under `/usr/local` (`cuda-13.*`, the newest first), and the driver's
/// usual folders.
pub(crate) fn folders() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            let root = PathBuf::from(root);
            out.extend(TOOLKIT_LIBS.iter().map(|sub| root.join(sub)));
        }
    }
    let usr_local = std::path::Path::new("/usr/local");
    out.extend(
        TOOLKIT_LIBS
            .iter()
            .map(|sub| usr_local.join("cuda").join(sub)),
    );
    for root in toolkits(usr_local) {
        out.extend(TOOLKIT_LIBS.iter().map(|sub| root.join(sub)));
    }
    for dir in [
        "/opt/cuda/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
    ] {
        out.push(PathBuf::from(dir));
    }
    out
}

/// The CUDA 13 toolkits installed in `dir` (`cuda-13`, `cuda-13.0`, `cuda-13.1`, ...), the
/// newest first (by version, so `cuda-13.10` before `cuda-13.9`).
pub(crate) fn toolkits(dir: &std::path::Path) -> Vec<PathBuf> {
    let version = |name: &str| -> Option<Vec<u32>> {
        let v = name.strip_prefix("cuda-13")?;
        let mut parts = vec![13];
        if !v.is_empty() {
            for p in v.strip_prefix('.')?.split('.') {
                parts.push(p.parse().ok()?);
            }
        }
        Some(parts)
    };
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let v = version(e.file_name().to_str()?)?;
                    e.path().is_dir().then(|| (v, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).collect()
}

/// The files in `dir` whose name starts with `prefix` (not NVRTC's `.alt.` variants), the
/// highest version first (by name).
fn companions(dir: &std::path::Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.reverse();
    found
}

/// Libraries loaded so far; never unloaded (cudarc keeps its own handles to them).
static LOADED: Mutex<Vec<(&'static str, libloading::Library)>> = Mutex::new(Vec::new());

/// Loads `lib` (once per process), or says where it looked. NVRTC comes with its builtins
/// library, which it opens by name when it compiles: when NVRTC is found in a folder outside
/// the loader's path, the builtins beside it are loaded too, so that name finds them.
pub(crate) fn load(lib: &Lib, ordinal: usize) -> Result<()> {
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if loaded.iter().any(|(f, _)| *f == lib.file) {
        return Ok(());
    }
    let dirs = folders();
    let candidates = dirs
        .iter()
        .map(|d| d.join(lib.file))
        .filter(|p| p.exists())
        .chain(std::iter::once(PathBuf::from(lib.file)));
    for path in candidates {
        // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
        if let Ok(handle) = unsafe { libloading::Library::new(&path) } {
            loaded.push((lib.file, handle));
            if lib.file == NVRTC.file
                && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            {
                for builtins in companions(dir, "libnvrtc-builtins.so.13") {
                    // SAFETY: as above.
                    if let Ok(handle) = unsafe { libloading::Library::new(&builtins) } {
                        loaded.push(("libnvrtc-builtins", handle));
                        break;
                    }
                }
            }
            return Ok(());
        }
    }
    Err(Error::LibraryNotFound {
        ordinal,
        what: lib.what,
        file: lib.file,
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        hint: lib.hint,
    })
}

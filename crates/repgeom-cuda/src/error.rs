//! The crate's one error type.

/// What can go wrong choosing, opening or using a device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A device name that is not one of [`crate::DEVICE_NAMES`].
    #[error("unknown device `{value}`: expected {}", crate::DEVICE_NAMES)]
    UnknownDevice {
        /// The name given.
        value: String,
    },
    /// A CUDA library that could not be loaded.
    #[error(
        "device cuda:{ordinal}: the {what} library ({file}) could not be loaded; looked for it \
         in the loader's path (LD_LIBRARY_PATH and the ldconfig cache) and in {searched}. {hint}"
    )]
    LibraryNotFound {
        /// The device asked for.
        ordinal: usize,
        /// What the library is (`CUDA driver`, `NVRTC`, `cuBLAS`).
        what: &'static str,
        /// Its file name.
        file: &'static str,
        /// The folders looked in, besides the loader's path.
        searched: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// A device index past the devices the driver sees.
    #[error(
        "device cuda:{ordinal}: the CUDA driver sees {count} device(s){}",
        if *count == 0 { String::new() } else { format!(" (cuda:0 to cuda:{})", count - 1) }
    )]
    NoSuchDevice {
        /// The device asked for.
        ordinal: usize,
        /// How many devices the driver sees.
        count: usize,
    },
    /// A device too old for repgeom's kernels.
    #[error(
        "device cuda:{ordinal} ({name}) has compute capability {major}.{minor}; repgeom's CUDA \
         kernels need {}.{} or newer",
        crate::MIN_COMPUTE_CAPABILITY.0, crate::MIN_COMPUTE_CAPABILITY.1
    )]
    TooOld {
        /// The device.
        ordinal: usize,
        /// Its name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },
    /// A CUDA driver call that failed.
    #[error("device cuda:{ordinal}: {step} failed: {reason}")]
    Driver {
        /// The device.
        ordinal: usize,
        /// What was being done.
        step: String,
        /// The driver's error.
        reason: String,
    },
    /// NVRTC refused repgeom's kernels.
    #[error("NVRTC could not compile repgeom's kernels for {arch}: {log}")]
    Compile {
        /// The target architecture (`compute_90`).
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// A cuBLAS call that failed.
    #[error("device cuda:{ordinal}: cuBLAS {step} failed: {reason}")]
    Blas {
        /// The device.
        ordinal: usize,
        /// The call.
        step: &'static str,
        /// cuBLAS's status.
        reason: String,
    },
    /// Work that does not fit in the device's free memory.
    #[error(
        "{what}: needs {needed} bytes of device memory for even one draw, and device \
         cuda:{ordinal} has {free} bytes free; {hint}"
    )]
    OutOfMemory {
        /// The work.
        what: String,
        /// The device.
        ordinal: usize,
        /// Bytes needed.
        needed: u64,
        /// Bytes free.
        free: u64,
        /// What to do about it.
        hint: &'static str,
    },
    /// Input the engine cannot take.
    #[error("{what}: {reason}")]
    Input {
        /// The input.
        what: String,
        /// Why not.
        reason: String,
    },
    /// A check shared with the CPU path (non-finite or zero rows, constant distances).
    #[error(transparent)]
    Linalg(#[from] repgeom_linalg::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! An open CUDA device: its context, stream, cuBLAS handle and repgeom's compiled kernels.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use cudarc::nvrtc::CompileOptions;

use crate::libs::{self, CUBLAS, CUBLASLT, DRIVER, NVRTC};
use crate::{Error, Result};

/// The CUDA source of repgeom's kernels, compiled at run time by NVRTC: the PGA engine's
/// (`kernels.cu`), then the forward pass's (`forward.cu`).
pub const KERNELS: &str = concat!(include_str!("kernels.cu"), include_str!("forward.cu"));

/// The oldest compute capability the kernels run on: the oldest CUDA 13 compiles for.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (7, 5);

/// The kernels' entry points, in `kernels.cu` and `forward.cu` (every one `extern "C"`, so
/// NVRTC keeps these names).
const FUNCTIONS: [&str; 25] = [
    "row_sq_norms",
    "scale_rows",
    "pair_words",
    "radix_hist",
    "radix_scan",
    "radix_scatter",
    "tie_bounds",
    "tie_carry",
    "tie_sums",
    "embed_rows",
    "add_positions",
    "scale_all",
    "add_bias",
    "combine",
    "clamp_all",
    "activate",
    "narrow_to",
    "norm_rows",
    "gather_heads",
    "masked_softmax",
    "merge_heads",
    "loss_part",
    "zero_diagonal",
    "permute_sym",
    "sum_chunks",
];

/// NVRTC's flags for [`KERNELS`]: no contracted multiply-adds, IEEE square roots and
/// divisions, denormals kept, so that each kernel rounds as the CPU path does.
pub(crate) const NVRTC_FLAGS: [&str; 4] = [
    "--fmad=false",
    "--prec-sqrt=true",
    "--prec-div=true",
    "--ftz=false",
];

/// NVRTC's options for [`KERNELS`] at `arch`: [`NVRTC_FLAGS`] and the architecture.
pub(crate) fn nvrtc_options(arch: &str) -> Vec<String> {
    let mut options: Vec<String> = NVRTC_FLAGS.iter().map(|f| f.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    options
}

/// Compiles [`KERNELS`] to PTX for `arch` (e.g. `compute_90`) with NVRTC, loading NVRTC first.
/// Needs no GPU: CI runs it to check that the kernels compile.
pub fn compile_kernels(arch: &str) -> Result<String> {
    libs::load(&NVRTC, 0)?;
    let opts = CompileOptions {
        options: nvrtc_options(arch),
        name: Some("repgeom_kernels.cu".into()),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNELS, opts).map_err(|e| Error::Compile {
        arch: arch.into(),
        log: match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        },
    })?;
    Ok(ptx.to_src())
}

/// A launch of `grid` blocks (x, y) of `threads` threads, no dynamic shared memory: every
/// kernel of `kernels.cu` and `forward.cu` is launched so.
pub(crate) fn launch_config(grid: (u32, u32), threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.0, grid.1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// An open CUDA device with repgeom's kernels. Opened once per device per process
/// ([`crate::Device::open`]) and shared; work on it is serialised by an internal lock.
pub struct Gpu {
    ordinal: usize,
    name: String,
    capability: (i32, i32),
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) inner: Mutex<Inner>,
    /// Device time per operation name, when [`PROFILE_ENV`] is set ([`Gpu::profiled`]).
    profile: Option<Mutex<BTreeMap<&'static str, OpTime>>>,
}

/// The environment variable that turns on [`Gpu::profiled`]'s accounting of device time per
/// operation (any value), read when a device is opened.
pub const PROFILE_ENV: &str = "REPGEOM_CUDA_PROFILE";

/// The device time spent in one kind of operation ([`Gpu::profile`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpTime {
    /// Calls.
    pub calls: u64,
    /// Wall time of the calls in seconds ([`Gpu::profiled`]: each between two
    /// synchronisations of the stream).
    pub seconds: f64,
}

/// What one piece of work at a time uses.
pub(crate) struct Inner {
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) blas: CudaBlas,
    pub(crate) functions: Vec<CudaFunction>,
}

impl Inner {
    /// The kernel named `name` (one of [`FUNCTIONS`]).
    pub(crate) fn function(&self, name: &str) -> &CudaFunction {
        let i = FUNCTIONS
            .iter()
            .position(|f| *f == name)
            .expect("a kernel of KERNELS");
        &self.functions[i]
    }
}

static OPEN: Mutex<Vec<Arc<Gpu>>> = Mutex::new(Vec::new());

impl Gpu {
    /// Opens CUDA device `ordinal` (once per process): loads the driver, NVRTC and cuBLAS,
    /// checks the index and the compute capability, and compiles the kernels for it.
    pub fn open(ordinal: usize) -> Result<Arc<Self>> {
        let mut open = OPEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(g) = open.iter().find(|g| g.ordinal == ordinal) {
            return Ok(g.clone());
        }
        libs::load(&DRIVER, ordinal)?;
        let driver = |step: &str, e| driver_error(ordinal, step, e);
        cudarc::driver::result::init().map_err(|e| driver("initialising the CUDA driver", e))?;
        let count = CudaContext::device_count().map_err(|e| driver("counting devices", e))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(Error::NoSuchDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver("creating a context", e))?;
        let name = ctx.name().unwrap_or_else(|_| "unnamed".into());
        let capability = ctx
            .compute_capability()
            .map_err(|e| driver("reading the compute capability", e))?;
        if capability < MIN_COMPUTE_CAPABILITY {
            return Err(Error::TooOld {
                ordinal,
                name,
                major: capability.0,
                minor: capability.1,
            });
        }
        libs::load(&CUBLASLT, ordinal)?;
        libs::load(&CUBLAS, ordinal)?;
        let ptx = compile_kernels(&format!("compute_{}{}", capability.0, capability.1))?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| driver("loading the kernels", e))?;
        let functions = FUNCTIONS
            .iter()
            .map(|f| {
                module
                    .load_function(f)
                    .map_err(|e| driver("finding a kernel", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(|e| Error::Blas {
            ordinal,
            step: "initialisation",
            reason: format!("{e:?}"),
        })?;
        let gpu = Arc::new(Self {
            ordinal,
            name,
            capability,
            ctx,
            inner: Mutex::new(Inner {
                stream,
                blas,
                functions,
            }),
            profile: std::env::var_os(PROFILE_ENV).map(|_| Mutex::new(BTreeMap::new())),
        });
        open.push(gpu.clone());
        Ok(gpu)
    }

    /// The device's index.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's compute capability.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| self.driver("reading free memory", e))?;
        Ok((free as u64, total as u64))
    }

    /// The device's stream, cuBLAS handle and kernels for one piece of work (others wait),
    /// with the context made current on this thread (a rayon worker, in a study, may not have
    /// it yet; cuBLAS calls need it).
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.driver("making the context current", e))?;
        Ok(inner)
    }

    /// [`Self::lock`] and the device's free memory read under it: no work on another thread
    /// can take that memory before the caller sizes its own.
    pub(crate) fn lock_with_free(&self) -> Result<(std::sync::MutexGuard<'_, Inner>, u64)> {
        let inner = self.lock()?;
        let (free, _) = self.memory()?;
        Ok((inner, free))
    }

    /// `f()`, and with [`PROFILE_ENV`] set, its device time added to `name`'s: the stream is
    /// synchronised before and after, so the time is the operation's own (at the price of the
    /// overlap of launches and work, which the profile gives up). Without it, just `f()`.
    pub fn profiled<R>(&self, name: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        if self.profile.is_none() {
            return f();
        }
        let sync = || -> Result<()> {
            self.lock()?
                .stream
                .synchronize()
                .map_err(|e| self.driver("waiting for the device", e))
        };
        sync()?;
        self.timed(name, || {
            let r = f()?;
            sync()?;
            Ok(r)
        })
    }

    /// `f()`, and with [`PROFILE_ENV`] set, its wall time added to `name`'s, without
    /// synchronising: for a step on the host, or a device call whose results come back to
    /// the host (so its wall time includes the device's work). Without it, just `f()`.
    pub fn timed<R>(&self, name: &'static str, f: impl FnOnce() -> R) -> R {
        let Some(profile) = &self.profile else {
            return f();
        };
        let t = std::time::Instant::now();
        let r = f();
        let secs = t.elapsed().as_secs_f64();
        let mut p = profile
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let op = p.entry(name).or_default();
        op.calls += 1;
        op.seconds += secs;
        r
    }

    /// The time per operation accounted by [`Gpu::profiled`] and [`Gpu::timed`] so far, the
    /// longest first; `None` unless [`PROFILE_ENV`] was set when the device was opened.
    pub fn profile(&self) -> Option<Vec<(&'static str, OpTime)>> {
        let p = self
            .profile
            .as_ref()?
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<_> = p.iter().map(|(k, t)| (*k, *t)).collect();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds).then(a.0.cmp(b.0)));
        Some(v)
    }

    pub(crate) fn driver(&self, step: &str, e: cudarc::driver::DriverError) -> Error {
        driver_error(self.ordinal, step, e)
    }

    pub(crate) fn blas(&self, step: &'static str, e: cudarc::cublas::result::CublasError) -> Error {
        Error::Blas {
            ordinal: self.ordinal,
            step,
            reason: format!("{e:?}"),
        }
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("capability", &self.capability)
            .finish()
    }
}

/// One line of [`Gpu::profile`]'s figures, the longest first, as `repgeom extract` and
/// `repgeom pga` print it: each operation's seconds, calls and share of the total.
///
/// ```
/// use repgeom_cuda::{OpTime, profile_line};
/// let ops = [("linear", OpTime { calls: 96, seconds: 0.75 }),
///            ("attention", OpTime { calls: 24, seconds: 0.25 })];
/// assert_eq!(
///     profile_line(&ops),
///     "profile (REPGEOM_CUDA_PROFILE): 1.000 s; linear 0.750 s (96 calls, 75.0 %), \
///      attention 0.250 s (24 calls, 25.0 %)"
/// );
/// ```
pub fn profile_line(ops: &[(&str, OpTime)]) -> String {
    let total: f64 = ops.iter().map(|(_, t)| t.seconds).sum();
    let parts: Vec<String> = ops
        .iter()
        .map(|(name, t)| {
            let share = if total > 0.0 {
                100.0 * t.seconds / total
            } else {
                0.0
            };
            format!(
                "{name} {:.3} s ({} calls, {share:.1} %)",
                t.seconds, t.calls
            )
        })
        .collect();
    format!(
        "profile ({PROFILE_ENV}): {total:.3} s; {}",
        parts.join(", ")
    )
}

/// A failed driver call on device `ordinal`, with the driver's description of the error.
fn driver_error(ordinal: usize, step: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Driver {
        ordinal,
        step: step.into(),
        reason: e
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{e:?}")),
    }
}

//! The operations of a decoder's forward pass on the device, for `repgeom-extract`'s device
//! path: weights uploaded once in the precision asked for ([`Weight`]), activations in `f32`
//! ([`Act`], row-major `[rows, cols]`), matrix products by cuBLAS (`f32`, or bf16/f16 inputs
//! with `f32` accumulation and output), and the elementwise and per-row steps by the kernels of
//! `forward.cu`, each with the CPU path's formula. Which operations run in which order for a
//! family is `repgeom-extract`'s business, not this module's.
#![allow(unsafe_code)] // kernel launches and cuBLAS calls are unsafe; each has its SAFETY note.

use std::ffi::c_void;

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PushKernelArg};

use crate::gpu::{Inner, launch_config as cfg};
use crate::{Error, Gpu, Result};

/// Threads of the per-row kernels (`ROW_THREADS` in `forward.cu`).
const ROW_THREADS: u32 = 256;
/// Threads of the elementwise kernels.
const THREADS: u32 = 256;
/// At most this many bytes of logits at once in [`Gpu::loss`].
const LOSS_BYTES: u64 = 1 << 30;

/// The rows whose logits [`Gpu::loss`] computes at once for a vocabulary of `vocab`: as many
/// as fit in 1 GiB, at least one.
fn loss_rows_at_once(vocab: u64) -> u64 {
    (LOSS_BYTES / (4 * vocab.max(1))).max(1)
}

/// The most device memory [`Gpu::loss`] allocates beside its inputs for `rows` rows of width
/// `d` and a vocabulary of `vocab`: per row computed at once, its logits, the row picked (and
/// its copy narrowed to half precision), its target and three `f64` sums. A batch's memory
/// estimate adds it (`repgeom_extract`'s device check), so that a small model's loss is not
/// counted at the 1 GiB a large vocabulary takes.
///
/// ```
/// // Pythia's vocabulary: 5,242 rows at once, 1 GiB of logits and their rows
/// let big = repgeom_cuda::loss_bytes(1 << 20, 2048, 50_304);
/// assert!(big > 1 << 30 && big < (1 << 30) + (1 << 26));
/// // 256 rows of a 1,000-token vocabulary: about 1 MB
/// assert_eq!(repgeom_cuda::loss_bytes(256, 64, 1000), 256 * (4 * 1000 + 6 * 64 + 28));
/// ```
pub fn loss_bytes(rows: u64, d: u64, vocab: u64) -> u64 {
    rows.min(loss_rows_at_once(vocab)) * (4 * vocab + 6 * d + 4 + 24)
}

/// The precision of a weight on the host, as stored in its checkpoint.
#[derive(Clone, Copy, Debug)]
pub enum HostData<'a> {
    /// `f32` values.
    F32(&'a [f32]),
    /// bf16 values, as their bits.
    Bf16(&'a [u16]),
    /// IEEE half values, as their bits.
    F16(&'a [u16]),
}

impl HostData<'_> {
    fn len(&self) -> usize {
        match self {
            HostData::F32(x) => x.len(),
            HostData::Bf16(x) | HostData::F16(x) => x.len(),
        }
    }
}

/// How a weight is held on the device.
enum Store {
    F32(CudaSlice<f32>),
    /// bf16 (`true`) or f16 (`false`) bits.
    Half(CudaSlice<u16>, bool),
}

/// A weight (a matrix row-major `[out, in]`, or a vector) on the device.
pub struct Weight {
    store: Store,
    len: usize,
}

impl Weight {
    /// The number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes on the device.
    pub fn bytes(&self) -> u64 {
        self.len as u64
            * if matches!(self.store, Store::F32(_)) {
                4
            } else {
                2
            }
    }

    /// `forward.cu`'s code of the weight's dtype (`DT_F32`, `DT_BF16`, `DT_F16`).
    fn code(&self) -> i32 {
        match self.store {
            Store::F32(_) => 0,
            Store::Half(_, true) => 1,
            Store::Half(_, false) => 2,
        }
    }
}

/// `f32` activations on the device, row-major `[rows, cols]`.
pub struct Act {
    data: CudaSlice<f32>,
    rows: usize,
    cols: usize,
}

impl Act {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// The device held for a model's uploads ([`Gpu::uploads`]): the one way weights reach it.
pub struct Uploads<'a> {
    gpu: &'a Gpu,
    inner: std::sync::MutexGuard<'a, Inner>,
    free: u64,
}

impl Uploads<'_> {
    /// The device's free memory in bytes when the hold was taken.
    pub fn free(&self) -> u64 {
        self.free
    }

    /// Uploads a weight under this hold, widened to `f32` when `widen` (`--dtype f32`), else
    /// as stored.
    pub fn upload(&self, data: HostData<'_>, widen: bool, what: &str) -> Result<Weight> {
        let len = data.len();
        let s = &self.inner.stream;
        let up = |e| self.gpu.driver(&format!("copying {what} to the device"), e);
        let store = match data {
            HostData::F32(x) => Store::F32(s.clone_htod(x).map_err(up)?),
            HostData::Bf16(x) if widen => {
                let w: Vec<f32> = x
                    .iter()
                    .map(|&b| f32::from_bits(u32::from(b) << 16))
                    .collect();
                Store::F32(s.clone_htod(&w).map_err(up)?)
            }
            HostData::F16(x) if widen => {
                let w: Vec<f32> = x
                    .iter()
                    .map(|&b| half::f16::from_bits(b).to_f32())
                    .collect();
                Store::F32(s.clone_htod(&w).map_err(up)?)
            }
            HostData::Bf16(x) => Store::Half(s.clone_htod(x).map_err(up)?, true),
            HostData::F16(x) => Store::Half(s.clone_htod(x).map_err(up)?, false),
        };
        Ok(Weight { store, len })
    }
}

/// An MLP's activation function (`forward.cu`'s `activate` codes, in `repgeom-extract`'s
/// `Activation` order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActFn {
    /// Exact GELU.
    GeluErf = 0,
    /// GELU's tanh form.
    GeluTanh = 1,
    /// ReLU.
    Relu = 2,
    /// SiLU.
    Silu = 3,
}

/// Rotary tables for one sequence length: `cos` and `sin` `[t, rot / 2]`.
pub struct Rope {
    cos: CudaSlice<f32>,
    sin: CudaSlice<f32>,
    t: usize,
    rot: usize,
}

/// Where one of q, k, v lies in a projection's rows: head `h` of `n` at columns
/// `col0 + h · stride ..+ head_dim`.
#[derive(Clone, Copy)]
pub struct Heads<'a> {
    /// The projection, `[B·T, cols]`.
    pub src: &'a Act,
    /// The first head's first column.
    pub col0: usize,
    /// Columns from one head to the next.
    pub stride: usize,
    /// Heads in the projection (fewer than the query heads for grouped keys and values).
    pub n: usize,
}

/// The shape and rules of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionSpec {
    /// Sequences.
    pub batch: usize,
    /// Positions per sequence.
    pub t: usize,
    /// Query heads.
    pub heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// The scale of the scores (`1/√hd` or the family's).
    pub scale: f32,
    /// Gemma-2's soft cap of the scaled scores.
    pub cap: Option<f32>,
    /// Sliding-window width.
    pub window: Option<usize>,
}

fn blocks(n: usize) -> u32 {
    u32::try_from((n as u64).div_ceil(u64::from(THREADS))).unwrap_or(u32::MAX)
}

/// Threads for a loop over `n` columns: a multiple of 32, at most 256.
fn threads_for(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 256) as u32
}

fn u32_of(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Input {
        what: what.into(),
        reason: format!("{n} is past the device kernels' 32-bit sizes"),
    })
}

fn i32_of(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::Input {
        what: what.into(),
        reason: format!("{n} is past cuBLAS's 32-bit sizes"),
    })
}

impl Gpu {
    /// Runs `f` with the device's stream, cuBLAS and kernels, the context current on this
    /// thread.
    fn with<R>(&self, f: impl FnOnce(&Inner) -> Result<R>) -> Result<R> {
        f(&*self.lock()?)
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        inner: &Inner,
        n: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        inner
            .stream
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| self.driver(&format!("allocating {what}"), e))
    }

    /// An exclusive hold on the device for uploading many weights, with the free memory read
    /// under it ([`Uploads::free`]): a caller that checks its bytes against that figure and
    /// then uploads through [`Uploads::upload`] cannot have the memory taken by other work of
    /// this process (a PGA unit's null draws, another model) between the check and the copies.
    /// Other work on the device waits until the hold is dropped.
    pub fn uploads(&self) -> Result<Uploads<'_>> {
        let (inner, free) = self.lock_with_free()?;
        Ok(Uploads {
            gpu: self,
            inner,
            free,
        })
    }

    /// Copies rows `rows` of `a` back into their places in `out` (resized to `a`'s
    /// `rows · cols`; the other rows keep what they held): the copy of the rows a caller
    /// reads, not of the whole activation.
    pub fn download_rows(&self, a: &Act, rows: &[u32], out: &mut Vec<f32>) -> Result<()> {
        if rows.is_empty() {
            out.resize(a.rows * a.cols, 0.0);
            return Ok(());
        }
        let picked = self.rows(a, rows)?;
        let mut compact = Vec::new();
        self.download(&picked, &mut compact)?;
        out.resize(a.rows * a.cols, 0.0);
        let d = a.cols;
        for (&r, row) in rows.iter().zip(compact.chunks_exact(d.max(1))) {
            let r = r as usize;
            out[r * d..(r + 1) * d].copy_from_slice(row);
        }
        Ok(())
    }

    /// Copies `a` back into `out` (resized to `rows · cols`).
    pub fn download(&self, a: &Act, out: &mut Vec<f32>) -> Result<()> {
        out.resize(a.rows * a.cols, 0.0);
        self.with(|inner| {
            inner
                .stream
                .memcpy_dtoh(&a.data.slice(..a.rows * a.cols), out.as_mut_slice())
                .map_err(|e| self.driver("copying hidden states back", e))?;
            inner
                .stream
                .synchronize()
                .map_err(|e| self.driver("waiting for the device", e))
        })
    }

    /// The rows `table[ids[r]]` (`table` `[V, d]`), widened to `f32`: the embedding lookup
    /// (ids checked by the caller against `V`).
    pub fn embed(&self, table: &Weight, ids: &[u32], d: usize) -> Result<Act> {
        let code = table.code();
        match &table.store {
            Store::F32(w) => self.gather(w, code, table.len, ids, d, "the embedding lookup"),
            Store::Half(w, _) => self.gather(w, code, table.len, ids, d, "the embedding lookup"),
        }
    }

    /// The rows `a[rows[r]]`, as a new `[rows.len(), cols]` activation.
    pub fn rows(&self, a: &Act, rows: &[u32]) -> Result<Act> {
        self.gather(
            &a.data,
            0,
            a.rows * a.cols,
            rows,
            a.cols,
            "a gather of rows",
        )
    }

    /// Rows `ids` of a row-major `[len / d, d]` table of dtype `code` (`embed_rows`).
    fn gather<T: cudarc::driver::DeviceRepr>(
        &self,
        table: &CudaSlice<T>,
        code: i32,
        len: usize,
        ids: &[u32],
        d: usize,
        what: &str,
    ) -> Result<Act> {
        if ids.iter().any(|&i| (i as usize + 1) * d > len) {
            return Err(Error::Input {
                what: what.into(),
                reason: format!("an index past the table's {} rows", len / d.max(1)),
            });
        }
        let rows = ids.len();
        let du = u32_of(d, "the hidden size")?;
        self.with(|inner| {
            let s = &inner.stream;
            let mut out = self.zeros::<f32>(inner, rows * d, "gathered rows")?;
            if rows == 0 {
                // no launch: a grid of zero blocks is an error
                return Ok(Act {
                    data: out,
                    rows,
                    cols: d,
                });
            }
            let ids_dev = s
                .clone_htod(ids)
                .map_err(|e| self.driver("copying row indices", e))?;
            // SAFETY: table holds len values, every index < len / d (checked), out is rows·d.
            unsafe {
                s.launch_builder(inner.function("embed_rows"))
                    .arg(table)
                    .arg(&code)
                    .arg(&ids_dev)
                    .arg(&mut out)
                    .arg(&du)
                    .launch(cfg((u32_of(rows, "rows")?, 1), threads_for(d)))
            }
            .map_err(|e| self.driver("running embed_rows", e))?;
            Ok(Act {
                data: out,
                rows,
                cols: d,
            })
        })
    }

    /// `h[r] += pos[r mod t]` (GPT-2's learned positions; `pos` `[max_positions, d]`).
    pub fn add_positions(&self, h: &mut Act, pos: &Weight, t: usize) -> Result<()> {
        if t * h.cols > pos.len || t == 0 || !h.rows.is_multiple_of(t) {
            return Err(Error::Input {
                what: "the position embedding".into(),
                reason: format!("{t} positions of {} columns", h.cols),
            });
        }
        let (tu, du) = (u32_of(t, "positions")?, u32_of(h.cols, "the hidden size")?);
        self.with(|inner| {
            let mut b = inner.stream.launch_builder(inner.function("add_positions"));
            let code = pos.code();
            b.arg(&mut h.data);
            match &pos.store {
                Store::F32(w) => b.arg(w),
                Store::Half(w, _) => b.arg(w),
            };
            b.arg(&code).arg(&tu).arg(&du);
            // SAFETY: h is rows·d, pos holds at least t·d values (checked).
            unsafe { b.launch(cfg((u32_of(h.rows, "rows")?, 1), threads_for(h.cols))) }
                .map_err(|e| self.driver("running add_positions", e))?;
            Ok(())
        })
    }

    /// `h *= s`.
    pub fn scale(&self, h: &mut Act, s: f32) -> Result<()> {
        let n = (h.rows * h.cols) as u64;
        self.with(|inner| {
            // SAFETY: n values in h.
            unsafe {
                inner
                    .stream
                    .launch_builder(inner.function("scale_all"))
                    .arg(&mut h.data)
                    .arg(&s)
                    .arg(&n)
                    .launch(cfg((blocks(n as usize), 1), THREADS))
            }
            .map_err(|e| self.driver("running scale_all", e))?;
            Ok(())
        })
    }

    /// `y = x · Wᵀ + b` for `W` `[out, in]` (`x` `[rows, in]`): an `f32` product for an `f32`
    /// weight; for a bf16/f16 weight, `x` rounded to the weight's type and the product
    /// accumulated and returned in `f32` (`cublasGemmEx`, compute type 32F).
    pub fn linear(&self, x: &Act, w: &Weight, out: usize, bias: Option<&Weight>) -> Result<Act> {
        let (rows, inp) = (x.rows, x.cols);
        if w.len != out * inp || bias.is_some_and(|b| b.len != out) {
            return Err(Error::Input {
                what: "a linear layer".into(),
                reason: format!(
                    "a weight of {} values for [{out}, {inp}] (bias {:?})",
                    w.len,
                    bias.map(|b| b.len)
                ),
            });
        }
        let (m, n, k) = (
            i32_of(out, "a layer's width")?,
            i32_of(rows, "rows")?,
            i32_of(inp, "a layer's input width")?,
        );
        self.with(|inner| {
            let s = &inner.stream;
            let mut y = self.zeros::<f32>(inner, rows * out, "a layer's output")?;
            // Row-major Y [rows, out] is column-major Yᵀ [out, rows] = W · Xᵀ, with W the
            // column-major view of the row-major [out, in] weight, transposed.
            match &w.store {
                Store::F32(ws) => {
                    let c = GemmConfig {
                        transa: CUBLAS_OP_T,
                        transb: CUBLAS_OP_N,
                        m,
                        n,
                        k,
                        alpha: 1.0f32,
                        lda: k,
                        ldb: k,
                        beta: 0.0f32,
                        ldc: m,
                    };
                    // SAFETY: W out·in, X rows·in, Y rows·out values, as the config says.
                    unsafe { inner.blas.gemm(c, ws, &x.data, &mut y) }
                        .map_err(|e| self.blas("linear product", e))?;
                }
                Store::Half(ws, bf16) => {
                    let mut xh = self.zeros::<u16>(inner, rows * inp, "a narrowed input")?;
                    let (len, code) = ((rows * inp) as u64, w.code());
                    // SAFETY: x and xh hold rows·in values.
                    unsafe {
                        s.launch_builder(inner.function("narrow_to"))
                            .arg(&x.data)
                            .arg(&mut xh)
                            .arg(&len)
                            .arg(&code)
                            .launch(cfg((blocks(rows * inp), 1), THREADS))
                    }
                    .map_err(|e| self.driver("running narrow_to", e))?;
                    let ty = if *bf16 {
                        cudaDataType_t::CUDA_R_16BF
                    } else {
                        cudaDataType_t::CUDA_R_16F
                    };
                    let (alpha, beta) = (1.0f32, 0.0f32);
                    let (wp, _a) = ws.device_ptr(s);
                    let (xp, _b) = xh.device_ptr(s);
                    let (yp, _c) = y.device_ptr_mut(s);
                    // SAFETY: as the f32 case; the types are the buffers' types, the scalars
                    // f32 for compute type 32F.
                    unsafe {
                        cudarc::cublas::result::gemm_ex(
                            *inner.blas.handle(),
                            CUBLAS_OP_T,
                            CUBLAS_OP_N,
                            m,
                            n,
                            k,
                            (&raw const alpha).cast::<c_void>(),
                            wp as *const c_void,
                            ty,
                            k,
                            xp as *const c_void,
                            ty,
                            k,
                            (&raw const beta).cast::<c_void>(),
                            yp as *mut c_void,
                            cudaDataType_t::CUDA_R_32F,
                            m,
                            cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                        )
                    }
                    .map_err(|e| self.blas("half-precision linear product", e))?;
                }
            }
            if let Some(b) = bias {
                let Store::F32(bs) = &b.store else {
                    return Err(Error::Input {
                        what: "a linear layer's bias".into(),
                        reason: "biases are uploaded in f32".into(),
                    });
                };
                let ou = u32_of(out, "a layer's width")?;
                // SAFETY: y rows·out, bias out values.
                unsafe {
                    s.launch_builder(inner.function("add_bias"))
                        .arg(&mut y)
                        .arg(bs)
                        .arg(&ou)
                        .launch(cfg((n as u32, 1), threads_for(out)))
                }
                .map_err(|e| self.driver("running add_bias", e))?;
            }
            Ok(Act {
                data: y,
                rows,
                cols: out,
            })
        })
    }

    /// Layer norm of each row with `bias`, RMS norm without; `weight` and `bias` in `f32`.
    pub fn norm(&self, x: &Act, weight: &Weight, bias: Option<&Weight>, eps: f32) -> Result<Act> {
        fn f32_of(w: &Weight, cols: usize) -> Option<&CudaSlice<f32>> {
            match &w.store {
                Store::F32(s) if w.len == cols => Some(s),
                _ => None,
            }
        }
        let (weight, bias) = (f32_of(weight, x.cols), bias.map(|b| f32_of(b, x.cols)));
        let (Some(w), b) = (weight, bias) else {
            return Err(Error::Input {
                what: "a norm".into(),
                reason: format!("its weight must be {} f32 values", x.cols),
            });
        };
        if b.as_ref().is_some_and(Option::is_none) {
            return Err(Error::Input {
                what: "a norm".into(),
                reason: format!("its bias must be {} f32 values", x.cols),
            });
        }
        let cu = u32_of(x.cols, "a norm's width")?;
        self.with(|inner| {
            let mut y = self.zeros::<f32>(inner, x.rows * x.cols, "a norm's output")?;
            let mut l = inner.stream.launch_builder(inner.function("norm_rows"));
            l.arg(&x.data).arg(&mut y).arg(w);
            let null = 0u64;
            match &b {
                Some(Some(b)) => l.arg(*b),
                _ => l.arg(&null),
            };
            l.arg(&cu).arg(&eps);
            // SAFETY: x and y rows·cols, weight and bias cols values (checked), or a null bias.
            unsafe { l.launch(cfg((u32_of(x.rows, "rows")?, 1), ROW_THREADS)) }
                .map_err(|e| self.driver("running norm_rows", e))?;
            Ok(Act {
                data: y,
                rows: x.rows,
                cols: x.cols,
            })
        })
    }

    /// `x = f(x)`.
    pub fn activate(&self, x: &mut Act, f: ActFn) -> Result<()> {
        let (n, kind) = ((x.rows * x.cols) as u64, f as i32);
        self.with(|inner| {
            // SAFETY: n values in x.
            unsafe {
                inner
                    .stream
                    .launch_builder(inner.function("activate"))
                    .arg(&mut x.data)
                    .arg(&n)
                    .arg(&kind)
                    .launch(cfg((blocks(n as usize), 1), THREADS))
            }
            .map_err(|e| self.driver("running activate", e))?;
            Ok(())
        })
    }

    /// `a += b` (`product` false) or `a *= b` (true), element by element.
    pub fn combine(&self, a: &mut Act, b: &Act, product: bool) -> Result<()> {
        if (a.rows, a.cols) != (b.rows, b.cols) {
            return Err(Error::Input {
                what: "an elementwise sum or product".into(),
                reason: format!("[{}, {}] with [{}, {}]", a.rows, a.cols, b.rows, b.cols),
            });
        }
        let (n, op) = ((a.rows * a.cols) as u64, i32::from(product));
        self.with(|inner| {
            // SAFETY: n values in a and b.
            unsafe {
                inner
                    .stream
                    .launch_builder(inner.function("combine"))
                    .arg(&mut a.data)
                    .arg(&b.data)
                    .arg(&n)
                    .arg(&op)
                    .launch(cfg((blocks(n as usize), 1), THREADS))
            }
            .map_err(|e| self.driver("running combine", e))?;
            Ok(())
        })
    }

    /// `x = clamp(x, −c, c)`.
    pub fn clamp(&self, x: &mut Act, c: f32) -> Result<()> {
        let n = (x.rows * x.cols) as u64;
        self.with(|inner| {
            // SAFETY: n values in x.
            unsafe {
                inner
                    .stream
                    .launch_builder(inner.function("clamp_all"))
                    .arg(&mut x.data)
                    .arg(&c)
                    .arg(&n)
                    .launch(cfg((blocks(n as usize), 1), THREADS))
            }
            .map_err(|e| self.driver("running clamp_all", e))?;
            Ok(())
        })
    }

    /// Uploads rotary tables (`cos`, `sin` `[t, rot / 2]`, computed on the host as the CPU
    /// path computes them).
    pub fn rope(&self, cos: &[f32], sin: &[f32], t: usize, rot: usize) -> Result<Rope> {
        if !rot.is_multiple_of(2) || cos.len() != t * rot / 2 || sin.len() != cos.len() {
            return Err(Error::Input {
                what: "rotary tables".into(),
                reason: format!(
                    "{} and {} values for {t} positions of {rot} dimensions",
                    cos.len(),
                    sin.len()
                ),
            });
        }
        self.with(|inner| {
            let up = |e| self.driver("copying rotary tables", e);
            Ok(Rope {
                cos: inner.stream.clone_htod(cos).map_err(up)?,
                sin: inner.stream.clone_htod(sin).map_err(up)?,
                t,
                rot,
            })
        })
    }

    /// Causal self-attention: q, k, v gathered into heads (keys and values repeated for
    /// grouped queries), q and k rotated by `rope`, scores `q·kᵀ` (batched `f32` product),
    /// softmax under the causal (and sliding-window) mask, `p·v`, and the heads merged back:
    /// `[B·T, heads · head_dim]`.
    pub fn attention(
        &self,
        q: Heads<'_>,
        k: Heads<'_>,
        v: Heads<'_>,
        rope: Option<&Rope>,
        a: &AttentionSpec,
    ) -> Result<Act> {
        let (b, t, nh, hd) = (a.batch, a.t, a.heads, a.head_dim);
        let rows = b * t;
        let bad = [q, k, v].iter().any(|h| {
            h.src.rows != rows
                || h.n == 0
                || nh % h.n != 0
                || h.col0 + (h.n - 1) * h.stride + hd > h.src.cols
        });
        if bad || rope.is_some_and(|r| r.t < t || r.rot > hd) {
            return Err(Error::Input {
                what: "attention".into(),
                reason: format!(
                    "q, k, v or the rotary tables do not fit {b} x {t} rows of {nh} heads of {hd}"
                ),
            });
        }
        let per = nh * t * hd;
        let (tu, hu, hdu) = (
            u32_of(t, "positions")?,
            u32_of(nh, "heads")?,
            u32_of(hd, "head_dim")?,
        );
        let (ti, hdi) = (i32_of(t, "positions")?, i32_of(hd, "head_dim")?);
        let bh = i32_of(b * nh, "sequences times heads")?;
        self.with(|inner| {
            let s = &inner.stream;
            let run = |name: &'static str| move |e| self.driver(&format!("running {name}"), e);
            let grid = (u32_of(rows, "rows")?, hu);
            let null = 0u64;
            let gather = |h: &Heads<'_>, rotate: bool| -> Result<CudaSlice<f32>> {
                let mut out = self.zeros::<f32>(inner, b * per, "attention heads")?;
                let (cols, col0, stride) = (
                    u32_of(h.src.cols, "columns")?,
                    u32_of(h.col0, "columns")?,
                    u32_of(h.stride, "columns")?,
                );
                let rep = u32_of(nh / h.n, "heads")?;
                let rope = rope.filter(|_| rotate);
                let rot = u32_of(rope.map_or(0, |r| r.rot), "rotary dims")?;
                let mut l = s.launch_builder(inner.function("gather_heads"));
                l.arg(&h.src.data)
                    .arg(&cols)
                    .arg(&col0)
                    .arg(&stride)
                    .arg(&rep)
                    .arg(&mut out)
                    .arg(&tu)
                    .arg(&hu)
                    .arg(&hdu);
                match rope {
                    Some(r) => l.arg(&r.cos).arg(&r.sin),
                    None => l.arg(&null).arg(&null),
                };
                l.arg(&rot);
                // SAFETY: src rows·cols with every head inside (checked), out B·H·T·hd, the
                // tables [≥ t, rot / 2].
                unsafe { l.launch(cfg(grid, threads_for(hd))) }.map_err(run("gather_heads"))?;
                Ok(out)
            };
            let qh = gather(&q, true)?;
            let kh = gather(&k, true)?;
            let vh = gather(&v, false)?;
            let mut scores = self.zeros::<f32>(inner, b * nh * t * t, "attention scores")?;
            // Row-major S [T, T] = Q Kᵀ per (sequence, head): column-major Sᵀ = K · Qᵀ.
            let c = StridedBatchedConfig {
                gemm: GemmConfig {
                    transa: CUBLAS_OP_T,
                    transb: CUBLAS_OP_N,
                    m: ti,
                    n: ti,
                    k: hdi,
                    alpha: 1.0f32,
                    lda: hdi,
                    ldb: hdi,
                    beta: 0.0f32,
                    ldc: ti,
                },
                batch_size: bh,
                stride_a: (t * hd) as i64,
                stride_b: (t * hd) as i64,
                stride_c: (t * t) as i64,
            };
            // SAFETY: B·H blocks of T·hd (q, k) and T·T (scores).
            unsafe { inner.blas.gemm_strided_batched(c, &kh, &qh, &mut scores) }
                .map_err(|e| self.blas("attention scores", e))?;
            drop((qh, kh));
            let (pre, cap, scale) = match a.cap {
                Some(cap) => (a.scale, cap, 1.0f32),
                None => (1.0f32, 0.0f32, a.scale),
            };
            let window = u32_of(a.window.unwrap_or(0), "window")?;
            // SAFETY: scores B·H·T rows of T.
            unsafe {
                s.launch_builder(inner.function("masked_softmax"))
                    .arg(&mut scores)
                    .arg(&tu)
                    .arg(&pre)
                    .arg(&cap)
                    .arg(&scale)
                    .arg(&window)
                    .launch(cfg((u32_of(b * nh * t, "score rows")?, 1), ROW_THREADS))
            }
            .map_err(run("masked_softmax"))?;
            let mut y = self.zeros::<f32>(inner, b * per, "attention output")?;
            // Row-major Y [T, hd] = P V: column-major Yᵀ = Vᵀ · Pᵀ, both read as stored.
            let c = StridedBatchedConfig {
                gemm: GemmConfig {
                    transa: CUBLAS_OP_N,
                    transb: CUBLAS_OP_N,
                    m: hdi,
                    n: ti,
                    k: ti,
                    alpha: 1.0f32,
                    lda: hdi,
                    ldb: ti,
                    beta: 0.0f32,
                    ldc: hdi,
                },
                batch_size: bh,
                stride_a: (t * hd) as i64,
                stride_b: (t * t) as i64,
                stride_c: (t * hd) as i64,
            };
            // SAFETY: B·H blocks of T·hd (v, y) and T·T (probabilities).
            unsafe { inner.blas.gemm_strided_batched(c, &vh, &scores, &mut y) }
                .map_err(|e| self.blas("attention output", e))?;
            drop((vh, scores));
            let mut out = self.zeros::<f32>(inner, b * per, "merged heads")?;
            // SAFETY: y B·H·T·hd, out B·T rows of H·hd.
            unsafe {
                s.launch_builder(inner.function("merge_heads"))
                    .arg(&y)
                    .arg(&mut out)
                    .arg(&tu)
                    .arg(&hu)
                    .arg(&hdu)
                    .launch(cfg(grid, threads_for(hd)))
            }
            .map_err(run("merge_heads"))?;
            Ok(Act {
                data: out,
                rows,
                cols: nh * hd,
            })
        })
    }

    /// The next-token loss `−log softmax(h_r · Wᵀ + bias)[target]` (Gemma-2's soft cap
    /// applied to the logits first) of rows `rows` of `h` (`[·, d]` final hidden states), each
    /// with its target: the logits of as many rows at a time as fit in 1 GiB (the readout
    /// product as [`Self::linear`]), each row's maximum, `Σ e^{x − max}` (in `f64`) and
    /// target logit on the device, the logarithm on the host.
    pub fn loss(
        &self,
        h: &Act,
        rows: &[u32],
        targets: &[u32],
        readout: &Weight,
        bias: Option<&Weight>,
        cap: Option<f32>,
    ) -> Result<Vec<f64>> {
        let d = h.cols;
        let vocab = readout.len / d.max(1);
        let bias = match bias.map(|b| (&b.store, b.len)) {
            None => None,
            Some((Store::F32(b), len)) if len == vocab => Some(b),
            Some((_, len)) => {
                return Err(Error::Input {
                    what: "the loss".into(),
                    reason: format!("a readout bias of {len} values, not {vocab} f32 values"),
                });
            }
        };
        if rows.len() != targets.len()
            || readout.len != vocab * d
            || rows.iter().any(|&r| r as usize >= h.rows)
            || targets.iter().any(|&t| t as usize >= vocab)
        {
            return Err(Error::Input {
                what: "the loss".into(),
                reason: format!(
                    "{} rows and {} targets of {} hidden states against a readout of {} values",
                    rows.len(),
                    targets.len(),
                    h.rows,
                    readout.len
                ),
            });
        }
        let chunk = usize::try_from(loss_rows_at_once(vocab as u64)).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(rows.len());
        let vu = u32_of(vocab, "the vocabulary")?;
        for (rs, ts) in rows.chunks(chunk).zip(targets.chunks(chunk)) {
            let picked = self.rows(h, rs)?;
            let logits = self.linear(&picked, readout, vocab, None)?;
            drop(picked);
            let parts = self.with(|inner| {
                let s = &inner.stream;
                let up = |e| self.driver("copying targets", e);
                let targets = s.clone_htod(ts).map_err(up)?;
                let mut part = self.zeros::<f64>(inner, 3 * rs.len(), "loss parts")?;
                let zero = 0u32;
                let capf = cap.unwrap_or(0.0);
                let null = 0u64;
                let mut l = s.launch_builder(inner.function("loss_part"));
                l.arg(&logits.data);
                match bias {
                    Some(b) => l.arg(b),
                    None => l.arg(&null),
                };
                l.arg(&capf)
                    .arg(&targets)
                    .arg(&zero)
                    .arg(&vu)
                    .arg(&mut part);
                // SAFETY: logits rows·V, bias V values (f32) or null, targets and part per row.
                unsafe { l.launch(cfg((u32_of(rs.len(), "rows")?, 1), ROW_THREADS)) }
                    .map_err(|e| self.driver("running loss_part", e))?;
                s.clone_dtoh(&part)
                    .map_err(|e| self.driver("copying the loss back", e))
            })?;
            out.extend(parts.chunks(3).map(|p| p[0] + p[1].ln() - p[2]));
        }
        Ok(out)
    }
}

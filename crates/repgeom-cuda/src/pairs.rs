//! Pair metrics' permutation null on the device: for kernel metrics (linear CKA, the
//! distance correlations' kernels), each draw's value of every layer pair is an inner product
//! of one layer's kernel matrix with the other's relabelled by the draw's permutation. The
//! matrices are uploaded once; per draw, each second-side matrix is relabelled by a gather
//! kernel and every pair's inner product is one batched cuBLAS `f32` product over chunks of
//! rows, the chunks summed in `f64`.
#![allow(unsafe_code)] // kernel launches and cuBLAS calls are unsafe; each has its SAFETY note.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::PushKernelArg;

use crate::gpu::launch_config as cfg;
use crate::{Error, Gpu, Result};

/// Rows of the matrices per chunk of the inner products: each chunk's `ROWS · N` products
/// are summed by cuBLAS in `f32`, the chunks in `f64`.
const ROWS: usize = 8;

impl Gpu {
    /// `Σ_{i<j} a_ij · b_{p(i) p(j)}` for every draw `t < draws` (`p = perm(t)`, a
    /// permutation of the `n` points) and every pair of a matrix of `a` with one of `b` (each
    /// `n × n`, row-major, symmetric): the strict upper triangle of the relabelled inner
    /// product, as `[draw][ia · b.len() + ib]`. Both sides' diagonals are left out (a caller
    /// adds them itself where its metric counts them).
    pub fn kernel_upper_sums(
        &self,
        a: &[&[f32]],
        b: &[&[f32]],
        n: usize,
        draws: usize,
        perm: &dyn Fn(usize) -> Vec<u32>,
        what: &str,
    ) -> Result<Vec<Vec<f64>>> {
        let (na, nb) = (a.len(), b.len());
        let nn = n * n;
        let bad = a.iter().chain(b).any(|m| m.len() != nn);
        if bad || n < 2 || i32::try_from(nn).is_err() || na == 0 || nb == 0 {
            return Err(Error::Input {
                what: what.into(),
                reason: format!(
                    "{na} and {nb} matrices that are not all of {n} x {n} (the device engine \
                     takes 2 to 46,340 points)"
                ),
            });
        }
        let chunks = n.div_ceil(ROWS);
        let cells = na * nb;
        let needed = 4 * (nn as u64) * (na + 2 * nb) as u64
            + 4 * (chunks * cells) as u64
            + 8 * cells as u64
            + 4 * n as u64;
        let (inner, free) = self.lock_with_free()?;
        if needed > free / 10 * 9 {
            return Err(Error::OutOfMemory {
                what: what.into(),
                ordinal: self.ordinal(),
                needed,
                free,
                hint: "use fewer points or fewer layers, or the CPU",
            });
        }
        let s = &inner.stream;
        let dev = |step: &'static str| move |e| self.driver(step, e);
        let upload = |ms: &[&[f32]]| {
            let mut host = Vec::with_capacity(ms.len() * nn);
            for m in ms {
                host.extend_from_slice(m);
            }
            s.clone_htod(&host)
        };
        let mut am = upload(a).map_err(dev("copying kernel matrices"))?;
        let bm = upload(b).map_err(dev("copying kernel matrices"))?;
        let mut bp = s
            .alloc_zeros::<f32>(nb * nn)
            .map_err(dev("allocating relabelled matrices"))?;
        let mut part = s
            .alloc_zeros::<f32>(chunks * cells)
            .map_err(dev("allocating partial sums"))?;
        let mut sums = s
            .alloc_zeros::<f64>(cells)
            .map_err(dev("allocating sums"))?;
        let nu = n as u32;
        let run = |name: &'static str| move |e| self.driver(&format!("running {name}"), e);
        // SAFETY: am holds na matrices of n·n.
        unsafe {
            s.launch_builder(inner.function("zero_diagonal"))
                .arg(&mut am)
                .arg(&nu)
                .launch(cfg((nu.div_ceil(256), na as u32), 256))
        }
        .map_err(run("zero_diagonal"))?;
        let (nai, nbi, nni) = (na as i32, nb as i32, nn as i32);
        let mut out = Vec::with_capacity(draws);
        for t in 0..draws {
            let perm = perm(t);
            if perm.len() != n || perm.iter().any(|&x| x as usize >= n) {
                return Err(Error::Input {
                    what: what.into(),
                    reason: format!("draw {t}'s relabelling is not a permutation of {n} points"),
                });
            }
            let p = s.clone_htod(&perm).map_err(dev("copying a permutation"))?;
            // SAFETY: bm and bp hold nb matrices of n·n, p holds n indices < n (checked).
            unsafe {
                s.launch_builder(inner.function("permute_sym"))
                    .arg(&bm)
                    .arg(&p)
                    .arg(&mut bp)
                    .arg(&nu)
                    .launch(cfg((nu, nb as u32), 256))
            }
            .map_err(run("permute_sym"))?;
            // Chunk c: rows c·ROWS.. of every matrix, ROWS·n consecutive values. Column-major,
            // the matrices of a side are the columns of an (n² × count) matrix, so a chunk's
            // products are C (na × nb, column-major) = A_cᵀ · B_c.
            let full = n / ROWS;
            let step = (ROWS * n) as i64;
            let mut gemm = |k: usize, offset: usize, count: usize, part_offset: usize| {
                let c = StridedBatchedConfig {
                    gemm: GemmConfig {
                        transa: CUBLAS_OP_T,
                        transb: CUBLAS_OP_N,
                        m: nai,
                        n: nbi,
                        k: k as i32,
                        alpha: 1.0f32,
                        lda: nni,
                        ldb: nni,
                        beta: 0.0f32,
                        ldc: nai,
                    },
                    batch_size: count as i32,
                    stride_a: step,
                    stride_b: step,
                    stride_c: cells as i64,
                };
                let (av, bv) = (am.slice(offset..), bp.slice(offset..));
                let mut pv = part.slice_mut(part_offset..);
                // SAFETY: chunk j reads k values from offset + j·step of each matrix (within
                // n·n: the last full chunk ends at n·n at most) and writes cells values at
                // part_offset + j·cells, within chunks·cells.
                unsafe { inner.blas.gemm_strided_batched(c, &av, &bv, &mut pv) }
                    .map_err(|e| self.blas("relabelled inner products", e))
            };
            if full > 0 {
                gemm(ROWS * n, 0, full, 0)?;
            }
            if full < chunks {
                gemm((n - full * ROWS) * n, full * ROWS * n, 1, full * cells)?;
            }
            let (chunks_u, cells_u) = (chunks as u32, cells as u32);
            // SAFETY: part holds chunks·cells values, sums cells.
            unsafe {
                s.launch_builder(inner.function("sum_chunks"))
                    .arg(&part)
                    .arg(&mut sums)
                    .arg(&chunks_u)
                    .arg(&cells_u)
                    .launch(cfg((cells_u.div_ceil(256), 1), 256))
            }
            .map_err(run("sum_chunks"))?;
            let total = s.clone_dtoh(&sums).map_err(dev("copying sums back"))?;
            // C is column-major: cell (ia, ib) at ib·na + ia. Both matrices are symmetric
            // with zero diagonals: the full sum is twice the strict upper triangle's.
            out.push(
                (0..cells)
                    .map(|c| total[(c % nb) * na + c / nb] / 2.0)
                    .collect(),
            );
        }
        Ok(out)
    }
}

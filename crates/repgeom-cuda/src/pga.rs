//! The PGA null draws on the device: for a batch of bases at a time, the projections (one
//! cuBLAS product), their row norms, the Gram matrices (one batched product), the sort words
//! of every pair, an LSD radix sort of each draw's words, and the tie sums Spearman's rho is
//! computed from: the CPU engine's steps, in the CPU engine's precision.
#![allow(unsafe_code)] // kernel launches and cuBLAS calls are unsafe; each has its SAFETY note.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaSlice, PushKernelArg};
use repgeom_linalg::{Distance, MatRef, RankedReference, TieSums, condensed_len};

use crate::gpu::{Inner, launch_config as launch};
use crate::{Error, Gpu, Result};

/// Threads and items per tile of the sort and tie kernels (`TILE_THREADS`, `TILE_ITEMS` in
/// `kernels.cu`).
const TILE_THREADS: u32 = 256;
const TILE: u64 = 256 * 8;
/// What to do when a draw does not fit.
const PGA_HINT: &str = "use fewer points, or max_pairs on the CPU";
/// At most this many draws share a batch (more gains nothing once the device is busy).
const MAX_BATCH: usize = 64;

/// A column-major copy of `m` (contiguous, leading dimension = rows).
fn col_major(m: MatRef<'_, f32>, out: &mut Vec<f32>) {
    for j in 0..m.ncols() {
        out.extend((0..m.nrows()).map(|i| m[(i, j)]));
    }
}

impl Gpu {
    /// The sort words of the full-space distances of `rows` (`N × d`), sorted by key on the
    /// device, `(order_key(distance) << 32) | pair` for every pair in condensed order: what
    /// [`RankedReference::from_sorted_words`] ranks. For cosine, `rows` are the rows
    /// normalised by [`repgeom_linalg::normalize_rows`] and `sq` is `None`; for Euclidean, the
    /// rows and squared norms of [`repgeom_linalg::rows_with_sq_norms`]. The Gram product is
    /// one `f32` cuBLAS product, the distances and keys the CPU's formulas.
    pub fn reference_words(
        &self,
        rows: MatRef<'_, f32>,
        sq: Option<&[f32]>,
        what: &str,
    ) -> Result<Vec<u64>> {
        let (n, d) = (rows.nrows(), rows.ncols());
        let m = condensed_len(n);
        if n < 2 || m >= (1 << 31) || sq.is_some_and(|s| s.len() != n) {
            return Err(Error::Input {
                what: what.into(),
                reason: format!(
                    "{n} points (the device engine takes 2 to 65,536), {} squared norms",
                    sq.map_or(0, <[f32]>::len)
                ),
            });
        }
        let (n64, d64, m64) = (n as u64, d as u64, m as u64);
        let tiles = m64.div_ceil(TILE);
        let needed = 4 * n64 * d64 + 4 * n64 * n64 + 20 * m64 + 1024 * tiles + 4 * n64;
        // The points in the device's layout, before the lock: host work need not hold it.
        let mut host = Vec::with_capacity(n * d);
        col_major(rows, &mut host);
        let (inner, free) = self.lock_with_free()?;
        if needed > free / 10 * 8 {
            return Err(Error::OutOfMemory {
                what: what.into(),
                ordinal: self.ordinal(),
                needed,
                free,
                hint: PGA_HINT,
            });
        }
        let s = &inner.stream;
        let dev = |step: &'static str| move |e| self.driver(step, e);
        let x = s.clone_htod(&host).map_err(dev("copying to the device"))?;
        drop(host);
        let mut gram = s
            .alloc_zeros::<f32>(n * n)
            .map_err(dev("allocating the Gram matrix"))?;
        let (ni, di) = (n as i32, d as i32);
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_T,
            m: ni,
            n: ni,
            k: di,
            alpha: 1.0f32,
            lda: ni,
            ldb: ni,
            beta: 0.0f32,
            ldc: ni,
        };
        // SAFETY: x is n·d and gram n·n, as allocated.
        unsafe { inner.blas.gemm(cfg, &x, &x, &mut gram) }
            .map_err(|e| self.blas("Gram product", e))?;
        drop(x);
        let sq32 = match sq {
            Some(sq) => s.clone_htod(sq),
            None => s.alloc_zeros::<f32>(n),
        }
        .map_err(dev("copying norms"))?;
        let pairs: Vec<u32> = (0..m as u32).collect();
        let pairs = s.clone_htod(&pairs).map_err(dev("copying pair indices"))?;
        let euclidean = i32::from(sq.is_some());
        let (keys, vals) = self.sorted_pairs(&inner, gram, &sq32, &pairs, n, 1, euclidean)?;
        let keys = s
            .clone_dtoh(&keys)
            .map_err(dev("copying sorted words back"))?;
        let vals = s
            .clone_dtoh(&vals)
            .map_err(dev("copying sorted words back"))?;
        Ok(keys
            .iter()
            .zip(&vals)
            .map(|(&k, &v)| (u64::from(k) << 32) | u64::from(v))
            .collect())
    }

    /// `(rho, squared norm of the projection)` for every basis, in order: Spearman's rho
    /// between the `reference` distances (of `h`'s rows in the full space) and the
    /// `distance`s of `h`'s rows projected onto the basis (`h · basis`, `f32`), and the
    /// projection's squared norm (summed in `f64`) for the captured variance. The same
    /// numbers as `repgeom_metrics`' CPU engine up to the rounding of the `f32` products:
    /// the row norms in `f64` with the CPU's checks ([`repgeom_linalg::inverse_row_norms`]),
    /// the same sort keys, and rho from the same integer sums
    /// ([`RankedReference::rho_from_tie_sums`]).
    ///
    /// `h` is `N × d`, each basis `d × k` (the same `k`); draws run in batches as large as
    /// the device's free memory allows, and a device that cannot hold one draw is an error
    /// before any work.
    pub fn pga_draws(
        &self,
        h: MatRef<'_, f32>,
        bases: &[MatRef<'_, f32>],
        reference: &RankedReference,
        distance: Distance,
        what: &str,
    ) -> Result<Vec<(f64, f64)>> {
        let (n, d) = (h.nrows(), h.ncols());
        let Some(first) = bases.first() else {
            return Ok(Vec::new());
        };
        let k = first.ncols();
        let m = condensed_len(n);
        if let Some(b) = bases.iter().find(|b| b.nrows() != d || b.ncols() != k) {
            return Err(Error::Input {
                what: what.into(),
                reason: format!(
                    "a basis of shape [{}, {}] against points [{n}, {d}] and a first basis \
                     [{d}, {k}]",
                    b.nrows(),
                    b.ncols()
                ),
            });
        }
        if reference.len() != m {
            return Err(Error::Input {
                what: what.into(),
                reason: format!(
                    "{} reference distances for {n} points ({m} pairs)",
                    reference.len()
                ),
            });
        }
        if n < 2 || m >= (1 << 31) || k == 0 {
            return Err(Error::Input {
                what: what.into(),
                reason: format!(
                    "{n} points in {k} dimensions: the device engine takes 2 to 65,536 points \
                     and k >= 1"
                ),
            });
        }
        let tiles = m.div_ceil(TILE as usize);
        let (n64, k64, d64, m64, t64) = (n as u64, k as u64, d as u64, m as u64, tiles as u64);
        let fixed = 4 * n64 * d64 + 4 * m64;
        let per_draw = 4 * d64 * k64 // basis
            + 4 * n64 * k64 // projection
            + 4 * n64 * n64 // Gram
            + 16 * m64 // words, twice
            + 4 * 256 * t64 // digit counts
            + 16 * t64 + 48 * t64 // tie bounds and sums
            + 20 * n64; // norms, scales
        // The points in the device's layout, before the lock: host work need not hold it.
        let mut host = Vec::with_capacity(n * d);
        col_major(h, &mut host);
        let (inner, free) = self.lock_with_free()?;
        let usable = free.saturating_sub(fixed) / 10 * 8;
        let fit = usize::try_from(usable / per_draw).unwrap_or(usize::MAX);
        if fit == 0 {
            return Err(Error::OutOfMemory {
                what: what.into(),
                ordinal: self.ordinal(),
                needed: fixed + per_draw,
                free,
                hint: PGA_HINT,
            });
        }
        let batch = fit.min(MAX_BATCH).min(bases.len());
        let s = &inner.stream;
        let up = |e| self.driver("copying to the device", e);
        let h_dev = s.clone_htod(&host).map_err(up)?;
        let rank2 = s.clone_htod(reference.rank2()).map_err(up)?;
        let mut out = Vec::with_capacity(bases.len());
        for chunk in bases.chunks(batch) {
            out.extend(self.batch(
                &inner,
                &h_dev,
                &rank2,
                chunk,
                reference,
                distance,
                (n, d, k),
                what,
            )?);
        }
        Ok(out)
    }

    /// One batch of draws (see [`Self::pga_draws`]).
    #[allow(clippy::too_many_arguments)]
    fn batch(
        &self,
        inner: &Inner,
        h: &CudaSlice<f32>,
        rank2: &CudaSlice<u32>,
        bases: &[MatRef<'_, f32>],
        reference: &RankedReference,
        distance: Distance,
        (n, d, k): (usize, usize, usize),
        what: &str,
    ) -> Result<Vec<(f64, f64)>> {
        let s = &inner.stream;
        let b = bases.len();
        let m = condensed_len(n) as u64;
        let tiles = m.div_ceil(TILE) as u32;
        let dev = |step: &'static str| move |e| self.driver(step, e);
        let mut q = Vec::with_capacity(d * k * b);
        for basis in bases {
            col_major(*basis, &mut q);
        }
        let q = s.clone_htod(&q).map_err(dev("copying the bases"))?;
        let mut p = s
            .alloc_zeros::<f32>(n * k * b)
            .map_err(dev("allocating projections"))?;
        let (ni, ki, di) = (n as i32, k as i32, d as i32);
        // P = H · [Q_1 … Q_b]: N × (k b), column-major.
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: ni,
            n: ki * b as i32,
            k: di,
            alpha: 1.0f32,
            lda: ni,
            ldb: di,
            beta: 0.0f32,
            ldc: ni,
        };
        // SAFETY: the shapes above match the buffers' lengths (n·d, d·k·b, n·k·b).
        unsafe { inner.blas.gemm(cfg, h, &q, &mut p) }.map_err(|e| self.blas("projection", e))?;
        drop(q);
        let (nu, ku, bu) = (n as u32, k as u32, b as u32);
        let mut norms = s
            .alloc_zeros::<f64>(n * b)
            .map_err(dev("allocating norms"))?;
        let blocks = |len: u64| (len.div_ceil(u64::from(TILE_THREADS))) as u32;
        let run = |e| self.driver("running a kernel", e);
        // SAFETY (every launch below): the kernels' arguments are the buffers and sizes their
        // comments in kernels.cu describe, allocated above with those sizes.
        unsafe {
            s.launch_builder(inner.function("row_sq_norms"))
                .arg(&p)
                .arg(&mut norms)
                .arg(&nu)
                .arg(&ku)
                .arg(&bu)
                .launch(launch((blocks(n as u64), bu), TILE_THREADS))
        }
        .map_err(run)?;
        let norms = s.clone_dtoh(&norms).map_err(dev("copying norms back"))?;
        // The projection's entries, for naming the first non-finite column of a row.
        // The first non-finite column of a row, for the error naming it: the projection is
        // copied back only then (the checks call it only for a row that fails).
        let first_bad = |draw: usize| {
            let p = &p;
            move |i: usize| {
                s.clone_dtoh(p)
                    .ok()
                    .and_then(|p| (0..k).find(|&c| !p[(draw * k + c) * n + i].is_finite()))
                    .unwrap_or(0)
            }
        };
        let mut sq_sums = Vec::with_capacity(b);
        // Cosine: each row's scale 1 / norm; Euclidean: the squared norms themselves, in f32.
        let (mut scales, mut sq_host) = (Vec::new(), Vec::new());
        for (draw, rows) in norms.chunks(n).enumerate() {
            match distance {
                Distance::Cosine => {
                    let inv = repgeom_linalg::inverse_row_norms(rows, what, first_bad(draw))?;
                    scales.extend(inv);
                }
                Distance::Euclidean => {
                    repgeom_linalg::check_row_norms(rows, what, first_bad(draw))?;
                    sq_host.extend(rows.iter().map(|&v| v as f32));
                }
            }
            sq_sums.push(rows.iter().sum::<f64>());
        }
        let euclidean = i32::from(distance == Distance::Euclidean);
        // The pair kernel reads the squared norms only for Euclidean distances.
        let sq32 = match distance {
            Distance::Euclidean => s.clone_htod(&sq_host),
            Distance::Cosine => s.alloc_zeros::<f32>(1),
        }
        .map_err(dev("copying norms"))?;
        if distance == Distance::Cosine {
            let scale = s.clone_htod(&scales).map_err(dev("copying scales"))?;
            unsafe {
                s.launch_builder(inner.function("scale_rows"))
                    .arg(&mut p)
                    .arg(&scale)
                    .arg(&nu)
                    .arg(&ku)
                    .arg(&bu)
                    .launch(launch((blocks(n as u64 * k as u64), bu), TILE_THREADS))
            }
            .map_err(run)?;
        }
        // G_b = P_b P_bᵀ, N × N per draw.
        let mut gram = s
            .alloc_zeros::<f32>(n * n * b)
            .map_err(dev("allocating Gram matrices"))?;
        let cfg = StridedBatchedConfig {
            gemm: GemmConfig {
                transa: CUBLAS_OP_N,
                transb: CUBLAS_OP_T,
                m: ni,
                n: ni,
                k: ki,
                alpha: 1.0f32,
                lda: ni,
                ldb: ni,
                beta: 0.0f32,
                ldc: ni,
            },
            batch_size: b as i32,
            stride_a: (n * k) as i64,
            stride_b: (n * k) as i64,
            stride_c: (n * n) as i64,
        };
        // SAFETY: b blocks of n·k and of n·n, as allocated.
        unsafe { inner.blas.gemm_strided_batched(cfg, &p, &p, &mut gram) }
            .map_err(|e| self.blas("Gram product", e))?;
        drop(p);
        let (keys, vals) = self.sorted_pairs(inner, gram, &sq32, rank2, n, b, euclidean)?;
        let tb = tiles as usize * b;
        let mut open_start = s
            .alloc_zeros::<i64>(tb)
            .map_err(dev("allocating tie bounds"))?;
        let mut open_end = s
            .alloc_zeros::<i64>(tb)
            .map_err(dev("allocating tie bounds"))?;
        let mut sums = s
            .alloc_zeros::<u64>(6 * tb)
            .map_err(dev("allocating tie sums"))?;
        unsafe {
            s.launch_builder(inner.function("tie_bounds"))
                .arg(&keys)
                .arg(&mut open_start)
                .arg(&mut open_end)
                .arg(&m)
                .arg(&tiles)
                .launch(launch((tiles, bu), TILE_THREADS))
        }
        .map_err(run)?;
        unsafe {
            s.launch_builder(inner.function("tie_carry"))
                .arg(&mut open_start)
                .arg(&mut open_end)
                .arg(&tiles)
                .arg(&bu)
                .launch(launch((bu.div_ceil(32), 1), 32))
        }
        .map_err(run)?;
        unsafe {
            s.launch_builder(inner.function("tie_sums"))
                .arg(&keys)
                .arg(&vals)
                .arg(&open_start)
                .arg(&open_end)
                .arg(&mut sums)
                .arg(&m)
                .arg(&tiles)
                .launch(launch((tiles, bu), TILE_THREADS))
        }
        .map_err(run)?;
        let sums = s.clone_dtoh(&sums).map_err(dev("copying tie sums back"))?;
        let word = |lo: u64, hi: u64| (u128::from(hi) << 64) | u128::from(lo);
        sums.chunks(6 * tiles as usize)
            .zip(sq_sums)
            .map(|(draw, sq)| {
                let mut t = TieSums::default();
                for s in draw.chunks(6) {
                    t.starts += word(s[0], s[1]);
                    t.ends += word(s[2], s[3]);
                    t.ties += word(s[4], s[5]);
                }
                Ok((reference.rho_from_tie_sums(t, what)?, sq))
            })
            .collect()
    }

    /// The sort words of every pair of each of `b` Gram matrices (`n × n`, column-major, side
    /// by side), sorted by key per draw: the keys of the distances (`sq32`: the rows' squared
    /// norms, for Euclidean) and `payload[p]` for pair `p`.
    #[allow(clippy::too_many_arguments)]
    fn sorted_pairs(
        &self,
        inner: &Inner,
        gram: CudaSlice<f32>,
        sq32: &CudaSlice<f32>,
        payload: &CudaSlice<u32>,
        n: usize,
        b: usize,
        euclidean: i32,
    ) -> Result<(CudaSlice<u32>, CudaSlice<u32>)> {
        let s = &inner.stream;
        let m = condensed_len(n) as u64;
        let tiles = m.div_ceil(TILE) as u32;
        let (nu, bu) = (n as u32, b as u32);
        let dev = |step: &'static str| move |e| self.driver(step, e);
        let run = |e| self.driver("running a kernel", e);
        let words = (m * b as u64) as usize;
        let mut keys = s
            .alloc_zeros::<u32>(words)
            .map_err(dev("allocating sort words"))?;
        let mut vals = s
            .alloc_zeros::<u32>(words)
            .map_err(dev("allocating sort words"))?;
        let mut keys2 = s
            .alloc_zeros::<u32>(words)
            .map_err(dev("allocating sort words"))?;
        let mut vals2 = s
            .alloc_zeros::<u32>(words)
            .map_err(dev("allocating sort words"))?;
        let jtiles = nu.div_ceil(TILE_THREADS);
        unsafe {
            s.launch_builder(inner.function("pair_words"))
                .arg(&gram)
                .arg(sq32)
                .arg(payload)
                .arg(&mut keys)
                .arg(&mut vals)
                .arg(&nu)
                .arg(&jtiles)
                .arg(&bu)
                .arg(&euclidean)
                .launch(launch((nu * jtiles, bu), TILE_THREADS))
        }
        .map_err(run)?;
        drop(gram);
        let hist_len = 256 * tiles;
        let mut hist = s
            .alloc_zeros::<u32>(hist_len as usize * b)
            .map_err(dev("allocating digit counts"))?;
        for pass in 0..4u32 {
            let shift = 8 * pass;
            let (kin, vin, kout, vout) = if pass % 2 == 0 {
                (&keys, &vals, &mut keys2, &mut vals2)
            } else {
                (&keys2, &vals2, &mut keys, &mut vals)
            };
            unsafe {
                s.launch_builder(inner.function("radix_hist"))
                    .arg(kin)
                    .arg(&mut hist)
                    .arg(&m)
                    .arg(&tiles)
                    .arg(&shift)
                    .launch(launch((tiles, bu), TILE_THREADS))
            }
            .map_err(run)?;
            unsafe {
                s.launch_builder(inner.function("radix_scan"))
                    .arg(&mut hist)
                    .arg(&hist_len)
                    .launch(launch((bu, 1), 1024))
            }
            .map_err(run)?;
            unsafe {
                s.launch_builder(inner.function("radix_scatter"))
                    .arg(kin)
                    .arg(vin)
                    .arg(kout)
                    .arg(vout)
                    .arg(&hist)
                    .arg(&m)
                    .arg(&tiles)
                    .arg(&shift)
                    .launch(launch((tiles, bu), TILE_THREADS))
            }
            .map_err(run)?;
        }
        // After an even number of passes the sorted words are back in `keys`, `vals`.
        drop((keys2, vals2, hist));
        Ok((keys, vals))
    }
}

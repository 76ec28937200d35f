//! Products of half-precision inputs accumulated in `f32`: `dst += a bᵀ` where `a` holds
//! activations rounded to bf16 or f16 and `b` a weight matrix stored in that type, as a GPU's
//! `cublasGemmEx` (compute type 32F) and PyTorch's CPU bf16 matrix products compute them.
//!
//! Each product of two bf16 (or f16) values is exact in `f32`, so the numbers differ from any
//! other such implementation only by the order of the `f32` additions. Two kernels:
//!
//! - **AMX** (Intel Advanced Matrix Extensions, `amx-bf16`: Sapphire Rapids and later), for
//!   bf16: both sides packed into 16 × 64-byte tiles, each 32 × 32 block of the output held in
//!   four tile registers over the whole inner dimension (`tdpbf16ps`: pairs of products added
//!   to `f32` accumulators; a subnormal input reads as zero and a subnormal result is flushed
//!   to zero, measured here: magnitudes below 1.2e-38), so each output entry is summed in one
//!   order whatever the pool;
//! - **widened**, anywhere else and for f16: both sides widened to `f32` (exactly) and
//!   multiplied by faer's `f32` GEMM.
//!
//! [`HalfMatrix`] holds one side in the layout its kernel reads; [`matmul_abt_add_half`] is
//! the product.
#![allow(unsafe_code)] // AMX instructions (inline assembly) and disjoint writes; see the SAFETY notes.

use std::ops::Range;
use std::sync::OnceLock;

use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Rows and inner-dimension entries of an AMX block: ranges of [`matmul_abt_add_half`] start at
/// multiples of this.
pub const HALF_BLOCK: usize = 32;

/// A half-precision type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HalfType {
    /// bfloat16: `f32`'s exponent, 8 significant bits.
    Bf16,
    /// IEEE binary16: 11 significant bits, largest finite value 65504.
    F16,
}

impl HalfType {
    /// The bits of `x` rounded to this type (to nearest, ties to even; NaN stays NaN and
    /// values past the type's range become infinite, as a GPU's conversion does).
    ///
    /// ```
    /// use repgeom_linalg::HalfType;
    /// assert_eq!(HalfType::Bf16.round(1.0 + 1.0 / 256.0), HalfType::Bf16.round(1.0));
    /// assert_eq!(HalfType::Bf16.widen(HalfType::Bf16.round(3.0)), 3.0);
    /// assert!(HalfType::F16.widen(HalfType::F16.round(1e5)).is_infinite());
    /// ```
    pub fn round(self, x: f32) -> u16 {
        match self {
            HalfType::Bf16 => half::bf16::from_f32(x).to_bits(),
            HalfType::F16 => half::f16::from_f32(x).to_bits(),
        }
    }

    /// [`Self::round`] of every value of `x` into `out` (as long as `x`).
    pub fn round_into(self, x: &[f32], out: &mut [u16]) {
        match self {
            HalfType::Bf16 => {
                // branch-free, so that it vectorises: to nearest even; a NaN keeps its sign
                // and gets a quiet bit, as `half::bf16::from_f32`
                for (o, v) in out.iter_mut().zip(x) {
                    let b = v.to_bits();
                    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
                    let nan = ((b >> 16) | 0x40) as u16;
                    *o = if b & 0x7fff_ffff > 0x7f80_0000 {
                        nan
                    } else {
                        rounded as u16
                    };
                }
            }
            HalfType::F16 => {
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                out.reinterpret_cast_mut::<half::f16>()
                    .convert_from_f32_slice(x);
            }
        }
    }

    /// The `f32` value of bits of this type (exact).
    pub fn widen(self, bits: u16) -> f32 {
        match self {
            HalfType::Bf16 => half::bf16::from_bits(bits).to_f32(),
            HalfType::F16 => half::f16::from_bits(bits).to_f32(),
        }
    }

    /// `x` rounded to this type and widened back, in place (on the pool unless `Par::Seq`):
    /// what the products see of an `f32` input.
    pub fn round_in_place(self, x: &mut [f32], par: Par) {
        // through `round_into`, which vectorises, a stack buffer at a time
        let f = |c: &mut [f32]| {
            let mut bits = [0u16; 256];
            for part in c.chunks_mut(256) {
                let bits = &mut bits[..part.len()];
                self.round_into(part, bits);
                part.iter_mut()
                    .zip(bits.iter())
                    .for_each(|(v, &b)| *v = self.widen(b));
            }
        };
        match par {
            Par::Seq => f(x),
            _ => x.par_chunks_mut(1 << 14).for_each(f),
        }
    }

    /// Whether products of this type run on AMX tiles on this machine (bf16 where
    /// [`amx_bf16`]); the other products are widened to `f32` (see the module's notes).
    ///
    /// ```
    /// use repgeom_linalg::HalfType;
    /// assert!(!HalfType::F16.on_amx());
    /// assert_eq!(HalfType::Bf16.on_amx(), repgeom_linalg::amx_bf16());
    /// ```
    pub fn on_amx(self) -> bool {
        self == HalfType::Bf16 && amx_bf16()
    }
}

/// Whether this machine computes bf16 products with AMX: the CPU has `amx-tile` and
/// `amx-bf16`, and the kernel lets this process use the tile registers (Linux 5.16 or later,
/// asked once). Decided once per process.
pub fn amx_bf16() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(amx::enable)
}

/// One side of a half-precision product: a `rows × cols` matrix (row-major in meaning) of
/// [`HalfType`] values, laid out for the kernel that will multiply it (AMX tiles for bf16 on
/// a machine with AMX, plain rows otherwise).
#[derive(Debug, Clone)]
pub struct HalfMatrix {
    rows: usize,
    cols: usize,
    ty: HalfType,
    layout: Layout,
    data: Vec<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Row-major `rows × cols`.
    Rows,
    /// AMX, left side: per block of 16 rows and 32 columns one 16 × 32 tile (row `r` holds
    /// row `r`'s 32 values), blocks ordered row block first; rows padded with zeros to a
    /// multiple of 32, columns to a multiple of 32.
    Left,
    /// AMX, right side (`b` of `a bᵀ`): per block of 16 rows and 32 columns one 16 × 32 tile
    /// whose row `p` holds, for each of the 16 rows `i`, the values of columns `2p` and
    /// `2p + 1` (the pairs `tdpbf16ps` multiplies), padded as [`Layout::Left`].
    Right,
}

impl HalfMatrix {
    /// The left side `a` of `a bᵀ`: `x` (`rows × cols`, row-major) rounded to `ty`, on the
    /// pool unless `par` is `Par::Seq`.
    ///
    /// # Panics
    /// If `x.len() != rows * cols`.
    pub fn left(x: &[f32], rows: usize, cols: usize, ty: HalfType, par: Par) -> Self {
        Self::left_for(x, rows, cols, ty, ty.on_amx(), par)
    }

    /// The right side `b` of `a bᵀ`: `bits` (`rows × cols` values of `ty`, row-major), as a
    /// weight matrix `[out, in]` is stored, on the pool unless `par` is `Par::Seq`.
    ///
    /// # Panics
    /// If `bits.len() != rows * cols`.
    pub fn right(bits: &[u16], rows: usize, cols: usize, ty: HalfType, par: Par) -> Self {
        Self::right_for(bits, rows, cols, ty, ty.on_amx(), par)
    }

    /// [`Self::left`] for the AMX kernel (`amx`, bf16 only) or the widened one.
    pub(crate) fn left_for(
        x: &[f32],
        rows: usize,
        cols: usize,
        ty: HalfType,
        amx: bool,
        par: Par,
    ) -> Self {
        assert_eq!(x.len(), rows * cols, "a {rows} x {cols} matrix");
        // one block of 16 rows (AMX) or one row: each tile row is 32 consecutive values
        Self::build(rows, cols, ty, false, amx, par, |r, c, out| {
            let x = &x[r * cols + c..r * cols + c + out.len()];
            if amx {
                amx::round_into(x, out);
            } else {
                ty.round_into(x, out);
            }
        })
    }

    /// [`Self::right`] for the AMX kernel (`amx`, bf16 only) or the widened one.
    pub(crate) fn right_for(
        bits: &[u16],
        rows: usize,
        cols: usize,
        ty: HalfType,
        amx: bool,
        par: Par,
    ) -> Self {
        assert_eq!(bits.len(), rows * cols, "a {rows} x {cols} matrix");
        Self::build(rows, cols, ty, true, amx, par, |r, c, out| {
            out.copy_from_slice(&bits[r * cols + c..r * cols + c + out.len()]);
        })
    }

    /// The matrix whose row `r` from column `c` on `row(r, c, out)` writes into `out` (at
    /// most 32 values, the rest of the matrix's row), laid out for the AMX kernel (`amx`) or
    /// in plain rows.
    fn build(
        rows: usize,
        cols: usize,
        ty: HalfType,
        right: bool,
        amx: bool,
        par: Par,
        row: impl Fn(usize, usize, &mut [u16]) + Sync,
    ) -> Self {
        assert!(!amx || ty == HalfType::Bf16, "AMX multiplies bf16");
        if !amx {
            // every value written below: no zeroing pass first
            let mut data = vec![0u16; rows * cols];
            let fill = |(r, out): (usize, &mut [u16])| row(r, 0, out);
            match par {
                Par::Seq => data.chunks_mut(cols.max(1)).enumerate().for_each(fill),
                _ => data.par_chunks_mut(cols.max(1)).enumerate().for_each(fill),
            }
            return Self {
                rows,
                cols,
                ty,
                layout: Layout::Rows,
                data,
            };
        }
        let (rb, kb) = (rows.div_ceil(HALF_BLOCK) * 2, cols.div_ceil(HALF_BLOCK));
        let mut data = zeroed(rb * kb * TILE, par);
        // one block of 16 rows, all its tiles
        let fill = |(i, blk): (usize, &mut [u16])| {
            let mut line = [0u16; HALF_BLOCK];
            for k in 0..kb {
                let (c, tile) = (k * HALF_BLOCK, &mut blk[k * TILE..(k + 1) * TILE]);
                let width = (cols - c).min(HALF_BLOCK);
                for r in 0..16.min(rows.saturating_sub(i * 16)) {
                    if right {
                        // row r's pairs of columns (2p, 2p + 1) into tile row p, place r
                        row(i * 16 + r, c, &mut line[..width]);
                        line[width..].fill(0);
                        for (p, pair) in line.chunks_exact(2).enumerate() {
                            tile[p * 32 + 2 * r..p * 32 + 2 * r + 2].copy_from_slice(pair);
                        }
                    } else {
                        row(i * 16 + r, c, &mut tile[r * 32..r * 32 + width]);
                    }
                }
            }
        };
        match par {
            Par::Seq => data
                .chunks_mut((kb * TILE).max(1))
                .enumerate()
                .for_each(fill),
            _ => data
                .par_chunks_mut((kb * TILE).max(1))
                .enumerate()
                .for_each(fill),
        }
        Self {
            rows,
            cols,
            ty,
            layout: if right { Layout::Right } else { Layout::Left },
            data,
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The type of the values.
    pub fn ty(&self) -> HalfType {
        self.ty
    }

    /// Whether its products run on AMX.
    pub fn amx(&self) -> bool {
        self.layout != Layout::Rows
    }

    /// Rows `range` widened to `f32`, row-major (the widened kernel's input).
    fn widened(&self, range: Range<usize>, par: Par) -> Vec<f32> {
        let cols = self.cols;
        let src = &self.data[range.start * cols..range.end * cols];
        let mut out = vec![0f32; src.len()];
        let f = |(o, s): (&mut [f32], &[u16])| {
            o.iter_mut()
                .zip(s)
                .for_each(|(o, &s)| *o = self.ty.widen(s));
        };
        match par {
            Par::Seq => out.chunks_mut(1 << 14).zip(src.chunks(1 << 14)).for_each(f),
            _ => out
                .par_chunks_mut(1 << 14)
                .zip(src.par_chunks(1 << 14))
                .for_each(f),
        }
        out
    }
}

/// `n` zeros, written by chunks on the pool unless `par` is `Par::Seq`: `vec![0; n]` is one
/// `calloc`, which the allocator meets by zeroing reused memory on the calling thread while
/// the pool waits (about 2 % of a Pythia-70M-shaped run at `stored`, laying out inputs).
fn zeroed(n: usize, par: Par) -> Vec<u16> {
    match par {
        Par::Seq => vec![0; n],
        _ => {
            let mut v = Vec::new();
            (0..n)
                .into_par_iter()
                .with_min_len(1 << 15)
                .map(|_| 0)
                .collect_into_vec(&mut v);
            v
        }
    }
}

/// Values per tile (16 rows of 64 bytes).
const TILE: usize = 16 * 32;

/// `dst += a[a_rows] b[b_rows]ᵀ`, `dst` row-major `a_rows.len() × b_rows.len()`: the products
/// of `a`'s and `b`'s half-precision values accumulated in `f32` (see the module's notes), on
/// the pool unless `par` is `Par::Seq`. Each entry is summed in one order, so the result does
/// not depend on the thread count.
///
/// # Panics
/// If `a` and `b` differ in type or columns, if `a` was not built by [`HalfMatrix::left`] or
/// `b` by [`HalfMatrix::right`] (AMX), if a range is out of bounds or does not start at a
/// multiple of [`HALF_BLOCK`] (AMX), or if `dst` has another length: each a bug in the
/// caller.
///
/// ```
/// use repgeom_linalg::{HalfMatrix, HalfType, Par, matmul_abt_add_half};
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
/// let w: Vec<u16> = [1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5].iter()
///     .map(|&v| HalfType::Bf16.round(v)).collect(); // 2 x 3
/// let a = HalfMatrix::left(&x, 2, 3, HalfType::Bf16, Par::Seq);
/// let b = HalfMatrix::right(&w, 2, 3, HalfType::Bf16, Par::Seq);
/// let mut y = vec![10.0f32; 4];
/// matmul_abt_add_half(&mut y, &a, 0..2, &b, 0..2, Par::Seq);
/// assert_eq!(y, [8.0, 13.0, 8.0, 17.5]);
/// ```
pub fn matmul_abt_add_half(
    dst: &mut [f32],
    a: &HalfMatrix,
    a_rows: Range<usize>,
    b: &HalfMatrix,
    b_rows: Range<usize>,
    par: Par,
) {
    assert!(
        a.ty == b.ty && a.cols == b.cols && a.amx() == b.amx(),
        "sides of one product"
    );
    assert!(
        a_rows.start <= a_rows.end
            && a_rows.end <= a.rows
            && b_rows.start <= b_rows.end
            && b_rows.end <= b.rows,
        "rows in range"
    );
    let (m, n, k) = (a_rows.len(), b_rows.len(), a.cols);
    assert_eq!(dst.len(), m * n, "a {m} x {n} output");
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    if !a.amx() {
        let (x, w) = (a.widened(a_rows, par), b.widened(b_rows, par));
        crate::kernel::product_in_tasks(
            MatMut::from_row_major_slice_mut(dst, m, n),
            Accum::Add,
            MatRef::from_row_major_slice(&x, m, k),
            MatRef::from_row_major_slice(&w, n, k).transpose(),
            par,
        );
        return;
    }
    assert!(
        a.layout == Layout::Left && b.layout == Layout::Right,
        "a left and a right side"
    );
    assert!(
        a_rows.start.is_multiple_of(HALF_BLOCK) && b_rows.start.is_multiple_of(HALF_BLOCK),
        "ranges start at blocks"
    );
    amx::product(dst, a, a_rows, b, b_rows, par);
}

/// The AMX kernel.
mod amx {
    use super::{HALF_BLOCK, HalfMatrix, Par, Range, TILE};
    use rayon::prelude::*;

    /// Rows and columns of the output one task computes: its share of `a` (at most
    /// `TASK_ROWS` × the inner dimension) stays in L2 while it walks `b`'s blocks.
    const TASK_ROWS: usize = 128;
    const TASK_COLS: usize = 512;

    /// The tile configuration (palette 1): eight tiles of 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            c[16 + 2 * t] = 64; // bytes per row (u16 little-endian)
            c[48 + t] = 16; // rows
            t += 1;
        }
        Config(c)
    };

    #[cfg(target_arch = "x86_64")]
    pub(super) fn enable() -> bool {
        use std::arch::x86_64::__cpuid_count;
        let max = __cpuid_count(0, 0).eax;
        if max < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx; // leaf 7 exists (checked)
        let (amx_bf16, amx_tile) = (edx >> 22 & 1 == 1, edx >> 24 & 1 == 1);
        if !(amx_bf16 && amx_tile) {
            return false;
        }
        // Linux: permission to use the tile data (ARCH_REQ_XCOMP_PERM = 0x1023,
        // XFEATURE_XTILEDATA = 18), for every thread of the process.
        #[cfg(target_os = "linux")]
        {
            let ret: i64;
            // SAFETY: the arch_prctl system call (158) with these arguments only asks the
            // kernel for a permission; it touches no memory of this process.
            unsafe {
                std::arch::asm!(
                    "syscall",
                    inlateout("rax") 158i64 => ret,
                    in("rdi") 0x1023i64,
                    in("rsi") 18i64,
                    lateout("rcx") _,
                    lateout("r11") _,
                    options(nostack)
                );
            }
            ret == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn enable() -> bool {
        false
    }

    /// bf16 rounding for the AMX kernel, which reads a subnormal bf16 input as zero: the
    /// values of `x` to nearest even into `out`, a subnormal as zero (`vcvtne2ps2bf16`, 32
    /// values an instruction, where the CPU has AVX512-BF16; AMX CPUs do), else
    /// [`HalfType::round_into`]. The products are the same either way.
    pub(super) fn round_into(x: &[f32], out: &mut [u16]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512bf16") {
            // SAFETY: the CPU has the instructions (checked above).
            unsafe { round_avx512(x, out) };
            return;
        }
        super::HalfType::Bf16.round_into(x, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bf16,avx512f")]
    unsafe fn round_avx512(x: &[f32], out: &mut [u16]) {
        use std::arch::x86_64::{
            __m512bh, __m512i, _mm512_cvtne2ps_pbh, _mm512_loadu_ps, _mm512_storeu_si512,
        };
        let n = x.len().min(out.len());
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: 32 values of `x` and of `out` from `i` on are in bounds.
            unsafe {
                let lo = _mm512_loadu_ps(x.as_ptr().add(i));
                let hi = _mm512_loadu_ps(x.as_ptr().add(i + 16));
                let r = _mm512_cvtne2ps_pbh(hi, lo);
                let r = std::mem::transmute::<__m512bh, __m512i>(r);
                _mm512_storeu_si512(out.as_mut_ptr().add(i).cast(), r);
            }
            i += 32;
        }
        super::HalfType::Bf16.round_into(&x[i..n], &mut out[i..n]);
    }

    /// The output's base pointer, shared by tasks that each write their own rectangle.
    struct Out(*mut f32);
    // SAFETY: the tasks write disjoint rectangles of one slice that outlives them.
    unsafe impl Send for Out {}
    // SAFETY: as above.
    unsafe impl Sync for Out {}
    impl Out {
        fn get(&self) -> *mut f32 {
            self.0
        }
    }

    pub(super) fn product(
        dst: &mut [f32],
        a: &HalfMatrix,
        a_rows: Range<usize>,
        b: &HalfMatrix,
        b_rows: Range<usize>,
        par: Par,
    ) {
        let (m, n) = (a_rows.len(), b_rows.len());
        let kb = a.cols.div_ceil(HALF_BLOCK);
        let (tm, tn) = (m.div_ceil(TASK_ROWS), n.div_ceil(TASK_COLS));
        let out = Out(dst.as_mut_ptr());
        let task = |t: usize| {
            let (r0, c0) = ((t / tn) * TASK_ROWS, (t % tn) * TASK_COLS);
            let (r1, c1) = ((r0 + TASK_ROWS).min(m), (c0 + TASK_COLS).min(n));
            let mut edge = Tiles([0.0; 4 * 256]);
            // SAFETY: the configuration is valid for palette 1; the tiles are released below.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                std::arch::asm!("ldtilecfg [{0}]", in(reg) CONFIG.0.as_ptr(), options(nostack));
            }
            for cb in (c0..c1).step_by(HALF_BLOCK) {
                let bj = (b_rows.start + cb) / 16;
                for rb in (r0..r1).step_by(HALF_BLOCK) {
                    let ai = (a_rows.start + rb) / 16;
                    let (rows, cols) = ((r1 - rb).min(HALF_BLOCK), (c1 - cb).min(HALF_BLOCK));
                    let full = rows == HALF_BLOCK && cols == HALF_BLOCK;
                    // a whole block is summed into `dst` in place; a block at an edge through
                    // `edge`, a copy of its part of `dst`
                    if !full {
                        for r in 0..HALF_BLOCK {
                            let line = &mut edge.0[r * HALF_BLOCK..(r + 1) * HALF_BLOCK];
                            line.fill(0.0);
                            if r < rows {
                                // SAFETY: row rb + r, columns cb..cb + cols of `dst` are this
                                // task's (inside its rectangle) and in bounds.
                                let src = unsafe {
                                    std::slice::from_raw_parts(
                                        out.get().add((rb + r) * n + cb),
                                        cols,
                                    )
                                };
                                line[..cols].copy_from_slice(src);
                            }
                        }
                    }
                    let (c, ldc) = if full {
                        // SAFETY: as above, the block's first entry.
                        (unsafe { out.get().add(rb * n + cb) }, n)
                    } else {
                        (edge.0.as_mut_ptr(), HALF_BLOCK)
                    };
                    // SAFETY: blocks ai, ai + 1 of `a` and bj, bj + 1 of `b` exist (rows are
                    // padded to multiples of 32 and the ranges start at multiples of 32), each
                    // `kb` tiles long; `c` is 32 rows of 32 values `ldc` apart, this task's.
                    unsafe {
                        block(
                            a.data.as_ptr().add(ai * kb * TILE),
                            a.data.as_ptr().add((ai + 1) * kb * TILE),
                            b.data.as_ptr().add(bj * kb * TILE),
                            b.data.as_ptr().add((bj + 1) * kb * TILE),
                            kb,
                            c,
                            ldc,
                        );
                    }
                    if !full {
                        for r in 0..rows {
                            // SAFETY: as above.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(
                                    out.get().add((rb + r) * n + cb),
                                    cols,
                                )
                            };
                            dst.copy_from_slice(&edge.0[r * HALF_BLOCK..r * HALF_BLOCK + cols]);
                        }
                    }
                }
            }
            // SAFETY: releases the tiles configured above.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                std::arch::asm!("tilerelease", options(nostack));
            }
        };
        match par {
            Par::Seq => (0..tm * tn).for_each(task),
            _ => (0..tm * tn).into_par_iter().for_each(task),
        }
    }

    #[repr(C, align(64))]
    struct Tiles([f32; 4 * 256]);

    /// One 32 × 32 block of the output, `c` (rows `ldc` values apart), plus its products summed
    /// over `kb` blocks of 32 inner values, in four 16 × 16 tiles (rows 0–15 × columns 0–15,
    /// 0–15 × 16–31, 16–31 × 0–15, 16–31 × 16–31): `a0`, `a1` the two left row blocks,
    /// `b0`, `b1` the two right ones.
    ///
    /// # Safety
    /// The tiles are configured (`ldtilecfg` of `CONFIG`); each of `a0`..`b1` has `kb` tiles;
    /// `c` has 32 rows of 32 values, `ldc` apart, no other thread's.
    #[cfg(target_arch = "x86_64")]
    unsafe fn block(
        a0: *const u16,
        a1: *const u16,
        b0: *const u16,
        b1: *const u16,
        kb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: see the function's contract; every load and store stays in its tiles.
        unsafe {
            let (c1, c2) = (c.add(16), c.add(16 * ldc));
            std::arch::asm!(
                "tileloadd tmm0, [{c0} + {sc}*1]",
                "tileloadd tmm1, [{c1} + {sc}*1]",
                "tileloadd tmm2, [{c2} + {sc}*1]",
                "tileloadd tmm3, [{c3} + {sc}*1]",
                "2:",
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {s}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {s}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "add {a0}, 1024",
                "add {a1}, 1024",
                "add {b0}, 1024",
                "add {b1}, 1024",
                "dec {kb}",
                "jnz 2b",
                "tilestored [{c0} + {sc}*1], tmm0",
                "tilestored [{c1} + {sc}*1], tmm1",
                "tilestored [{c2} + {sc}*1], tmm2",
                "tilestored [{c3} + {sc}*1], tmm3",
                a0 = inout(reg) a0 => _,
                a1 = inout(reg) a1 => _,
                b0 = inout(reg) b0 => _,
                b1 = inout(reg) b1 => _,
                kb = inout(reg) kb => _,
                s = in(reg) 64usize,
                sc = in(reg) 4 * ldc,
                c0 = in(reg) c,
                c1 = in(reg) c1,
                c2 = in(reg) c2,
                c3 = in(reg) c2.add(16),
                options(nostack)
            );
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn block(
        _: *const u16,
        _: *const u16,
        _: *const u16,
        _: *const u16,
        _: usize,
        _: *mut f32,
    ) {
        unreachable!("AMX is enabled on x86_64 only")
    }
}

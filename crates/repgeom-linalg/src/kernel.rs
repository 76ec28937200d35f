//! Kernel numerics for the metric registry: singular values of a point cloud, Gram matrices,
//! the linear HSIC estimators behind CKA and their feature-space form. All in `f64`.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};

use crate::{Error, Result};

/// All `min(N, d)` singular values of `x`, non-increasing.
///
/// Computed as the square roots of the eigenvalues of the smaller Gram matrix ($X^\top X$ or
/// $XX^\top$, one GEMM with `par`), eigenvalues only, sequentially, so the values are
/// bit-identical at any thread count. In `f64` this resolves singular values down to about
/// $\sigma_1\sqrt{n\,\varepsilon_{f64}}$ (~1e-6 relative), finer than the precision of `f32`
/// activations; it is 2-4x faster than a bidiagonal SVD at `d = 2048`.
pub fn singular_values(x: MatRef<'_, f64>, what: &str, par: Par) -> Result<Vec<f64>> {
    let (m, n) = (x.nrows(), x.ncols());
    let size = m.min(n);
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut g = Mat::<f64>::zeros(size, size);
    if n <= m {
        product_in_tasks(g.as_mut(), Accum::Replace, x.transpose(), x, par);
    } else {
        product_in_tasks(g.as_mut(), Accum::Replace, x, x.transpose(), par);
    }
    gram_singular_values(g.as_ref(), what)
}

/// The singular values of a matrix `X` from its Gram matrix `g` ($X^\top X$ or $XX^\top$,
/// symmetric, lower triangle read): the square roots of its eigenvalues (negative rounding
/// clamped to zero), non-increasing, computed sequentially. [`singular_values`] is this on the
/// Gram of the points; a covariance accumulated over batches gives it without the points.
///
/// ```
/// use repgeom_linalg::{Mat, gram_singular_values};
/// let g = Mat::<f64>::from_fn(2, 2, |i, j| if i == j { [9.0, 4.0][i] } else { 0.0 });
/// assert_eq!(gram_singular_values(g.as_ref(), "toy").unwrap(), [3.0, 2.0]);
/// ```
pub fn gram_singular_values(g: MatRef<'_, f64>, what: &str) -> Result<Vec<f64>> {
    use faer::linalg::evd::{ComputeEigenvectors, self_adjoint_evd, self_adjoint_evd_scratch};
    let size = g.nrows();
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut s = faer::diag::Diag::<f64>::zeros(size);
    let scratch = self_adjoint_evd_scratch::<f64>(
        size,
        ComputeEigenvectors::No,
        Par::Seq,
        Default::default(),
    );
    self_adjoint_evd(
        g,
        s.as_mut(),
        None,
        Par::Seq,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|_| Error::NoConvergence {
        what: format!("eigenvalues of the Gram matrix of {what}"),
    })?;
    let mut values: Vec<f64> = s
        .column_vector()
        .iter()
        .map(|v| v.max(0.0).sqrt())
        .collect();
    values.sort_by(|a, b| b.total_cmp(a));
    Ok(values)
}

/// The Gram matrix of the rows of `x` (`N × d`): $K = XX^\top$ (`N × N`).
pub fn gram_rows(x: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    let n = x.nrows();
    let mut g = Mat::<f64>::zeros(n, n);
    product_in_tasks(g.as_mut(), Accum::Replace, x, x.transpose(), par);
    g
}

/// $\lVert X^\top Y\rVert_F^2$ for `x` (`N × d_a`) and `y` (`N × d_b`) over the same rows: the
/// biased linear HSIC $\mathrm{tr}(KL)$ of the row Grams $K = XX^\top$, $L = YY^\top$ (for
/// centred features, up to $1/(N-1)^2$) computed in feature space, without an `N × N` matrix:
/// `O(N d_a d_b)` time and `d_a × d_b` memory.
///
/// ```
/// use repgeom_linalg::{Mat, Par, cross_frobenius_sq, gram_rows, hsic_biased_unscaled};
/// let x = Mat::<f64>::from_fn(6, 2, |i, j| (i * 3 + j) as f64 % 5.0 - 2.0);
/// let y = Mat::<f64>::from_fn(6, 3, |i, j| (i + 2 * j) as f64 % 4.0 - 1.5);
/// let via_grams = hsic_biased_unscaled(
///     gram_rows(x.as_ref(), Par::Seq).as_ref(),
///     gram_rows(y.as_ref(), Par::Seq).as_ref(),
/// );
/// let direct = cross_frobenius_sq(x.as_ref(), y.as_ref(), Par::Seq);
/// assert!((direct - via_grams).abs() <= 1e-12 * via_grams.abs());
/// ```
#[track_caller]
pub fn cross_frobenius_sq(x: MatRef<'_, f64>, y: MatRef<'_, f64>, par: Par) -> f64 {
    assert_eq!(
        x.nrows(),
        y.nrows(),
        "cross_frobenius_sq: x and y need the same rows"
    );
    let mut c = Mat::<f64>::zeros(x.ncols(), y.ncols());
    product_in_tasks(c.as_mut(), Accum::Replace, x.transpose(), y, par);
    let mut sum = 0.0;
    for j in 0..c.ncols() {
        for i in 0..c.nrows() {
            sum += c[(i, j)] * c[(i, j)];
        }
    }
    sum
}

/// The biased (V-statistic) linear HSIC of two Gram matrices of **centred** features, up to
/// the factor $1/(N-1)^2$ (which cancels in CKA): $\langle K, L\rangle_F = \mathrm{tr}(KL)$.
#[track_caller]
pub fn hsic_biased_unscaled(k: MatRef<'_, f64>, l: MatRef<'_, f64>) -> f64 {
    assert_eq!(
        k.shape(),
        l.shape(),
        "hsic: Gram matrices must have the same shape"
    );
    let mut sum = 0.0;
    for j in 0..k.ncols() {
        for i in 0..k.nrows() {
            sum += k[(i, j)] * l[(i, j)];
        }
    }
    sum
}

/// The unbiased HSIC estimator of Song et al. (2012), eq. 5, for two `N × N` Gram matrices
/// (`N ≥ 4`); the diagonals are ignored (set to zero):
///
/// $$\mathrm{HSIC}_1 = \frac{1}{N(N-3)}\Big[\mathrm{tr}(\tilde K\tilde L)
/// + \frac{\mathbf 1^\top\tilde K\mathbf 1\;\mathbf 1^\top\tilde L\mathbf 1}{(N-1)(N-2)}
/// - \frac{2}{N-2}\,\mathbf 1^\top\tilde K\tilde L\mathbf 1\Big]$$
#[track_caller]
pub fn hsic_unbiased(k: MatRef<'_, f64>, l: MatRef<'_, f64>) -> Result<f64> {
    assert_eq!(
        k.shape(),
        l.shape(),
        "hsic: Gram matrices must have the same shape"
    );
    assert_eq!(k.nrows(), k.ncols(), "hsic: Gram matrices must be square");
    let n = k.nrows();
    if n < 4 {
        return Err(Error::TooFewPoints {
            what: "unbiased HSIC".into(),
            n,
            min: 4,
        });
    }
    let mut trace = 0.0;
    let mut row_k = vec![0.0f64; n];
    let mut row_l = vec![0.0f64; n];
    for j in 0..n {
        for i in 0..n {
            if i != j {
                let (kv, lv) = (k[(i, j)], l[(i, j)]);
                trace += kv * lv;
                row_k[j] += kv;
                row_l[j] += lv;
            }
        }
    }
    let sum_k: f64 = row_k.iter().sum();
    let sum_l: f64 = row_l.iter().sum();
    // 1ᵀ K̃ L̃ 1 = Σ_j (K̃1)_j (L̃1)_j for symmetric K̃, L̃.
    let cross: f64 = row_k.iter().zip(&row_l).map(|(a, b)| a * b).sum();
    let nf = n as f64;
    let value = (trace + sum_k * sum_l / ((nf - 1.0) * (nf - 2.0)) - 2.0 / (nf - 2.0) * cross)
        / (nf * (nf - 3.0));
    Ok(value)
}

/// `dst ← a bᵀ` in `f32` for `a` (`m × k`) and `b` (`n × k`): the product behind extraction's
/// loss logits (`a` a block of final hidden states, `b` the readout), written into a buffer
/// the caller reuses. Each entry's sum runs over `k` in one order at any thread count.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par, matmul_abt_f32};
/// let a = MatRef::from_row_major_slice(&[1.0f32, 2.0, 3.0, 4.0], 2, 2);
/// let b = MatRef::from_row_major_slice(&[1.0f32, 0.0, 1.0, 1.0, 0.0, 2.0], 3, 2);
/// let mut dst = Mat::<f32>::zeros(2, 3);
/// matmul_abt_f32(dst.as_mut(), a, b, Par::Seq);
/// assert_eq!(dst[(1, 1)], 7.0);
/// ```
pub fn matmul_abt_f32(dst: MatMut<'_, f32>, a: MatRef<'_, f32>, b: MatRef<'_, f32>, par: Par) {
    product_in_tasks(dst, Accum::Replace, a, b.transpose(), par);
}

/// `dst ← dst + a bᵀ` in `f32`, the same product as [`matmul_abt_f32`] added to what `dst`
/// holds: extraction's linear layers (`a` the activations, `b` the `[out, in]` weight, `dst`
/// pre-filled with the bias rows). Each entry's sum runs over `k` in one order at any thread
/// count, and is added to `dst` once, at the end.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par, matmul_abt_add_f32};
/// let a = MatRef::from_row_major_slice(&[1.0f32, 2.0, 3.0, 4.0], 2, 2);
/// let b = MatRef::from_row_major_slice(&[1.0f32, 0.0, 1.0, 1.0, 0.0, 2.0], 3, 2);
/// let mut dst = Mat::<f32>::from_fn(2, 3, |_, j| j as f32);
/// matmul_abt_add_f32(dst.as_mut(), a, b, Par::Seq);
/// assert_eq!(dst[(1, 1)], 8.0);
/// ```
pub fn matmul_abt_add_f32(dst: MatMut<'_, f32>, a: MatRef<'_, f32>, b: MatRef<'_, f32>, par: Par) {
    product_in_tasks(dst, Accum::Add, a, b.transpose(), par);
}

/// Rows and columns of `dst` in one task of a parallel product ([`product_in_tasks`]): a fixed
/// square, so a task's size depends on the shapes only (square, so that `gram_lower`'s
/// diagonal tasks are triangles). Measured (`cargo run --release -p repgeom-linalg --example
/// f32_product_tasks`, see `docs/extraction.md`), 256 × 256 sequential products at two
/// threads ran at 0.99–1.31× the speed of faer's own parallel product on Pythia-70M and 410M
/// layer shapes, and they leave enough equal tasks (16 to 128 per product at 2,048 rows) for
/// 16 threads.
pub(crate) const TASK: usize = 256;

/// Whether a product into an `m × n` output runs as one sequential product: under `Par::Seq`
/// or a pool of one thread, or when the output is one task.
pub(crate) fn one_task(par: Par, m: usize, n: usize) -> bool {
    par.degree() == 1 || (m <= TASK && n <= TASK)
}

/// `dst ← accum(dst, lhs · rhs)`: with `Par::Seq` faer's product; on the pool, `dst` cut into
/// [`TASK`] × [`TASK`] squares, each one sequential faer product on one
/// worker. faer's parallel product splits its packing and its loops over `k` among the
/// threads and meets at a barrier per step; the tasks share nothing and wait for nothing.
/// Every entry's sum over `k` runs in the same order either way (faer's order does not depend
/// on the output's size: the tests compare the bits), so the result is the same at any thread
/// count.
pub(crate) fn product_in_tasks<T: faer::traits::ComplexField>(
    dst: MatMut<'_, T>,
    accum: Accum,
    lhs: MatRef<'_, T>,
    rhs: MatRef<'_, T>,
    par: Par,
) {
    use rayon::prelude::*;
    if one_task(par, dst.nrows(), dst.ncols()) {
        matmul(dst, accum, lhs, rhs, T::one_impl(), Par::Seq);
        return;
    }
    output_tasks(dst)
        .into_par_iter()
        .for_each(|(r0, c0, tile)| {
            let (r, c) = (tile.nrows(), tile.ncols());
            let (lhs, rhs) = (lhs.subrows(r0, r), rhs.subcols(c0, c));
            matmul(tile, accum, lhs, rhs, T::one_impl(), Par::Seq);
        });
}

/// `dst` cut into its [`TASK`] × [`TASK`] squares (less at the last row and column), row by row:
/// `(first row, first column, the square)`.
pub(crate) fn output_tasks<T>(dst: MatMut<'_, T>) -> Vec<(usize, usize, MatMut<'_, T>)> {
    let (m, n) = (dst.nrows(), dst.ncols());
    let mut tasks = Vec::with_capacity(m.div_ceil(TASK) * n.div_ceil(TASK));
    let mut rows = dst;
    let mut r0 = 0;
    while r0 < m {
        let (mut line, rest) = rows.split_at_row_mut(TASK.min(m - r0));
        rows = rest;
        let mut c0 = 0;
        while c0 < n {
            let (tile, rest) = line.split_at_col_mut(TASK.min(n - c0));
            line = rest;
            tasks.push((r0, c0, tile));
            c0 += TASK;
        }
        r0 += TASK;
    }
    tasks
}

/// `dst ← dst + aᵀ b` in `f64` for `a` (`m × p`) and `b` (`m × q`): a cross-product summed
/// over the rows of a batch, for accumulators that see their rows in batches (streaming CKA).
/// Each entry's sum over the batch's rows runs in one order at any thread count and is added
/// to `dst` once.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par, matmul_atb_add_f64};
/// let a = MatRef::from_row_major_slice(&[1.0, 2.0, 3.0, 4.0], 2, 2);
/// let b = MatRef::from_row_major_slice(&[1.0, 0.0, 1.0, 1.0, 0.0, 2.0], 2, 3);
/// let mut dst = Mat::<f64>::zeros(2, 3);
/// matmul_atb_add_f64(dst.as_mut(), a, b, Par::Seq);
/// matmul_atb_add_f64(dst.as_mut(), a, b, Par::Seq);
/// assert_eq!(dst[(1, 2)], 2.0 * (2.0 + 8.0));
/// ```
pub fn matmul_atb_add_f64(dst: MatMut<'_, f64>, a: MatRef<'_, f64>, b: MatRef<'_, f64>, par: Par) {
    product_in_tasks(dst, Accum::Add, a.transpose(), b, par);
}

/// `dst += aᵀ a` for a symmetric `dst` (`d × d`, `a` of `d` columns): the lower triangle by
/// faer's triangular product, half the work of [`matmul_atb_add_f64`], then mirrored into the
/// upper one, so `dst` stays symmetric. The second moments of a covariance accumulated batch by
/// batch. Each entry's sum runs in one order at any thread count.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par, syrk_add_f64};
/// let a = MatRef::from_row_major_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, 2);
/// let mut dst = Mat::<f64>::zeros(2, 2);
/// syrk_add_f64(dst.as_mut(), a, Par::Seq);
/// assert_eq!((dst[(0, 0)], dst[(1, 0)], dst[(0, 1)], dst[(1, 1)]), (35.0, 44.0, 44.0, 56.0));
/// ```
pub fn syrk_add_f64(mut dst: MatMut<'_, f64>, a: MatRef<'_, f64>, par: Par) {
    crate::decomp::gram_lower(dst.as_mut(), a, Accum::Add, par);
    for j in 0..dst.ncols() {
        for i in 0..j {
            dst[(i, j)] = dst[(j, i)];
        }
    }
}

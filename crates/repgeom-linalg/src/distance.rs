//! Pairwise cosine distances through one GEMM of row-normalised points.

use faer::linalg::matmul::triangular::{BlockStructure, matmul as tri_matmul};
use faer::{Accum, Mat, MatRef, Par};

use crate::{Error, Result};

/// Number of unordered pairs of `n` points: $n(n-1)/2$.
pub fn condensed_len(n: usize) -> usize {
    n * n.saturating_sub(1) / 2
}

/// Index of the pair `(i, j)`, `i < j`, in condensed order (SciPy's `pdist` order: row-major
/// over the strict upper triangle).
#[track_caller]
pub fn pair_index(n: usize, i: usize, j: usize) -> usize {
    assert!(i < j && j < n, "pair_index needs i < j < n");
    i * n - i * (i + 1) / 2 + (j - i - 1)
}

/// Divides every row by its Euclidean norm (accumulated in `f64`), returning `f32` rows.
///
/// A row whose norm is zero, or below `f32::EPSILON` times the largest row norm (below what
/// `f32` data can resolve, e.g. a point equal to the mean after centring), has no direction:
/// that is an [`Error::ZeroNorm`] naming `what` and the row.
pub fn normalize_rows<T: Copy + Into<f64>>(x: MatRef<'_, T>, what: &str) -> Result<Mat<f32>> {
    let (n, d) = (x.nrows(), x.ncols());
    let mut norms = vec![0.0f64; n];
    for j in 0..d {
        for i in 0..n {
            let v: f64 = x[(i, j)].into();
            norms[i] += v * v;
        }
    }
    let max = norms.iter().cloned().fold(0.0f64, f64::max).sqrt();
    for (i, sq) in norms.iter_mut().enumerate() {
        let norm = sq.sqrt();
        if !norm.is_finite() {
            let col = (0..d).find(|&j| !x[(i, j)].into().is_finite()).unwrap_or(0);
            return Err(Error::NonFinite { what: what.into(), row: i, col });
        }
        if norm == 0.0 || norm <= max * f64::from(f32::EPSILON) {
            return Err(Error::ZeroNorm { what: what.into(), row: i });
        }
        *sq = 1.0 / norm;
    }
    Ok(Mat::from_fn(n, d, |i, j| (x[(i, j)].into() * norms[i]) as f32))
}

/// Cosine distances $1 - \cos(x_i, x_j)$ for all pairs `i < j`, in condensed order.
///
/// Rows are normalised (see [`normalize_rows`]), then one `f32` GEMM computes the lower
/// triangle of the Gram matrix. Values are clamped to `[0, 2]`.
pub fn cosine_distances<T: Copy + Into<f64>>(
    x: MatRef<'_, T>,
    what: &str,
    par: Par,
) -> Result<Vec<f32>> {
    let n = x.nrows();
    let xn = normalize_rows(x, what)?;
    let mut out = vec![0.0f32; condensed_len(n)];
    condensed_from_normalized(xn.as_ref(), &mut out, par);
    Ok(out)
}

/// Like [`cosine_distances`], writing into a caller-owned buffer of length $n(n-1)/2$ (so a
/// loop over many projections allocates its largest buffer once).
#[track_caller]
pub fn cosine_distances_into<T: Copy + Into<f64>>(
    x: MatRef<'_, T>,
    out: &mut [f32],
    what: &str,
    par: Par,
) -> Result<()> {
    assert_eq!(out.len(), condensed_len(x.nrows()), "cosine_distances_into: buffer length");
    let xn = normalize_rows(x, what)?;
    condensed_from_normalized(xn.as_ref(), out, par);
    Ok(())
}

/// Fills `out` (length $n(n-1)/2$) with the cosine distances of already normalised rows.
pub(crate) fn condensed_from_normalized(xn: MatRef<'_, f32>, out: &mut [f32], par: Par) {
    let n = xn.nrows();
    assert_eq!(out.len(), condensed_len(n));
    let mut g = Mat::<f32>::zeros(n, n);
    tri_matmul(
        &mut g,
        BlockStructure::StrictTriangularLower,
        Accum::Replace,
        xn,
        BlockStructure::Rectangular,
        xn.transpose(),
        BlockStructure::Rectangular,
        1.0f32,
        par,
    );
    let mut pos = 0;
    for i in 0..n {
        // Column i of the lower triangle holds G[j, i] for j > i, contiguously.
        let col = g.col(i);
        for j in (i + 1)..n {
            out[pos] = (1.0 - col[j]).clamp(0.0, 2.0);
            pos += 1;
        }
    }
}

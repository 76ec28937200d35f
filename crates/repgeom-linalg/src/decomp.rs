//! Centring, principal directions, CCR and the readout subspace, all in `f64`.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};

use crate::{Error, Result};

/// Converts an `f32` matrix to `f64`.
pub fn to_f64(x: MatRef<'_, f32>) -> Mat<f64> {
    let mut out = Mat::<f64>::zeros(x.nrows(), x.ncols());
    to_f64_into(out.as_mut(), x, Par::Seq);
    out
}

/// Writes `x` widened to `f64` into `dst` (the same shape) over blocks of columns, in parallel
/// unless `par` is `Par::Seq`, each block in tiles of 32 rows so that a row-major input (a
/// readout) is read a row piece at a time while `dst`'s columns are written in runs.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par, to_f64, to_f64_into};
/// let x = MatRef::from_row_major_slice(&[1.5f32, -2.0, 0.25, 4.0, 5.0, 6.0], 2, 3);
/// let mut dst = Mat::<f64>::zeros(2, 3);
/// to_f64_into(dst.as_mut(), x, Par::Seq);
/// assert!(dst == to_f64(x));
/// ```
pub fn to_f64_into(mut dst: MatMut<'_, f64>, x: MatRef<'_, f32>, par: Par) {
    const TILE: usize = 32;
    assert_eq!(
        (dst.nrows(), dst.ncols()),
        (x.nrows(), x.ncols()),
        "to_f64_into: shapes differ"
    );
    let rows = x.nrows();
    by_col_blocks(dst.as_mut(), par, |j0, mut block| {
        let mut i0 = 0;
        while i0 < rows {
            let h = TILE.min(rows - i0);
            for j in 0..block.ncols() {
                let col = block.as_mut().col_mut(j).subrows_mut(i0, h);
                for (t, v) in col.iter_mut().enumerate() {
                    *v = f64::from(x[(i0 + t, j0 + j)]);
                }
            }
            i0 += h;
        }
    });
}

/// Converts an `f64` matrix to `f32` (rounding to nearest), by blocks of columns on the
/// current rayon pool unless `par` is `Par::Seq`.
pub fn to_f32(x: MatRef<'_, f64>, par: Par) -> Mat<f32> {
    crate::mat_from_cols(x.nrows(), x.ncols(), par, |j| {
        x.col(j).iter().map(|&v| v as f32)
    })
}

/// Subtracts the mean over points (rows) from every column, in `f64`.
///
/// $$X_c = X - \mathbf{1}\,\bar{x}^\top,\qquad \bar{x} = \tfrac{1}{N}X^\top\mathbf{1}$$
///
/// Each column is one sequential sum; blocks of columns run in parallel unless `par` is
/// `Par::Seq`, so the result is bit-identical at any thread count.
pub fn center_columns(x: MatRef<'_, f32>, par: Par) -> Mat<f64> {
    let n = x.nrows();
    let mut out = crate::mat_from_cols(n, x.ncols(), par, |j| {
        x.col(j).iter().map(|&v| f64::from(v))
    });
    by_col_blocks(out.as_mut(), par, |_, mut cols| {
        for col in cols.as_mut().col_iter_mut() {
            let mean = col.as_ref().iter().sum::<f64>() / n.max(1) as f64;
            col.iter_mut().for_each(|v| *v -= mean);
        }
    });
    out
}

/// Eigendecomposition of a symmetric matrix, eigenvalues in non-increasing order.
///
/// Bit-identical at any thread count: its parallel steps are cut into [`EVD_PIECES`] pieces
/// whatever the pool, and `par` decides only whether they run on the current rayon pool or,
/// with `Par::Seq`, one after another. Each eigenvector's sign is fixed so that its entry of
/// largest magnitude is positive, which makes the output deterministic.
///
/// ```
/// use repgeom_linalg::{Mat, Par, symmetric_eigen_desc};
/// let a = Mat::<f64>::from_fn(3, 3, |i, j| if i == j { (i + 1) as f64 } else { 0.0 });
/// let (values, vectors) = symmetric_eigen_desc(a.as_ref(), Par::Seq).unwrap();
/// assert_eq!(values, [3.0, 2.0, 1.0]);
/// assert_eq!(vectors[(2, 0)], 1.0);
/// ```
pub fn symmetric_eigen_desc(a: MatRef<'_, f64>, par: Par) -> Result<(Vec<f64>, Mat<f64>)> {
    assert_eq!(
        a.nrows(),
        a.ncols(),
        "symmetric_eigen_desc needs a square matrix"
    );
    eigen_desc(a, a.nrows(), par)
}

/// How many pieces the eigendecomposition's parallel steps are cut into, at any thread count.
///
/// faer's reduction to tridiagonal form (the decomposition's costly part: `4n³/3` flops that
/// stream the trailing matrix once per column, so it is bound by memory bandwidth) cuts each
/// column's symmetric product into as many column ranges as its `Par` names and adds their
/// partial sums in order: its rounding depends on that number, never on the threads that run
/// the pieces; the tridiagonal solve splits its products over output tiles. Both get
/// `Par::rayon(EVD_PIECES)`, so the result is the same on one thread and on many; the pool
/// decides only how many pieces run at once (the back-transform of the wanted vectors runs
/// sequentially). Sixteen pieces keep a 16-core node's memory channels busy and cost under
/// 5 % on one thread (d = 4096). Matrices of up to 314 rows, below faer's threshold for
/// parallel work, are reduced in one piece.
pub const EVD_PIECES: usize = 16;

/// [`symmetric_eigen_desc`] with only the top `m` eigenvectors: every eigenvalue, and the
/// eigenvectors of the `m` largest, equal bit for bit to the first `m` columns of the whole
/// decomposition. The reduction to tridiagonal form and the tridiagonal solve are the same;
/// only the `m` vectors wanted are transformed back (`2 n² m` flops instead of `2 n³`).
pub(crate) fn eigen_desc(a: MatRef<'_, f64>, m: usize, par: Par) -> Result<(Vec<f64>, Mat<f64>)> {
    if par == Par::Seq && a.nrows() > 1 {
        // The same pieces one after another, on a pool of one thread (a failure to start its
        // thread leaves them to the current pool: the same numbers).
        if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            return pool.install(|| eigen_desc_in_pieces(a, m));
        }
    }
    eigen_desc_in_pieces(a, m)
}

/// [`eigen_desc`] on the current rayon pool, every faer call cut into [`EVD_PIECES`] pieces.
fn eigen_desc_in_pieces(a: MatRef<'_, f64>, m: usize) -> Result<(Vec<f64>, Mat<f64>)> {
    use faer::Conj;
    use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
    use faer::linalg::evd::{
        ComputeEigenvectors, self_adjoint_evd_scratch, tridiag, tridiagonal_self_adjoint_evd,
    };
    use faer::linalg::householder::{
        apply_block_householder_sequence_on_the_left_in_place_scratch,
        apply_block_householder_sequence_on_the_left_in_place_with_conj,
    };
    let pieces = Par::rayon(EVD_PIECES);
    let n = a.nrows();
    assert!(m <= n, "eigen_desc: m = {m} > n = {n}");
    if n == 0 {
        return Ok((Vec::new(), Mat::zeros(0, 0)));
    }
    // faer's `self_adjoint_evd`, step by step (it reads the lower triangle only).
    let bs = faer::linalg::qr::no_pivoting::factor::recommended_block_size::<f64>(n, n);
    let mut buf = MemBuffer::new(StackReq::any_of(&[
        tridiag::tridiag_in_place_scratch::<f64>(n, pieces, Default::default()),
        self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::Yes, pieces, Default::default()),
        apply_block_householder_sequence_on_the_left_in_place_scratch::<f64>(n - 1, bs, m),
    ]));
    let mut trid = Mat::<f64>::zeros(n, n);
    trid.copy_from_triangular_lower(a);
    let mut householder = Mat::<f64>::zeros(bs, n - 1);
    tridiag::tridiag_in_place(
        trid.as_mut(),
        householder.as_mut(),
        pieces,
        MemStack::new(&mut buf),
        Default::default(),
    );
    let mut diag = faer::diag::Diag::<f64>::zeros(n);
    let mut offdiag = faer::diag::Diag::<f64>::zeros(n);
    for i in 0..n {
        diag[i] = trid[(i, i)];
        if i + 1 < n {
            offdiag[i] = trid[(i + 1, i)];
        }
    }
    let mut s = faer::diag::Diag::<f64>::zeros(n);
    let mut u = Mat::<f64>::zeros(n, n);
    tridiagonal_self_adjoint_evd(
        diag.as_ref(),
        offdiag.as_ref(),
        s.as_mut(),
        Some(u.as_mut()),
        pieces,
        MemStack::new(&mut buf),
        Default::default(),
    )
    .map_err(|_| Error::NoConvergence {
        what: "symmetric eigendecomposition".into(),
    })?;
    // Eigenvalues come non-decreasing: the top m vectors are the last m columns.
    let mut top = u.subcols(n - m, m).to_owned();
    drop(u);
    // Sequential (`2 n² m` flops, little beside the rest): a split product's rounding would
    // depend on `m`, and the top `m` vectors would no longer be the whole decomposition's.
    if n > 1 {
        apply_block_householder_sequence_on_the_left_in_place_with_conj(
            trid.submatrix(1, 0, n - 1, n - 1),
            householder.as_ref(),
            Conj::No,
            top.as_mut().subrows_mut(1, n - 1),
            Par::Seq,
            MemStack::new(&mut buf),
        );
    }
    let values = (0..n).rev().map(|i| s[i]).collect();
    let mut vectors = Mat::<f64>::zeros(n, m);
    for (dst, src) in (0..m).rev().enumerate() {
        let col = top.col(src);
        let mut pivot = 0.0f64;
        for v in col.iter() {
            if v.abs() > pivot.abs() {
                pivot = *v;
            }
        }
        let sign = if pivot < 0.0 { -1.0 } else { 1.0 };
        for i in 0..n {
            vectors[(i, dst)] = sign * col[i];
        }
    }
    Ok((values, vectors))
}

/// Dimension from which [`top_eigen_desc`] uses the Krylov–Schur partial eigensolver
/// instead of a full eigendecomposition.
const PARTIAL_FROM: usize = 384;

/// The top-`m` eigenpairs of a symmetric positive semi-definite matrix, non-increasing, with
/// the sign convention of [`symmetric_eigen_desc`].
///
/// For a large matrix and few pairs (`m ≤ n/8`) this uses faer's restarted Krylov–Schur
/// solver (deterministic start vector) to a residual of `1e-13 ‖A‖_F`, which costs
/// matrix–vector products instead of an `O(n³)` tridiagonalisation. A restarted solver can
/// converge to `m` eigenpairs that are not the top `m` (seen on a nearly flat spectrum) and
/// report success, so its answer is accepted only when [`top_pairs_certified`] proves that
/// no other eigenvalue reaches the smallest one found; otherwise, and when it does not
/// converge, the full decomposition answers.
///
/// `par` runs the solver's matrix–vector products and the certificate's factorisation over
/// fixed blocks of rows and tiles, each block sequential, so the answer is bit-identical at any
/// thread count (as is the full decomposition, see [`EVD_PIECES`]).
pub fn top_eigen_desc(a: MatRef<'_, f64>, m: usize, par: Par) -> Result<(Vec<f64>, Mat<f64>)> {
    let n = a.nrows();
    if n >= PARTIAL_FROM
        && m > 0
        && m * 8 <= n
        && let Some((vals, vecs)) = partial_eigen(a, m, par)
        && top_pairs_certified(a, &vals, vecs.as_ref(), par)
    {
        return Ok((vals, vecs));
    }
    let (vals, vecs) = symmetric_eigen_desc(a, par)?;
    Ok((vals[..m].to_vec(), vecs.subcols(0, m).to_owned()))
}

/// Relative margin below the smallest eigenvalue found within which another eigenvalue counts
/// as a tie that [`top_pairs_certified`] cannot rule out (far above rounding, `~1e-13`).
const CERTIFY_MARGIN: f64 = 1e-8;

/// Largest accepted `|VᵀV − I|` entry and `‖AV − VΛ‖_F / ‖A‖_F` of pairs that
/// [`top_pairs_certified`] accepts (the partial solver converges to `1e-13`).
const CERTIFY_RESIDUAL: f64 = 1e-10;

/// Whether the eigenpairs `(vals, vecs)` (`m` of them, non-increasing) of the symmetric `a`
/// are its top `m`: `V` is orthonormal, each pair's residual is at rounding level, and no
/// other eigenvalue of `a` reaches `σ = λ_m − 1e-8 λ_1`.
///
/// The last part is Sylvester's law of inertia, checked with one Cholesky factorisation
/// (`n³/3` flops): `σ I − B` with `B = A − V Λ Vᵀ` is positive definite only if
/// `xᵀ A x = xᵀ B x < σ` for every unit `x ⊥ span(V)`, so (Courant–Fischer) `λ_{m+1}(A) < σ`;
/// the `m` orthonormal pairs found above `σ` are then the top `m`. A missed eigenvalue at or
/// above `σ`, or a vector found twice (a restarted Krylov solver's "ghost" copy, which the
/// orthonormality test catches), makes the check fail. The factorisation runs over fixed tiles
/// (see `positive_definite`), in parallel unless `par` is `Par::Seq`, each tile sequential: the
/// verdict is the same at any thread count.
pub fn top_pairs_certified(
    a: MatRef<'_, f64>,
    vals: &[f64],
    vecs: MatRef<'_, f64>,
    par: Par,
) -> bool {
    let (Some(&first), Some(&last)) = (vals.first(), vals.last()) else {
        return false;
    };
    let sigma = last - CERTIFY_MARGIN * first.abs();
    if sigma.is_nan() || sigma <= 0.0 || vecs.ncols() != vals.len() {
        return false;
    }
    let (n, m) = (a.nrows(), vals.len());
    let mut vtv = Mat::<f64>::zeros(m, m);
    matmul(
        &mut vtv,
        Accum::Replace,
        vecs.transpose(),
        vecs,
        1.0,
        Par::Seq,
    );
    let orthonormal = (0..m).all(|j| {
        (0..m).all(|i| (vtv[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() <= CERTIFY_RESIDUAL)
    });
    if !orthonormal {
        return false;
    }
    // V Λ, for the residual A V − V Λ and the deflation below
    let scaled = Mat::<f64>::from_fn(n, m, |i, j| vecs[(i, j)] * vals[j]);
    let mut residual = Mat::<f64>::zeros(n, m);
    matmul(&mut residual, Accum::Replace, a, vecs, 1.0, Par::Seq);
    let residual = (residual - &scaled).norm_l2();
    if residual.is_nan() || residual > CERTIFY_RESIDUAL * a.norm_l2() {
        return false;
    }
    // σI − A + V Λ Vᵀ, built a block of columns at a time (each entry computed alone)
    let mut b = Mat::<f64>::zeros(n, n);
    by_col_blocks(b.as_mut(), par, |j0, mut cols| {
        for (j, col) in (j0..).zip(cols.as_mut().col_iter_mut()) {
            for (i, v) in col.iter_mut().enumerate() {
                *v = if i == j { sigma } else { 0.0 } - a[(i, j)];
            }
        }
        let w = cols.ncols();
        matmul(
            cols,
            Accum::Add,
            &scaled,
            vecs.subrows(j0, w).transpose(),
            1.0,
            Par::Seq,
        );
    });
    positive_definite(b.as_mut(), par)
}

/// Tile size of [`positive_definite`]'s factorisation: a constant, so that the tiles never
/// depend on the thread count.
const CHOLESKY_TILE: usize = 128;

/// Whether the symmetric `b` (its lower triangle is read and overwritten) is positive definite:
/// a right-looking Cholesky factorisation over tiles of [`CHOLESKY_TILE`] rows and columns.
///
/// Each step factors one diagonal tile, solves the tiles below it, and updates the trailing
/// columns one tile-wide block at a time; every tile operation is one sequential faer call on
/// the same operands whatever the thread count, the independent ones of a step run in parallel
/// unless `par` is `Par::Seq`. So every entry is computed by the same arithmetic at any thread
/// count, and so is the verdict. (faer's own parallel factorisation splits its work by the
/// thread count.)
fn positive_definite(mut b: MatMut<'_, f64>, par: Par) -> bool {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
    use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
    let n = b.nrows();
    let t = CHOLESKY_TILE;
    let mut buf = MemBuffer::new(cholesky_in_place_scratch::<f64>(
        t.min(n),
        Par::Seq,
        Default::default(),
    ));
    let mut k0 = 0;
    while k0 < n {
        let kw = t.min(n - k0);
        let (top, bottom) = b.as_mut().split_at_row_mut(k0 + kw);
        let mut diagonal = top.submatrix_mut(k0, k0, kw, kw);
        let factored = cholesky_in_place(
            diagonal.as_mut(),
            Default::default(),
            Par::Seq,
            MemStack::new(&mut buf),
            Default::default(),
        );
        if factored.is_err() {
            return false;
        }
        let l = diagonal.as_ref();
        // Below the diagonal tile: P Lᵀ = B, i.e. L Pᵀ = Bᵀ, each block of rows on its own.
        let (left, trailing) = bottom.split_at_col_mut(k0 + kw);
        let mut panel = left.subcols_mut(k0, kw);
        by_row_blocks_of(CHOLESKY_TILE, panel.as_mut(), par, |_, rows| {
            solve_lower_triangular_in_place(l, rows.transpose_mut(), Par::Seq);
        });
        // The trailing lower triangle: B₂₂ −= P Pᵀ, one block of columns at a time, each from
        // its diagonal down.
        let panel = panel.as_ref();
        by_col_blocks(trailing, par, |j0, cols| {
            let w = cols.ncols();
            let rows = cols.nrows() - j0;
            matmul(
                cols.subrows_mut(j0, rows),
                Accum::Add,
                panel.subrows(j0, rows),
                panel.subrows(j0, w).transpose(),
                -1.0,
                Par::Seq,
            );
        });
        k0 += kw;
    }
    true
}

/// Rows per block of the partial eigensolver's matrix–vector products ([`RowBlocked`]).
const MATVEC_ROWS: usize = 128;

/// A matrix as a linear operator whose products run over fixed blocks of [`MATVEC_ROWS`]
/// rows, each block one sequential faer product, the blocks in parallel unless `par` is
/// `Par::Seq`: every entry is the sum faer's sequential product computes over the whole
/// matrix, in the same order, so the solver's path does not depend on the thread count.
#[derive(Debug)]
struct RowBlocked<'a> {
    a: MatRef<'a, f64>,
    par: Par,
}

impl faer::matrix_free::LinOp<f64> for RowBlocked<'_> {
    fn apply_scratch(&self, _rhs_ncols: usize, _par: Par) -> faer::dyn_stack::StackReq {
        faer::dyn_stack::StackReq::EMPTY
    }

    fn nrows(&self) -> usize {
        self.a.nrows()
    }

    fn ncols(&self) -> usize {
        self.a.ncols()
    }

    fn apply(
        &self,
        out: MatMut<'_, f64>,
        rhs: MatRef<'_, f64>,
        _par: Par,
        _stack: &mut faer::dyn_stack::MemStack,
    ) {
        let a = self.a;
        by_row_blocks_of(MATVEC_ROWS, out, self.par, |r0, dst| {
            let rows = dst.nrows();
            matmul(dst, Accum::Replace, a.subrows(r0, rows), rhs, 1.0, Par::Seq);
        });
    }

    fn conj_apply(
        &self,
        out: MatMut<'_, f64>,
        rhs: MatRef<'_, f64>,
        par: Par,
        stack: &mut faer::dyn_stack::MemStack,
    ) {
        self.apply(out, rhs, par, stack);
    }
}

pub(crate) fn partial_eigen(
    a: MatRef<'_, f64>,
    m: usize,
    par: Par,
) -> Option<(Vec<f64>, Mat<f64>)> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::matrix_free::eigen::{
        PartialEigenParams, partial_self_adjoint_eigen, partial_self_adjoint_eigen_scratch,
    };
    let n = a.nrows();
    let op = RowBlocked { a, par };
    // A fixed, non-special start vector (not the all-ones vector: centred data annihilate it).
    let v0 = faer::Col::<f64>::from_fn(n, |i| {
        let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
        (h as f64 / (1u64 << 53) as f64) - 0.5
    });
    let norm = v0.norm_l2();
    let v0 = faer::Col::<f64>::from_fn(n, |i| v0[i] / norm);
    let params = PartialEigenParams {
        max_dim: (4 * m).max(64).min(n),
        ..Default::default()
    };
    let scratch = partial_self_adjoint_eigen_scratch::<f64>(&op, m, Par::Seq, params);
    let mut vecs = Mat::<f64>::zeros(n, m);
    let mut vals = vec![0.0f64; m];
    let tol = 1e-13 * a.norm_l2();
    let info = partial_self_adjoint_eigen(
        vecs.as_mut(),
        &mut vals,
        &op,
        v0.as_ref(),
        tol,
        Par::Seq,
        MemStack::new(&mut MemBuffer::new(scratch)),
        params,
    );
    if info.n_converged_eigen < m || vals.iter().any(|v| !v.is_finite()) {
        return None;
    }
    // Largest magnitude = largest for a PSD matrix; sort descending and fix signs.
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&x, &y| vals[y].total_cmp(&vals[x]));
    let mut out = Mat::<f64>::zeros(n, m);
    let mut sorted = Vec::with_capacity(m);
    for (dst, &src) in order.iter().enumerate() {
        sorted.push(vals[src]);
        let col = vecs.col(src);
        let norm = col.norm_l2();
        let mut pivot = 0.0f64;
        for v in col.iter() {
            if v.abs() > pivot.abs() {
                pivot = *v;
            }
        }
        let sign = if pivot < 0.0 { -1.0 } else { 1.0 } / norm;
        for i in 0..n {
            out[(i, dst)] = sign * col[i];
        }
    }
    Some((sorted, out))
}

/// The top principal directions of a centred point cloud and its whole covariance spectrum.
#[derive(Debug, Clone)]
pub struct PrincipalDirections {
    /// `d × m` orthonormal directions, by decreasing variance.
    pub directions: Mat<f64>,
    /// The top eigenvalues of the covariance $X_c^\top X_c/(N-1)$, non-increasing: all
    /// `min(N, d)` of them from [`principal_directions`], the top `m` from
    /// [`top_principal_directions`].
    pub variances: Vec<f64>,
}

/// Top-`m` principal directions of an already centred `N × d` matrix, with the whole
/// covariance spectrum.
///
/// Uses whichever Gram matrix is smaller: $X_c^\top X_c$ (`d × d`) when `N ≥ d`, otherwise
/// $X_c X_c^\top$ (`N × N`) with $u_j = X_c^\top v_j/\sqrt{\lambda_j}$.
pub fn principal_directions(
    xc: MatRef<'_, f64>,
    m: usize,
    par: Par,
) -> Result<PrincipalDirections> {
    directions(xc, m, par, true)
}

/// The shared body of [`principal_directions`] (`whole_spectrum`: full eigendecomposition)
/// and [`top_principal_directions`] (top `m` pairs only, via [`top_eigen_desc`]).
fn directions(
    xc: MatRef<'_, f64>,
    m: usize,
    par: Par,
    whole_spectrum: bool,
) -> Result<PrincipalDirections> {
    let (n, d) = (xc.nrows(), xc.ncols());
    if n < 2 {
        return Err(Error::TooFewPoints {
            what: "principal directions".into(),
            n,
            min: 2,
        });
    }
    let r = n.min(d);
    if m > r {
        return Err(Error::DimensionTooLarge {
            what: "principal directions".into(),
            requested: m,
            available: r,
        });
    }
    let denom = (n - 1) as f64;
    let dual = n < d;
    let mut g = Mat::<f64>::zeros(r, r);
    if dual {
        gram_lower(g.as_mut(), xc.transpose(), Accum::Replace, par);
    } else {
        gram_lower(g.as_mut(), xc, Accum::Replace, par);
    }
    // The partial eigensolver multiplies by the whole matrix.
    for j in 1..r {
        for i in 0..j {
            g[(i, j)] = g[(j, i)];
        }
    }
    let (vals, vecs) = if whole_spectrum {
        let (vals, vecs) = symmetric_eigen_desc(g.as_ref(), par)?;
        (vals, vecs.subcols(0, m).to_owned())
    } else {
        top_eigen_desc(g.as_ref(), m, par)?
    };
    let variances = vals.iter().take(r).map(|v| v.max(0.0) / denom).collect();
    if !dual {
        return Ok(PrincipalDirections {
            directions: vecs,
            variances,
        });
    }
    let mut directions = Mat::<f64>::zeros(d, m);
    crate::kernel::product_in_tasks(
        directions.as_mut(),
        Accum::Replace,
        xc.transpose(),
        vecs.as_ref(),
        par,
    );
    for j in 0..m {
        let norm = directions.col(j).norm_l2();
        if norm <= f64::EPSILON * (1.0 + vals[0].abs().sqrt()) {
            return Err(Error::DimensionTooLarge {
                what: "principal directions (data has lower rank)".into(),
                requested: m,
                available: j,
            });
        }
        directions.col_mut(j).iter_mut().for_each(|v| *v /= norm);
    }
    Ok(PrincipalDirections {
        directions,
        variances,
    })
}

/// The lower triangle (diagonal included) of $X^\top X$ into `g`, at half the cost of the
/// whole product; the strict upper triangle of `g` is left as it was. Each entry is the one
/// the whole product computes, bit for bit (the same kernels, over the same inner order). On
/// the pool, the rectangles of `g` on or below its diagonal are sequential products on their
/// own tasks, as in `product_in_tasks` (faer's parallel product meets at barriers), the
/// diagonal ones triangular.
pub(crate) fn gram_lower(g: MatMut<'_, f64>, x: MatRef<'_, f64>, accum: Accum, par: Par) {
    use faer::linalg::matmul::triangular::{BlockStructure, matmul as tri_matmul};
    use rayon::prelude::*;
    let lower = |tile: MatMut<'_, f64>, xt: MatRef<'_, f64>, x: MatRef<'_, f64>| {
        tri_matmul(
            tile,
            BlockStructure::TriangularLower,
            accum,
            xt,
            BlockStructure::Rectangular,
            x,
            BlockStructure::Rectangular,
            1.0,
            Par::Seq,
        );
    };
    if crate::kernel::one_task(par, g.nrows(), g.ncols()) {
        lower(g, x.transpose(), x);
        return;
    }
    crate::kernel::output_tasks(g)
        .into_par_iter()
        .filter(|&(r0, c0, _)| c0 <= r0)
        .for_each(|(r0, c0, tile)| {
            let (r, c) = (tile.nrows(), tile.ncols());
            let (xt, xc) = (x.transpose().subrows(r0, r), x.subcols(c0, c));
            if r0 == c0 {
                lower(tile, xt, xc);
            } else {
                matmul(tile, accum, xt, xc, 1.0, Par::Seq);
            }
        });
}

/// Removes the span of the orthonormal columns of `u` (`d × c`) from every row of `x`:
/// $X - (XU)U^\top$.
#[track_caller]
pub fn remove_directions(x: MatRef<'_, f64>, u: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    assert_eq!(
        x.ncols(),
        u.nrows(),
        "remove_directions: x is N×d, u must be d×c"
    );
    if u.ncols() == 0 {
        return x.to_owned();
    }
    // `X u` through `project`: with one direction (CCR-1) it is a matrix–vector product, which
    // faer's own parallel kernel would make depend on the thread count. `(X U) Uᵀ` has an inner
    // dimension of `c`, summed in order for each entry: one block of columns at a time, each
    // block sequential (faer's parallel rank-`c` update barely splits).
    let coef = project(x, u, par);
    let mut out = crate::mat_from_cols(x.nrows(), x.ncols(), par, |j| x.col(j).iter().copied());
    by_col_blocks(out.as_mut(), par, |j0, cols| {
        let w = cols.ncols();
        matmul(
            cols,
            Accum::Add,
            &coef,
            u.subrows(j0, w).transpose(),
            -1.0,
            Par::Seq,
        );
    });
    out
}

/// Top-`m` principal directions only (their variances, not the whole spectrum), through
/// [`top_eigen_desc`]: much faster than [`principal_directions`] for `m ≪ min(N, d)`.
pub fn top_principal_directions(
    xc: MatRef<'_, f64>,
    m: usize,
    par: Par,
) -> Result<PrincipalDirections> {
    directions(xc, m, par, false)
}

/// CCR-`c`: centre over points, then remove the top-`c` principal directions.
///
/// `c = 0` centres only. Returns the corrected matrix in `f64`.
///
/// ```
/// use repgeom_linalg::{Mat, Par, ccr};
/// let x = Mat::<f32>::from_fn(20, 4, |i, j| ((i * 7 + j * 3) % 11) as f32 + (j as f32) * 5.0);
/// let y = ccr(x.as_ref(), 1, Par::Seq).unwrap();
/// // Centred: every column sums to zero.
/// for j in 0..4 {
///     assert!((0..20).map(|i| y[(i, j)]).sum::<f64>().abs() < 1e-9);
/// }
/// ```
pub fn ccr(x: MatRef<'_, f32>, c: usize, par: Par) -> Result<Mat<f64>> {
    let xc = center_columns(x, par);
    if c == 0 {
        return Ok(xc);
    }
    let pd = top_principal_directions(xc.as_ref(), c, par)?;
    Ok(remove_directions(xc.as_ref(), pd.directions.as_ref(), par))
}

/// Top-`k` right singular vectors (`d × k`) and the top-`k` singular values of a `V × d` matrix.
///
/// Computed from the `d × d` Gram matrix $W^\top W$, accumulated in `f64` over blocks of rows
/// (so a 50k-row readout never exists in `f64` at once), then a sequential symmetric
/// eigendecomposition (full: a partial solver can silently miss an eigenvalue where the
/// spectrum is nearly flat around `k`). The subspace is what PGA uses; signs are fixed
/// deterministically.
pub fn top_right_singular_vectors(
    w: MatRef<'_, f32>,
    k: usize,
    par: Par,
) -> Result<(Mat<f64>, Vec<f64>)> {
    let d = w.ncols();
    let available = d.min(w.nrows());
    if k > available || k == 0 {
        return Err(Error::DimensionTooLarge {
            what: "readout singular vectors".into(),
            requested: k,
            available,
        });
    }
    const BLOCK: usize = 4096;
    let mut g = Mat::<f64>::zeros(d, d);
    // One buffer for every block: a fresh column-by-column copy per block spent more time in
    // page faults than in the conversion (1.9 s for a 6.9B model's `W_U`).
    let mut block = Mat::<f64>::zeros(BLOCK.min(w.nrows()), d);
    let mut start = 0;
    while start < w.nrows() {
        let len = BLOCK.min(w.nrows() - start);
        let mut block = block.as_mut().subrows_mut(0, len);
        to_f64_into(block.as_mut(), w.subrows(start, len), par);
        // Only the lower triangle: the eigendecomposition reads no other.
        gram_lower(g.as_mut(), block.as_ref(), Accum::Add, par);
        start += len;
    }
    // The full decomposition, not the partial Krylov–Schur solve of `top_eigen_desc`: on a
    // W_U whose spectrum is nearly flat around k (random 4000 × 2048, λ_100/λ_101 − 1 = 5e-4)
    // the restarted solver converged to 100 eigenpairs that were not the top 100 (a principal
    // angle of 90° to the true subspace; PGA's rho_readout 0.7698 instead of 0.7739), and
    // nothing in its output showed it. `top_pairs_certified` now catches that, but there the
    // partial solve alone costs as much as the full one, so trying it first only adds time
    // (`examples/readout_timing.rs` times both on any W_U).
    let (vals, vecs) = eigen_desc(g.as_ref(), k, par)?;
    let sv = vals.iter().take(k).map(|v| v.max(0.0).sqrt()).collect();
    Ok((vecs, sv))
}

/// The readout subspace $V_k$ of `W_U` (`V × d`): its top-`k` right singular vectors.
///
/// ```
/// use repgeom_linalg::{Mat, Par, orthonormal_basis_check, readout_subspace};
/// let w_u = Mat::<f32>::from_fn(50, 8, |i, j| ((i * 13 + j * 5) % 17) as f32 - 8.0);
/// let v_k = readout_subspace(w_u.as_ref(), 3, Par::Seq).unwrap();
/// assert_eq!((v_k.nrows(), v_k.ncols()), (8, 3));
/// assert!(orthonormal_basis_check(v_k.as_ref()) < 1e-10);
/// ```
pub fn readout_subspace(w_u: MatRef<'_, f32>, k: usize, par: Par) -> Result<Mat<f64>> {
    top_right_singular_vectors(w_u, k, par).map(|(v, _)| v)
}

/// Rows per block of a one-column product ([`by_row_blocks`]): a constant, so that the blocks
/// never depend on the thread count.
const COLUMN_ROWS: usize = 4096;

/// Runs `f` on successive blocks of [`COLUMN_ROWS`] rows of `dst` and of `x` (the same rows),
/// the blocks in parallel on the current rayon pool unless `par` is `Par::Seq`.
///
/// This is how a product with a single output column runs, each block with `Par::Seq`. faer's
/// parallel GEMM splits its work over tiles of the output, so each entry's sum over the inner
/// dimension runs in one order at any thread count; but faer sends a product with one output
/// column to a matrix–vector kernel that, under `Par::rayon(n)` and above 256² entries of
/// `x`, cuts the inner dimension into `n` pieces, sums each on its own thread and adds the `n`
/// partial sums, so its rounding depends on `n` (CCR-1's `X u`, and through it PGA's captured
/// variance). Here every entry is one sequential sum, and the blocks are the same with
/// `Par::Seq` and at any thread count.
fn by_row_blocks<T: Send + Sync>(
    dst: MatMut<'_, T>,
    x: MatRef<'_, T>,
    par: Par,
    f: impl Fn(MatMut<'_, T>, MatRef<'_, T>) + Sync,
) {
    assert_eq!(dst.nrows(), x.nrows(), "by_row_blocks: row counts differ");
    by_row_blocks_of(COLUMN_ROWS, dst, par, |r0, dst| {
        let rows = dst.nrows();
        f(dst, x.subrows(r0, rows));
    });
}

/// Runs `f(r0, block)` on the successive blocks of `len` rows of `dst` (`r0`: the block's first
/// row), in parallel on the current rayon pool unless `par` is `Par::Seq` or there is one
/// block. The blocks depend on `len` only, never on the thread count.
fn by_row_blocks_of<T: Send + Sync>(
    len: usize,
    dst: MatMut<'_, T>,
    par: Par,
    f: impl Fn(usize, MatMut<'_, T>) + Sync,
) {
    use rayon::prelude::*;
    if par == Par::Seq || dst.nrows() <= len {
        let mut dst = dst;
        let mut r0 = 0;
        while dst.nrows() > 0 {
            let rows = len.min(dst.nrows());
            let (head, rest) = dst.split_at_row_mut(rows);
            f(r0, head);
            (dst, r0) = (rest, r0 + rows);
        }
    } else {
        dst.par_row_chunks_mut(len)
            .enumerate()
            .for_each(|(b, block)| f(b * len, block));
    }
}

/// Columns per block of [`by_col_blocks`].
const BLOCK_COLS: usize = CHOLESKY_TILE;

/// Runs `f(j0, block)` on the successive blocks of [`BLOCK_COLS`] columns of `dst` (`j0`: the
/// block's first column), in parallel unless `par` is `Par::Seq`; the blocks never depend on
/// the thread count.
fn by_col_blocks<T: Send + Sync>(
    dst: MatMut<'_, T>,
    par: Par,
    f: impl Fn(usize, MatMut<'_, T>) + Sync,
) {
    by_row_blocks_of(BLOCK_COLS, dst.transpose_mut(), par, |j0, block| {
        f(j0, block.transpose_mut());
    });
}

/// Projects the rows of `x` (`N × d`) onto the columns of `basis` (`d × k`): $XB$.
///
/// Bit-identical at any thread count, `k = 1` included (blocks of rows, see `by_row_blocks`).
#[track_caller]
pub fn project(x: MatRef<'_, f64>, basis: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    assert_eq!(
        x.ncols(),
        basis.nrows(),
        "project: x is N×d, basis must be d×k"
    );
    let mut out = Mat::<f64>::zeros(x.nrows(), basis.ncols());
    if basis.ncols() == 1 {
        by_row_blocks(out.as_mut(), x, par, |dst, x| {
            matmul(dst, Accum::Replace, x, basis, 1.0, Par::Seq);
        });
    } else {
        crate::kernel::product_in_tasks(out.as_mut(), Accum::Replace, x, basis, par);
    }
    out
}

/// Projects `f32` rows onto `f32` basis columns: $XB$ in `f32` (the fast path of null draws).
///
/// Bit-identical at any thread count, `k = 1` included (blocks of rows, see `by_row_blocks`).
#[track_caller]
pub fn project_f32(x: MatRef<'_, f32>, basis: MatRef<'_, f32>, par: Par) -> Mat<f32> {
    assert_eq!(
        x.ncols(),
        basis.nrows(),
        "project_f32: x is N×d, basis must be d×k"
    );
    let mut out = Mat::<f32>::zeros(x.nrows(), basis.ncols());
    if basis.ncols() == 1 {
        by_row_blocks(out.as_mut(), x, par, |dst, x| {
            matmul(dst, Accum::Replace, x, basis, 1.0f32, Par::Seq);
        });
    } else {
        crate::kernel::product_in_tasks(out.as_mut(), Accum::Replace, x, basis, par);
    }
    out
}

/// The thin QR factorisation of a `d × k` matrix (`k ≤ d`) by blocked Householder
/// reflections, with the signs fixed so that `R` has a non-negative diagonal: returns `Q`
/// (`d × k`, orthonormal columns) and `diag(R)`.
///
/// `diag(R)_j` is the norm of column `j`'s component orthogonal to the columns before it, so
/// a (numerically) dependent column shows as a value near zero. This is the factorisation of
/// LAPACK's `geqrf`/`orgqr` (NumPy's `linalg.qr`) up to rounding; with the sign convention,
/// the `Q` of a standard Gaussian matrix is uniform on the Stiefel manifold (Mezzadri 2007).
/// Runs sequentially: bit-identical at any thread count, and cheap enough to run one per
/// parallel task.
///
/// ```
/// use repgeom_linalg::{Mat, orthonormal_basis_check, qr_positive};
/// let a = Mat::<f64>::from_fn(6, 3, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0 + (i == j) as u8 as f64);
/// let (q, r) = qr_positive(a.as_ref());
/// assert!(orthonormal_basis_check(q.as_ref()) < 1e-12);
/// assert!(r.iter().all(|&v| v >= 0.0));
/// // The first column of Q is the first column of A, normalised (R's first diagonal > 0).
/// let norm = a.col(0).norm_l2();
/// assert!((0..6).all(|i| (q[(i, 0)] - a[(i, 0)] / norm).abs() < 1e-12));
/// ```
#[track_caller]
pub fn qr_positive(a: MatRef<'_, f64>) -> (Mat<f64>, Vec<f64>) {
    use faer::Conj;
    use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
    use faer::linalg::householder::{
        apply_block_householder_sequence_on_the_left_in_place_scratch,
        apply_block_householder_sequence_on_the_left_in_place_with_conj,
    };
    use faer::linalg::qr::no_pivoting::factor::{
        qr_in_place, qr_in_place_scratch, recommended_block_size,
    };
    let (d, k) = (a.nrows(), a.ncols());
    assert!(k <= d, "qr_positive needs k <= d (got {d} x {k})");
    let mut factors = a.to_owned();
    if k == 0 {
        return (factors, Vec::new());
    }
    let bs = recommended_block_size::<f64>(d, k);
    let mut coeffs = Mat::<f64>::zeros(bs, k);
    let mut buf = MemBuffer::new(StackReq::any_of(&[
        qr_in_place_scratch::<f64>(d, k, bs, Par::Seq, Default::default()),
        apply_block_householder_sequence_on_the_left_in_place_scratch::<f64>(d, bs, k),
    ]));
    qr_in_place(
        factors.as_mut(),
        coeffs.as_mut(),
        Par::Seq,
        MemStack::new(&mut buf),
        Default::default(),
    );
    // Q·S with S = sign(diag R): apply the reflectors to S (a d × k "identity" with signs).
    let mut q = Mat::<f64>::zeros(d, k);
    let mut r_diag = Vec::with_capacity(k);
    for j in 0..k {
        let r = factors[(j, j)];
        q[(j, j)] = if r < 0.0 { -1.0 } else { 1.0 };
        r_diag.push(r.abs());
    }
    apply_block_householder_sequence_on_the_left_in_place_with_conj(
        factors.as_ref(),
        coeffs.as_ref(),
        Conj::No,
        q.as_mut(),
        Par::Seq,
        MemStack::new(&mut buf),
    );
    (q, r_diag)
}

/// Largest absolute entry of $B^\top B - I$: zero for an orthonormal basis.
pub fn orthonormal_basis_check(b: MatRef<'_, f64>) -> f64 {
    let mut g = Mat::<f64>::zeros(b.ncols(), b.ncols());
    matmul(&mut g, Accum::Replace, b.transpose(), b, 1.0, Par::Seq);
    let mut worst = 0.0f64;
    for j in 0..g.ncols() {
        for i in 0..g.nrows() {
            let target = if i == j { 1.0 } else { 0.0 };
            worst = worst.max((g[(i, j)] - target).abs());
        }
    }
    worst
}

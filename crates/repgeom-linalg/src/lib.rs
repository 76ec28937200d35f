//! `repgeom-linalg` is the numerical core of repgeom: centring, common-component removal (CCR),
//! symmetric eigendecompositions and singular subspaces, projections, pairwise cosine distances
//! via GEMM, average ranks and the Spearman correlation.
//!
//! The main types are faer's [`Mat`] and [`MatRef`] (re-exported here so that no other crate
//! depends on faer directly) and [`RankedReference`], a reference vector ranked once so that
//! its Spearman correlation with many other vectors costs one radix sort each.
//!
//! Key design decision: one float type per path, chosen for accuracy or speed and stated at the
//! boundary. Decompositions (readout subspace, principal directions) run in `f64`, because faer's
//! `f32` decompositions are orders of magnitude less accurate than LAPACK's; distance GEMMs run in
//! `f32`, which is twice as fast and exact enough for ranking; half-precision products
//! ([`matmul_abt_add_half`]: bf16/f16 inputs, `f32` sums, on AMX tiles where the CPU has them)
//! serve a model's forward pass at its stored precision only. Every function takes its
//! parallelism as an explicit [`Par`] argument, and no parallel split follows the thread count
//! (dense eigendecompositions are cut into the same [`EVD_PIECES`] pieces on any pool), so
//! results are bit-identical at any thread count.
//!
//! This crate is not I/O and never prints: it sees only matrices and slices.
#![deny(missing_docs)]

mod alloc;
mod decomp;
mod distance;
mod error;
mod half;
mod kernel;
#[cfg(test)]
mod proptests;
mod rank;
mod simd;
#[cfg(test)]
mod tests;

pub use alloc::{mat_from_cols, mat_from_row_major};
pub use decomp::{
    EVD_PIECES, PrincipalDirections, ccr, center_columns, orthonormal_basis_check,
    principal_directions, project, project_f32, qr_positive, readout_subspace, remove_directions,
    symmetric_eigen_desc, to_f32, to_f64, to_f64_into, top_eigen_desc, top_pairs_certified,
    top_principal_directions, top_right_singular_vectors,
};
pub use distance::{
    Distance, check_row_norms, condensed_len, cosine_distances, cosine_distances_into,
    inverse_row_norms, normalize_rows, pair_index, pairwise_distances, rows_with_sq_norms,
    spearman_of_cosine, spearman_of_distances,
};
pub use error::{Error, Result};
pub use faer::{Mat, MatMut, MatRef, Par};
pub use half::{HALF_BLOCK, HalfMatrix, HalfType, amx_bf16, matmul_abt_add_half};
pub use kernel::{
    cross_frobenius_sq, gram_rows, gram_singular_values, hsic_biased_unscaled, hsic_unbiased,
    matmul_abt_add_f32, matmul_abt_f32, matmul_atb_add_f64, singular_values, syrk_add_f64,
};
pub use rank::{
    BUCKET_MIN_WORDS, PairSort, RankScratch, RankedReference, TieSums, average_ranks, float_key,
    pearson, spearman,
};
pub use simd::vectorize;

/// `f(0), f(1), …, f(n − 1)`, in that order: on this thread with `Par::Seq`, else on the
/// current rayon pool. Which thread computes which item does not change the result, so the
/// output is the same at any thread count as long as each `f(i)` is: the one way repgeom maps
/// independent pieces of work (draws, blocks of rows, groups) in parallel.
///
/// ```
/// use repgeom_linalg::{Par, map_in_order};
/// let squares = map_in_order(5, Par::rayon(2), |i| i * i);
/// assert_eq!(squares, map_in_order(5, Par::Seq, |i| i * i));
/// assert_eq!(squares, [0, 1, 4, 9, 16]);
/// ```
pub fn map_in_order<R: Send>(n: usize, par: Par, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    match par {
        Par::Seq => (0..n).map(f).collect(),
        _ => {
            use rayon::prelude::*;
            (0..n).into_par_iter().map(f).collect()
        }
    }
}

/// `cell`'s value, made by `make` when it has none, with no wait while `make` runs: the one way
/// repgeom fills a cache whose value is computed on the rayon pool. A pool thread that waits
/// for its share of that work runs other tasks meanwhile, and one of them may ask for the
/// same value: `OnceLock::get_or_init`, or a lock held across the work, would then wait on
/// itself for ever. Here two threads may both make the value and the first one stored is
/// kept, so `make` must give the same value on every call (as repgeom's computations do, at
/// any thread count).
///
/// ```
/// use std::sync::OnceLock;
/// use repgeom_linalg::{Par, get_or_make, map_in_order};
/// let cell = OnceLock::new();
/// let sums = map_in_order(64, Par::rayon(4), |_| {
///     *get_or_make(&cell, || map_in_order(1000, Par::rayon(4), |i| i as u64).iter().sum::<u64>())
/// });
/// assert!(sums.iter().all(|&s| s == 499_500));
/// ```
pub fn get_or_make<T>(cell: &std::sync::OnceLock<T>, make: impl FnOnce() -> T) -> &T {
    if let Some(v) = cell.get() {
        return v;
    }
    // Stores nothing when another thread stored first; `set` itself never runs user code.
    let _ = cell.set(make());
    cell.get().expect("stored above or by another thread")
}

/// Checks that every entry of `x` is finite; returns the first offending `(row, col)` (the
/// first in column-major order). The check runs by lines on the current rayon pool unless
/// `par` is `Par::Seq`; the offender, if any, is looked for in order, so it is the same.
///
/// ```
/// use repgeom_linalg::{Mat, Par, first_non_finite};
/// let mut x = Mat::<f32>::zeros(300, 40);
/// assert_eq!(first_non_finite(x.as_ref(), Par::rayon(2)), None);
/// x[(7, 30)] = f32::NAN;
/// x[(9, 3)] = f32::INFINITY;
/// assert_eq!(first_non_finite(x.as_ref(), Par::rayon(2)), Some((9, 3)));
/// ```
pub fn first_non_finite<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    par: Par,
) -> Option<(usize, usize)> {
    // Almost every matrix is finite: one pass in memory order (rows of a row-major matrix,
    // columns otherwise) says so without the column-major walk, which strides across a
    // row-major matrix's cache lines.
    let finite = |v: &T| (*v).into().is_finite();
    let row_major = x.col_stride() == 1;
    let line = |l: usize| match row_major {
        true => x.row(l).iter().all(finite),
        false => x.col(l).iter().all(finite),
    };
    let lines = if row_major { x.nrows() } else { x.ncols() };
    let all_finite = match par {
        Par::Seq => (0..lines).all(line),
        _ => {
            use rayon::prelude::*;
            (0..lines).into_par_iter().all(line)
        }
    };
    if all_finite {
        return None;
    }
    for j in 0..x.ncols() {
        for i in 0..x.nrows() {
            if !x[(i, j)].into().is_finite() {
                return Some((i, j));
            }
        }
    }
    None
}

//! Large buffers written by the pool's threads into disjoint places of one allocation.
//!
//! A fresh allocation of tens of megabytes comes from the system as untouched pages, and the
//! first write to each page faults (about 30 ms for a 64 MB matrix on a 2-core VM): faer's
//! `Mat::from_fn` and `Mat::zeros` take all of them on one thread, which then bounds a layer's
//! centring, CCR and conversions however many threads the pool has. [`mat_from_cols`] writes
//! each element once, by blocks of columns on the pool, so the threads take the faults side by
//! side. [`stable_scatter`], one pass of the radix sort that ranks a layer's two million
//! distances, writes each chunk's words into runs of the output that no other chunk touches.
#![allow(unsafe_code)] // disjoint writes from the pool's threads; see the SAFETY notes.

use faer::{Mat, Par};

/// Elements per parallel block of [`mat_from_cols`] (1 MiB of `f64`): large against a task's
/// overhead, small against a layer's matrix.
const BLOCK_ELEMS: usize = 1 << 17;

/// The allocation's base pointer, shared by the tasks that each write their own columns.
struct Base<T>(*mut T);

// SAFETY: the tasks write disjoint columns of one allocation that outlives them (see
// `mat_from_cols`), and `T: Send`.
unsafe impl<T: Send> Send for Base<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Base<T> {}

impl<T> Base<T> {
    /// The pointer (a method, so that closures capture the `Sync` wrapper, not its field).
    fn get(&self) -> *mut T {
        self.0
    }
}

/// The `nrows × ncols` matrix whose column `j` is the `nrows` values `column(j)` yields,
/// like faer's `Mat::from_fn` but written by blocks of columns on the current rayon pool
/// unless `par` is `Par::Seq` (or the matrix is small). Each entry is computed once, by
/// `column` alone, so nothing depends on the thread count. A column of another length is a
/// bug in the caller: it panics.
///
/// ```
/// use repgeom_linalg::{Mat, Par, mat_from_cols};
/// let f = |i: usize, j: usize| (i * 1000 + j) as f64;
/// let m = mat_from_cols(300, 500, Par::rayon(2), |j| (0..300).map(move |i| f(i, j)));
/// assert_eq!(m, Mat::from_fn(300, 500, f));
/// ```
pub fn mat_from_cols<T, I>(
    nrows: usize,
    ncols: usize,
    par: Par,
    column: impl Fn(usize) -> I + Sync,
) -> Mat<T>
where
    T: Copy + Send + Sync,
    I: IntoIterator<Item = T>,
{
    let mut m = Mat::<T>::with_capacity(nrows, ncols);
    let stride = m.col_stride().unsigned_abs();
    assert!(stride >= nrows, "a column holds its rows");
    let base = Base(m.as_ptr_mut());
    let write_columns = |cols: std::ops::Range<usize>| {
        for j in cols {
            let mut values = column(j).into_iter();
            // SAFETY: the allocation holds `stride * ncols` elements of `T`, column `j` starts
            // at `j * stride` and holds `nrows <= stride` of them, and each column is written
            // by one task only.
            let col = unsafe { base.get().add(j * stride) };
            for i in 0..nrows {
                let v = values.next().expect("a column yields nrows values");
                // SAFETY: as above, `i < nrows`.
                unsafe { col.add(i).write(v) };
            }
            assert!(values.next().is_none(), "a column yields nrows values");
        }
    };
    let per_block = (BLOCK_ELEMS / nrows.max(1)).max(1);
    column_blocks(ncols, per_block, par, ncols <= per_block, write_columns);
    // SAFETY: the capacity holds `nrows × ncols` elements (`with_capacity`), and every one of
    // them was written above (a column of another length panicked before this point, and
    // `T: Copy`, so the unwinding matrix, still without rows or columns, drops nothing).
    unsafe { m.set_dims(nrows, ncols) };
    m
}

/// `write(cols)` over the ranges of `width` columns that cover `0..ncols`: all at once on this
/// thread where `par` is `Par::Seq` or the matrix is `small`, else one task per range on the
/// current rayon pool.
fn column_blocks(
    ncols: usize,
    width: usize,
    par: Par,
    small: bool,
    write: impl Fn(std::ops::Range<usize>) + Sync,
) {
    if par == Par::Seq || small {
        return write(0..ncols);
    }
    use rayon::prelude::*;
    (0..ncols.div_ceil(width))
        .into_par_iter()
        .for_each(|b| write(b * width..((b + 1) * width).min(ncols)));
}

/// Words per chunk of [`stable_scatter`] (512 KiB of `u64`): large against a task's overhead,
/// small against a layer's 2 million pairs.
pub(crate) const SCATTER_CHUNK: usize = 1 << 16;

/// Writes the words of `src` into `dst` (of the same length) ordered by `digit(word)`, a
/// bucket below `buckets`, stably: one pass of a least-significant-digit radix sort, by
/// chunks of [`SCATTER_CHUNK`] words on the current rayon pool. Each chunk counts its digits;
/// the counts' prefix sums over (digit, chunk) give every chunk its own run of slots in each
/// bucket, which it then fills in order. The result is the sequential pass's at any thread
/// count. `digit` must be a function of the word: a chunk that finds more words of a digit
/// than it counted panics rather than write past its run.
pub(crate) fn stable_scatter(
    src: &[u64],
    dst: &mut [u64],
    buckets: usize,
    digit: impl Fn(u64) -> usize + Sync,
) {
    use rayon::prelude::*;
    assert_eq!(src.len(), dst.len(), "a scatter keeps its length");
    let counts: Vec<Vec<usize>> = (src.par_chunks(SCATTER_CHUNK))
        .map(|chunk| {
            let mut k = vec![0usize; buckets];
            for &w in chunk {
                k[digit(w)] += 1;
            }
            k
        })
        .collect();
    // runs[c][b]: the slots of chunk c's words of digit b, `start..end`.
    let mut runs: Vec<Vec<(usize, usize)>> = vec![vec![(0, 0); buckets]; counts.len()];
    let mut next = 0;
    for b in 0..buckets {
        for (run, k) in runs.iter_mut().zip(&counts) {
            run[b] = (next, next + k[b]);
            next += k[b];
        }
    }
    debug_assert_eq!(next, dst.len());
    let base = Base(dst.as_mut_ptr());
    (src.par_chunks(SCATTER_CHUNK))
        .zip(runs)
        .for_each(|(chunk, mut run)| {
            for &w in chunk {
                let (slot, end) = &mut run[digit(w)];
                assert!(*slot < *end, "a word's digit is a function of the word");
                // SAFETY: the runs tile `0..dst.len()` (their lengths are the counts, which
                // sum to `src.len() == dst.len()`), no two (chunk, digit) runs overlap, this
                // task alone writes its chunk's runs, and it writes only below each run's end
                // (the assert): every write is in bounds and no slot is written by two tasks.
                // `dst` is borrowed mutably for the whole call.
                unsafe { base.get().add(*slot).write(w) };
                *slot += 1;
            }
        });
}

/// The side of the square tiles [`mat_from_row_major`] transposes through: a tile of `f32`
/// (16 KiB) stays in L1 while its rows are read and its columns written.
const TILE: usize = 64;

/// The `nrows × ncols` matrix whose entries are `data` in row-major order (`data[i · ncols +
/// j]` is entry `(i, j)`), copied into faer's column-major layout by square tiles, by blocks of
/// [`TILE`] columns on the current rayon pool unless `par` is `Par::Seq` (or the matrix is
/// small). Every entry is copied, so nothing depends on the thread count; the tiles keep the
/// strided side of the copy in cache, where an entry-by-entry `Mat::from_fn` takes a cache
/// and TLB miss per entry (75 ms for one 2048 × 4096 layer on one thread).
///
/// ```
/// use repgeom_linalg::{Mat, Par, mat_from_row_major};
/// let data: Vec<f32> = (0..300 * 70).map(|v| v as f32).collect();
/// let m = mat_from_row_major(&data, 300, 70, Par::rayon(2));
/// assert_eq!(m, Mat::from_fn(300, 70, |i, j| data[i * 70 + j]));
/// ```
///
/// # Panics
///
/// If `data` does not hold `nrows × ncols` entries (a bug in the caller, which knows the
/// shape it read).
pub fn mat_from_row_major<T>(data: &[T], nrows: usize, ncols: usize, par: Par) -> Mat<T>
where
    T: Copy + Send + Sync,
{
    assert_eq!(
        Some(data.len()),
        nrows.checked_mul(ncols),
        "row-major data of {nrows} × {ncols} entries"
    );
    let mut m = Mat::<T>::with_capacity(nrows, ncols);
    let stride = m.col_stride().unsigned_abs();
    assert!(stride >= nrows, "a column holds its rows");
    let base = Base(m.as_ptr_mut());
    let write_columns = |cols: std::ops::Range<usize>| {
        for r0 in (0..nrows).step_by(TILE) {
            let rows = r0..(r0 + TILE).min(nrows);
            for j in cols.clone() {
                // SAFETY: the allocation holds `stride * ncols` elements of `T`, column `j`
                // starts at `j * stride` and holds `nrows <= stride` of them, and each column
                // is written by one task only.
                let col = unsafe { base.get().add(j * stride) };
                for i in rows.clone() {
                    let v = data[i * ncols + j];
                    // SAFETY: as above, `i < nrows`.
                    unsafe { col.add(i).write(v) };
                }
            }
        }
    };
    let small = nrows.saturating_mul(ncols) <= BLOCK_ELEMS;
    column_blocks(ncols, TILE, par, small, write_columns);
    // SAFETY: the capacity holds `nrows × ncols` elements (`with_capacity`), and every one of
    // them was written above (each column's rows, tile by tile; `data` holds every entry, so
    // nothing panicked in between, and `T: Copy` drops nothing if it had).
    unsafe { m.set_dims(nrows, ncols) };
    m
}

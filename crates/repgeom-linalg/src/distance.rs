//! Pairwise cosine distances through one GEMM of row-normalised points.

use faer::{Mat, MatRef, Par};

use faer::reborrow::{Reborrow, ReborrowMut};

use crate::{Error, RankScratch, RankedReference, Result, float_key};

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
///
/// Each row's squared norm is summed over its columns in order and the rows are written by
/// blocks, on the current rayon pool unless `par` is `Par::Seq`: the same bits either way.
pub fn normalize_rows<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    what: &str,
    par: Par,
) -> Result<Mat<f32>> {
    let d = x.ncols();
    let norms = squared_row_norms(x, par);
    let first_bad = |i: usize| (0..d).find(|&j| !x[(i, j)].into().is_finite()).unwrap_or(0);
    let inv = inverse_row_norms(&norms, what, first_bad)?;
    Ok(rows_to_f32(x, Some(&inv), par))
}

/// The fewest rows in a parallel block of [`squared_row_norms`].
const MIN_NORM_ROWS: usize = 64;

/// Every row's squared norm in `f64`, summed over the columns in order (blocks of rows on the
/// current rayon pool unless `par` is `Par::Seq`: the same bits either way).
fn squared_row_norms<T: Copy + Into<f64> + Sync>(x: MatRef<'_, T>, par: Par) -> Vec<f64> {
    let mut sq = vec![0.0f64; x.nrows()];
    // A row's sum does not depend on the blocks: as many as threads, each a run of rows.
    let rows = match par {
        Par::Seq => x.nrows(),
        _ => x.nrows().div_ceil(rayon::current_num_threads()),
    }
    .max(MIN_NORM_ROWS);
    let block = |(b, out): (usize, &mut [f64])| {
        let r0 = b * rows;
        for j in 0..x.ncols() {
            for (t, s) in out.iter_mut().enumerate() {
                let v: f64 = x[(r0 + t, j)].into();
                *s += v * v;
            }
        }
    };
    if par == Par::Seq {
        sq.chunks_mut(rows).enumerate().for_each(block);
    } else {
        use rayon::prelude::*;
        sq.par_chunks_mut(rows).enumerate().for_each(block);
    }
    sq
}

/// `x` in `f32`, each row first multiplied in `f64` by its `scale` when one is given (blocks
/// of columns on the current rayon pool unless `par` is `Par::Seq`).
fn rows_to_f32<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    scale: Option<&[f64]>,
    par: Par,
) -> Mat<f32> {
    let (n, d) = (x.nrows(), x.ncols());
    match scale {
        Some(s) => crate::mat_from_cols(n, d, par, |j| {
            (x.col(j).iter().zip(s)).map(|(&v, &s)| (v.into() * s) as f32)
        }),
        None => crate::mat_from_cols(n, d, par, |j| x.col(j).iter().map(|&v| v.into() as f32)),
    }
}

/// `1 / ‖x_i‖` from the squared row norms `sq` (accumulated in `f64`): the scale
/// [`normalize_rows`] multiplies each row by, in `f64`, before rounding to `f32`. The one home
/// of its checks, shared with the CUDA engine: a non-finite norm is an error naming the row
/// and its first non-finite column (`first_bad(row)`), and a norm of zero, or at most
/// `f32::EPSILON` times the largest, an error naming the row (its direction is noise).
pub fn inverse_row_norms(
    sq: &[f64],
    what: &str,
    first_bad: impl Fn(usize) -> usize,
) -> Result<Vec<f64>> {
    let max = sq.iter().cloned().fold(0.0f64, f64::max).sqrt();
    sq.iter()
        .enumerate()
        .map(|(i, s)| {
            let norm = s.sqrt();
            if !norm.is_finite() {
                return Err(Error::NonFinite {
                    what: what.into(),
                    row: i,
                    col: first_bad(i),
                });
            }
            if norm == 0.0 || norm <= max * f64::from(f32::EPSILON) {
                return Err(Error::ZeroNorm {
                    what: what.into(),
                    row: i,
                });
            }
            Ok(1.0 / norm)
        })
        .collect()
}

/// Checks that every squared row norm `sq` (accumulated in `f64`) is finite, naming the first
/// row that is not and its first non-finite column (`first_bad(row)`): the check of the
/// Euclidean distances' rows, shared with the CUDA engine.
pub fn check_row_norms(sq: &[f64], what: &str, first_bad: impl Fn(usize) -> usize) -> Result<()> {
    match sq.iter().position(|s| !s.is_finite()) {
        Some(i) => Err(Error::NonFinite {
            what: what.into(),
            row: i,
            col: first_bad(i),
        }),
        None => Ok(()),
    }
}

/// Cosine distances $1 - \cos(x_i, x_j)$ for all pairs `i < j`, in condensed order.
///
/// Rows are normalised (see [`normalize_rows`]), then one `f32` GEMM computes the lower
/// triangle of the Gram matrix. Values are clamped to `[0, 2]`.
pub fn cosine_distances<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    what: &str,
    par: Par,
) -> Result<Vec<f32>> {
    let n = x.nrows();
    let xn = normalize_rows(x, what, par)?;
    let mut out = vec![0.0f32; condensed_len(n)];
    condensed_from_normalized(xn.as_ref(), &mut out, par);
    Ok(out)
}

/// Like [`cosine_distances`], writing into a caller-owned buffer of length $n(n-1)/2$ (so a
/// loop over many projections allocates its largest buffer once).
#[track_caller]
pub fn cosine_distances_into<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    out: &mut [f32],
    what: &str,
    par: Par,
) -> Result<()> {
    assert_eq!(
        out.len(),
        condensed_len(x.nrows()),
        "cosine_distances_into: buffer length"
    );
    let xn = normalize_rows(x, what, par)?;
    condensed_from_normalized(xn.as_ref(), out, par);
    Ok(())
}

/// Fills `out` (length $n(n-1)/2$) with the cosine distances of already normalised rows.
pub(crate) fn condensed_from_normalized(xn: MatRef<'_, f32>, out: &mut [f32], par: Par) {
    assert_eq!(out.len(), condensed_len(xn.nrows()));
    for_each_gram_column(xn, par, &mut Vec::new(), |pos, sims| {
        for (o, g) in out[pos..pos + sims.len()].iter_mut().zip(sims) {
            *o = (1.0 - g).clamp(0.0, 2.0);
        }
    });
}

/// Rows per block of the block-wise Gram product: the largest intermediate is `N × BLOCK`.
const BLOCK: usize = 256;

/// Computes the strict lower triangle of $X_n X_n^\top$ one block of columns at a time and
/// calls `f(pos, sims)` for each column `i`, where `sims[t]` is $\langle x_i, x_{i+1+t}\rangle$
/// and `pos` the condensed index of the pair `(i, i + 1)`. Memory: one `N × 256` block, in
/// `buf` (grown as needed, so that a caller can keep it from call to call).
pub(crate) fn for_each_gram_column(
    xn: MatRef<'_, f32>,
    par: Par,
    buf: &mut Vec<f32>,
    mut f: impl FnMut(usize, &[f32]),
) {
    let n = xn.nrows();
    let width = BLOCK.min(n.max(1));
    if buf.len() < n * width {
        buf.resize(n * width, 0.0);
    }
    let mut i0 = 0;
    while i0 < n {
        let b = BLOCK.min(n - i0);
        let rows = n - i0;
        let mut g = faer::MatMut::from_column_major_slice_mut(&mut buf[..rows * b], rows, b);
        crate::matmul_abt_f32(g.rb_mut(), xn.subrows(i0, rows), xn.subrows(i0, b), par);
        for c in 0..b {
            let i = i0 + c;
            if i + 1 >= n {
                continue;
            }
            // Column c holds <x_{i0 + r}, x_i> for r = 0..rows; pairs (i, j > i) start at r = c + 1.
            let col = g.rb().col(c);
            let col = col
                .try_as_col_major()
                .expect("faer Mat columns are contiguous")
                .as_slice();
            let pos = crate::distance::pair_index(n, i, i + 1);
            f(pos, &col[c + 1..rows]);
        }
        i0 += b;
    }
}

/// Spearman correlation between `reference` (over all pairs, condensed order) and the cosine
/// distances of the rows of `x`, computed block-wise without materialising the distances:
/// each similarity becomes a sort key directly. `x` must have no zero rows (see
/// [`normalize_rows`], whose error this returns).
pub fn spearman_of_cosine<T: Copy + Into<f64> + Sync>(
    reference: &RankedReference,
    x: MatRef<'_, T>,
    scratch: &mut RankScratch,
    what: &str,
    par: Par,
) -> Result<f64> {
    assert_eq!(
        reference.len(),
        condensed_len(x.nrows()),
        "spearman_of_cosine: reference length"
    );
    let xn = normalize_rows(x, what, par)?;
    let rank2 = reference.rank2();
    reference.spearman_with_columns(scratch, what, |sink, block| {
        for_each_gram_column(xn.as_ref(), par, block, |pos, sims| {
            let end = pos + sims.len();
            sink.put(pos, sims.len(), |words| {
                crate::vectorize(CosineWords {
                    words,
                    rank2: &rank2[pos..end],
                    sims,
                })
            });
        });
    })
}

/// One column's sort words, `(cosine_key(g) << 32) | rank2`, compiled for the SIMD level of
/// the running CPU ([`crate::vectorize`]; the baseline build is SSE2, two words an
/// iteration). The map is elementwise, so every level writes the same words.
struct CosineWords<'a> {
    words: &'a mut [u64],
    rank2: &'a [u32],
    sims: &'a [f32],
}

impl pulp::WithSimd for CosineWords<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for ((w, &r), g) in self.words.iter_mut().zip(self.rank2).zip(self.sims) {
            *w = (cosine_key(*g) << 32) | u64::from(r);
        }
    }
}

/// [`float_key`] of the cosine distance `clamp(1 − g, 0, 2)`, without its branches: the
/// distance is never negative and never `−0` (`1 − g` is `+0` when `g = 1`), so its key is its
/// bits with the sign bit set, and the loop over a block vectorises.
#[inline(always)]
pub(crate) fn cosine_key(g: f32) -> u64 {
    u64::from((1.0 - g).clamp(0.0, 2.0).to_bits() | 0x8000_0000)
}

/// The pairwise distance PGA compares: cosine (the default) or Euclidean.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Distance {
    /// $1 - \cos(x_i, x_j)$ (scale-free; rows must be non-zero).
    #[default]
    Cosine,
    /// $\lVert x_i - x_j \rVert_2$.
    Euclidean,
}

impl Distance {
    /// The name used on the command line, in manifests and in output rows.
    pub fn name(self) -> &'static str {
        match self {
            Distance::Cosine => "cosine",
            Distance::Euclidean => "euclidean",
        }
    }
}

impl std::fmt::Display for Distance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Distance {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" => Ok(Distance::Cosine),
            "euclidean" => Ok(Distance::Euclidean),
            other => Err(format!(
                "unknown distance {other:?}: use cosine or euclidean"
            )),
        }
    }
}

/// Rows as `f32` plus their squared norms (accumulated in `f64`, rounded to `f32`), for
/// Euclidean distances through one Gram product:
/// $\lVert x_i - x_j\rVert^2 = s_i + s_j - 2\langle x_i, x_j\rangle$ (what the CUDA engine
/// uploads for the full-space distances). Errors on a non-finite row.
pub fn rows_with_sq_norms<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    what: &str,
    par: Par,
) -> Result<(Mat<f32>, Vec<f32>)> {
    let d = x.ncols();
    let sq = squared_row_norms(x, par);
    check_row_norms(&sq, what, |i| {
        (0..d).find(|&j| !x[(i, j)].into().is_finite()).unwrap_or(0)
    })?;
    let rows = rows_to_f32(x, None, par);
    Ok((rows, sq.into_iter().map(|s| s as f32).collect()))
}

#[inline]
fn euclidean_from_gram(si: f32, sj: f32, g: f32) -> f32 {
    (si + sj - 2.0 * g).max(0.0).sqrt()
}

/// Pairwise distances of the rows of `x` for all pairs `i < j`, in condensed order: cosine
/// (see [`cosine_distances`]) or Euclidean (one `f32` Gram product and the row norms, clamped
/// at 0 before the square root).
///
/// ```
/// use repgeom_linalg::{Distance, Mat, Par, condensed_len, pairwise_distances};
/// let x = Mat::<f32>::from_fn(3, 2, |i, j| [[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]][i][j]);
/// let d = pairwise_distances(x.as_ref(), Distance::Euclidean, "x", Par::Seq).unwrap();
/// assert_eq!(d.len(), condensed_len(3)); // pairs (0,1), (0,2), (1,2)
/// assert!((d[0] - 2f32.sqrt()).abs() < 1e-6);
/// let c = pairwise_distances(x.as_ref(), Distance::Cosine, "x", Par::Seq).unwrap();
/// assert!((c[0] - 1.0).abs() < 1e-6); // orthogonal rows
/// ```
pub fn pairwise_distances<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    distance: Distance,
    what: &str,
    par: Par,
) -> Result<Vec<f32>> {
    match distance {
        Distance::Cosine => cosine_distances(x, what, par),
        Distance::Euclidean => {
            let n = x.nrows();
            let (rows, sq) = rows_with_sq_norms(x, what, par)?;
            let mut out = vec![0.0f32; condensed_len(n)];
            let mut i = 0usize;
            for_each_gram_column(rows.as_ref(), par, &mut Vec::new(), |pos, sims| {
                while pair_index_start(n, i + 1) <= pos && i + 1 < n {
                    i += 1;
                }
                for (t, (o, g)) in out[pos..pos + sims.len()].iter_mut().zip(sims).enumerate() {
                    *o = euclidean_from_gram(sq[i], sq[i + 1 + t], *g);
                }
            });
            Ok(out)
        }
    }
}

/// Condensed index of the first pair of row `i` (`(i, i + 1)`).
fn pair_index_start(n: usize, i: usize) -> usize {
    i * n - i * (i + 1) / 2
}

/// Spearman correlation between `reference` and the `distance` distances of the rows of `x`,
/// block-wise as in [`spearman_of_cosine`] (which it is for [`Distance::Cosine`]).
pub fn spearman_of_distances<T: Copy + Into<f64> + Sync>(
    reference: &RankedReference,
    x: MatRef<'_, T>,
    distance: Distance,
    scratch: &mut RankScratch,
    what: &str,
    par: Par,
) -> Result<f64> {
    match distance {
        Distance::Cosine => spearman_of_cosine(reference, x, scratch, what, par),
        Distance::Euclidean => {
            let n = x.nrows();
            assert_eq!(
                reference.len(),
                condensed_len(n),
                "spearman_of_distances: reference length"
            );
            let (rows, sq) = rows_with_sq_norms(x, what, par)?;
            let rank2 = reference.rank2();
            reference.spearman_with_columns(scratch, what, |sink, block| {
                let mut i = 0usize;
                for_each_gram_column(rows.as_ref(), par, block, |pos, sims| {
                    while i + 1 < n && pair_index_start(n, i + 1) <= pos {
                        i += 1;
                    }
                    let end = pos + sims.len();
                    sink.put(pos, sims.len(), |words| {
                        let pairs = words.iter_mut().zip(&rank2[pos..end]);
                        for (t, ((w, &r), g)) in pairs.zip(sims).enumerate() {
                            let key = float_key(euclidean_from_gram(sq[i], sq[i + 1 + t], *g));
                            *w = (key << 32) | u64::from(r);
                        }
                    });
                });
            })
        }
    }
}

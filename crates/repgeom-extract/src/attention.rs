//! Causal self-attention of a batch on the CPU: one rayon task per (sequence, query head),
//! each running its two products and its softmax alone.
//!
//! A batch of `B` sequences with `H` heads is `B · H` independent problems of `T × T` scores.
//! As batched candle products they were `B · H` small GEMMs one after another, each split over
//! the whole pool (at 16 threads a 256 × 256 × 64 product is a few microseconds of work per
//! thread against the cost of waking them), and their scores lived at once as `[B, H, T, T]`
//! buffers. Here every task takes its query rows 64 at a time: their scores against the keys
//! they see (`Q K_hᵀ`) in its worker's own buffer, the soft cap and the masked softmax row by
//! row, and `P V_h` written straight into its head's columns of the `[B, T, H · hd]` output,
//! with `Par::Seq` products:
//! every entry's sum runs in one order, so the output is the same at any thread count.
//! Grouped keys and values are read where they are (query head `h` uses key head
//! `h / (H / H_kv)`), not repeated into `H` copies.

use rayon::prelude::*;
use repgeom_linalg::{MatMut, MatRef, Par, matmul_abt_f32};

use crate::kernels::{masked_softmax_row, visible_from};

/// The shape of a batch's attention: `batch` sequences of `len` tokens, `q_heads` query heads
/// and `kv_heads` key/value heads (`q_heads` a multiple of it) of `head_dim` values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub(crate) batch: usize,
    pub(crate) len: usize,
    pub(crate) q_heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

/// How scores become probabilities: `scale · q·k`, Gemma-2's soft cap `cap · tanh(x / cap)`
/// where `cap` is set, then the causal (and, with `window`, sliding-window) softmax.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scores {
    pub(crate) scale: f64,
    pub(crate) cap: Option<f64>,
    pub(crate) window: Option<usize>,
}

/// Attention of a batch: `q` is `[B, H, T, hd]`, `k` and `v` are `[B, H_kv, T, hd]` (each
/// contiguous, row-major); the result is `[B, T, H · hd]`, head `h` in columns
/// `h · hd .. (h + 1) · hd`.
pub(crate) fn attention(shape: Heads, q: &[f32], k: &[f32], v: &[f32], s: Scores) -> Vec<f32> {
    let Heads {
        batch,
        len: t,
        q_heads,
        kv_heads,
        head_dim: hd,
    } = shape;
    assert!(
        kv_heads > 0 && q_heads % kv_heads == 0,
        "attention: {q_heads} query heads over {kv_heads} key/value heads"
    );
    let block = t * hd;
    assert_eq!(q.len(), batch * q_heads * block, "attention: q's length");
    assert_eq!(k.len(), batch * kv_heads * block, "attention: k's length");
    assert_eq!(v.len(), batch * kv_heads * block, "attention: v's length");
    let width = q_heads * hd;
    let group = q_heads / kv_heads;
    fn head(x: &[f32], i: usize, t: usize, hd: usize) -> MatRef<'_, f32> {
        MatRef::from_row_major_slice(&x[i * t * hd..][..t * hd], t, hd)
    }
    // zeroed by the system: the pages are first touched by the tasks
    let mut out = vec![0f32; batch * t * width];
    out.par_chunks_mut(t * width.max(1))
        .enumerate()
        .for_each(|(seq, rows)| {
            // this sequence's output, cut into its heads' columns
            let mut heads = Vec::with_capacity(q_heads);
            let mut rest = MatMut::from_row_major_slice_mut(rows, t, width);
            for _ in 0..q_heads {
                let (this, next) = rest.split_at_col_mut(hd);
                heads.push(this);
                rest = next;
            }
            heads.into_par_iter().enumerate().for_each_init(
                || vec![0f32; scratch_len(t)],
                |scores, (h, dst)| {
                    let kv = seq * kv_heads + h / group;
                    let (qh, kh) = (head(q, seq * q_heads + h, t, hd), head(k, kv, t, hd));
                    let vh = head(v, kv, t, hd);
                    one_head(dst, qh, kh, vh, scores, s);
                },
            );
        });
    out
}

/// Query rows per block of [`one_head`]: a block's scores need the keys up to its last row
/// only, and fit in a worker's cache (`64 × T` values).
const ROWS: usize = 64;

/// The scores buffer of one worker for sequences of `t` tokens: one block of [`ROWS`]
/// query rows against every key.
pub(crate) fn scratch_len(t: usize) -> usize {
    ROWS.min(t) * t
}

/// One head of one sequence: `dst ← softmax(Q Kᵀ) V`, by blocks of [`ROWS`] query rows, each
/// block's scores in `scores` (at least `ROWS × T` values).
///
/// A block's products run over the keys some row of the block sees (`lo ..= last row`, `lo`
/// the window's start for its first row): about half of the `T × T` work of a causal layer.
/// What is left out are the softmax's zeros, which add nothing to a sum.
fn one_head(
    mut dst: MatMut<'_, f32>,
    q: MatRef<'_, f32>,
    k: MatRef<'_, f32>,
    v: MatRef<'_, f32>,
    scores: &mut [f32],
    s: Scores,
) {
    let t = q.nrows();
    // The scale is applied inside the softmax, or before the cap where there is one (as
    // `cap · tanh(scale · x / cap)`, each step rounded to f32 as three tensor operations
    // would: `x · m + 0` is `x · m` with a zero's sign made positive).
    let in_softmax = match s.cap {
        Some(_) => 1.0,
        None => s.scale as f32,
    };
    let mut r0 = 0;
    while r0 < t {
        let r1 = (r0 + ROWS).min(t);
        let lo = visible_from(r0, s.window);
        let (m, w) = (r1 - r0, r1 - lo);
        // row i of the block holds the scores of query r0 + i against keys lo..r1
        let block = &mut scores[..m * w];
        matmul_abt_f32(
            MatMut::from_row_major_slice_mut(block, m, w),
            q.subrows(r0, m),
            k.subrows(lo, w),
            Par::Seq,
        );
        for (i, row) in (r0 - lo..).zip(block.chunks_exact_mut(w)) {
            // `i`: the query's position among keys lo..r1, where its window starts at
            // `visible_from(i, window)` too
            if let Some(cap) = s.cap {
                let (m, inv, c) = (s.scale as f32, (1.0 / cap) as f32, cap as f32);
                for x in &mut row[visible_from(i, s.window)..=i] {
                    *x = ((*x * m + 0.0) * inv + 0.0).tanh() * c + 0.0;
                }
            }
            masked_softmax_row(row, i, in_softmax, s.window);
        }
        matmul_abt_f32(
            dst.as_mut().subrows_mut(r0, m),
            MatRef::from_row_major_slice(block, m, w),
            v.subrows(lo, w).transpose(),
            Par::Seq,
        );
        r0 = r1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention computed directly in `f64` from the definition.
    fn direct(shape: Heads, q: &[f32], k: &[f32], v: &[f32], s: Scores) -> Vec<f64> {
        let Heads {
            batch,
            len: t,
            q_heads,
            kv_heads,
            head_dim: hd,
        } = shape;
        let mut out = vec![0f64; batch * t * q_heads * hd];
        for b in 0..batch {
            for h in 0..q_heads {
                let qb = (b * q_heads + h) * t * hd;
                let kb = (b * kv_heads + h / (q_heads / kv_heads)) * t * hd;
                for i in 0..t {
                    let seen: Vec<usize> = (0..=i)
                        .filter(|&j| s.window.is_none_or(|w| i - j < w))
                        .collect();
                    let logits: Vec<f64> = seen
                        .iter()
                        .map(|&j| {
                            let dot: f64 = (0..hd)
                                .map(|c| {
                                    f64::from(q[qb + i * hd + c]) * f64::from(k[kb + j * hd + c])
                                })
                                .sum();
                            let x = dot * s.scale;
                            s.cap.map_or(x, |cap| cap * (x / cap).tanh())
                        })
                        .collect();
                    let max = logits.iter().copied().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = logits.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..hd {
                        out[(b * t + i) * q_heads * hd + h * hd + c] = seen
                            .iter()
                            .zip(&e)
                            .map(|(&j, p)| p / sum * f64::from(v[kb + j * hd + c]))
                            .sum();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_matches_the_definition() {
        const TOL: f64 = 2e-6;
        let value =
            |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5 - 1.0;
        // lengths across the row blocks, grouped heads, windows, the soft cap
        for (batch, len, q_heads, kv_heads, head_dim, window, cap) in [
            (1, 1, 1, 1, 4, None, None),
            (2, 5, 2, 2, 3, None, None),
            (2, 70, 4, 2, 8, None, None),
            (1, 150, 3, 1, 5, Some(40), None),
            (2, 130, 2, 1, 6, Some(3), Some(2.5)),
            (1, 64, 2, 2, 4, Some(64), Some(50.0)),
        ] {
            let shape = Heads {
                batch,
                len,
                q_heads,
                kv_heads,
                head_dim,
            };
            let n = |h: usize| batch * h * len * head_dim;
            let q: Vec<f32> = (0..n(q_heads)).map(|i| value(i, 1)).collect();
            let k: Vec<f32> = (0..n(kv_heads)).map(|i| value(i, 2)).collect();
            let v: Vec<f32> = (0..n(kv_heads)).map(|i| value(i, 3)).collect();
            let s = Scores {
                scale: 0.6,
                cap,
                window,
            };
            let want = direct(shape, &q, &k, &v, s);
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let got = pool.install(|| attention(shape, &q, &k, &v, s));
                for (p, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(g) - w).abs() <= TOL,
                        "{shape:?} {s:?}, {threads} threads, entry {p}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

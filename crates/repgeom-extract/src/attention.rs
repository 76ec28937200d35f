//! Causal self-attention of a batch on the CPU: one rayon task per (sequence, query head),
//! each reading its head from the projections where they are, and running its rotary
//! embedding, its two products and its softmax alone.
//!
//! A batch of `B` sequences with `H` heads is `B · H` independent problems of `T × T` scores.
//! As candle operations they were three strided copies of the projections into `[B, H, T, hd]`
//! and the rotary embedding's narrow, rope and concatenation (copies on one thread, while
//! the rest of the pool waited), then `B · H` small GEMMs one after another, each split over
//! the whole pool (at 16 threads a 256 × 256 × 64 product is a few microseconds of work per
//! thread against the cost of waking them), with the scores of all heads at once as
//! `[B, H, T, T]` buffers. Here every task copies its query head and key head out of the
//! projections into its worker's buffers, rotating them on the way (candle's rope formula,
//! operation for operation), then takes its query rows 64 at a time: their scores against the
//! keys they see (`Q K_hᵀ`) in its worker's own buffer, the soft cap and the masked softmax
//! row by row, and `P V_h` (the values read in place) written straight into its head's
//! columns of the `[B, T, H · hd]` output, with `Par::Seq` products: every entry's sum runs in
//! one order, so the output is the same at any thread count. Grouped keys and values are
//! read where they are (query head `h` uses key head `h / (H / H_kv)`), not repeated into `H`
//! copies.

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

/// Where one kind of head (queries, keys or values) lies in a projection's row-major
/// `[B·T, row]` output: head `h` of token `p` is the `head_dim` values from
/// `p · row + first + h · step`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadsIn<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) row: usize,
    pub(crate) first: usize,
    pub(crate) step: usize,
}

impl<'a> HeadsIn<'a> {
    /// The heads of a projection of their own, `[B·T, heads · head_dim]`.
    pub(crate) fn separate(data: &'a [f32], heads: usize, head_dim: usize) -> Self {
        HeadsIn {
            data,
            row: heads * head_dim,
            first: 0,
            step: head_dim,
        }
    }
}

/// The rotary embedding of queries and keys (rotate-half) on the first `dims` values of each
/// head, from tables `[T, dims / 2]` of cosines and sines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rotary<'a> {
    pub(crate) cos: &'a [f32],
    pub(crate) sin: &'a [f32],
    pub(crate) dims: usize,
}

/// How scores become probabilities: `scale · q·k`, Gemma-2's soft cap `cap · tanh(x / cap)`
/// where `cap` is set, then the causal (and, with `window`, sliding-window) softmax.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scores {
    pub(crate) scale: f64,
    pub(crate) cap: Option<f64>,
    pub(crate) window: Option<usize>,
}

/// One worker's buffers: a block of scores, and the rotated query and key heads.
struct Scratch {
    scores: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
}

impl Scratch {
    fn new(t: usize, hd: usize) -> Self {
        Scratch {
            scores: vec![0f32; ROWS.min(t) * t],
            q: vec![0f32; t * hd],
            k: vec![0f32; t * hd],
        }
    }
}

/// The `f32` values of one worker's buffers for sequences of `t` tokens and heads of `hd`
/// values (for memory estimates).
pub(crate) fn scratch_len(t: usize, hd: usize) -> usize {
    ROWS.min(t) * t + 2 * t * hd
}

/// Attention of a batch: queries of `shape.q_heads` heads, keys and values of
/// `shape.kv_heads`, where [`HeadsIn`] says; `rotary` rotates queries and keys. The result is
/// `[B, T, H · hd]`, head `h` in columns `h · hd .. (h + 1) · hd`.
pub(crate) fn attention(
    shape: Heads,
    q: HeadsIn<'_>,
    k: HeadsIn<'_>,
    v: HeadsIn<'_>,
    rotary: Option<Rotary<'_>>,
    s: Scores,
) -> Vec<f32> {
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
    let fits = |x: &HeadsIn<'_>, heads: usize| {
        heads == 0
            || batch * t == 0
            || (x.first + (heads - 1) * x.step + hd <= x.row
                && x.data.len() >= (batch * t - 1) * x.row + x.first + (heads - 1) * x.step + hd)
    };
    assert!(fits(&q, q_heads), "attention: the queries' layout");
    assert!(fits(&k, kv_heads), "attention: the keys' layout");
    assert!(fits(&v, kv_heads), "attention: the values' layout");
    if let Some(r) = &rotary {
        assert!(
            r.dims % 2 == 0
                && r.dims <= hd
                && r.cos.len() >= t * r.dims / 2
                && r.sin.len() >= t * r.dims / 2,
            "attention: the rotary tables"
        );
    }
    let width = q_heads * hd;
    let group = q_heads / kv_heads;
    // every value is written by a task
    let mut out = crate::kernels::zeros(batch * t * width);
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
                || Scratch::new(t, hd),
                |buf, (h, dst)| {
                    let kv = h / group;
                    gather(&mut buf.q, q, seq, h, t, hd, rotary);
                    gather(&mut buf.k, k, seq, kv, t, hd, rotary);
                    let start = seq * t * v.row + v.first + kv * v.step;
                    let vh =
                        MatRef::from_row_major_slice_with_stride(&v.data[start..], t, hd, v.row);
                    one_head(
                        dst,
                        MatRef::from_row_major_slice(&buf.q, t, hd),
                        MatRef::from_row_major_slice(&buf.k, t, hd),
                        vh,
                        &mut buf.scores,
                        s,
                    );
                },
            );
        });
    out
}

/// Copies head `h` of sequence `seq` into `dst` (`[T, hd]`), rotating its first `dims`
/// values where `rotary` is given, with candle's rope: for `i < dims / 2`,
/// `x_i cos − x_{i+half} sin` and `x_i sin + x_{i+half} cos`, each product rounded.
fn gather(
    dst: &mut [f32],
    x: HeadsIn<'_>,
    seq: usize,
    h: usize,
    t: usize,
    hd: usize,
    rotary: Option<Rotary<'_>>,
) {
    for (i, d) in dst.chunks_exact_mut(hd).enumerate() {
        let start = (seq * t + i) * x.row + x.first + h * x.step;
        let src = &x.data[start..start + hd];
        match rotary {
            Some(r) if r.dims > 0 => {
                let half = r.dims / 2;
                let (cos, sin) = (&r.cos[i * half..][..half], &r.sin[i * half..][..half]);
                for j in 0..half {
                    let (x1, x2) = (src[j], src[j + half]);
                    d[j] = x1 * cos[j] - x2 * sin[j];
                    d[j + half] = x1 * sin[j] + x2 * cos[j];
                }
                d[r.dims..].copy_from_slice(&src[r.dims..]);
            }
            _ => d.copy_from_slice(src),
        }
    }
}

/// Query rows per block of [`one_head`]: a block's scores need the keys up to its last row
/// only, and fit in a worker's cache (`64 × T` values).
const ROWS: usize = 64;

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

    /// Head `h` of token `p` of `x`, as `f64`.
    fn head(x: &HeadsIn<'_>, p: usize, h: usize, hd: usize) -> Vec<f64> {
        let start = p * x.row + x.first + h * x.step;
        x.data[start..start + hd]
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    }

    /// A head rotated in `f64` at position `i`.
    fn rotated(mut x: Vec<f64>, i: usize, r: Option<Rotary<'_>>) -> Vec<f64> {
        if let Some(r) = r {
            let half = r.dims / 2;
            for j in 0..half {
                let (c, s) = (
                    f64::from(r.cos[i * half + j]),
                    f64::from(r.sin[i * half + j]),
                );
                let (x1, x2) = (x[j], x[j + half]);
                x[j] = x1 * c - x2 * s;
                x[j + half] = x1 * s + x2 * c;
            }
        }
        x
    }

    /// Attention computed directly in `f64` from the definition.
    fn direct(
        shape: Heads,
        (q, k, v): (HeadsIn<'_>, HeadsIn<'_>, HeadsIn<'_>),
        r: Option<Rotary<'_>>,
        s: Scores,
    ) -> Vec<f64> {
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
                let kv = h / (q_heads / kv_heads);
                for i in 0..t {
                    let qi = rotated(head(&q, b * t + i, h, hd), i, r);
                    let seen: Vec<usize> = (0..=i)
                        .filter(|&j| s.window.is_none_or(|w| i - j < w))
                        .collect();
                    let logits: Vec<f64> = seen
                        .iter()
                        .map(|&j| {
                            let kj = rotated(head(&k, b * t + j, kv, hd), j, r);
                            let x = qi.iter().zip(&kj).map(|(a, b)| a * b).sum::<f64>() * s.scale;
                            s.cap.map_or(x, |cap| cap * (x / cap).tanh())
                        })
                        .collect();
                    let max = logits.iter().copied().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = logits.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for (&j, p) in seen.iter().zip(&e) {
                        let vj = head(&v, b * t + j, kv, hd);
                        for c in 0..hd {
                            out[(b * t + i) * q_heads * hd + h * hd + c] += p / sum * vj[c];
                        }
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
        // lengths across the row blocks, grouped heads, windows, the soft cap, partial and
        // whole rotary dimensions
        for (batch, len, q_heads, kv_heads, head_dim, window, cap, rot) in [
            (1, 1, 1, 1, 4, None, None, 0),
            (2, 5, 2, 2, 3, None, None, 2),
            (2, 70, 4, 2, 8, None, None, 8),
            (1, 150, 3, 1, 6, Some(40), None, 4),
            (2, 130, 2, 1, 6, Some(3), Some(2.5), 0),
            (1, 64, 2, 2, 4, Some(64), Some(50.0), 4),
        ] {
            let shape = Heads {
                batch,
                len,
                q_heads,
                kv_heads,
                head_dim,
            };
            let rows = batch * len;
            let half = rot / 2;
            let cos: Vec<f32> = (0..len * half).map(|i| (i as f32 * 0.37).cos()).collect();
            let sin: Vec<f32> = (0..len * half).map(|i| (i as f32 * 0.37).sin()).collect();
            let rotary = (rot > 0).then_some(Rotary {
                cos: &cos,
                sin: &sin,
                dims: rot,
            });
            let s = Scores {
                scale: 0.6,
                cap,
                window,
            };
            // separate projections, and (with as many key as query heads) GPT-NeoX's fused
            // per-head [q | k | v] layout
            let split: Vec<Vec<f32>> = [q_heads, kv_heads, kv_heads]
                .iter()
                .enumerate()
                .map(|(salt, &h)| (0..rows * h * head_dim).map(|i| value(i, salt)).collect())
                .collect();
            let fused: Vec<f32> = (0..rows * q_heads * 3 * head_dim)
                .map(|i| value(i, 5))
                .collect();
            let mut layouts = vec![(
                "split",
                [0, 1, 2].map(|i| HeadsIn {
                    data: &split[i],
                    row: split[i].len() / rows,
                    first: 0,
                    step: head_dim,
                }),
            )];
            if q_heads == kv_heads {
                layouts.push((
                    "fused per head",
                    [0, 1, 2].map(|i| HeadsIn {
                        data: &fused,
                        row: q_heads * 3 * head_dim,
                        first: i * head_dim,
                        step: 3 * head_dim,
                    }),
                ));
            }
            for (name, [q, k, v]) in layouts {
                let want = direct(shape, (q, k, v), rotary, s);
                for threads in [1, 3] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let got = pool.install(|| attention(shape, q, k, v, rotary, s));
                    for (p, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (f64::from(g) - w).abs() <= TOL,
                            "{name} {shape:?} {s:?} rotary {rot}, {threads} threads, entry {p}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

//! Average ranks and Spearman correlation, with a radix-sort fast path for repeated use.

use crate::{Error, Result};

/// Maps an `f32` to a `u32` whose unsigned order is the float's total order (−0 and +0 equal).
#[inline]
fn order_key(v: f32) -> u32 {
    let v = if v == 0.0 { 0.0f32 } else { v };
    let b = v.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Sorts `(key << 32 | index)` words by their upper 32 bits, stably, with an LSD radix sort
/// (three passes of 11/11/10 bits; passes whose digit is constant are skipped).
fn radix_sort_keys(words: &mut Vec<u64>, tmp: &mut Vec<u64>) {
    tmp.clear();
    tmp.resize(words.len(), 0);
    const PASSES: [(u32, usize); 3] = [(32, 11), (43, 11), (54, 10)];
    let mut counts = [[0usize; 2048]; 3];
    for &w in words.iter() {
        for (p, &(shift, bits)) in PASSES.iter().enumerate() {
            counts[p][((w >> shift) as usize) & ((1 << bits) - 1)] += 1;
        }
    }
    for (p, &(shift, bits)) in PASSES.iter().enumerate() {
        let c = &mut counts[p];
        if c.contains(&words.len()) {
            continue; // every word has the same digit: this pass would not move anything
        }
        let mut sum = 0;
        for slot in c.iter_mut().take(1 << bits) {
            let here = *slot;
            *slot = sum;
            sum += here;
        }
        let mask = (1u64 << bits) - 1;
        for &w in words.iter() {
            let digit = ((w >> shift) & mask) as usize;
            tmp[c[digit]] = w;
            c[digit] += 1;
        }
        std::mem::swap(words, tmp);
    }
}

/// Reusable buffers for [`RankedReference::spearman`], one per worker thread.
#[derive(Debug, Default)]
pub struct RankScratch {
    words: Vec<u64>,
    tmp: Vec<u64>,
}

/// Fills `words` with sorted `(key, index)` words for `values`.
fn sorted_words(values: &[f32], scratch: &mut RankScratch) {
    assert!(
        values.len() < u32::MAX as usize,
        "at most 2^32 - 1 values can be ranked"
    );
    scratch.words.clear();
    scratch.words.extend(
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| (u64::from(order_key(v)) << 32) | i as u64),
    );
    radix_sort_keys(&mut scratch.words, &mut scratch.tmp);
}

/// Walks sorted words group by group of tied keys, calling `f(average_rank, group)` with
/// 1-based average ranks.
#[inline]
fn for_each_tie_group(words: &[u64], mut f: impl FnMut(f64, &[u64])) {
    let mut start = 0;
    while start < words.len() {
        let key = words[start] >> 32;
        let mut end = start + 1;
        while end < words.len() && words[end] >> 32 == key {
            end += 1;
        }
        f((start + end + 1) as f64 / 2.0, &words[start..end]);
        start = end;
    }
}

/// Average ranks (1-based; ties share the mean of their positions), as SciPy's `rankdata`.
pub fn average_ranks(values: &[f32]) -> Vec<f64> {
    let mut scratch = RankScratch::default();
    sorted_words(values, &mut scratch);
    let mut ranks = vec![0.0f64; values.len()];
    for_each_tie_group(&scratch.words, |r, group| {
        for &w in group {
            ranks[(w & 0xFFFF_FFFF) as usize] = r;
        }
    });
    ranks
}

/// A vector ranked once, against which Spearman correlations with many other vectors of the
/// same length are computed, one radix sort each.
///
/// $$\rho = \frac{\sum_i (r_i - \bar r)(s_i - \bar s)}{\sqrt{\sum_i (r_i-\bar r)^2\,\sum_i (s_i-\bar s)^2}}$$
/// with average ranks for ties, which is exactly SciPy's `spearmanr`.
///
/// The reference keeps twice its average ranks as integers (`u32`), which travel through the
/// sort of the other vector as the payload of each key: the correlation is then accumulated in
/// sorted order with no random access into the reference.
#[derive(Debug, Clone)]
pub struct RankedReference {
    rank2: Vec<u32>,
    sum_sq: f64,
}

impl RankedReference {
    /// Ranks `values`. Errors if fewer than 2 values or all are tied.
    pub fn new(values: &[f32], what: &str) -> Result<Self> {
        let n = values.len();
        if n < 2 {
            return Err(Error::TooFewPoints {
                what: what.into(),
                n,
                min: 2,
            });
        }
        assert!(
            n < (u32::MAX / 2) as usize,
            "at most 2^31 - 1 values can be ranked"
        );
        let mean = (n as f64 + 1.0) / 2.0;
        let mut scratch = RankScratch::default();
        sorted_words(values, &mut scratch);
        let mut rank2 = vec![0u32; n];
        let mut sum_sq = 0.0f64;
        for_each_tie_group(&scratch.words, |r, group| {
            let twice = (2.0 * r) as u32;
            sum_sq += (r - mean) * (r - mean) * group.len() as f64;
            for &w in group {
                rank2[(w & 0xFFFF_FFFF) as usize] = twice;
            }
        });
        if sum_sq == 0.0 {
            return Err(Error::Constant { what: what.into() });
        }
        Ok(Self { rank2, sum_sq })
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.rank2.len()
    }

    /// Whether the reference is empty (never true for a constructed reference).
    pub fn is_empty(&self) -> bool {
        self.rank2.is_empty()
    }

    /// Spearman correlation between the reference and `other` (same length).
    #[track_caller]
    pub fn spearman(&self, other: &[f32], scratch: &mut RankScratch, what: &str) -> Result<f64> {
        assert_eq!(other.len(), self.rank2.len(), "spearman: length mismatch");
        scratch.words.clear();
        scratch.words.extend(
            other
                .iter()
                .zip(&self.rank2)
                .map(|(&v, &r)| (u64::from(order_key(v)) << 32) | u64::from(r)),
        );
        self.finish(scratch, what)
    }

    /// Spearman correlation between the reference and the values written by `fill` into a
    /// key buffer: `fill(keys)` must write `keys[p] = order_key(value_p)` for every position
    /// (see [`float_key`]). Lets callers stream values (e.g. block-wise distances) without
    /// materialising them.
    pub fn spearman_with(
        &self,
        scratch: &mut RankScratch,
        what: &str,
        fill: impl FnOnce(&mut [u64]),
    ) -> Result<f64> {
        scratch.words.clear();
        scratch.words.resize(self.rank2.len(), 0);
        fill(&mut scratch.words);
        for (w, &r) in scratch.words.iter_mut().zip(&self.rank2) {
            *w = (*w << 32) | u64::from(r);
        }
        self.finish(scratch, what)
    }

    fn finish(&self, scratch: &mut RankScratch, what: &str) -> Result<f64> {
        radix_sort_keys(&mut scratch.words, &mut scratch.tmp);
        let n = self.rank2.len();
        let mean = (n as f64 + 1.0) / 2.0;
        let (mut sxy, mut syy) = (0.0f64, 0.0f64);
        for_each_tie_group(&scratch.words, |r, group| {
            let rc = r - mean;
            let s2: u64 = group.iter().map(|&w| w & 0xFFFF_FFFF).sum();
            let cnt = group.len() as f64;
            sxy += rc * (s2 as f64 / 2.0 - cnt * mean);
            syy += rc * rc * cnt;
        });
        if syy == 0.0 {
            return Err(Error::Constant { what: what.into() });
        }
        Ok((sxy / (self.sum_sq.sqrt() * syy.sqrt())).clamp(-1.0, 1.0))
    }
}

/// The sort key of a float: a `u32` whose unsigned order is the float's order (−0 = +0).
#[inline]
pub fn float_key(v: f32) -> u64 {
    u64::from(order_key(v))
}

/// Pearson correlation of two equal-length slices (two-pass, `f64`).
#[track_caller]
pub fn pearson(a: &[f64], b: &[f64], what: &str) -> Result<f64> {
    assert_eq!(a.len(), b.len(), "pearson: length mismatch");
    let n = a.len();
    if n < 2 {
        return Err(Error::TooFewPoints {
            what: what.into(),
            n,
            min: 2,
        });
    }
    let ma = a.iter().sum::<f64>() / n as f64;
    let mb = b.iter().sum::<f64>() / n as f64;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        let (dx, dy) = (x - ma, y - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    if saa == 0.0 || sbb == 0.0 {
        return Err(Error::Constant { what: what.into() });
    }
    Ok((sab / (saa.sqrt() * sbb.sqrt())).clamp(-1.0, 1.0))
}

/// Spearman correlation of two equal-length `f32` slices (average ranks for ties).
///
/// ```
/// let rho = repgeom_linalg::spearman(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 25.0, 100.0], "x").unwrap();
/// assert!((rho - 1.0).abs() < 1e-12); // monotone, whatever the spacing
/// ```
#[track_caller]
pub fn spearman(a: &[f32], b: &[f32], what: &str) -> Result<f64> {
    assert_eq!(a.len(), b.len(), "spearman: length mismatch");
    let reference = RankedReference::new(a, what)?;
    reference.spearman(b, &mut RankScratch::default(), what)
}

//! Average ranks and Spearman correlation, with a radix-sort fast path for repeated use.

use std::sync::atomic::{AtomicU32, Ordering};

use faer::Par;

use crate::alloc::{SCATTER_CHUNK, stable_scatter};
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

/// Sorts `(key << 32 | payload)` words by their upper 32 bits, stably, with an LSD radix
/// sort over the bits the keys actually span: keys are offset by their minimum, and the `b`
/// significant bits of the range are split into `ceil(b / 11)` passes of equal width.
/// Distances between `0.5` and `2` span at most 24 bits: three passes of 8 bits (256
/// buckets, whose write fronts stay in L1), where fixed 11-bit digits of the whole key
/// scattered into 2048 buckets; one pass fewer when the range is narrower still.
///
/// Where [`pooled`], each pass runs by chunks on the current rayon pool ([`stable_scatter`]):
/// a stable sort has one result, so the words come out the same.
pub(crate) fn radix_sort_keys(words: &mut Vec<u64>, tmp: &mut Vec<u64>, par: Par) {
    if pooled(par, words.len()) {
        return radix_sort_keys_par(words, tmp);
    }
    // Every slot of `tmp` is written by a pass before it is read: only its length matters,
    // so a reused buffer is not cleared again.
    tmp.resize(words.len(), 0);
    if words.is_empty() {
        return;
    }
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for &w in words.iter() {
        lo = lo.min(w);
        hi = hi.max(w);
    }
    let lo = (lo >> 32) as u32;
    let Some((passes, width)) = digits(lo, (hi >> 32) as u32) else {
        return; // all keys equal
    };
    let digit = |w: u64, p: usize| digit_of(w, p, lo, width);
    let mut counts = vec![0u32; passes << width];
    for &w in words.iter() {
        for p in 0..passes {
            counts[(p << width) + digit(w, p)] += 1;
        }
    }
    for p in 0..passes {
        let c = &mut counts[p << width..(p + 1) << width];
        let mut sum = 0u32;
        for slot in c.iter_mut() {
            let here = *slot;
            *slot = sum;
            sum += here;
        }
        for &w in words.iter() {
            let d = digit(w, p);
            tmp[c[d] as usize] = w;
            c[d] += 1;
        }
        std::mem::swap(words, tmp);
    }
}

/// The widest digit of [`radix_sort_keys`], in bits.
const MAX_DIGIT: u32 = 11;

/// The fewest words that [`radix_sort_keys`] and [`RankedReference::from_sorted_words`] split
/// over a pool: below it, a task's overhead outweighs the work.
const PAR_MIN_WORDS: usize = 1 << 17;

/// Whether `len` words are sorted or ranked by chunks on the current rayon pool: under `par`,
/// at least [`PAR_MIN_WORDS`] of them, and a pool of more than one thread (on one, the
/// sequential passes, which count every digit in one read, are faster). The words are the
/// same either way.
fn pooled(par: Par, len: usize) -> bool {
    par != Par::Seq && len >= PAR_MIN_WORDS && rayon::current_num_threads() > 1
}

/// The digits of [`radix_sort_keys`] for keys between `lo` and `hi` (the upper halves of the
/// words): `(passes, width)`, or `None` when every key is equal.
fn digits(lo: u32, hi: u32) -> Option<(usize, u32)> {
    let bits = 32 - (hi - lo).leading_zeros();
    if bits == 0 {
        return None;
    }
    let passes = bits.div_ceil(MAX_DIGIT);
    Some((passes as usize, bits.div_ceil(passes)))
}

/// Digit `p` of word `w` under [`digits`]: bits `p·width ..` of its key less `lo`.
#[inline]
fn digit_of(w: u64, p: usize, lo: u32, width: u32) -> usize {
    let shift = p as u32 * width;
    (((((w >> 32) as u32) - lo) >> shift) & ((1u32 << width) - 1)) as usize
}

/// [`radix_sort_keys`] with each pass by chunks on the current rayon pool.
fn radix_sort_keys_par(words: &mut Vec<u64>, tmp: &mut Vec<u64>) {
    use rayon::prelude::*;
    if tmp.len() != words.len() {
        // Zeroed by the system: the pages are first touched by the scatter's tasks.
        *tmp = vec![0; words.len()];
    }
    let (lo, hi) = (words.par_chunks(SCATTER_CHUNK))
        .map(|c| {
            c.iter()
                .fold((u64::MAX, 0), |(l, h), &w| (l.min(w), h.max(w)))
        })
        .reduce(|| (u64::MAX, 0), |(l, h), (a, b)| (l.min(a), h.max(b)));
    let Some((passes, width)) = digits((lo >> 32) as u32, (hi >> 32) as u32) else {
        return;
    };
    let lo = (lo >> 32) as u32;
    for p in 0..passes {
        stable_scatter(words, tmp, 1 << width, |w| digit_of(w, p, lo, width));
        std::mem::swap(words, tmp);
    }
}

/// Reusable buffers for [`RankedReference::spearman`], one per worker thread.
#[derive(Debug)]
pub struct RankScratch {
    words: Vec<u64>,
    tmp: Vec<u64>,
    /// The block of similarities that block-wise distances are computed into.
    pub(crate) block: Vec<f32>,
    sort: PairSort,
    buckets: Buckets,
}

impl Default for RankScratch {
    /// Empty buffers, and the sort [`PairSort::from_env`] names.
    fn default() -> Self {
        Self::with_sort(PairSort::from_env())
    }
}

impl RankScratch {
    /// Empty buffers that sort block-wise distances ([`crate::spearman_of_distances`]) with
    /// `sort`. Every sort gives the same correlation, to the bit; only their speed differs.
    ///
    /// ```
    /// use repgeom_linalg::{Distance, Mat, Par, PairSort, RankScratch, RankedReference};
    /// use repgeom_linalg::{BUCKET_MIN_WORDS, condensed_len, pairwise_distances};
    /// let n = 1030; // 529,935 pairs: enough to go through the buckets
    /// assert!(condensed_len(n) >= BUCKET_MIN_WORDS);
    /// let x = Mat::<f32>::from_fn(n, 4, |i, j| ((i * 7 + j * 13) % 101) as f32);
    /// let y = Mat::<f32>::from_fn(n, 4, |i, j| ((i * 11 + j * 5) % 97) as f32);
    /// let dy = pairwise_distances(y.as_ref(), Distance::Euclidean, "y", Par::Seq).unwrap();
    /// let reference = RankedReference::new(&dy, "y", Par::Seq).unwrap();
    /// let rho = |sort| {
    ///     let mut scratch = RankScratch::with_sort(sort);
    ///     repgeom_linalg::spearman_of_distances(
    ///         &reference, x.as_ref(), Distance::Euclidean, &mut scratch, "x", Par::Seq,
    ///     )
    ///     .unwrap()
    /// };
    /// assert_eq!(rho(PairSort::Buckets).to_bits(), rho(PairSort::Radix).to_bits());
    /// ```
    pub fn with_sort(sort: PairSort) -> Self {
        Self {
            words: Vec::new(),
            tmp: Vec::new(),
            block: Vec::new(),
            sort,
            buckets: Buckets::default(),
        }
    }
}

/// How [`crate::spearman_of_distances`] sorts a vector's pairwise distances, each one a
/// `(key, payload)` word. Both give the same correlation to the bit (the same integer sums);
/// they differ in how often the 16 bytes a pair cross memory, which matters where many cores
/// share its bandwidth. The choice is for measuring that: `REPGEOM_PAIR_SORT=buckets` in the
/// environment selects [`PairSort::Buckets`] for every scratch made by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairSort {
    /// One array of every word, then an LSD radix sort in passes over memory (three at the
    /// 24 bits a cosine distance's key spans) and two passes for the sums: the words cross
    /// memory about eleven times. The default.
    Radix,
    /// Every word sent to one of about 2,048 buckets by its key's top bits as the distances
    /// are made, then each bucket sorted and summed in cache: the words cross memory twice.
    /// Used from [`BUCKET_MIN_WORDS`] words on (the radix sort below).
    Buckets,
}

impl PairSort {
    /// The sort `REPGEOM_PAIR_SORT` names (`radix` or `buckets`), read once per process;
    /// [`PairSort::Radix`] when it is unset or names neither.
    pub fn from_env() -> Self {
        static SORT: std::sync::OnceLock<PairSort> = std::sync::OnceLock::new();
        *SORT.get_or_init(|| match std::env::var("REPGEOM_PAIR_SORT").as_deref() {
            Ok("buckets") => PairSort::Buckets,
            _ => PairSort::Radix,
        })
    }
}

/// The fewest words that [`PairSort::Buckets`] sorts through buckets: below it, the radix
/// sort's buffers are a few MB, and the buckets would hold a few words each.
pub const BUCKET_MIN_WORDS: usize = 1 << 19;

/// Words per page of [`Buckets`] (4 KiB).
const PAGE: usize = 512;

/// Buckets are indexed by the top `LOG_BUCKETS` significant bits of the estimated key range.
const LOG_BUCKETS: u32 = 11;

/// [`PairSort::Buckets`]: words written into buckets by their key's top bits as they are made,
/// each bucket a chain of pages in one arena, so that the words cross memory once on the way
/// in and once on the way out; each bucket is then sorted and summed in cache. The buckets'
/// key ranges come from the keys of the first eighth of the words (the range widened by an
/// eighth each side; keys outside it go to the first or the last bucket), so the split is
/// monotone in the key whatever the estimate, a tie group never spans two buckets, and the
/// sums are those of one sort of every word.
#[derive(Debug, Default)]
struct Buckets {
    lo: u32,
    shift: u32,
    last: u32,
    arena: Vec<u64>,
    /// Per bucket: the arena index its next word goes to, and the end of its current page.
    fronts: Vec<[u32; 2]>,
    /// Per bucket: its first and its current page.
    pages: Vec<[u32; 2]>,
    /// Per page: the next page of its bucket.
    next: Vec<u32>,
    /// The first page not yet in a chain.
    free: u32,
    /// One column's words, on their way into the buckets.
    column: Vec<u64>,
    /// One bucket's words, gathered from its pages, and the radix sort's other buffer.
    gather: Vec<u64>,
    tmp: Vec<u64>,
}

impl Buckets {
    /// Sets the buckets up for `n` words from the keys of `staged`, and puts those in.
    fn start(&mut self, staged: &[u64], n: usize) {
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        for &w in staged {
            let k = (w >> 32) as u32;
            lo = lo.min(k);
            hi = hi.max(k);
        }
        let pad = (hi - lo) / 8;
        let (lo, hi) = (lo.saturating_sub(pad), hi.saturating_add(pad));
        let bits = 32 - (hi - lo).leading_zeros();
        self.shift = bits.saturating_sub(LOG_BUCKETS);
        self.lo = lo;
        self.last = (hi - lo) >> self.shift;
        let nb = self.last as usize + 1;
        let pages = n / PAGE + nb + 1;
        if self.arena.len() < pages * PAGE {
            self.arena = vec![0; pages * PAGE];
        }
        if self.next.len() < pages {
            self.next.resize(pages, u32::MAX);
        }
        self.fronts.clear();
        self.fronts.resize(nb, [0, 0]);
        self.pages.clear();
        self.pages.resize(nb, [u32::MAX, u32::MAX]);
        self.free = 0;
        self.put(staged);
    }

    /// Appends each word to its bucket, chaining a fresh page to a bucket whose page is full.
    /// The arena has a page for every `PAGE` words and one more per bucket, so it never runs
    /// out.
    #[inline]
    fn put(&mut self, words: &[u64]) {
        for &w in words {
            let k = (w >> 32) as u32;
            let b = ((k.saturating_sub(self.lo)) >> self.shift).min(self.last) as usize;
            let [mut c, end] = self.fronts[b];
            if c == end {
                let page = self.free;
                self.free += 1;
                let [first, tail] = &mut self.pages[b];
                match *tail {
                    u32::MAX => *first = page,
                    t => self.next[t as usize] = page,
                }
                *tail = page;
                c = page * PAGE as u32;
                self.fronts[b][1] = c + PAGE as u32;
            }
            self.arena[c as usize] = w;
            self.fronts[b][0] = c + 1;
        }
    }

    /// The [`TieSums`] of every word put in: each bucket gathered, sorted and summed in key
    /// order, its positions offset by the words of the buckets before it.
    fn sums(&mut self) -> TieSums {
        let mut total = TieSums::default();
        let mut offset = 0u64;
        for b in 0..=self.last as usize {
            let [mut page, tail] = self.pages[b];
            if page == u32::MAX {
                continue;
            }
            self.gather.clear();
            loop {
                let at = page as usize * PAGE;
                if page == tail {
                    let end = self.fronts[b][0] as usize;
                    self.gather.extend_from_slice(&self.arena[at..end]);
                    break;
                }
                self.gather.extend_from_slice(&self.arena[at..at + PAGE]);
                page = self.next[page as usize];
            }
            radix_sort_keys(&mut self.gather, &mut self.tmp, Par::Seq);
            let s = tie_sums(&self.gather, offset);
            total.starts += s.starts;
            total.ends += s.ends;
            total.ties += s.ties;
            offset += self.gather.len() as u64;
        }
        total
    }
}

/// Where the sort words of [`RankedReference::spearman_with_columns`] go, column by column:
/// one array ([`PairSort::Radix`]), or the first eighth of them staged in an array and the
/// rest straight into [`Buckets`].
pub(crate) struct ColumnSink<'a> {
    words: &'a mut Vec<u64>,
    buckets: &'a mut Buckets,
    /// Under [`PairSort::Buckets`], the words staged before the buckets start.
    stage: Option<usize>,
    ready: bool,
    n: usize,
}

impl ColumnSink<'_> {
    /// Has `write` fill the words of positions `pos..pos + len` (given in increasing order,
    /// every position once).
    #[inline]
    pub(crate) fn put(&mut self, pos: usize, len: usize, write: impl FnOnce(&mut [u64])) {
        if self.ready {
            let mut col = std::mem::take(&mut self.buckets.column);
            col.resize(len, 0);
            write(&mut col);
            self.buckets.put(&col);
            self.buckets.column = col;
        } else {
            if self.words.len() < pos + len {
                self.words.resize(pos + len, 0);
            }
            let staged = pos + len;
            write(&mut self.words[pos..staged]);
            if self.stage.is_some_and(|stage| staged >= stage) {
                self.buckets.start(&self.words[..staged], self.n);
                self.ready = true;
            }
        }
    }
}

/// The [`TieSums`] of sorted words that sit at positions `offset..` of the whole sort and
/// hold whole tie groups.
fn tie_sums(words: &[u64], offset: u64) -> TieSums {
    let n = words.len() as u64;
    let (mut starts, mut ties) = (0u128, 0u128);
    let mut start = offset;
    let mut prev = words[0] >> 32;
    for (p, &w) in (offset..).zip(words.iter()) {
        let key = w >> 32;
        start = if key == prev { start } else { p };
        prev = key;
        let q2 = w & 0xFFFF_FFFF;
        let j = p - start;
        starts += u128::from(start * q2);
        ties += u128::from(j * (j + 1));
    }
    let mut ends = 0u128;
    let mut end = offset + n;
    let mut next = words[words.len() - 1] >> 32;
    for (p, &w) in words.iter().enumerate().rev() {
        let key = w >> 32;
        end = if key == next {
            end
        } else {
            offset + p as u64 + 1
        };
        next = key;
        ends += u128::from(end * (w & 0xFFFF_FFFF));
    }
    TieSums { starts, ends, ties }
}

/// Fills `words` with sorted `(key, index)` words for `values`, on the current rayon pool
/// unless `par` is `Par::Seq` (the same words either way).
fn sorted_words(values: &[f32], scratch: &mut RankScratch, par: Par) {
    assert!(
        values.len() < u32::MAX as usize,
        "at most 2^32 - 1 values can be ranked"
    );
    let word = |(i, &v): (usize, &f32)| (u64::from(order_key(v)) << 32) | i as u64;
    if pooled(par, values.len()) {
        use rayon::prelude::*;
        (values.par_iter().enumerate())
            .map(word)
            .collect_into_vec(&mut scratch.words);
    } else {
        scratch.words.clear();
        scratch.words.extend(values.iter().enumerate().map(word));
    }
    radix_sort_keys(&mut scratch.words, &mut scratch.tmp, par);
}

/// Walks sorted words `from..to` (whole tie groups) group by group of tied keys, calling
/// `f(s, e)` with each group's sorted positions `[s, e)`: its 1-based average rank is
/// `(s + e + 1) / 2`.
#[inline]
fn for_each_tie_group(words: &[u64], from: usize, to: usize, mut f: impl FnMut(usize, usize)) {
    let mut start = from;
    while start < to {
        let key = words[start] >> 32;
        let mut end = start + 1;
        while end < to && words[end] >> 32 == key {
            end += 1;
        }
        f(start, end);
        start = end;
    }
}

/// Average ranks (1-based; ties share the mean of their positions), as SciPy's `rankdata`.
pub fn average_ranks(values: &[f32]) -> Vec<f64> {
    let mut scratch = RankScratch::default();
    sorted_words(values, &mut scratch, Par::Seq);
    let words = &scratch.words;
    let mut ranks = vec![0.0f64; values.len()];
    for_each_tie_group(words, 0, words.len(), |s, e| {
        for &w in &words[s..e] {
            ranks[(w & 0xFFFF_FFFF) as usize] = (s + e + 1) as f64 / 2.0;
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
    /// Ranks `values`, on the current rayon pool unless `par` is `Par::Seq` (the same ranks
    /// at any thread count). Errors if fewer than 2 values or all are tied.
    ///
    /// ```
    /// use repgeom_linalg::{Par, RankScratch, RankedReference};
    /// let values: Vec<f32> = (0..300_000u64).map(|i| ((i * 7919) % 1000) as f32).collect();
    /// let other: Vec<f32> = values.iter().map(|v| v.sqrt()).collect();
    /// let pooled = RankedReference::new(&values, "x", Par::rayon(2)).unwrap();
    /// let rho = pooled.spearman(&other, &mut RankScratch::default(), "x").unwrap();
    /// assert_eq!(rho, 1.0); // a monotone map, ties and all
    /// let alone = RankedReference::new(&values, "x", Par::Seq).unwrap();
    /// assert_eq!(pooled.rank2(), alone.rank2());
    /// ```
    pub fn new(values: &[f32], what: &str, par: Par) -> Result<Self> {
        Self::new_in(values, &mut RankScratch::default(), what, par)
    }

    /// [`Self::new`] with the sort's buffers from `scratch` (kept from call to call, so that
    /// ranking many vectors in turn does not allocate them each time). The same ranks.
    pub fn new_in(values: &[f32], scratch: &mut RankScratch, what: &str, par: Par) -> Result<Self> {
        sorted_words(values, scratch, par);
        Self::from_sorted_words(&scratch.words, what, par)
    }

    /// The reference from its words sorted elsewhere (the CUDA engine sorts them on the
    /// device): `words[p] = (order_key(value) << 32) | index` (see [`float_key`]), sorted by
    /// key; the order inside a tie group does not matter. The ranks and their sum of squares
    /// are computed here, as [`Self::new`] computes them, by chunks of whole tie groups on the
    /// current rayon pool unless `par` is `Par::Seq`. Errors if fewer than 2 values or all are
    /// tied.
    ///
    /// The sum of squares is exact: `Σ (r − m)² = (n (n² − 1) − Σ_g (t_g³ − t_g)) / 12` over
    /// the tie groups `g` (sizes `t_g`), summed in integers and rounded once, as the other
    /// side's in [`Self::rho_from_tie_sums`].
    pub fn from_sorted_words(words: &[u64], what: &str, par: Par) -> Result<Self> {
        let n = words.len();
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
        debug_assert!(
            words.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32),
            "sorted by key"
        );
        // Chunks start at tie groups' first words, so each holds whole groups: twice a
        // group's average rank is `start + end + 1` (1-based ranks), known inside its chunk.
        let key = |p: usize| words[p] >> 32;
        let par = if pooled(par, n) { par } else { Par::Seq };
        let mut starts = vec![0];
        if par != Par::Seq {
            for mut s in (SCATTER_CHUNK..n).step_by(SCATTER_CHUNK) {
                while s < n && key(s) == key(s - 1) {
                    s += 1;
                }
                if s < n && s > *starts.last().expect("the first chunk") {
                    starts.push(s);
                }
            }
        }
        starts.push(n);
        let rank2: Vec<AtomicU32> = crate::map_in_order(n, par, |_| AtomicU32::new(0));
        // Σ (t³ − t) over each chunk's groups, in integers throughout: a group `[s, e)` has
        // twice its average rank `s + e + 1` (below 2^32, since n < 2^31), and only groups of
        // two or more add to the tie sum, most groups being single values.
        let ties = crate::map_in_order(starts.len() - 1, par, |c| {
            let mut ties = 0u128;
            for_each_tie_group(words, starts[c], starts[c + 1], |s, e| {
                let twice = (s + e + 1) as u32;
                if e - s > 1 {
                    let t = (e - s) as u128;
                    ties += t * t * t - t;
                }
                for &w in &words[s..e] {
                    rank2[(w & 0xFFFF_FFFF) as usize].store(twice, Ordering::Relaxed);
                }
            });
            ties
        });
        let n = n as i128;
        let sxx12 = n * (n * n - 1) - ties.into_iter().sum::<u128>() as i128;
        if sxx12 == 0 {
            return Err(Error::Constant { what: what.into() });
        }
        Ok(Self {
            rank2: rank2.into_iter().map(AtomicU32::into_inner).collect(),
            sum_sq: sxx12 as f64 / 12.0,
        })
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
        self.spearman_with_block(scratch, what, |keys, _| fill(keys))
    }

    /// [`Self::spearman_with`], also lending `fill` the scratch's block buffer (kept from call
    /// to call, so that block-wise distances do not allocate per call).
    pub(crate) fn spearman_with_block(
        &self,
        scratch: &mut RankScratch,
        what: &str,
        fill: impl FnOnce(&mut [u64], &mut Vec<f32>),
    ) -> Result<f64> {
        let rank2 = &self.rank2;
        self.spearman_with_words(scratch, what, |words, block| {
            fill(words, block);
            for (w, &r) in words.iter_mut().zip(rank2) {
                *w = (*w << 32) | u64::from(r);
            }
        })
    }

    /// The correlation from sort words written directly by `fill(words, block)`: it must set
    /// every `words[p]` to `(key_p << 32) | rank2[p]` (see [`Self::rank2`]), which saves the
    /// pass that would join keys and reference ranks. The words buffer is reused from call to
    /// call without clearing, since every slot is written.
    pub(crate) fn spearman_with_words(
        &self,
        scratch: &mut RankScratch,
        what: &str,
        fill: impl FnOnce(&mut [u64], &mut Vec<f32>),
    ) -> Result<f64> {
        if scratch.words.len() != self.rank2.len() {
            scratch.words.clear();
            scratch.words.resize(self.rank2.len(), 0);
        }
        fill(&mut scratch.words, &mut scratch.block);
        self.finish(scratch, what)
    }

    /// Twice the reference ranks, by position: the payload of each sort word (what the CUDA
    /// engine uploads beside the distances it sorts).
    pub fn rank2(&self) -> &[u32] {
        &self.rank2
    }

    /// The correlation from the sorted `(key, twice the reference rank)` words, in exact
    /// integer arithmetic: two branch-free passes, no per-group floating-point sums.
    ///
    /// With `q_p` the reference rank carried by the word at sorted position `p` and `r_p` the
    /// average rank of its key (a tie group `[s, e)` has `2 r_p = s + e + 1`), and
    /// `m = (n + 1)/2`: `Σ (r_p − m)(q_p − m) = (Σ (2 r_p)(2 q_p) − n (n + 1)²) / 4`, since
    /// both rank vectors sum to `n m`; and `Σ (r_p − m)² = (n (n² − 1) − Σ_g (t_g³ − t_g)) / 12`
    /// (the usual tie correction), where `t³ − t = Σ_{j<t} 3 j (j + 1)` accumulates one
    /// position `j` into its group at a time. A forward pass carries each group's start `s`,
    /// a backward pass its end `e`.
    fn finish(&self, scratch: &mut RankScratch, what: &str) -> Result<f64> {
        radix_sort_keys(&mut scratch.words, &mut scratch.tmp, Par::Seq);
        self.rho_from_tie_sums(tie_sums(&scratch.words, 0), what)
    }

    /// The correlation from sort words made column by column: `fill(sink, block)` must
    /// [`ColumnSink::put`] every position's `(key_p << 32) | rank2[p]`, in increasing order.
    /// Sorted as the scratch's [`PairSort`] says (the buckets from [`BUCKET_MIN_WORDS`] words
    /// on): the same sums either way.
    pub(crate) fn spearman_with_columns(
        &self,
        scratch: &mut RankScratch,
        what: &str,
        fill: impl FnOnce(&mut ColumnSink<'_>, &mut Vec<f32>),
    ) -> Result<f64> {
        let n = self.rank2.len();
        let bucketed = scratch.sort == PairSort::Buckets && n >= BUCKET_MIN_WORDS;
        let stage = bucketed.then_some(n / 8);
        // Every position is written before it is read, so a reused buffer is only cut or
        // grown to length (a stage's last column may have grown it past the stage).
        scratch.words.resize(stage.unwrap_or(n), 0);
        let mut sink = ColumnSink {
            words: &mut scratch.words,
            buckets: &mut scratch.buckets,
            stage,
            ready: false,
            n,
        };
        fill(&mut sink, &mut scratch.block);
        if sink.ready {
            let sums = scratch.buckets.sums();
            return self.rho_from_tie_sums(sums, what);
        }
        self.finish(scratch, what)
    }

    /// Spearman's rho from the three integer sums of the other values' sorted words (see
    /// [`TieSums`]): the one formula, shared by the CPU's sort and the CUDA engine's.
    pub fn rho_from_tie_sums(&self, sums: TieSums, what: &str) -> Result<f64> {
        let TieSums { starts, ends, ties } = sums;
        // Σ (2 r_p)(2 q_p) = Σ (s + e)(2 q_p) + Σ 2 q_p, and the doubled reference ranks sum
        // to n (n + 1) whatever its ties.
        let n = self.rank2.len() as i128;
        let syy12 = n * (n * n - 1) - 3 * ties as i128;
        if syy12 == 0 {
            return Err(Error::Constant { what: what.into() });
        }
        Ok(self.rho((starts + ends) as i128 + n * (n + 1), syy12 as f64 / 12.0))
    }

    /// Spearman's rho between two ranked vectors of the same length: the dot product of their
    /// doubled ranks, in integers, and each side's sum of squares. The same bits as
    /// [`Self::spearman`] of `self` against the values `other` was ranked from (both are
    /// the one formula of [`Self::rho_from_tie_sums`] on the same integers), at the cost of one
    /// pass over the two rank vectors instead of a sort: what a vector correlated with many
    /// others, each ranked once, pays per pair.
    ///
    /// ```
    /// use repgeom_linalg::{Par, RankScratch, RankedReference};
    /// let a: Vec<f32> = (0..1000u32).map(|i| ((i * 37) % 101) as f32).collect();
    /// let b: Vec<f32> = (0..1000u32).map(|i| ((i * 53) % 89) as f32 * 0.5).collect();
    /// let ra = RankedReference::new(&a, "a", Par::Seq).unwrap();
    /// let rb = RankedReference::new(&b, "b", Par::Seq).unwrap();
    /// let sorted = ra.spearman(&b, &mut RankScratch::default(), "b").unwrap();
    /// assert_eq!(ra.spearman_ranked(&rb).to_bits(), sorted.to_bits());
    /// ```
    ///
    /// # Panics
    ///
    /// When the two lengths differ.
    pub fn spearman_ranked(&self, other: &RankedReference) -> f64 {
        assert_eq!(
            self.rank2.len(),
            other.rank2.len(),
            "spearman_ranked: length mismatch"
        );
        Self::spearman_ranked_pairs(&[self, other], &[(0, 1)], Par::Seq)[0]
    }

    /// Spearman's rho of many pairs of ranked vectors of one length: `rho[c]` is
    /// `refs[pairs[c].0].spearman_ranked(refs[pairs[c].1])`, the same bits. The positions go
    /// by blocks that fit a core's cache, each block of every vector read once for all of its
    /// pairs, where the pairs one at a time read each vector once per pair (a layer × layer
    /// table of 2 million-value vectors: 14 vectors' traffic for 49 pairs, not 98). On the
    /// current rayon pool unless `par` is `Par::Seq`, by spans of blocks: the dot products are
    /// sums of integers, exact in any order, so the result is the same at any thread count.
    ///
    /// ```
    /// use repgeom_linalg::{Par, RankedReference};
    /// let v = |m: u32| -> Vec<f32> { (0..500u32).map(|i| ((i * m) % 97) as f32).collect() };
    /// let r: Vec<RankedReference> =
    ///     [3, 5, 7].map(|m| RankedReference::new(&v(m), "v", Par::Seq).unwrap()).into();
    /// let refs: Vec<&RankedReference> = r.iter().collect();
    /// let rho = RankedReference::spearman_ranked_pairs(&refs, &[(0, 1), (2, 0)], Par::rayon(2));
    /// assert_eq!(rho, [r[0].spearman_ranked(&r[1]), r[2].spearman_ranked(&r[0])]);
    /// ```
    ///
    /// # Panics
    ///
    /// When a pair names a vector past `refs`, or two vectors of a pair differ in length.
    pub fn spearman_ranked_pairs(
        refs: &[&RankedReference],
        pairs: &[(usize, usize)],
        par: Par,
    ) -> Vec<f64> {
        let Some(&(first, _)) = pairs.first() else {
            return Vec::new();
        };
        let n = refs[first].rank2.len();
        for &(x, y) in pairs {
            assert!(
                refs[x].rank2.len() == n && refs[y].rank2.len() == n,
                "spearman_ranked_pairs: length mismatch"
            );
        }
        // Each product is below (2n)² < 2^64, and a block's sum stays below 2^64 as well.
        let fits = usize::try_from(u64::MAX / (4 * n as u64).saturating_mul(n as u64).max(1))
            .unwrap_or(usize::MAX);
        let block = RANK_BLOCK.min(fits).max(1);
        let span = block * SPAN_BLOCKS;
        let parts = crate::map_in_order(n.div_ceil(span), par, |s| {
            crate::vectorize(BlockDots {
                refs,
                pairs,
                from: s * span,
                to: ((s + 1) * span).min(n),
                block,
            })
        });
        let mut dots = vec![0u128; pairs.len()];
        for part in parts {
            for (dot, p) in dots.iter_mut().zip(part) {
                *dot += p;
            }
        }
        (pairs.iter().zip(dots))
            .map(|(&(x, y), dot)| refs[x].rho(dot as i128, refs[y].sum_sq))
            .collect()
    }

    /// Rho from `Σ (2 r)(2 q)` (`dot4`, `r` the other side's average ranks and `q` this
    /// side's) and the other side's sum of squared rank deviations `syy`: both rank vectors
    /// sum to `n m` with `m = (n + 1) / 2`, so `Σ (r − m)(q − m) = (dot4 − n (n + 1)²) / 4`.
    fn rho(&self, dot4: i128, syy: f64) -> f64 {
        let n = self.rank2.len() as i128;
        let sxy = (dot4 - n * (n + 1) * (n + 1)) as f64 / 4.0;
        (sxy / (self.sum_sq.sqrt() * syy.sqrt())).clamp(-1.0, 1.0)
    }
}

/// Positions per block of [`RankedReference::spearman_ranked_pairs`]: 16 KiB of each vector,
/// so that a layer × layer table's blocks (fourteen vectors, say) stay in a core's L2 cache
/// while every pair's products are summed.
const RANK_BLOCK: usize = 4096;

/// Blocks per task of [`RankedReference::spearman_ranked_pairs`].
const SPAN_BLOCKS: usize = 32;

/// The dot products `Σ (2r)(2q)` of [`RankedReference::spearman_ranked_pairs`]'s pairs over
/// positions `from..to`, block by block, through [`crate::vectorize`]: the products and sums
/// are integers, the same bits at every instruction set.
struct BlockDots<'a> {
    refs: &'a [&'a RankedReference],
    pairs: &'a [(usize, usize)],
    from: usize,
    to: usize,
    block: usize,
}

impl pulp::WithSimd for BlockDots<'_> {
    type Output = Vec<u128>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Vec<u128> {
        let mut dots = vec![0u128; self.pairs.len()];
        let mut lo = self.from;
        while lo < self.to {
            let hi = (lo + self.block).min(self.to);
            for (dot, &(x, y)) in dots.iter_mut().zip(self.pairs) {
                let (a, b) = (&self.refs[x].rank2[lo..hi], &self.refs[y].rank2[lo..hi]);
                let part: u64 = (a.iter().zip(b))
                    .map(|(&p, &q)| u64::from(p) * u64::from(q))
                    .sum();
                *dot += u128::from(part);
            }
            lo = hi;
        }
        dots
    }
}

/// The sums Spearman's rho against a [`RankedReference`] is computed from, once the other
/// values' words `(key, 2 q)` are sorted by key (`q` the reference rank a word carries): with
/// `s` and `e` the start and end (one past the last position) of the tie group of the word at
/// sorted position `p`, `starts = Σ s · 2q`, `ends = Σ e · 2q` and `ties = Σ j (j + 1)` with
/// `j = p − s`. The order of the words inside a tie group changes none of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TieSums {
    /// `Σ s · 2q` over the sorted positions.
    pub starts: u128,
    /// `Σ e · 2q` over the sorted positions.
    pub ends: u128,
    /// `Σ j (j + 1)`, `j` the position inside the tie group (`Σ_g (t_g³ − t_g) / 3`).
    pub ties: u128,
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
    let reference = RankedReference::new(a, what, Par::Seq)?;
    reference.spearman(b, &mut RankScratch::default(), what)
}

//! Permutation nulls for every pair metric: per layer pair, and for aggregates over a
//! comparison's layer × layer table (the "best-matching layer" and its kin), calibrated the way
//! Gröger, Wen & Brbić (2026, *Revisiting the Platonic Representation Hypothesis: An
//! Aristotelian View*, Algorithm 2) define it: the null recomputes the whole table under each
//! permutation and takes the same aggregate.
//!
//! Draw `i` relabels the second representation's points by a permutation that depends only on
//! `(seed, i, N)`, so every layer pair of a comparison, and every metric with the same seed,
//! sees the same draws. The work that does not change between draws is done once per layer:
//! a metric whose value under a relabelling follows from per-layer work ([`Prepared`]: a
//! normalised kernel matrix for linear CKA, RSA and distance agreement, neighbour lists for
//! mutual k-NN and CKNNA) is scored from that work alone, `O(N²)` or `O(N·k)` per pair and
//! draw, with the relabelled rows of each second-side layer gathered once per draw and shared
//! by every first-side layer. Any other metric (SVCCA, PWCCA, Procrustes, a plugin) is
//! recomputed on the relabelled rows: correct, and as costly as the metric.
//!
//! [`compare`] is the one driver. Two models are compared through
//! [`crate::analysis::ModelPair`] (`repgeom compare`, Python's `compare` and the study's
//! cross-model units): it prepares both models (model B's null bases from `seed + 1`) and
//! judges the points that are the same input twice once, on every layer of both models, before
//! [`compare_all`]'s work; the self-test calls [`compare`] directly.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use repgeom_linalg::{Mat, MatRef, Par};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::registry::{LayerInput, MetricValue, OptionDoc, PairInput, PairMetric};

/// The permutation null a pair metric asks for: `n_perm` draws (0 = none) from `seed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permutations {
    /// Number of draws (0 = no null; otherwise at least 2).
    pub n_perm: usize,
    /// Seed: draw `i` depends only on `(seed, i, N)`.
    pub seed: u64,
}

impl Permutations {
    /// Validates the draw count (a null of one draw has no spread).
    pub fn check(&self) -> Result<()> {
        if self.n_perm == 1 {
            return Err(Error::InvalidOption {
                name: "n_perm".into(),
                value: "1".into(),
                reason: "a permutation null needs at least 2 draws (0 = no null)".into(),
            });
        }
        Ok(())
    }
}

/// Sets `n_perm` on every metric of a run, keeping each metric's seed: what
/// `repgeom compare --n-perm`, the study's `analysis.cross_n_perm` and Python's
/// `compare(n_perm=)` mean by one permutation count for the whole comparison.
pub fn set_n_perm(metrics: &mut [Box<dyn PairMetric>], n_perm: usize) {
    for m in metrics {
        let seed = m.permutations().seed;
        m.set_permutations(Permutations { n_perm, seed });
    }
}

/// The documented `n_perm` option every pair metric has.
pub(crate) const N_PERM_OPTION: OptionDoc = OptionDoc {
    name: "n_perm",
    help: "permutations of the second representation's points for the null (0 = none)",
};

/// The documented `seed` option every pair metric has.
pub(crate) const SEED_OPTION: OptionDoc = OptionDoc {
    name: "seed",
    help: "seed of the permutation null (draw i depends only on seed, i and N)",
};

/// The [`PairMetric::permutations`] and [`PairMetric::set_permutations`] of a metric struct
/// with `n_perm` and `seed` fields.
macro_rules! permutation_fields {
    () => {
        fn permutations(&self) -> $crate::calibrate::Permutations {
            $crate::calibrate::Permutations {
                n_perm: self.n_perm,
                seed: self.seed,
            }
        }
        fn set_permutations(&mut self, p: $crate::calibrate::Permutations) {
            self.n_perm = p.n_perm;
            self.seed = p.seed;
        }
    };
}
pub(crate) use permutation_fields;

/// Permutation `i` of `n` points for `seed`, with its inverse: depends only on `(seed, i, n)`.
pub(crate) fn permutation(n: usize, seed: u64, i: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(i);
    let mut perm: Vec<u32> = (0..n as u32).collect();
    perm.shuffle(&mut rng);
    let mut inv = vec![0u32; n];
    for (i, &p) in perm.iter().enumerate() {
        inv[p as usize] = i as u32;
    }
    (perm, inv)
}

// ---------------------------------------------------------------------------------------------
// Prepared per-layer work.

/// Per-layer work from which a metric's values under any relabelling of the second side's
/// points follow without recomputing the metric (see the module docs). Built by
/// [`PairMetric::prepare`]; opaque outside this crate (a plugin metric returns `None` there and
/// takes the generic path).
#[derive(Debug)]
pub struct Prepared(pub(crate) PreparedKind);

#[derive(Debug)]
pub(crate) enum PreparedKind {
    /// One matrix per variant with a null.
    Kernel(Vec<KernelMatrix>),
    /// Neighbour lists.
    Neighbours(crate::knn::PreparedNeighbours),
}

impl Prepared {
    fn variants(&self) -> Vec<String> {
        match &self.0 {
            PreparedKind::Kernel(m) => m.iter().map(|k| k.variant.clone()).collect(),
            PreparedKind::Neighbours(p) => vec![p.variant().to_string()],
        }
    }
}

/// A symmetric `N × N` matrix (full storage, `f32`) scaled so that a metric's value of the
/// pair (A, B relabelled by `p`) is `w · Σ_{i<j} a_ij b_{p(i)p(j)} + [diagonal] Σ_i a_ii b_{p(i)p(i)}`.
#[derive(Debug)]
pub(crate) struct KernelMatrix {
    pub(crate) variant: String,
    n: usize,
    data: Vec<f32>,
    off_weight: f32,
    diagonal: bool,
}

impl KernelMatrix {
    /// `m` scaled by `scale`; `off_weight` multiplies the strict upper triangle's sum.
    pub(crate) fn new(
        variant: &str,
        m: MatRef<'_, f64>,
        scale: f64,
        off_weight: f32,
        diagonal: bool,
    ) -> Self {
        let n = m.nrows();
        let mut data = vec![0.0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                data[i * n + j] = (m[(i, j)] * scale) as f32;
            }
        }
        Self {
            variant: variant.into(),
            n,
            data,
            off_weight,
            diagonal,
        }
    }

    /// From the condensed strict upper triangle (`i < j`, row-major), zero diagonal.
    pub(crate) fn from_condensed(variant: &str, n: usize, c: &[f64], off_weight: f32) -> Self {
        let mut data = vec![0.0f32; n * n];
        let mut t = 0;
        for i in 0..n {
            for j in i + 1..n {
                let v = c[t] as f32;
                data[i * n + j] = v;
                data[j * n + i] = v;
                t += 1;
            }
        }
        Self {
            variant: variant.into(),
            n,
            data,
            off_weight,
            diagonal: false,
        }
    }
}

/// Draws scored together by the kernel path: each A row is read from memory once for this
/// many draws (the pass is bound by memory traffic, not arithmetic).
const DRAWS_PER_PASS: usize = 8;

/// Draws of the kernel path: for each permutation of `perms` (`None` = as given), the value
/// of every cell `(a, b)` (indices into `a` and `b`) with B's points relabelled by it. Row by
/// row: each A matrix's row is copied once for all the draws, each B matrix's relabelled row
/// gathered once per draw, and one small `f32` GEMM (`L_A × L_B`, SIMD-dispatched by faer)
/// per draw scores every cell's strict upper triangle of that row at once; rows are summed in
/// `f64`. A draw's values do not depend on which draws share its pass.
fn kernel_draws(
    a: &[&KernelMatrix],
    b: &[&KernelMatrix],
    cells: &[(usize, usize)],
    perms: &[Option<&[u32]>],
) -> Vec<Vec<f64>> {
    let n = a[0].n;
    let (na, nb, nt) = (a.len(), b.len(), perms.len());
    let mut out = vec![vec![0.0f64; cells.len()]; nt];
    let mut bbuf = vec![0.0f32; nb * n];
    let mut abuf = vec![0.0f32; na * n];
    let (mut used_a, mut used_b) = (vec![false; na], vec![false; nb]);
    for &(i, j) in cells {
        used_a[i] = true;
        used_b[j] = true;
    }
    let mut prod = Mat::<f32>::zeros(na, nb);
    for i in 0..n {
        for (ai, m) in a.iter().enumerate().filter(|(ai, _)| used_a[*ai]) {
            abuf[ai * n + i..(ai + 1) * n].copy_from_slice(&m.data[i * n + i..(i + 1) * n]);
        }
        let l = n - i - 1;
        for (perm, out) in perms.iter().zip(out.iter_mut()) {
            for (bi, m) in b.iter().enumerate().filter(|(bi, _)| used_b[*bi]) {
                let dst = &mut bbuf[bi * n..(bi + 1) * n];
                match perm {
                    Some(p) => {
                        let row = &m.data[p[i] as usize * n..(p[i] as usize + 1) * n];
                        for (d, &pj) in dst[i..].iter_mut().zip(&p[i..]) {
                            *d = row[pj as usize];
                        }
                    }
                    None => dst[i..].copy_from_slice(&m.data[i * n + i..(i + 1) * n]),
                }
            }
            if l > 0 {
                let av = MatRef::from_row_major_slice(&abuf, na, n).subcols(i + 1, l);
                let bv = MatRef::from_row_major_slice(&bbuf, nb, n).subcols(i + 1, l);
                repgeom_linalg::matmul_abt_f32(prod.as_mut(), av, bv, Par::Seq);
            }
            for (c, &(ai, bi)) in cells.iter().enumerate() {
                let ka = a[ai];
                let mut v = if l > 0 {
                    f64::from(ka.off_weight) * f64::from(prod[(ai, bi)])
                } else {
                    0.0
                };
                if ka.diagonal {
                    v += f64::from(abuf[ai * n + i] * bbuf[bi * n + i]);
                }
                out[c] += v;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Aggregates.

/// An aggregate of a comparison's layer × layer table, calibrated by taking the same aggregate
/// of the table under each permutation. For a distance (a metric where smaller is closer, e.g.
/// Procrustes) "best" means smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The best cell of the table (the best-matching layer pair).
    Max,
    /// The mean over A's layers of each one's best cell over B's layers.
    RowMaxMean,
    /// The mean of the cells of the best one-to-one matching of layers (Hungarian algorithm;
    /// `min(L_A, L_B)` cells).
    Hungarian,
    /// The mean of the matched-depth cells ([`crate::layer_pairs`] with `diagonal`).
    Diagonal,
}

impl Aggregate {
    /// Every aggregate, in the order of their names.
    pub const ALL: [Aggregate; 4] = [
        Aggregate::Max,
        Aggregate::RowMaxMean,
        Aggregate::Hungarian,
        Aggregate::Diagonal,
    ];

    /// The name used on the command line, in manifests and in the `aggregate` column.
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Max => "max",
            Aggregate::RowMaxMean => "row_max_mean",
            Aggregate::Hungarian => "hungarian",
            Aggregate::Diagonal => "diagonal",
        }
    }

    /// The aggregate of `table` (row-major `la × lb`, oriented so that larger is closer).
    fn of(self, table: &[f64], la: usize, lb: usize) -> f64 {
        match self {
            Aggregate::Max => table.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Aggregate::RowMaxMean => {
                table
                    .chunks(lb)
                    .map(|r| r.iter().copied().fold(f64::NEG_INFINITY, f64::max))
                    .sum::<f64>()
                    / la as f64
            }
            Aggregate::Hungarian => {
                let cells = best_matching(table, la, lb);
                cells.iter().map(|&(i, j)| table[i * lb + j]).sum::<f64>() / cells.len() as f64
            }
            Aggregate::Diagonal => {
                let cells = crate::layer_pairs(la, lb, true);
                cells.iter().map(|&(i, j)| table[i * lb + j]).sum::<f64>() / cells.len() as f64
            }
        }
    }
}

impl std::fmt::Display for Aggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Aggregate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Aggregate::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| Error::InvalidOption {
                name: "aggregate".into(),
                value: s.into(),
                reason: format!(
                    "expected one of {}",
                    Aggregate::ALL.map(Aggregate::name).join(", ")
                ),
            })
    }
}

/// The one-to-one matching of rows to columns of `w` (`la × lb`, row-major) with the largest
/// total weight, as `(row, column)` cells sorted by row (Kuhn–Munkres with potentials,
/// `O(n²m)`; the transpose is matched when there are more rows than columns).
pub(crate) fn best_matching(w: &[f64], la: usize, lb: usize) -> Vec<(usize, usize)> {
    if la > lb {
        let t: Vec<f64> = (0..lb)
            .flat_map(|j| (0..la).map(move |i| (i, j)))
            .map(|(i, j)| w[i * lb + j])
            .collect();
        let mut cells: Vec<(usize, usize)> = best_matching(&t, lb, la)
            .into_iter()
            .map(|(j, i)| (i, j))
            .collect();
        cells.sort_unstable();
        return cells;
    }
    let (n, m) = (la, lb);
    // Minimise the cost −w; 1-based arrays as in the classic formulation.
    let cost = |i: usize, j: usize| -w[(i - 1) * m + (j - 1)];
    let mut u = vec![0.0f64; n + 1];
    let mut v = vec![0.0f64; m + 1];
    let mut p = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0;
        let mut minv = vec![f64::INFINITY; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = f64::INFINITY;
            let mut j1 = 0;
            for j in 1..=m {
                if !used[j] {
                    let cur = cost(i0, j) - u[i0] - v[j];
                    if cur < minv[j] {
                        minv[j] = cur;
                        way[j] = j0;
                    }
                    if minv[j] < delta {
                        delta = minv[j];
                        j1 = j;
                    }
                }
            }
            for j in 0..=m {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut cells: Vec<(usize, usize)> = (1..=m)
        .filter(|&j| p[j] != 0)
        .map(|j| (p[j] - 1, j - 1))
        .collect();
    cells.sort_unstable();
    cells
}

// ---------------------------------------------------------------------------------------------
// The driver.

/// How a comparison is calibrated beyond each metric's own permutation null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompareSettings {
    /// Aggregates over the layer × layer table to report, each with its own null.
    pub aggregates: Vec<Aggregate>,
    /// Level of the critical value `tau` reported with each aggregate (the null's `1 − alpha`
    /// order statistic, as Gröger et al.'s `calibrate_layers`), default 0.05.
    pub alpha: f64,
}

impl Default for CompareSettings {
    fn default() -> Self {
        Self {
            aggregates: Vec::new(),
            alpha: 0.05,
        }
    }
}

impl CompareSettings {
    /// Validates `alpha`.
    pub fn check(&self) -> Result<()> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(Error::InvalidOption {
                name: "alpha".into(),
                value: self.alpha.to_string(),
                reason: "a significance level lies in (0, 1)".into(),
            });
        }
        Ok(())
    }
}

/// One row of a comparison: a value of one layer pair (`a`, `b`: indices into the layer lists).
#[derive(Debug, Clone, PartialEq)]
pub struct PairRow {
    /// Index of the first side's layer.
    pub a: usize,
    /// Index of the second side's layer.
    pub b: usize,
    /// The value, with its permutation null when the metric has one.
    pub value: MetricValue,
}

/// One aggregate over the table, with its null.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateRow {
    /// Which aggregate.
    pub aggregate: Aggregate,
    /// The aggregate of the observed table (`value`), its null's mean, std and p, and extras
    /// `z`, `z_se`, `p_upper`, `p_lower`, `p_two_sided`, `n_perm`, `tau`, `alpha`, `n_cells`
    /// and, for a similarity, `calibrated` = `clamp((value − tau)/(1 − tau), 0, 1)`.
    pub value: MetricValue,
}

/// A metric over the layer pairs of one comparison.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comparison {
    /// One row per (pair, variant), pairs in the order given.
    pub pairs: Vec<PairRow>,
    /// One row per (aggregate, variant with a null).
    pub aggregates: Vec<AggregateRow>,
}

/// `metric` over `pairs` of layers of two models (indices into `a` and `b`, all over the same
/// `N` points in the same order), each value with the metric's permutation null
/// ([`PairMetric::permutations`]; the same draws for every pair), and each of
/// `settings.aggregates` over the table with a null that recomputes the table under each draw.
///
/// Points that are the same input twice (equal rows in every layer of both sides: a repeated
/// token in a repeated context) are dropped first ([`duplicate_points`], judged on the layers
/// given; [`crate::analysis::ModelPair`] judges them on every layer of both models, whichever
/// are compared); every row reports how many in extra `duplicates_dropped`.
///
/// Results are identical at any thread count (draws run in parallel under the first layer's
/// [`Par`], each draw sequentially).
///
/// ```
/// use repgeom_linalg::{Mat, Par};
/// use repgeom_metrics::calibrate::{Aggregate, CompareSettings, compare};
/// use repgeom_metrics::{CkaLinear, LayerInput, PairMetric, layer_pairs};
///
/// let x = Mat::<f32>::from_fn(40, 6, |i, j| ((i * 7 + j * 3) % 11) as f32 + (i * j) as f32 * 0.1);
/// let y = Mat::<f32>::from_fn(40, 5, |i, j| ((i * 5 + j) % 13) as f32);
/// let a = [LayerInput::new(x.as_ref(), "A0", Par::Seq)?, LayerInput::new(y.as_ref(), "A1", Par::Seq)?];
/// let b = [LayerInput::new(x.as_ref(), "B0", Par::Seq)?];
/// let mut cka = CkaLinear::default();
/// cka.set_permutations(repgeom_metrics::calibrate::Permutations { n_perm: 50, seed: 0 });
/// let settings = CompareSettings { aggregates: vec![Aggregate::Max], ..Default::default() };
/// let out = compare(&cka, &a.iter().collect::<Vec<_>>(), &b.iter().collect::<Vec<_>>(),
///                   &layer_pairs(2, 1, false), &settings)?;
/// assert_eq!(out.pairs.len(), 2);
/// assert!((out.pairs[0].value.value - 1.0).abs() < 1e-12); // A0 is B0
/// assert_eq!(out.pairs[0].value.p_value, Some(1.0 / 51.0)); // at the p floor
/// assert_eq!(out.aggregates[0].value.value, out.pairs[0].value.value);
/// # Ok::<(), repgeom_metrics::Error>(())
/// ```
pub fn compare(
    metric: &dyn PairMetric,
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    settings: &CompareSettings,
) -> Result<Comparison> {
    on_kept_points(a, b, &duplicate_points(a, b), |a, b| {
        compare_points(metric, a, b, pairs, settings)
    })
}

/// `run` on the points of `a` and `b` other than `dups` (ascending indices): the same input
/// twice (a repeated token in a repeated context) adds no information and ties every distance
/// to it, so the comparison runs on the first copy of each, the layers copied without the
/// others once for every metric `run` computes. Every row of the result reports how many were
/// dropped in extra `duplicates_dropped`.
fn on_kept_points(
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    dups: &[usize],
    run: impl FnOnce(&[&LayerInput<'_>], &[&LayerInput<'_>]) -> Result<Comparison>,
) -> Result<Comparison> {
    let mut out = if dups.is_empty() {
        run(a, b)?
    } else {
        let n = a.iter().chain(b).next().map_or(0, |x| x.n());
        let keep: Vec<usize> = (0..n).filter(|i| dups.binary_search(i).is_err()).collect();
        let owned_a: Vec<Mat<f32>> = a.iter().map(|x| rows_of(x.acts(), &keep)).collect();
        let owned_b: Vec<Mat<f32>> = b.iter().map(|x| rows_of(x.acts(), &keep)).collect();
        let kept_a = (owned_a.iter().zip(a))
            .map(|(m, x)| kept_input(m, x, dups.len()))
            .collect::<Result<Vec<_>>>()?;
        let kept_b = (owned_b.iter().zip(b))
            .map(|(m, x)| kept_input(m, x, dups.len()))
            .collect::<Result<Vec<_>>>()?;
        let (ra, rb): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
            (kept_a.iter().collect(), kept_b.iter().collect());
        run(&ra[..], &rb[..])?
    };
    let dropped = dups.len() as f64;
    for r in &mut out.pairs {
        r.value.extra.insert("duplicates_dropped".into(), dropped);
    }
    for r in &mut out.aggregates {
        r.value.extra.insert("duplicates_dropped".into(), dropped);
    }
    Ok(out)
}

/// Points (ascending) whose rows equal an earlier point's in every layer of `a` and of `b`:
/// the same input seen twice. Empty when the sides disagree on `N` (an error later).
pub fn duplicate_points(a: &[&LayerInput<'_>], b: &[&LayerInput<'_>]) -> Vec<usize> {
    let layers: Vec<MatRef<'_, f32>> = a.iter().chain(b).map(|x| x.acts()).collect();
    duplicate_rows(&layers)
}

/// Points (ascending) whose rows equal an earlier point's in every one of `layers`. Empty when
/// there are none or the layers disagree on `N`.
pub(crate) fn duplicate_rows(layers: &[MatRef<'_, f32>]) -> Vec<usize> {
    let Some(n) = layers.first().map(|m| m.nrows()) else {
        return Vec::new();
    };
    if layers.iter().any(|m| m.nrows() != n) {
        return Vec::new();
    }
    // A duplicate in every layer is one in the first: hash that layer's rows (FNV-1a over the
    // bit patterns), and compare every layer only where two rows hash alike.
    let first = layers[0];
    let hash = |i: usize| -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for j in 0..first.ncols() {
            h = (h ^ u64::from(first[(i, j)].to_bits())).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let same = |i: usize, k: usize| {
        (layers.iter()).all(|m| (0..m.ncols()).all(|j| m[(i, j)].to_bits() == m[(k, j)].to_bits()))
    };
    let mut seen: std::collections::BTreeMap<u64, Vec<usize>> = std::collections::BTreeMap::new();
    let mut dups = Vec::new();
    for i in 0..n {
        let firsts = seen.entry(hash(i)).or_default();
        if firsts.iter().any(|&k| same(i, k)) {
            dups.push(i);
        } else {
            firsts.push(i);
        }
    }
    dups
}

/// The rows `keep` of `x`.
fn rows_of(x: MatRef<'_, f32>, keep: &[usize]) -> Mat<f32> {
    Mat::from_fn(keep.len(), x.ncols(), |i, j| x[(keep[i], j)])
}

/// `x` with only the kept rows `m`, its readout basis, null bases and memory budget carried.
fn kept_input<'a>(m: &'a Mat<f32>, x: &LayerInput<'a>, dropped: usize) -> Result<LayerInput<'a>> {
    let what = format!("{} ({dropped} duplicate points dropped)", x.what());
    let mut input =
        LayerInput::new(m.as_ref(), what, x.par())?.with_memory_budget(x.memory_budget());
    if let Some(basis) = x.readout_basis_opt() {
        input = input.with_readout(basis)?;
    }
    if let Some(null) = x.null_opt() {
        input = input.with_null(null)?;
    }
    Ok(input)
}

/// [`compare`] on points with no duplicates to drop.
fn compare_points(
    metric: &dyn PairMetric,
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    settings: &CompareSettings,
) -> Result<Comparison> {
    settings.check()?;
    metric.check()?;
    let perms = metric.permutations();
    perms.check()?;
    let name = metric.info().name;
    if perms.n_perm == 0 && !settings.aggregates.is_empty() {
        return Err(Error::InvalidOption {
            name: "n_perm".into(),
            value: "0".into(),
            reason: format!(
                "{name}: an aggregate over layer pairs ({}) needs a permutation null to be \
                 judged against; set n_perm (e.g. --n-perm 1000)",
                settings
                    .aggregates
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    if pairs.is_empty() || a.is_empty() || b.is_empty() {
        return Ok(Comparison::default());
    }
    let (la, lb) = (a.len(), b.len());
    let full = pairs.len() == la * lb;
    for agg in &settings.aggregates {
        let ok = match agg {
            Aggregate::Diagonal => crate::layer_pairs(la, lb, true)
                .iter()
                .all(|c| pairs.contains(c)),
            _ => full,
        };
        if !ok {
            return Err(Error::InvalidOption {
                name: "aggregate".into(),
                value: agg.name().into(),
                reason: format!(
                    "{name}: the aggregate needs every layer pair of the {la} × {lb} table \
                     (drop --diagonal, or use the diagonal aggregate)"
                ),
            });
        }
    }
    // Observed values.
    let mut observed = Vec::with_capacity(pairs.len());
    for &(i, j) in pairs {
        observed.push(metric.compute(&PairInput::new(a[i], b[j])?)?);
    }
    if perms.n_perm == 0 {
        return Ok(Comparison {
            pairs: rows(pairs, observed),
            aggregates: Vec::new(),
        });
    }
    // The null: per draw, a value per (pair, variant with a null).
    let n = a[0].n();
    let par = a[0].par();
    let prep_a: Vec<Option<Prepared>> =
        a.iter().map(|x| metric.prepare(x)).collect::<Result<_>>()?;
    let prep_b: Vec<Option<Prepared>> =
        b.iter().map(|x| metric.prepare(x)).collect::<Result<_>>()?;
    let fast = prep_a.iter().chain(&prep_b).all(Option::is_some);
    let variants: Vec<String> = if fast {
        prep_a[0]
            .as_ref()
            .map(Prepared::variants)
            .unwrap_or_default()
    } else {
        observed[0]
            .iter()
            .filter(|v| v.null_mean.is_none())
            .map(|v| v.variant.clone())
            .collect()
    };
    // Draws in fixed groups (the same at any thread count), the groups in parallel.
    let per_pass = if fast { DRAWS_PER_PASS } else { 1 };
    let groups: Vec<std::ops::Range<u64>> = (0..perms.n_perm as u64)
        .step_by(per_pass)
        .map(|s| s..(s + per_pass as u64).min(perms.n_perm as u64))
        .collect();
    let group = |g: &std::ops::Range<u64>| -> Result<Vec<Vec<f64>>> {
        let ps: Vec<(Vec<u32>, Vec<u32>)> =
            g.clone().map(|i| permutation(n, perms.seed, i)).collect();
        if fast {
            fast_draws(&prep_a, &prep_b, pairs, &variants, &ps)
        } else {
            ps.iter()
                .map(|(perm, _)| generic_draw(metric, a, b, pairs, &variants, perm))
                .collect()
        }
    };
    let grouped: Vec<Vec<Vec<f64>>> = match par {
        Par::Seq => groups.iter().map(group).collect::<Result<_>>()?,
        _ => groups.par_iter().map(group).collect::<Result<_>>()?,
    };
    let draws: Vec<Vec<f64>> = grouped.into_iter().flatten().collect();
    let nv = variants.len();
    let larger = metric.larger_is_closer();
    for (c, values) in observed.iter_mut().enumerate() {
        for v in values.iter_mut() {
            // A row that carries its own null (distance_spearman's readout row against random
            // subspaces) keeps it.
            if v.null_mean.is_some() {
                continue;
            }
            if let Some(k) = variants.iter().position(|x| *x == v.variant) {
                let null: Vec<f64> = draws.iter().map(|d| d[c * nv + k]).collect();
                *v = with_null(v.clone(), v.value, &null, larger)?;
            }
        }
    }
    // Aggregates, per variant with a null.
    let mut aggregates = Vec::new();
    let sign = if larger { 1.0 } else { -1.0 };
    for agg in &settings.aggregates {
        for (k, variant) in variants.iter().enumerate() {
            let table = |value: &dyn Fn(usize) -> f64| -> Vec<f64> {
                let mut t = vec![f64::NEG_INFINITY; la * lb];
                for (c, &(i, j)) in pairs.iter().enumerate() {
                    t[i * lb + j] = sign * value(c);
                }
                t
            };
            let obs_value = |c: usize| {
                observed[c]
                    .iter()
                    .find(|v| v.variant == *variant)
                    .map_or(f64::NAN, |v| v.value)
            };
            let obs = agg.of(&table(&obs_value), la, lb);
            let null: Vec<f64> = draws
                .iter()
                .map(|d| agg.of(&table(&|c| d[c * nv + k]), la, lb))
                .collect();
            aggregates.push(AggregateRow {
                aggregate: *agg,
                value: aggregate_row(
                    name,
                    variant,
                    obs,
                    &null,
                    sign,
                    settings.alpha,
                    agg,
                    la,
                    lb,
                    pairs.len(),
                )?,
            });
        }
    }
    Ok(Comparison {
        pairs: rows(pairs, observed),
        aggregates,
    })
}

/// [`compare`] for each of `metrics`, rows in the order a layer × layer table is read: each
/// layer pair's rows (metric by metric) in `pairs` order, then every metric's aggregates.
/// `on_metric` is called with each metric's name before it runs (a progress bar, a
/// cancellation check).
///
/// ```
/// use repgeom_linalg::{Mat, Par};
/// use repgeom_metrics::calibrate::{CompareSettings, compare_all};
/// use repgeom_metrics::{CkaLinear, LayerInput, PairMetric, Rsa, layer_pairs};
///
/// let x = Mat::<f32>::from_fn(30, 4, |i, j| ((i * 7 + j * 3) % 11) as f32);
/// let y = Mat::<f32>::from_fn(30, 3, |i, j| ((i * 5 + j) % 13) as f32);
/// let (a, b) = ([LayerInput::new(x.as_ref(), "A0", Par::Seq)?],
///               [LayerInput::new(x.as_ref(), "B0", Par::Seq)?, LayerInput::new(y.as_ref(), "B1", Par::Seq)?]);
/// let metrics: Vec<Box<dyn PairMetric>> = vec![Box::new(CkaLinear::default()), Box::new(Rsa::default())];
/// let mut seen = Vec::new();
/// let out = compare_all(&metrics, &a.iter().collect::<Vec<_>>(), &b.iter().collect::<Vec<_>>(),
///                       &layer_pairs(1, 2, false), &CompareSettings::default(),
///                       &mut |name| seen.push(name.to_string()))?;
/// assert_eq!(seen, ["cka_linear", "rsa"]);
/// // Pair-major: both metrics of pair (0, 0), then both of pair (0, 1).
/// let order: Vec<(usize, usize)> = out.pairs.iter().map(|r| (r.a, r.b)).collect();
/// assert_eq!(order[0], (0, 0));
/// assert_eq!(order[order.len() - 1], (0, 1));
/// # Ok::<(), repgeom_metrics::Error>(())
/// ```
pub fn compare_all(
    metrics: &[Box<dyn PairMetric>],
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    settings: &CompareSettings,
    on_metric: &mut dyn FnMut(&str),
) -> Result<Comparison> {
    let dups = duplicate_points(a, b);
    compare_all_without(metrics, a, b, pairs, settings, &dups, on_metric)
}

/// [`compare_all`] with the points `dups` (ascending) dropped, once for every metric: the same
/// input twice, as [`crate::analysis::ModelPair::new`] judged them on every layer of both
/// models.
pub(crate) fn compare_all_without(
    metrics: &[Box<dyn PairMetric>],
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    settings: &CompareSettings,
    dups: &[usize],
    on_metric: &mut dyn FnMut(&str),
) -> Result<Comparison> {
    on_kept_points(a, b, dups, |a, b| {
        let mut tables = Vec::with_capacity(metrics.len());
        for metric in metrics {
            on_metric(metric.info().name);
            tables.push(compare_points(metric.as_ref(), a, b, pairs, settings)?);
        }
        let mut out = Comparison::default();
        for &(i, j) in pairs {
            for t in &tables {
                let rows = t.pairs.iter().filter(|r| (r.a, r.b) == (i, j));
                out.pairs.extend(rows.cloned());
            }
        }
        out.aggregates = tables.into_iter().flat_map(|t| t.aggregates).collect();
        Ok(out)
    })
}

fn rows(pairs: &[(usize, usize)], observed: Vec<Vec<MetricValue>>) -> Vec<PairRow> {
    pairs
        .iter()
        .zip(observed)
        .flat_map(|(&(a, b), values)| values.into_iter().map(move |value| PairRow { a, b, value }))
        .collect()
}

/// The null columns of one value: mean, std, the tail in the metric's direction as `p_value`,
/// both tails, z and its standard error.
fn with_null(v: MetricValue, observed: f64, null: &[f64], larger: bool) -> Result<MetricValue> {
    let s = repgeom_null::summarize(observed, null)?;
    let t = repgeom_null::tails(observed, null);
    let mut v = v.with_null(&s);
    v.p_value = Some(if larger { t.p_upper } else { t.p_lower });
    Ok(v.with_extra("z", s.z)
        .with_extra("z_se", repgeom_null::z_standard_error(s.z, null.len()))
        .with_extra("p_upper", t.p_upper)
        .with_extra("p_lower", t.p_lower)
        .with_extra("p_two_sided", t.p_two_sided)
        .with_extra("n_perm", null.len() as f64))
}

#[allow(clippy::too_many_arguments)]
fn aggregate_row(
    metric: &str,
    variant: &str,
    oriented_obs: f64,
    oriented_null: &[f64],
    sign: f64,
    alpha: f64,
    agg: &Aggregate,
    la: usize,
    lb: usize,
    n_cells: usize,
) -> Result<MetricValue> {
    let obs = sign * oriented_obs;
    let null: Vec<f64> = oriented_null.iter().map(|v| sign * v).collect();
    let v = with_null(
        MetricValue::new(metric, variant, obs),
        obs,
        &null,
        sign > 0.0,
    )?;
    // tau: the ceil((1 − α)(K + 1))-th smallest of {observed} ∪ null, oriented (Gröger et al.).
    let mut combined: Vec<f64> = oriented_null.to_vec();
    combined.push(oriented_obs);
    combined.sort_by(f64::total_cmp);
    let k = oriented_null.len();
    let idx = (((1.0 - alpha) * (k + 1) as f64).ceil() as usize).clamp(1, k + 1) - 1;
    let tau = combined[idx];
    let mut v = v
        .with_extra("tau", sign * tau)
        .with_extra("alpha", alpha)
        .with_extra(
            "n_cells",
            match agg {
                Aggregate::Max | Aggregate::RowMaxMean => n_cells as f64,
                Aggregate::Hungarian => la.min(lb) as f64,
                Aggregate::Diagonal => la as f64,
            },
        );
    if sign > 0.0 {
        let denom = (1.0 - tau).max(1e-12);
        v = v.with_extra("calibrated", ((oriented_obs - tau) / denom).clamp(0.0, 1.0));
    }
    Ok(v)
}

/// Draws by prepared work: for each `(perm, inv)`, each B layer relabelled once, then every
/// cell scored (kernels: the draws in one pass, see [`kernel_draws`]).
fn fast_draws(
    prep_a: &[Option<Prepared>],
    prep_b: &[Option<Prepared>],
    pairs: &[(usize, usize)],
    variants: &[String],
    perms: &[(Vec<u32>, Vec<u32>)],
) -> Result<Vec<Vec<f64>>> {
    let nv = variants.len();
    let mut out = vec![vec![0.0f64; pairs.len() * nv]; perms.len()];
    fn get(p: &Option<Prepared>) -> &PreparedKind {
        match p {
            Some(Prepared(k)) => k,
            None => unreachable!("the fast path has every layer prepared"),
        }
    }
    match get(&prep_a[0]) {
        PreparedKind::Kernel(_) => {
            let ps: Vec<Option<&[u32]>> = perms.iter().map(|(p, _)| Some(p.as_slice())).collect();
            for (k, _) in variants.iter().enumerate() {
                fn mats(side: &[Option<Prepared>], k: usize) -> Vec<&KernelMatrix> {
                    side.iter()
                        .map(|p| match get(p) {
                            PreparedKind::Kernel(m) => &m[k],
                            PreparedKind::Neighbours(_) => unreachable!("one kind per metric"),
                        })
                        .collect()
                }
                let values = kernel_draws(&mats(prep_a, k), &mats(prep_b, k), pairs, &ps);
                for (t, values) in values.into_iter().enumerate() {
                    for (c, v) in values.into_iter().enumerate() {
                        out[t][c * nv + k] = v;
                    }
                }
            }
        }
        PreparedKind::Neighbours(_) => {
            fn nb(p: &Option<Prepared>) -> &crate::knn::PreparedNeighbours {
                match get(p) {
                    PreparedKind::Neighbours(x) => x,
                    PreparedKind::Kernel(_) => unreachable!("one kind per metric"),
                }
            }
            for ((perm, inv), out) in perms.iter().zip(out.iter_mut()) {
                let mut relabelled: Vec<Option<crate::knn::PreparedNeighbours>> =
                    prep_b.iter().map(|_| None).collect();
                for (c, &(i, j)) in pairs.iter().enumerate() {
                    if relabelled[j].is_none() {
                        relabelled[j] = Some(nb(&prep_b[j]).permuted(perm, inv));
                    }
                    let pb = relabelled[j].as_ref().expect("just set");
                    out[c * nv] = nb(&prep_a[i]).score(pb);
                }
            }
        }
    }
    Ok(out)
}

/// One draw by recomputation: each B layer's rows relabelled once, the metric computed on
/// every cell.
fn generic_draw(
    metric: &dyn PairMetric,
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    variants: &[String],
    perm: &[u32],
) -> Result<Vec<f64>> {
    let nv = variants.len();
    let mut out = vec![f64::NAN; pairs.len() * nv];
    let used = |j: usize| pairs.iter().any(|&(_, q)| q == j);
    let relabelled: Vec<Option<Mat<f32>>> = (0..b.len())
        .map(|j| {
            used(j).then(|| {
                let x = b[j].acts();
                Mat::from_fn(x.nrows(), x.ncols(), |r, col| x[(perm[r] as usize, col)])
            })
        })
        .collect();
    let mut inputs = Vec::with_capacity(b.len());
    for (j, m) in relabelled.iter().enumerate() {
        inputs.push(match m {
            None => None,
            Some(m) => {
                let mut ib = LayerInput::new(
                    m.as_ref(),
                    format!("{} (points permuted)", b[j].what()),
                    b[j].par(),
                )?
                .with_memory_budget(b[j].memory_budget());
                if let Some(basis) = b[j].readout_basis_opt() {
                    ib = ib.with_readout(basis)?;
                }
                if let Some(null) = b[j].null_opt() {
                    ib = ib.with_null(null)?;
                }
                Some(ib)
            }
        });
    }
    for (c, &(i, j)) in pairs.iter().enumerate() {
        let ib = inputs[j]
            .as_ref()
            .expect("every paired layer is relabelled");
        for v in metric.compute(&PairInput::new(a[i], ib)?)? {
            if let Some(k) = variants.iter().position(|x| *x == v.variant) {
                out[c * nv + k] = v.value;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PairMetric;
    use serde_json::json;

    /// Three layers over the same 48 points: a base, a noisy linear map of it, and an
    /// unrelated one (a fixed pseudo-random generator, no RNG state).
    fn layers() -> Vec<Mat<f32>> {
        let h = |t: usize| ((t as u64 * 2654435761 + 12345) % 10007) as f32 / 10007.0 - 0.5;
        let n = 48;
        let base = Mat::<f32>::from_fn(n, 7, |i, j| {
            h(i * 7 + j) + if j == 0 { (i % 4) as f32 } else { 0.0 }
        });
        let mapped = Mat::<f32>::from_fn(n, 5, |i, j| {
            (0..7)
                .map(|l| base[(i, l)] * h(1000 + l * 5 + j))
                .sum::<f32>()
                + 0.05 * h(5000 + i * 5 + j)
        });
        let other = Mat::<f32>::from_fn(n, 6, |i, j| h(9000 + i * 6 + j));
        vec![base, mapped, other]
    }

    fn metric(config: serde_json::Value) -> Box<dyn PairMetric> {
        serde_json::from_value(config).unwrap()
    }

    /// Every metric with a prepared null: the prepared value of each cell under a draw equals
    /// the metric recomputed on the relabelled rows (identity included: the observed value).
    #[test]
    fn prepared_nulls_equal_recomputation() {
        let mats = layers();
        let inputs: Vec<LayerInput<'_>> = mats
            .iter()
            .enumerate()
            .map(|(i, m)| LayerInput::new(m.as_ref(), format!("layer {i}"), Par::Seq).unwrap())
            .collect();
        let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
        let pairs = crate::layer_pairs(3, 3, false);
        for config in [
            json!({"metric": "cka_linear"}),
            json!({"metric": "cka_linear", "debiased": true}),
            json!({"metric": "rsa"}),
            json!({"metric": "rsa", "rdm": "correlation"}),
            json!({"metric": "distance_spearman", "readout": false, "random": false, "ccr": 0}),
            json!({"metric": "distance_spearman", "readout": false, "random": false, "ccr": 1}),
            json!({"metric": "mutual_knn", "k": 5}),
            json!({"metric": "cknna", "k": 5}),
        ] {
            let m = metric(config.clone());
            let prep: Vec<Option<Prepared>> = refs.iter().map(|x| m.prepare(x).unwrap()).collect();
            assert!(prep.iter().all(Option::is_some), "{config}");
            let variants = prep[0].as_ref().unwrap().variants();
            let identity: Vec<u32> = (0..48).collect();
            let draws = std::iter::once((identity.clone(), identity))
                .chain((0..4).map(|i| permutation(48, 7, i)));
            let draws: Vec<(Vec<u32>, Vec<u32>)> = draws.collect();
            let fasts = fast_draws(&prep, &prep, &pairs, &variants, &draws).unwrap();
            for ((perm, _), fast) in draws.iter().zip(fasts) {
                let slow = generic_draw(m.as_ref(), &refs, &refs, &pairs, &variants, perm).unwrap();
                for (c, (f, s)) in fast.iter().zip(&slow).enumerate() {
                    assert!(
                        (f - s).abs() < 1e-5,
                        "{config} cell {c}: prepared {f} vs recomputed {s}"
                    );
                }
            }
        }
    }

    /// A point repeated in every layer of both sides is dropped (and counted on every row):
    /// the values are those of the comparison without the copies. A point repeated on one side
    /// only is kept.
    #[test]
    fn duplicated_points_are_dropped_and_counted() {
        let mats = layers();
        let n = mats[0].nrows();
        // Points 0..n, then copies of points 3, 10 and 3 again.
        let order: Vec<usize> = (0..n).chain([3, 10, 3]).collect();
        let twice: Vec<Mat<f32>> = (mats.iter())
            .map(|m| Mat::from_fn(order.len(), m.ncols(), |i, j| m[(order[i], j)]))
            .collect();
        fn inputs(ms: &[Mat<f32>]) -> Vec<LayerInput<'_>> {
            (ms.iter().enumerate())
                .map(|(i, m)| LayerInput::new(m.as_ref(), format!("layer {i}"), Par::Seq).unwrap())
                .collect()
        }
        let (with, without) = (inputs(&twice), inputs(&mats));
        let rw: Vec<&LayerInput<'_>> = with.iter().collect();
        let ro: Vec<&LayerInput<'_>> = without.iter().collect();
        assert_eq!(duplicate_points(&rw, &rw), [n, n + 1, n + 2]);
        let pairs = crate::layer_pairs(3, 3, false);
        let m = metric(json!({"metric": "mutual_knn", "k": 5, "n_perm": 20}));
        let settings = CompareSettings {
            aggregates: vec![Aggregate::Max],
            ..CompareSettings::default()
        };
        let a = compare(m.as_ref(), &rw, &rw, &pairs, &settings).unwrap();
        let b = compare(m.as_ref(), &ro, &ro, &pairs, &settings).unwrap();
        for (x, y) in a.pairs.iter().zip(&b.pairs) {
            assert_eq!(x.value.value, y.value.value);
            assert_eq!(x.value.p_value, y.value.p_value);
            assert_eq!(x.value.extra["duplicates_dropped"], 3.0);
            assert_eq!(y.value.extra["duplicates_dropped"], 0.0);
        }
        assert_eq!(a.aggregates[0].value.extra["duplicates_dropped"], 3.0);
        // Repeated in A's layers only: not the same input, kept.
        let one_side = [rw[0]];
        let other: Vec<Mat<f32>> = vec![Mat::from_fn(order.len(), 4, |i, j| (i * 4 + j) as f32)];
        let oi = inputs(&other);
        assert!(duplicate_points(&one_side, &[&oi[0]]).is_empty());
    }

    #[test]
    fn aggregates_and_nulls_are_calibrated_and_seeded() {
        let mats = layers();
        let run = |par: Par, seed: u64, aggregates: Vec<Aggregate>| {
            let inputs: Vec<LayerInput<'_>> = mats
                .iter()
                .map(|m| LayerInput::new(m.as_ref(), "x", par).unwrap())
                .collect();
            let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
            let m = metric(json!({"metric": "cka_linear", "n_perm": 99, "seed": seed}));
            let settings = CompareSettings {
                aggregates,
                alpha: 0.05,
            };
            compare(
                m.as_ref(),
                &refs,
                &refs,
                &crate::layer_pairs(3, 3, false),
                &settings,
            )
        };
        let out = run(Par::Seq, 0, Aggregate::ALL.to_vec()).unwrap();
        assert_eq!(out.pairs.len(), 9);
        // A layer against itself: at the p floor; the unrelated layer against the base: not.
        let cell = |a: usize, b: usize| {
            &out.pairs
                .iter()
                .find(|r| (r.a, r.b) == (a, b))
                .unwrap()
                .value
        };
        assert_eq!(cell(0, 0).p_value, Some(0.01));
        assert!(cell(0, 2).p_value.unwrap() > 0.01, "{:?}", cell(0, 2));
        for key in ["z", "z_se", "p_upper", "p_lower", "p_two_sided", "n_perm"] {
            assert!(cell(0, 1).extra.contains_key(key), "{key}");
        }
        // Each aggregate of the observed table, with its null at the floor (the diagonal is 1).
        let names: Vec<&str> = out.aggregates.iter().map(|r| r.aggregate.name()).collect();
        assert_eq!(names, ["max", "row_max_mean", "hungarian", "diagonal"]);
        for r in &out.aggregates {
            assert_eq!(r.value.p_value, Some(0.01), "{}", r.aggregate);
            assert!(r.value.extra["tau"] < r.value.value, "{}", r.aggregate);
            assert!(r.value.extra["calibrated"] > 0.0, "{}", r.aggregate);
        }
        assert!((out.aggregates[0].value.value - 1.0).abs() < 1e-12);
        // Identical at any thread count; the null moves with the seed, the value does not.
        assert_eq!(out, run(Par::rayon(2), 0, Aggregate::ALL.to_vec()).unwrap());
        let other = run(Par::Seq, 1, Vec::new()).unwrap();
        assert_eq!(other.pairs[1].value.value, out.pairs[1].value.value);
        assert_ne!(other.pairs[1].value.null_mean, out.pairs[1].value.null_mean);
    }

    #[test]
    fn an_aggregate_needs_a_null_and_the_whole_table() {
        let mats = layers();
        let inputs: Vec<LayerInput<'_>> = mats
            .iter()
            .map(|m| LayerInput::new(m.as_ref(), "x", Par::Seq).unwrap())
            .collect();
        let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
        let max = CompareSettings {
            aggregates: vec![Aggregate::Max],
            alpha: 0.05,
        };
        let e = compare(
            metric(json!({"metric": "cka_linear"})).as_ref(),
            &refs,
            &refs,
            &crate::layer_pairs(3, 3, false),
            &max,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("n_perm") && e.contains("needs a permutation null"),
            "{e}"
        );
        let m = metric(json!({"metric": "cka_linear", "n_perm": 10}));
        let e = compare(
            m.as_ref(),
            &refs,
            &refs,
            &crate::layer_pairs(3, 3, true),
            &max,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("every layer pair"), "{e}");
        let diagonal = CompareSettings {
            aggregates: vec![Aggregate::Diagonal],
            alpha: 0.05,
        };
        assert!(
            compare(
                m.as_ref(),
                &refs,
                &refs,
                &crate::layer_pairs(3, 3, true),
                &diagonal
            )
            .is_ok()
        );
        // A distance: p in the lower tail, "best" the smallest.
        let p = metric(json!({"metric": "procrustes", "n_perm": 9}));
        let out = compare(
            p.as_ref(),
            &refs,
            &refs,
            &crate::layer_pairs(3, 3, false),
            &max,
        )
        .unwrap();
        let angular = out
            .aggregates
            .iter()
            .find(|r| r.value.variant == "angular")
            .unwrap();
        assert!(angular.value.value.abs() < 1e-6, "{:?}", angular.value);
        assert_eq!(angular.value.p_value, Some(0.1));
    }

    #[test]
    fn best_matching_is_the_brute_force_optimum() {
        // every 3 × 4 and 4 × 3 weight table from a small generator against all matchings
        for seed in 0..20u64 {
            for (la, lb) in [(3usize, 4usize), (4, 3), (3, 3)] {
                let w: Vec<f64> = (0..la * lb)
                    .map(|t| (((t as u64 + 1) * (seed * 2654435761 + 97)) % 1009) as f64 / 1009.0)
                    .collect();
                let got = best_matching(&w, la, lb);
                let total = |cells: &[(usize, usize)]| {
                    cells.iter().map(|&(i, j)| w[i * lb + j]).sum::<f64>()
                };
                let (small, large) = (la.min(lb), la.max(lb));
                let mut best = f64::NEG_INFINITY;
                // all injective maps from the smaller side into the larger
                let mut idx = vec![0usize; small];
                loop {
                    let mut seen = vec![false; large];
                    if idx.iter().all(|&x| !std::mem::replace(&mut seen[x], true)) {
                        let cells: Vec<(usize, usize)> = idx
                            .iter()
                            .enumerate()
                            .map(|(s, &l)| if la <= lb { (s, l) } else { (l, s) })
                            .collect();
                        best = best.max(total(&cells));
                    }
                    let mut p = 0;
                    while p < small {
                        idx[p] += 1;
                        if idx[p] < large {
                            break;
                        }
                        idx[p] = 0;
                        p += 1;
                    }
                    if p == small {
                        break;
                    }
                }
                assert_eq!(got.len(), small);
                assert!((total(&got) - best).abs() < 1e-12, "{seed} {la}×{lb}");
            }
        }
    }
}

//! Nearest-neighbour alignment of two representations: mutual k-NN and CKNNA (Huh, Cheung,
//! Wang & Isola 2024, *The Platonic Representation Hypothesis*); their permutation null is
//! scored from the neighbour lists alone (module `calibrate`).
//!
//! Neighbours come from a blocked top-k search (`ROW_BLOCK` rows of similarities at a time),
//! so no `N × N` matrix is ever held: memory is `O(N·k)` plus one `ROW_BLOCK × N` block per
//! worker. Everything after the search (the statistic and every permutation draw) works on the
//! `N × k` neighbour lists alone, in `O(N·k)` per draw.

use repgeom_linalg::{Mat, MatRef, Par, normalize_rows, project, project_f32};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::{LayerInput, PairInput};
use crate::permute::{
    N_PERM_OPTION, Permutations, Prepared, PreparedKind, Relabel, SEED_OPTION, permutation_fields,
};
use crate::registry::{PairMetric, PairSide};
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// Rows of the similarity matrix computed at once by the blocked searches.
const ROW_BLOCK: usize = 256;

/// Each point's `k` nearest neighbours (itself excluded), best first, with their scores and
/// weights. Without ties every point has exactly `k`, each of weight 1. With `ties` (the
/// neighbour metrics), a point whose `k`-th nearest ties with further points lists *all* the
/// points at that score: the `s` slots left after the strictly nearer ones are shared among the
/// `t` tied points, weight `s/t` each — the probability that a uniformly random tie-break puts
/// the point in the set. So a statistic of the lists is its expectation over random
/// tie-breaks, and does not depend on the point order.
#[derive(Debug, Clone)]
pub(crate) struct Neighbours {
    k: usize,
    /// Row `i`'s entries are `offsets[i]..offsets[i + 1]` (`n + 1` entries).
    offsets: Vec<usize>,
    /// Neighbour indices, best first (equal scores: lower index first).
    pub(crate) index: Vec<u32>,
    /// The matching scores (higher = nearer).
    pub(crate) score: Vec<f64>,
    /// The matching weights: 1, or `s/t` for one of `t` points tied for the last `s` slots.
    weight: Vec<f64>,
    /// Points whose neighbour set is decided by a tie: more points tie at the `k`-th score
    /// than slots are left (bf16/fp16 activations, duplicated tokens).
    pub(crate) tied: usize,
}

impl Neighbours {
    fn n(&self) -> usize {
        self.offsets.len() - 1
    }
    fn row(&self, i: usize) -> (&[u32], &[f64], &[f64]) {
        let r = self.offsets[i]..self.offsets[i + 1];
        (
            &self.index[r.clone()],
            &self.score[r.clone()],
            &self.weight[r],
        )
    }
}

/// Keeps the best `k` of a stream of (score, index), best first, ties to the lower index.
fn push_top(top: &mut Vec<(f64, u32)>, k: usize, score: f64, j: u32) {
    let better = |a: &(f64, u32), b: &(f64, u32)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
    if top.len() == k && !better(&(score, j), &top[k - 1]) {
        return;
    }
    let pos = top
        .iter()
        .position(|t| better(&(score, j), t))
        .unwrap_or(top.len());
    top.insert(pos, (score, j));
    top.truncate(k);
}

/// Blocked top-k search over the rows of `x` (`N × d`), where `block(rows)` returns the scores
/// of rows `rows` against all `N` points (`rows.len() × N`, larger = nearer). With `ties`, a
/// row whose `k`-th score ties with further points lists all of them, weighted
/// ([`Neighbours`]); without, exactly `k` (ties to the lower index). Blocks run in parallel
/// under `par`, each computed sequentially, so the result is identical at any thread count.
pub(crate) fn top_k_blocked<F>(n: usize, k: usize, ties: bool, par: Par, block: F) -> Neighbours
where
    F: Fn(std::ops::Range<usize>) -> Mat<f64> + Sync,
{
    let starts: Vec<usize> = (0..n).step_by(ROW_BLOCK).collect();
    // Per block: (entries of each row as (score, index, weight), tied rows).
    type Block = (Vec<Vec<(f64, u32, f64)>>, usize);
    let one = |&s: &usize| -> Block {
        let rows = s..(s + ROW_BLOCK).min(n);
        let scores = block(rows.clone());
        let mut out = Vec::with_capacity(rows.len());
        let mut tied = 0;
        let mut top = Vec::with_capacity(k + 1);
        for (r, i) in rows.enumerate() {
            top.clear();
            for j in 0..n {
                if j != i {
                    push_top(&mut top, k, scores[(r, j)], j as u32);
                }
            }
            let Some(&(last, _)) = top.last() else {
                out.push(Vec::new());
                continue;
            };
            // Every point at the k-th score, the kept ones included.
            let at_last: Vec<u32> = (0..n)
                .filter(|&j| j != i && scores[(r, j)] == last)
                .map(|j| j as u32)
                .collect();
            let better = top.iter().filter(|t| t.0 > last).count();
            let slots = top.len() - better;
            if at_last.len() > slots {
                tied += 1;
            }
            let row: Vec<(f64, u32, f64)> = if ties && at_last.len() > slots {
                let w = slots as f64 / at_last.len() as f64;
                (top[..better].iter().map(|&(sc, j)| (sc, j, 1.0)))
                    .chain(at_last.iter().map(|&j| (last, j, w)))
                    .collect()
            } else {
                top.iter().map(|&(sc, j)| (sc, j, 1.0)).collect()
            };
            out.push(row);
        }
        (out, tied)
    };
    let parts: Vec<Block> = repgeom_linalg::map_in_order(starts.len(), par, |b| one(&starts[b]));
    let mut nb = Neighbours {
        k,
        offsets: vec![0],
        index: Vec::with_capacity(n * k),
        score: Vec::with_capacity(n * k),
        weight: Vec::with_capacity(n * k),
        tied: 0,
    };
    for (rows, t) in parts {
        nb.tied += t;
        for row in rows {
            for (sc, j, w) in row {
                nb.index.push(j);
                nb.score.push(sc);
                nb.weight.push(w);
            }
            nb.offsets.push(nb.index.len());
        }
    }
    nb
}

/// Cosine `k`-NN of a layer: rows normalised to unit length in `f32` (as the reference code,
/// which runs in `float32`), similarities by block GEMM, scores widened to `f64`. Searched
/// once per layer and `(k, center)` ([`LayerInput::memo`]): every pair the layer is part of,
/// and the permutation null, share the lists.
pub(crate) fn cosine_neighbours(
    layer: &LayerInput<'_>,
    k: usize,
    center: bool,
) -> Result<std::sync::Arc<Neighbours>> {
    layer.memo(("cosine neighbours", k, center), || {
        search(layer, k, center)
    })
}

/// [`cosine_neighbours`]' search.
fn search(layer: &LayerInput<'_>, k: usize, center: bool) -> Result<Neighbours> {
    let xn = if center {
        normalize_rows(layer.centred(), layer.what(), layer.par())?
    } else {
        normalize_rows(layer.acts(), layer.what(), layer.par())?
    };
    let xt = xn.transpose();
    Ok(top_k_blocked(layer.n(), k, true, layer.par(), |rows| {
        let s = project_f32(xn.as_ref().subrows(rows.start, rows.len()), xt, Par::Seq);
        Mat::from_fn(s.nrows(), s.ncols(), |i, j| f64::from(s[(i, j)]))
    }))
}

/// Euclidean 2-NN distances (`f64`) of the centred rows of `x`: the nearest and second-nearest
/// distance of every point, by blocked Gram products.
pub(crate) fn euclidean_neighbours(x: MatRef<'_, f64>, k: usize, par: Par) -> Neighbours {
    let n = x.nrows();
    let sq: Vec<f64> = (0..n)
        .map(|i| x.row(i).iter().map(|v| v * v).sum())
        .collect();
    let xt = x.transpose();
    let mut nb = top_k_blocked(n, k, false, par, |rows| {
        let g = project(x.subrows(rows.start, rows.len()), xt, Par::Seq);
        // Score = −‖x_i − x_j‖² up to the row constant ‖x_i‖²: −(‖x_j‖² − 2 x_i·x_j).
        Mat::from_fn(g.nrows(), n, |r, j| {
            2.0 * g[(r, j)] - sq[j] - sq[rows.start + r]
        })
    });
    for (i, s) in nb.score.iter_mut().enumerate() {
        // Back to distances, recomputed exactly from the coordinates (the Gram form cancels).
        let (a, b) = (i / k, nb.index[i] as usize);
        let d2: f64 = x
            .row(a)
            .iter()
            .zip(x.row(b).iter())
            .map(|(u, v)| (u - v) * (u - v))
            .sum();
        *s = d2.sqrt();
    }
    nb
}

/// The rows of `b` relabelled as if its points were permuted by `perm` (point `i` of the
/// permuted representation is point `perm[i]` of the original): neighbours of `i` become
/// `inv[j]` for `j` in the neighbours of `perm[i]`.
fn permuted(b: &Neighbours, perm: &[u32], inv: &[u32]) -> Neighbours {
    let mut out = Neighbours {
        k: b.k,
        offsets: Vec::with_capacity(b.offsets.len()),
        index: Vec::with_capacity(b.index.len()),
        score: Vec::with_capacity(b.score.len()),
        weight: Vec::with_capacity(b.weight.len()),
        tied: b.tied,
    };
    out.offsets.push(0);
    for &p in perm {
        let (idx, sc, w) = b.row(p as usize);
        out.index.extend(idx.iter().map(|&j| inv[j as usize]));
        out.score.extend_from_slice(sc);
        out.weight.extend_from_slice(w);
        out.offsets.push(out.index.len());
    }
    out
}

/// Extras `tied_a` and `tied_b`: the fraction of each side's points whose neighbour set a tie
/// at its boundary decides (see [`Neighbours`]: their tied points are shared by weight).
fn with_ties(v: MetricValue, a: &Neighbours, b: &Neighbours) -> MetricValue {
    let n = a.n().max(1) as f64;
    v.with_extra("tied_a", a.tied as f64 / n)
        .with_extra("tied_b", b.tied as f64 / n)
}

/// Mutual k-NN: mean over points of |kNN_A(i) ∩ kNN_B(i)| / k, each common neighbour counted
/// with the product of its weights on the two sides (its expected count when each side's ties
/// are broken independently and uniformly at random).
fn mutual_knn_value(a: &Neighbours, b: &Neighbours, mark: &mut [u32], wa: &mut [f64]) -> f64 {
    let n = a.n();
    let mut total = 0.0f64;
    for i in 0..n {
        let stamp = i as u32 + 1;
        let (ia, _, w) = a.row(i);
        for (&j, &w) in ia.iter().zip(w) {
            mark[j as usize] = stamp;
            wa[j as usize] = w;
        }
        let (ib, _, w) = b.row(i);
        for (&j, &w) in ib.iter().zip(w) {
            if mark[j as usize] == stamp {
                total += w * wa[j as usize];
            }
        }
    }
    for m in mark.iter_mut() {
        *m = 0;
    }
    total / (n * a.k) as f64
}

/// Sparse `M ∘ K` and `M ∘ L` on the mask `M` = kNN_A ∩ kNN_B (row `i`: the common neighbours
/// of `i`, sorted by index), as used by CKNNA; a neighbour tied at a boundary enters `M` with
/// the product of its two weights (the expected mask under independent random tie-breaks, the
/// self-HSIC's two copies included).
struct Masked {
    /// Per row, (j, K_ij, L_ij) sorted by j.
    rows: Vec<Vec<(u32, f64, f64)>>,
}

impl Masked {
    fn new(a: &Neighbours, b: &Neighbours) -> Self {
        let n = a.n();
        let rows = (0..n)
            .map(|i| {
                let (ia, sa, wa) = a.row(i);
                let (ib, sb, wb) = b.row(i);
                // A tied neighbour's mask entry is the product of its two weights.
                let mut r: Vec<(u32, f64, f64)> = (ia.iter().zip(sa).zip(wa))
                    .filter_map(|((&j, &kv), &w)| {
                        let p = ib.iter().position(|&x| x == j)?;
                        let m = w * wb[p];
                        Some((j, m * kv, m * sb[p]))
                    })
                    .collect();
                r.sort_unstable_by_key(|t| t.0);
                r
            })
            .collect();
        Self { rows }
    }

    /// The unbiased HSIC (Song et al. 2012) of the two masked kernels, as the reference code
    /// writes it for non-symmetric matrices:
    /// `[Σ K̃∘L̃ᵀ + ΣK̃ ΣL̃/((m−1)(m−2)) − 2·1ᵀK̃L̃1/(m−2)] / (m(m−3))`.
    fn hsic_unbiased(&self) -> f64 {
        let m = self.rows.len();
        let mf = m as f64;
        let mut col_k = vec![0.0f64; m];
        let mut row_l = vec![0.0f64; m];
        let (mut sum_k, mut sum_l, mut trace) = (0.0, 0.0, 0.0);
        for (i, r) in self.rows.iter().enumerate() {
            for &(j, kv, lv) in r {
                let j = j as usize;
                sum_k += kv;
                sum_l += lv;
                col_k[j] += kv;
                row_l[i] += lv;
                // L̃_ji: is i a common neighbour of j?
                if let Ok(p) = self.rows[j].binary_search_by_key(&(i as u32), |t| t.0) {
                    trace += kv * self.rows[j][p].2;
                }
            }
        }
        let cross: f64 = col_k.iter().zip(&row_l).map(|(c, r)| c * r).sum();
        (trace + sum_k * sum_l / ((mf - 1.0) * (mf - 2.0)) - 2.0 * cross / (mf - 2.0))
            / (mf * (mf - 3.0))
    }
}

/// A layer's CKNNA self-HSIC (its kernel restricted to its own neighbour lists `nb`), once per
/// layer and `(k, center)` like the lists.
fn self_hsic(layer: &LayerInput<'_>, nb: &Neighbours, k: usize, center: bool) -> Result<f64> {
    layer
        .memo(("cknna self-HSIC", k, center), || {
            Ok(Masked::new(nb, nb).hsic_unbiased())
        })
        .map(|v| *v)
}

/// CKNNA: unbiased HSIC of the two cosine kernels restricted to mutual neighbours, normalised
/// by each kernel's own restricted self-HSIC.
fn cknna_value(a: &Neighbours, b: &Neighbours, self_norm: f64) -> f64 {
    Masked::new(a, b).hsic_unbiased() / self_norm
}

/// A layer's neighbour lists, prepared for the permutation null (see [`crate::calibrate`]).
#[derive(Debug)]
pub(crate) struct PreparedNeighbours {
    nb: std::sync::Arc<Neighbours>,
    /// CKNNA: the layer's restricted self-HSIC; mutual k-NN: `None`.
    self_hsic: Option<f64>,
}

impl Relabel for PreparedNeighbours {
    fn variant(&self) -> &str {
        ""
    }

    fn permuted(&self, perm: &[u32], inv: &[u32]) -> Box<dyn Relabel> {
        Box::new(Self {
            nb: std::sync::Arc::new(permuted(&self.nb, perm, inv)),
            self_hsic: self.self_hsic,
        })
    }

    fn score(&self, b: &dyn Relabel) -> f64 {
        let Some(b) = b.as_any().downcast_ref::<Self>() else {
            // The driver pairs work of one metric only; another kind scores nothing.
            return f64::NAN;
        };
        match (self.self_hsic, b.self_hsic) {
            (Some(kk), Some(ll)) => cknna_value(&self.nb, &b.nb, (kk * ll).sqrt()),
            _ => {
                let n = self.nb.n();
                mutual_knn_value(&self.nb, &b.nb, &mut vec![0; n], &mut vec![0.0; n])
            }
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn check_knn_options(name: &str, k: usize, permutations: Permutations, min_k: usize) -> Result<()> {
    if k < min_k {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: k.to_string(),
            reason: format!("{name} needs at least {min_k} neighbours"),
        });
    }
    permutations.check()
}

fn check_k_against_n(name: &str, k: usize, input: &PairInput<'_>) -> Result<()> {
    let n = input.a.n();
    if k >= n {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: k.to_string(),
            reason: format!(
                "{name} needs k < N = {n} (each point has N − 1 neighbours) ({})",
                input.what()
            ),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

/// Mutual k-nearest-neighbour alignment (Huh et al. 2024): the mean, over points, of the
/// fraction of a point's `k` cosine nearest neighbours in A that are also among its `k` nearest
/// neighbours in B. In [0, 1]; about `k/(N−1)` for unrelated representations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MutualKnn {
    /// Neighbours per point (the reference's `topk`, default 10).
    pub k: usize,
    /// Centre each representation before the cosine (the reference does not: default false).
    pub center: bool,
    /// Permutations of B's points for the null (0 = no null).
    pub n_perm: usize,
    /// Seed of the permutations (draw `i` depends only on `(seed, i, N)`).
    pub seed: u64,
}

impl Default for MutualKnn {
    fn default() -> Self {
        Self {
            k: 10,
            center: false,
            n_perm: 100,
            seed: 0,
        }
    }
}

const KNN_OPTIONS: &[OptionDoc] = &[
    OptionDoc {
        name: "center",
        help: "centre each representation before the cosine (the reference does not)",
    },
    OptionDoc {
        name: "k",
        help: "nearest neighbours per point (cosine, self excluded)",
    },
    N_PERM_OPTION,
    SEED_OPTION,
];

#[typetag::serde(name = "mutual_knn")]
impl PairMetric for MutualKnn {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "mutual_knn",
            summary: "mutual k-nearest-neighbour alignment (cosine), with a permutation null",
            source: "Huh, Cheung, Wang & Isola (2024), The Platonic Representation Hypothesis, ICML",
            options: KNN_OPTIONS,
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        check_knn_options("mutual_knn", self.k, self.permutations(), 1)
    }

    permutation_fields!();

    fn warm(&self, layer: &LayerInput<'_>, _side: PairSide) {
        if self.check().is_ok() && self.k < layer.n() {
            let _ = cosine_neighbours(layer, self.k, self.center);
        }
    }

    fn prepare(&self, layer: &LayerInput<'_>) -> Result<Option<Prepared>> {
        Ok(Some(Prepared(PreparedKind::Neighbours(Box::new(
            PreparedNeighbours {
                nb: cosine_neighbours(layer, self.k, self.center)?,
                self_hsic: None,
            },
        )))))
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        check_k_against_n("mutual_knn", self.k, input)?;
        let a = cosine_neighbours(input.a, self.k, self.center)?;
        let b = cosine_neighbours(input.b, self.k, self.center)?;
        let n = a.n();
        let value = mutual_knn_value(&a, &b, &mut vec![0; n], &mut vec![0.0; n]);
        Ok(vec![
            with_ties(MetricValue::new("mutual_knn", "", value), &a, &b)
                .with_extra("k", self.k as f64)
                .with_extra("chance", self.k as f64 / (n - 1) as f64),
        ])
    }
}

/// CKNNA (Huh et al. 2024): CKA's unbiased HSIC restricted to pairs that are mutual cosine
/// nearest neighbours in both representations, normalised by each representation's own
/// restricted HSIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cknna {
    /// Neighbours per point (default 10, at least 2).
    pub k: usize,
    /// Centre each representation before the cosine (the reference does not: default false).
    pub center: bool,
    /// Permutations of B's points for the null (0 = no null).
    pub n_perm: usize,
    /// Seed of the permutations.
    pub seed: u64,
}

impl Default for Cknna {
    fn default() -> Self {
        Self {
            k: 10,
            center: false,
            n_perm: 100,
            seed: 0,
        }
    }
}

#[typetag::serde(name = "cknna")]
impl PairMetric for Cknna {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "cknna",
            summary: "centred kernel nearest-neighbour alignment (CKA on mutual k-NN pairs), with a permutation null",
            source: "Huh, Cheung, Wang & Isola (2024), The Platonic Representation Hypothesis, ICML; unbiased HSIC: Song et al. (2012)",
            options: KNN_OPTIONS,
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        check_knn_options("cknna", self.k, self.permutations(), 2)
    }

    permutation_fields!();

    fn warm(&self, layer: &LayerInput<'_>, _side: PairSide) {
        if self.check().is_ok()
            && self.k < layer.n()
            && layer.n() >= 4
            && let Ok(nb) = cosine_neighbours(layer, self.k, self.center)
        {
            let _ = self_hsic(layer, &nb, self.k, self.center);
        }
    }

    fn prepare(&self, layer: &LayerInput<'_>) -> Result<Option<Prepared>> {
        let nb = cosine_neighbours(layer, self.k, self.center)?;
        let kk = self_hsic(layer, &nb, self.k, self.center)?;
        Ok(Some(Prepared(PreparedKind::Neighbours(Box::new(
            PreparedNeighbours {
                nb,
                self_hsic: Some(kk),
            },
        )))))
    }

    fn symmetric(&self) -> bool {
        // Σ K̃ L̃ over a non-symmetric k-NN mask differs from Σ L̃ K̃ (the reference's formula).
        false
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        check_k_against_n("cknna", self.k, input)?;
        if input.a.n() < 4 {
            return Err(Error::TooFewPoints {
                what: input.what(),
                n: input.a.n(),
                min: 4,
            });
        }
        let a = cosine_neighbours(input.a, self.k, self.center)?;
        let b = cosine_neighbours(input.b, self.k, self.center)?;
        let kk = self_hsic(input.a, &a, self.k, self.center)?;
        let ll = self_hsic(input.b, &b, self.k, self.center)?;
        if kk.is_nan() || ll.is_nan() || kk <= 0.0 || ll <= 0.0 {
            return Err(Error::Degenerate {
                what: format!("cknna on {}", input.what()),
                reason: format!(
                    "a restricted self-HSIC is not positive (HSIC(A,A) = {kk:.3e}, HSIC(B,B) = {ll:.3e})"
                ),
            });
        }
        let norm = (kk * ll).sqrt();
        let value = cknna_value(&a, &b, norm);
        Ok(vec![
            with_ties(MetricValue::new("cknna", "", value), &a, &b).with_extra("k", self.k as f64),
        ])
    }
}

//! Cross-model metrics on two representations of the same points: distance agreement
//! (Spearman of pairwise cosine distances) in the full space, in each model's readout subspace
//! and in random subspaces; and linear CKA.

use std::sync::Arc;

use repgeom_linalg::{
    Mat, MatRef, Par, RankScratch, RankedReference, condensed_len, cosine_distances,
    cosine_distances_into, cross_frobenius_sq, gram_rows, hsic_unbiased, project, project_f32,
    to_f32,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::{LayerInput, PairInput};
use crate::permute::{
    KernelMatrix, N_PERM_OPTION, Prepared, PreparedKind, SEED_OPTION, permutation_fields,
};
use crate::registry::{PairMetric, PairSide};
use crate::value::{MetricInfo, MetricValue, OptionDoc};
use repgeom_null::NullBases;

/// Distance agreement between two models: Spearman correlation of their pairwise cosine
/// distances over the same `N` points, in the full space (variant `full`), inside each model's
/// own readout subspace (variant `readout`, with z against random subspaces), and in random
/// `k`-dimensional subspaces of each model (variant `random`: their mean, with `sd`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistanceSpearman {
    /// CCR level applied to each model before distances (0 = centre only; default 1, as PGA).
    pub ccr: usize,
    /// Compare inside each model's readout subspace (needs both readout bases).
    pub readout: bool,
    /// Compare inside random subspaces (needs both null bases, same number of draws).
    pub random: bool,
    /// Permutations of B's points for the null of the `full` variant (0 = none).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

impl Default for DistanceSpearman {
    fn default() -> Self {
        Self {
            ccr: 1,
            readout: true,
            random: true,
            n_perm: 0,
            seed: 0,
        }
    }
}

#[typetag::serde(name = "distance_spearman")]
impl PairMetric for DistanceSpearman {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "distance_spearman",
            summary: "Spearman of two models' pairwise cosine distances: full space, own readout subspaces, random subspaces",
            source: "representational similarity analysis (Kriegeskorte et al. 2008); readout/random variants as in repgeom's docs/metrics.md",
            options: &[
                OptionDoc {
                    name: "ccr",
                    help: "principal directions removed from each model first (0 = centre only)",
                },
                OptionDoc {
                    name: "readout",
                    help: "also compare inside each model's readout subspace",
                },
                OptionDoc {
                    name: "random",
                    help: "also compare inside paired random subspaces (null for the readout)",
                },
                N_PERM_OPTION,
                SEED_OPTION,
            ],
            needs_readout: true,
            needs_null: true,
            rotation_invariant: true,
        }
    }

    fn needs_readout_and_null(&self) -> (bool, bool) {
        // The readout variant needs both readouts; the random variant the null bases.
        (self.readout, self.random)
    }

    permutation_fields!();

    fn cells_side_by_side(&self) -> bool {
        // Each cell's random subspaces already run over the pool, two N(N − 1)/2 distance
        // vectors and a sort's buffers on every worker.
        !self.random
    }

    fn warm(&self, layer: &LayerInput<'_>, _: PairSide) {
        if self.check_ccr(layer).is_ok() {
            let _ = self.full(layer);
            if self.readout && layer.readout_basis_opt().is_some() {
                let _ = self.in_readout(layer, layer.what());
            }
        }
    }

    fn prepare(&self, layer: &LayerInput<'_>) -> Result<Option<Prepared>> {
        // The full variant's ranks; the readout variant keeps its random-subspace null.
        let x = layer.ccr(self.ccr)?;
        let label = format!("{} after CCR-{}", layer.what(), self.ccr);
        let d = cosine_distances(x.as_ref().as_ref(), &label, layer.par())?;
        Ok(Some(Prepared(PreparedKind::Kernel(vec![
            standardized_ranks("full", layer.n(), &d, &label)?,
        ]))))
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        self.values(input, |qa, qb| {
            let (a, b) = (&input.a, &input.b);
            let (par, n, what) = (a.par(), a.n(), input.what());
            let (ca, cb) = (a.ccr(self.ccr)?, b.ccr(self.ccr)?);
            let ha = to_f32(ca.as_ref().as_ref(), par);
            let hb = to_f32(cb.as_ref().as_ref(), par);
            let pairs: Vec<(&Mat<f32>, &Mat<f32>)> =
                qa.bases_f32().iter().zip(qb.bases_f32()).collect();
            crate::pga::over_draws(
                &pairs,
                par,
                &|| {},
                || DrawScratch::new(n),
                |&(q1, q2), s| s.rho(ha.as_ref(), q1.as_ref(), hb.as_ref(), q2.as_ref(), &what),
            )
        })
    }

    fn compute_table(
        &self,
        a: &[&LayerInput<'_>],
        b: &[&LayerInput<'_>],
        pairs: &[(usize, usize)],
    ) -> Option<Vec<Result<Vec<MetricValue>>>> {
        if !self.random {
            return None;
        }
        let rhos = self.random_table(a, b, pairs)?;
        let par = a.first()?.par();
        Some(repgeom_linalg::map_in_order(pairs.len(), par, |c| {
            let (i, j) = pairs[c];
            let input = PairInput::new(a[i], b[j])?;
            match &rhos[c] {
                Some(r) => self.values(&input, |_, _| Ok(r.clone())),
                None => self.compute(&input),
            }
        }))
    }
}

impl DistanceSpearman {
    /// The cell's values, with `random(qa, qb)` the random-subspace rhos over the two layers'
    /// paired null bases (checked to be as many) where the variant is asked for.
    fn values(
        &self,
        input: &PairInput<'_>,
        random: impl FnOnce(&NullBases, &NullBases) -> Result<Vec<f64>>,
    ) -> Result<Vec<MetricValue>> {
        let what = input.what();
        let (a, b) = (&input.a, &input.b);
        for side in [a, b] {
            self.check_ccr(side)?;
        }
        let mut out = Vec::new();
        let (sa, sb) = (self.full(a)?, self.full(b)?);
        let full = sa.spearman(&sb);
        out.push(
            MetricValue::new("distance_spearman", "full", full)
                .with_extra("ccr", self.ccr as f64)
                .with_extra(
                    "tied_a",
                    sa.tied.expect("the full distances keep their ties"),
                )
                .with_extra(
                    "tied_b",
                    sb.tied.expect("the full distances keep their ties"),
                ),
        );

        let readout = if self.readout {
            let va = a.readout_basis("distance_spearman")?;
            let vb = b.readout_basis("distance_spearman")?;
            let label = format!("{what}: readout-subspace distances");
            let ra = self.in_readout(a, &label)?;
            let rb = self.in_readout(b, &label)?;
            Some((ra.spearman(&rb), va.ncols(), vb.ncols()))
        } else {
            None
        };

        let random = if self.random {
            let qa = a.null("distance_spearman")?;
            let qb = b.null("distance_spearman")?;
            if qa.len() != qb.len() {
                return Err(Error::ShapeMismatch {
                    what: format!("{what}: paired random subspaces"),
                    left: format!("{} draws for {}", qa.len(), a.what()),
                    right: format!("{} draws for {}", qb.len(), b.what()),
                });
            }
            Some(random(qa, qb)?)
        } else {
            None
        };

        match (readout, random) {
            (Some((r, ka, kb)), Some(rhos)) => {
                let s = repgeom_null::summarize(r, &rhos)?;
                out.push(
                    MetricValue::new("distance_spearman", "readout", r)
                        .with_null(&s)
                        .with_extra("z", s.z)
                        .with_extra("k_a", ka as f64)
                        .with_extra("k_b", kb as f64),
                );
                out.push(random_row(&rhos, &s));
            }
            (Some((r, ka, kb)), None) => out.push(
                MetricValue::new("distance_spearman", "readout", r)
                    .with_extra("k_a", ka as f64)
                    .with_extra("k_b", kb as f64),
            ),
            (None, Some(rhos)) => {
                let s = repgeom_null::summarize(0.0, &rhos)?;
                out.push(random_row(&rhos, &s));
            }
            (None, None) => {}
        }
        Ok(out)
    }

    /// A table's random-subspace rhos, per cell (`None` where a layer's draw failed: that
    /// cell is computed alone, which meets the error and names it with its pair), or `None`
    /// for the whole table when no layer is in two cells (nothing to share) or the layers'
    /// draws are not as many.
    ///
    /// Draws go in groups: each layer's draw `i` (projection, distances, ranks, on one
    /// worker) once, then every cell's rho for draw `i` from the two ranked draws, the dot
    /// products of their ranks by blocks of positions, each layer's block read once for all
    /// of its cells ([`RankedReference::spearman_ranked_pairs`], the same bits as a cell's
    /// sort of B's distances against A's ranks). A group holds at most [`TABLE_GROUP_BYTES`] of
    /// ranks, and enough draws to give every worker two layers' draws at a time.
    fn random_table(
        &self,
        a: &[&LayerInput<'_>],
        b: &[&LayerInput<'_>],
        pairs: &[(usize, usize)],
    ) -> Option<Vec<Option<Vec<f64>>>> {
        let (used_a, used_b) = (
            PairSide::A.used_layers(pairs),
            PairSide::B.used_layers(pairs),
        );
        if pairs.len() <= used_a.len().max(used_b.len()) {
            return None;
        }
        let layers: Vec<&LayerInput<'_>> = (used_a.iter().map(|&i| a[i]))
            .chain(used_b.iter().map(|&j| b[j]))
            .collect();
        let par = layers[0].par();
        // Each layer after CCR in `f32` with its null bases, as a cell alone projects them.
        let sides: Vec<Option<DrawSource<'_>>> =
            repgeom_linalg::map_in_order(layers.len(), par, |t| {
                let layer = layers[t];
                self.check_ccr(layer).ok()?;
                let x = layer.ccr(self.ccr).ok()?;
                let null = layer.null("distance_spearman").ok()?;
                Some((to_f32(x.as_ref().as_ref(), Par::Seq), null.bases_f32()))
            });
        let mut counts = sides.iter().flatten().map(|(_, q)| q.len());
        let n_draws = counts.next()?;
        if counts.any(|c| c != n_draws) {
            return None;
        }
        let n = layers.iter().map(|l| l.n()).max()?;
        let per_draw = layers.len() * condensed_len(n) * std::mem::size_of::<u32>();
        let threads = match par {
            Par::Seq => 1,
            Par::Rayon(t) => t.get(),
        };
        let group = (2 * threads)
            .div_ceil(layers.len())
            .min(TABLE_GROUP_BYTES / per_draw.max(1))
            .clamp(1, n_draws.max(1));
        let index_a = |i: usize| used_a.binary_search(&i).expect("a used layer");
        let index_b = |j: usize| used_a.len() + used_b.binary_search(&j).expect("a used layer");
        let mut rhos: Vec<Option<Vec<f64>>> = vec![Some(Vec::with_capacity(n_draws)); pairs.len()];
        for first in (0..n_draws).step_by(group) {
            let draws = first..(first + group).min(n_draws);
            let items: Vec<(usize, usize)> = draws
                .clone()
                .flat_map(|i| (0..layers.len()).map(move |t| (i, t)))
                .collect();
            let ranked: Vec<Option<RankedReference>> = crate::pga::over_draws(
                &items,
                par,
                &|| {},
                || (Vec::new(), RankScratch::default()),
                |&(i, t), (d, scratch)| {
                    let Some((h, q)) = &sides[t] else {
                        return Ok(None);
                    };
                    let what = layers[t].what();
                    d.resize(condensed_len(layers[t].n()), 0.0);
                    let projected = project_f32(h.as_ref(), q[i].as_ref(), Par::Seq);
                    if cosine_distances_into(projected.as_ref(), d, what, Par::Seq).is_err() {
                        return Ok(None);
                    }
                    Ok(RankedReference::new_in(d, scratch, what, Par::Seq).ok())
                },
            )
            .ok()?;
            for of_draw in ranked.chunks(layers.len()) {
                // The cells whose two ranked draws exist, all at once: each layer's ranks
                // read once per block for every cell it is in.
                let mut refs: Vec<&RankedReference> = Vec::new();
                let slot: Vec<Option<usize>> = (of_draw.iter())
                    .map(|r| {
                        r.as_ref().map(|r| {
                            refs.push(r);
                            refs.len() - 1
                        })
                    })
                    .collect();
                let n = refs.first().map(|r| r.len());
                let cell = |&(i, j): &(usize, usize)| match (slot[index_a(i)], slot[index_b(j)]) {
                    (Some(x), Some(y)) if Some(refs[x].len()) == n && Some(refs[y].len()) == n => {
                        Some((x, y))
                    }
                    _ => None,
                };
                let cells: Vec<Option<(usize, usize)>> = pairs.iter().map(cell).collect();
                let both: Vec<(usize, usize)> = cells.iter().flatten().copied().collect();
                let mut rho = RankedReference::spearman_ranked_pairs(&refs, &both, par).into_iter();
                for (c, cell) in cells.iter().enumerate() {
                    match (&mut rhos[c], cell.and_then(|_| rho.next())) {
                        (Some(r), Some(rho)) => r.push(rho),
                        (slot, _) => *slot = None,
                    }
                }
            }
        }
        Some(rhos)
    }

    /// Errors unless `self.ccr` directions can be removed from `side`.
    fn check_ccr(&self, side: &LayerInput<'_>) -> Result<()> {
        if self.ccr >= (side.n() - 1).min(side.d()) {
            return Err(Error::InvalidOption {
                name: "ccr".into(),
                value: self.ccr.to_string(),
                reason: format!(
                    "too many directions to remove from {} [{}, {}]",
                    side.what(),
                    side.n(),
                    side.d()
                ),
            });
        }
        Ok(())
    }

    /// The layer's full-space distances after CCR, ranked for the `full` variant's
    /// correlation, once per layer.
    fn full(&self, layer: &LayerInput<'_>) -> Result<Arc<SpearmanSide>> {
        let label = format!("{} after CCR-{}", layer.what(), self.ccr);
        let key = ("distance_spearman full", self.ccr);
        spearman_side(
            layer,
            key,
            true,
            &format!("{label}: full-space distances"),
            || {
                let x = layer.ccr(self.ccr)?;
                Ok(cosine_distances(x.as_ref().as_ref(), &label, layer.par())?)
            },
        )
    }

    /// The layer's distances inside its own readout subspace (after CCR), ranked for the
    /// `readout` variant's correlation, once per layer.
    fn in_readout(&self, layer: &LayerInput<'_>, what: &str) -> Result<Arc<SpearmanSide>> {
        let key = ("distance_spearman readout", self.ccr);
        spearman_side(layer, key, false, what, || {
            let v = layer.readout_basis("distance_spearman")?;
            let x = layer.ccr(self.ccr)?;
            let label = format!(
                "{} after CCR-{} in its readout subspace",
                layer.what(),
                self.ccr
            );
            let projected = project(x.as_ref().as_ref(), v, layer.par());
            Ok(cosine_distances(projected.as_ref(), &label, layer.par())?)
        })
    }
}

/// One layer's condensed distances for the Spearman correlations of a pair metric, ranked
/// once per layer ([`LayerInput::memo`]) and shared by every pair the layer is part of, on
/// either side: a pair's rho is then the dot product of the two sides' ranks
/// ([`RankedReference::spearman_ranked`], the bits of [`repgeom_linalg::spearman`] of the two
/// distance vectors), with the fraction tied ([`tied_fraction`]) where asked for.
pub(crate) struct SpearmanSide {
    ranked: RankedReference,
    pub(crate) tied: Option<f64>,
}

impl SpearmanSide {
    /// Spearman's rho between side A (`self`) and side B, exactly as
    /// [`repgeom_linalg::spearman`] of the two distance vectors.
    pub(crate) fn spearman(&self, b: &SpearmanSide) -> f64 {
        self.ranked.spearman_ranked(&b.ranked)
    }
}

/// `layer`'s [`SpearmanSide`] under `key` (a name and a level), from the `distances` it
/// computes on first use; `what` names the distances if every one is tied.
pub(crate) fn spearman_side(
    layer: &LayerInput<'_>,
    key: (&'static str, usize),
    tied: bool,
    what: &str,
    distances: impl FnOnce() -> Result<Vec<f32>>,
) -> Result<Arc<SpearmanSide>> {
    layer.memo((key.0, key.1, false), || {
        let values = distances()?;
        Ok(SpearmanSide {
            tied: tied.then(|| tied_fraction(&values)),
            ranked: RankedReference::new(&values, what, layer.par())?,
        })
    })
}

/// One layer as its random-subspace draws read it: the layer after CCR in `f32`, and its null
/// bases in `f32`.
type DrawSource<'a> = (Mat<f32>, &'a [Mat<f32>]);

/// The most bytes of ranked draws a table's random-subspace variant keeps at once
/// ([`DistanceSpearman::compute_table`]): one group of draws of every layer of the table.
const TABLE_GROUP_BYTES: usize = 256 << 20;

fn random_row(rhos: &[f64], s: &repgeom_null::NullSummary) -> MetricValue {
    MetricValue::new("distance_spearman", "random", s.null_mean)
        .with_extra("sd", s.null_std)
        .with_extra("n_null", rhos.len() as f64)
}

/// Per-worker buffers of one random draw.
struct DrawScratch {
    da: Vec<f32>,
    db: Vec<f32>,
    rank: RankScratch,
}

impl DrawScratch {
    fn new(n: usize) -> Self {
        let m = condensed_len(n);
        Self {
            da: vec![0.0; m],
            db: vec![0.0; m],
            rank: RankScratch::default(),
        }
    }

    fn rho(
        &mut self,
        ha: MatRef<'_, f32>,
        qa: MatRef<'_, f32>,
        hb: MatRef<'_, f32>,
        qb: MatRef<'_, f32>,
        what: &str,
    ) -> Result<f64> {
        let label = format!("{what}: random subspaces");
        cosine_distances_into(
            project_f32(ha, qa, Par::Seq).as_ref(),
            &mut self.da,
            &label,
            Par::Seq,
        )?;
        cosine_distances_into(
            project_f32(hb, qb, Par::Seq).as_ref(),
            &mut self.db,
            &label,
            Par::Seq,
        )?;
        let reference = RankedReference::new(&self.da, &label, Par::Seq)?;
        Ok(reference.spearman(&self.db, &mut self.rank, &label)?)
    }
}

// ---------------------------------------------------------------------------------------------

/// The fraction of the condensed pairwise distances equal to at least one other (ties from
/// bf16/fp16 activations, duplicated tokens, saturated units), which the average ranks of a
/// Spearman correlation share out: reported as extras `tied_a`, `tied_b` beside the value.
///
/// ```
/// assert_eq!(repgeom_metrics::tied_fraction(&[0.5, 1.0, 0.5, 2.0]), 0.5);
/// assert_eq!(repgeom_metrics::tied_fraction(&[0.1, 0.2, 0.3]), 0.0);
/// ```
pub fn tied_fraction(condensed: &[f32]) -> f64 {
    if condensed.is_empty() {
        return 0.0;
    }
    let mut v = condensed.to_vec();
    v.sort_unstable_by(f32::total_cmp);
    let mut tied = 0usize;
    let mut i = 0;
    while i < v.len() {
        let mut j = i + 1;
        while j < v.len() && v[j] == v[i] {
            j += 1;
        }
        if j - i > 1 {
            tied += j - i;
        }
        i = j;
    }
    tied as f64 / v.len() as f64
}

/// The kernel of a Spearman correlation over condensed pairs: average ranks, centred and scaled
/// to unit norm, so the correlation of two such kernels is their inner product.
pub(crate) fn standardized_ranks(
    variant: &str,
    n: usize,
    condensed: &[f32],
    what: &str,
) -> Result<KernelMatrix> {
    let mut r = repgeom_linalg::average_ranks(condensed);
    let mean = r.iter().sum::<f64>() / r.len() as f64;
    let mut ss = 0.0;
    for v in &mut r {
        *v -= mean;
        ss += *v * *v;
    }
    if ss.is_nan() || ss <= 0.0 {
        return Err(Error::Degenerate {
            what: what.into(),
            reason: "every pairwise distance is tied, so their ranks carry no order".into(),
        });
    }
    let scale = 1.0 / ss.sqrt();
    for v in &mut r {
        *v *= scale;
    }
    Ok(KernelMatrix::from_condensed(variant, n, &r, 1.0))
}

/// Linear CKA (Kornblith et al. 2019): HSIC of the two linear kernels on centred features,
/// normalised, a similarity in [0, 1] (1 = identical up to rotation and isotropic scaling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CkaLinear {
    /// Use the unbiased HSIC estimator of Song et al. (2012) (variant `debiased`) instead of the
    /// biased one of Gretton et al. (2005) (variant `biased`, default).
    pub debiased: bool,
    /// Permutations of B's points for the null (0 = none).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

#[allow(clippy::derivable_impls)] // written out so the default is stated beside the others
impl Default for CkaLinear {
    fn default() -> Self {
        Self {
            debiased: false,
            n_perm: 0,
            seed: 0,
        }
    }
}

#[typetag::serde(name = "cka_linear")]
impl PairMetric for CkaLinear {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "cka_linear",
            summary: "linear centred kernel alignment, a similarity in [0, 1] (biased or debiased HSIC)",
            source: "Kornblith, Norouzi, Lee, Hinton (2019), ICML; debiased HSIC: Song et al. (2012), JMLR",
            options: &[
                OptionDoc {
                    name: "debiased",
                    help: "use the unbiased HSIC estimator (variant debiased)",
                },
                N_PERM_OPTION,
                SEED_OPTION,
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    permutation_fields!();

    fn prepare(&self, layer: &LayerInput<'_>) -> Result<Option<Prepared>> {
        // CKA = ⟨K̃, L̃⟩ / (‖K̃‖‖L̃‖) with K̃ the centred Gram (biased) or its U-centred form
        // (debiased: Székely & Rizzo 2014, HSIC_u(K, L) = ⟨Ũ_K, Ũ_L⟩ / (N(N−3))); both commute
        // with relabelling the points.
        let mut k = gram_rows(layer.centred(), layer.par());
        let n = k.nrows();
        let (variant, off_weight, diagonal) = if self.debiased {
            u_centre(&mut k);
            ("debiased", 2.0, false)
        } else {
            ("biased", 2.0, true)
        };
        let norm = k.norm_l2();
        if norm.is_nan() || norm <= 0.0 {
            return Err(Error::Degenerate {
                what: format!("cka_linear on {}", layer.what()),
                reason: "the (centred) Gram matrix is zero".into(),
            });
        }
        debug_assert_eq!(n, layer.n());
        Ok(Some(Prepared(PreparedKind::Kernel(vec![
            KernelMatrix::new(variant, k.as_ref(), 1.0 / norm, off_weight, diagonal),
        ]))))
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        let what = format!("cka_linear on {}", input.what());
        let par = input.a.par();
        let (a, b) = (input.a.centred(), input.b.centred());
        let (kl, kk, ll, variant) = if self.debiased {
            // The unbiased estimator drops the Grams' diagonals, so it needs them.
            let k = gram_rows(a, par);
            let l = gram_rows(b, par);
            (
                hsic_unbiased(k.as_ref(), l.as_ref())?,
                hsic_unbiased(k.as_ref(), k.as_ref())?,
                hsic_unbiased(l.as_ref(), l.as_ref())?,
                "debiased",
            )
        } else {
            // tr(KL) = ‖AᵀB‖²_F: feature space, no N × N Gram (N = 10,000 would need 800 MB).
            // The self-terms are cached on each layer: an L × L table computes each once.
            (
                cross_frobenius_sq(a, b, par),
                input.a.centred_gram_frobenius_sq(),
                input.b.centred_gram_frobenius_sq(),
                "biased",
            )
        };
        if kk.is_nan() || ll.is_nan() || kk <= 0.0 || ll <= 0.0 {
            return Err(Error::Degenerate {
                what,
                reason: format!(
                    "a self-similarity HSIC is not positive (HSIC(A,A) = {kk:.3e}, HSIC(B,B) = {ll:.3e})"
                ),
            });
        }
        let mut value = kl / (kk.sqrt() * ll.sqrt());
        if !self.debiased {
            // Bounded by Cauchy-Schwarz; only rounding can push it past 1.
            value = value.min(1.0);
        }
        Ok(vec![MetricValue::new("cka_linear", variant, value)])
    }
}

/// U-centring in place (Székely & Rizzo 2014): with the diagonal zeroed, row sums `r` and total
/// `s`, `Ũ_ij = K_ij − (r_i + r_j)/(N−2) + s/((N−1)(N−2))` off the diagonal, 0 on it.
fn u_centre(k: &mut Mat<f64>) {
    let n = k.nrows();
    let nf = n as f64;
    let r: Vec<f64> = (0..n)
        .map(|i| (0..n).filter(|&j| j != i).map(|j| k[(i, j)]).sum())
        .collect();
    let s: f64 = r.iter().sum();
    let c = s / ((nf - 1.0) * (nf - 2.0));
    for i in 0..n {
        for j in 0..n {
            k[(i, j)] = if i == j {
                0.0
            } else {
                k[(i, j)] - (r[i] + r[j]) / (nf - 2.0) + c
            };
        }
    }
}

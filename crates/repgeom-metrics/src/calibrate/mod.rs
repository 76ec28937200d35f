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
//! the work of each metric; the self-test calls [`compare`] directly, on the layers it gives.
//!
//! Files: this module holds the settings, the rows and the driver; `aggregate` the table's
//! aggregates and Hungarian matching, `draws` the permutation draws (kernel, relabelled lists,
//! recomputation), `duplicates` the same input twice.

mod aggregate;
mod draws;
mod duplicates;

use serde::{Deserialize, Serialize};

pub use aggregate::Aggregate;
use aggregate::aggregate_row;
use draws::{DRAWS_PER_PASS, device_kernel_draws, fast_draws, generic_draw, is_kernel};
pub(crate) use duplicates::duplicate_rows;
use duplicates::{duplicate_points, on_kept_points};

use crate::error::{Error, Result};
use crate::input::{LayerInput, PairInput, layer_pairs};
use crate::permute::permutation;
pub use crate::permute::{Permutations, Prepared};
use crate::registry::{PairMetric, PairSide};
use crate::value::MetricValue;

/// Sets `n_perm` on every metric of a run, keeping each metric's seed: what
/// `repgeom compare --n-perm`, the study's `analysis.cross_n_perm` and Python's
/// `compare(n_perm=)` mean by one permutation count for the whole comparison.
pub fn set_n_perm(metrics: &mut [Box<dyn PairMetric>], n_perm: usize) {
    for m in metrics {
        let seed = m.permutations().seed;
        m.set_permutations(Permutations { n_perm, seed });
    }
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
            Aggregate::Diagonal => layer_pairs(la, lb, true).iter().all(|c| pairs.contains(c)),
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
    // Observed values: first each layer's work that its pairs share (`PairMetric::warm`),
    // the layers side by side, then the whole table where the metric computes one at once
    // (`PairMetric::compute_table`), or else the pairs, side by side where the metric allows
    // it; the first failing pair in order names the error, at any thread count.
    let par = a[0].par();
    let cells = if metric.cells_side_by_side() {
        par
    } else {
        repgeom_linalg::Par::Seq
    };
    let (used_a, used_b) = (
        PairSide::A.used_layers(pairs),
        PairSide::B.used_layers(pairs),
    );
    repgeom_linalg::map_in_order(used_a.len() + used_b.len(), par, |t| match t {
        t if t < used_a.len() => metric.warm(a[used_a[t]], PairSide::A),
        t => metric.warm(b[used_b[t - used_a.len()]], PairSide::B),
    });
    let mut observed: Vec<Vec<MetricValue>> = metric
        .compute_table(a, b, pairs)
        .unwrap_or_else(|| {
            repgeom_linalg::map_in_order(pairs.len(), cells, |c| {
                let (i, j) = pairs[c];
                metric.compute(&PairInput::new(a[i], b[j])?)
            })
        })
        .into_iter()
        .collect::<Result<_>>()?;
    if perms.n_perm == 0 {
        return Ok(Comparison {
            pairs: rows(pairs, observed),
            aggregates: Vec::new(),
        });
    }
    // The null: per draw, a value per (pair, variant with a null).
    let n = a[0].n();
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
    // Kernel metrics on a CUDA device (the layers' device, `--device`): every draw there, the
    // same permutations; otherwise the groups on the CPU.
    let gpu = if fast && is_kernel(&prep_a) && is_kernel(&prep_b) {
        a[0].device().open()?
    } else {
        None
    };
    let draws: Vec<Vec<f64>> = match gpu {
        Some(gpu) => device_kernel_draws(
            &gpu,
            &prep_a,
            &prep_b,
            pairs,
            &variants,
            perms.n_perm,
            &|t| permutation(n, perms.seed, t as u64).0,
            &format!("{name}'s permutation null"),
        )?,
        None => {
            // The first failing group in order names the error, at any thread count.
            let grouped = repgeom_linalg::map_in_order(groups.len(), par, |i| group(&groups[i]));
            let grouped: Vec<Vec<Vec<f64>>> = grouped.into_iter().collect::<Result<_>>()?;
            grouped.into_iter().flatten().collect()
        }
    };
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

/// [`compare`] for each of `metrics` with the points `dups` (ascending) dropped, once for
/// every metric (the same input twice, as [`crate::analysis::ModelPair::new`] judged them on
/// every layer of both models), rows in the order a layer × layer table is read: each layer
/// pair's rows (metric by metric) in `pairs` order, then every metric's aggregates.
/// `on_metric` is called with each metric's name before it runs. The one route of a
/// multi-metric comparison is [`crate::analysis::ModelPair::compare`].
pub(crate) fn compare_all(
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
pub(super) fn with_null(
    v: MetricValue,
    observed: f64,
    null: &[f64],
    larger: bool,
) -> Result<MetricValue> {
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

#[cfg(test)]
mod tests;

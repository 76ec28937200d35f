//! One unit's rows: [`compute_unit`] hands the unit to its kind's function (PGA, PGA at a
//! sensitivity `k`, PC share, a spectral metric, validation loss, weights hash, probe, a cross
//! pair's cell, a cross pair's table), each reading what its group shares ([`UnitInputs`]).
//! Nothing here opens a file: the group's data come loaded, a weights hash comes from the
//! loader, and the rows go back to `run_units`, which writes them.

use std::collections::BTreeMap;

use repgeom_linalg::{Mat, Par};
use repgeom_metrics::analysis::ModelContext;
use repgeom_metrics::{LayerInput, Metric, MetricValue, PcReadoutShare, Pga};
use repgeom_report::Row;

use super::{CrossPair, Loader, ModelCtx, cross_cell};
use crate::plan::{ModelInfo, Study, Unit, UnitKind};
use crate::{Error, Result};

/// What a unit's computation reads: its model's data at the unit's layer and what its
/// (model, checkpoint) group computed once for all its units.
pub(super) struct UnitInputs<'a> {
    pub(super) study: &'a Study,
    pub(super) loader: &'a Loader<'a>,
    /// The unit's model.
    pub(super) m: &'a ModelInfo,
    /// The model's readout contexts.
    pub(super) ctx: &'a ModelCtx,
    /// The unit's layer (points × width).
    pub(super) acts: &'a Mat<f32>,
    /// The sequence of each point, when PGA's bootstrap needs them and the file records them.
    pub(super) sequences: Option<&'a [usize]>,
    /// A hub checkpoint's probe features at the unit's layer, and their labels.
    pub(super) probe: Option<(&'a Mat<f32>, &'a [usize])>,
    /// The checkpoint's computed validation loss and its standard error.
    pub(super) computed_loss: Option<(f64, Option<f64>)>,
    /// The unit's hidden state's covariance spectra over every token of the corpus, at each
    /// convergence checkpoint (`analysis.spectral_tokens`, hub checkpoints).
    pub(super) spectra: Option<&'a [repgeom_metrics::CovarianceSpectrum]>,
    /// The group's model pairs, by the other model's label.
    pub(super) cross: &'a BTreeMap<String, CrossPair>,
}

impl<'a> UnitInputs<'a> {
    /// How messages name the unit's layer: `MODEL CHECKPOINT layer L`, marked when synthetic.
    fn what(&self, u: &Unit) -> String {
        let synth = if self.m.synthetic { " (synthetic)" } else { "" };
        format!("{} {} layer {}{synth}", self.m.label, u.checkpoint, u.layer)
    }

    /// The unit's layer at the model's own `k`, with its null.
    fn layer(&self, u: &Unit) -> Result<LayerInput<'a>> {
        self.layer_of(&self.ctx.model, u)
    }

    /// The unit's layer in `model`'s context (the model's own `k`, or a sensitivity `k`), on
    /// the whole pool, which the group's units share (`run::for_each_unit`); the thread count
    /// never changes a number.
    fn layer_of(&self, model: &'a ModelContext, u: &Unit) -> Result<LayerInput<'a>> {
        Ok(model
            .layer(self.acts.as_ref(), self.what(u))?
            .with_par(Par::rayon(0)))
    }
}

/// The rows of unit `u`, computed by its kind's function.
pub(super) fn compute_unit(x: &UnitInputs<'_>, u: &Unit) -> Result<Vec<Row>> {
    let values = match &u.kind {
        UnitKind::Pga { .. } => pga(x, u)?,
        UnitKind::PgaK { ccr, k } => pga_k(x, u, *ccr, *k)?,
        UnitKind::PcShare { m } => pc_share(x, u, *m)?,
        UnitKind::Spectral { metric } => spectral(x, u, metric)?,
        UnitKind::ValLoss => val_loss(x, u),
        UnitKind::Weights => weights(x, u)?,
        UnitKind::Probe => probe(x, u)?,
        // Rows naming the other model (and, for the table, other layers than the unit's).
        UnitKind::CrossTable { other } => return Ok(cross_table(x, u, other)),
        UnitKind::Cross { other } => return Ok(cross(x, u, other)),
    };
    Ok(values.into_iter().map(|v| to_row(x.m, u, v)).collect())
}

/// The PGA metric of a `pga` or `pga_k` unit and the model context its layer is taken in
/// (the model's own `k`, or a sensitivity `k`); `None` for the other kinds.
fn pga_of<'a>(x: &UnitInputs<'a>, u: &Unit) -> Option<(Pga, &'a ModelContext)> {
    let a = &x.study.manifest.analysis;
    match &u.kind {
        // The bootstrap, by sequence when they are known.
        UnitKind::Pga { ccr } => Some((pga_metric(a, ccr.clone(), true), &x.ctx.model)),
        UnitKind::PgaK { ccr, k } => {
            Some((pga_metric(a, vec![*ccr], false), &x.ctx.sensitivity[k]))
        }
        _ => None,
    }
}

/// The PGA metric and layer input of a `pga` or `pga_k` unit, as it computes them.
fn pga_call<'a>(x: &UnitInputs<'a>, u: &Unit) -> Result<(Pga, LayerInput<'a>)> {
    let (metric, model) = pga_of(x, u).expect("a pga or pga_k unit");
    let mut layer = x.layer_of(model, u)?;
    if let (UnitKind::Pga { .. }, Some(ids)) = (&u.kind, x.sequences) {
        layer = layer.with_sequences(ids)?;
    }
    Ok((metric, layer))
}

/// The memory a PGA unit's engine needs and the budget it runs under
/// ([`ModelContext::pga_memory`]), from the layer's shape alone: `None` for other kinds, where
/// no budget applies.
pub(super) fn memory(
    x: &UnitInputs<'_>,
    u: &Unit,
) -> Option<(repgeom_metrics::pga::MemoryEstimate, u64)> {
    let (metric, model) = pga_of(x, u)?;
    model.pga_memory(&metric, x.acts.nrows())
}

/// `pga` at the CCR levels of unit `u`.
fn pga(x: &UnitInputs<'_>, u: &Unit) -> Result<Vec<MetricValue>> {
    let (metric, layer) = pga_call(x, u)?;
    Ok(metric.compute(&layer)?)
}

/// `pga` at CCR level `ccr` and the k-sensitivity `k`, its variants renamed `ccrC_kK`.
fn pga_k(x: &UnitInputs<'_>, u: &Unit, ccr: usize, k: usize) -> Result<Vec<MetricValue>> {
    let (metric, layer) = pga_call(x, u)?;
    let mut values = metric.compute(&layer)?;
    // `ccrC` → `ccrC_kK` (`ccrC_kK_spectrum` under the spectrum null: the null stays last).
    for v in &mut values {
        v.variant = v
            .variant
            .replacen(&format!("ccr{ccr}"), &format!("ccr{ccr}_k{k}"), 1);
    }
    Ok(values)
}

/// The readout share of the top-`m` principal directions.
fn pc_share(x: &UnitInputs<'_>, u: &Unit, m: usize) -> Result<Vec<MetricValue>> {
    Ok(PcReadoutShare { m }.compute(&x.layer(u)?)?)
}

/// One spectral metric of the registry on the points; with the spectra over every token
/// (`analysis.spectral_tokens`), also its covariance form's value at each convergence
/// checkpoint, as metric `{metric}_all_tokens` ([`repgeom_report::ALL_TOKENS`]) with
/// `n_tokens`, and `tolerance` and `stable_from` on the last row.
fn spectral(x: &UnitInputs<'_>, u: &Unit, metric: &str) -> Result<Vec<MetricValue>> {
    let mut rows = repgeom_metrics::metric(metric)?.compute(&x.layer(u)?)?;
    if let Some(spectra) = x.spectra {
        let form = repgeom_metrics::covariance_form(metric)?;
        let reports = repgeom_metrics::convergence_reports(
            spectra,
            &[form.as_ref()],
            repgeom_metrics::CONVERGENCE_TOL,
        )?;
        for r in reports {
            let values = r.values();
            let last = values.len().saturating_sub(1);
            rows.extend(values.into_iter().enumerate().map(|(i, mut v)| {
                v.metric = format!("{}{}", v.metric, repgeom_report::ALL_TOKENS);
                let n = (i < last).then(|| r.tokens[i]);
                v.variant = repgeom_report::all_tokens_variant(&v.variant, n);
                v
            }));
        }
    }
    Ok(rows)
}

/// A loss typed into the manifest, else the computed one with its standard error over the
/// held-out sequences (row `val_loss_se` beside it); no row without either.
fn val_loss(x: &UnitInputs<'_>, u: &Unit) -> Vec<MetricValue> {
    let c = x.m.checkpoint(&u.checkpoint).expect("planned checkpoint");
    match (c.val_loss, x.computed_loss) {
        (Some(v), _) => vec![MetricValue::new("val_loss", "", v)],
        (None, Some((v, se))) => std::iter::once(MetricValue::new("val_loss", "", v))
            .chain(se.map(|se| MetricValue::new("val_loss_se", "", se)))
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// A hub checkpoint's weights hash (the variant) and parameter count (the value).
fn weights(x: &UnitInputs<'_>, u: &Unit) -> Result<Vec<MetricValue>> {
    Ok(x.loader
        .audit(x.m, &u.checkpoint)?
        .map(|r| MetricValue::new("weights_sha256", &r.weights_sha256, r.parameters as f64))
        .into_iter()
        .collect())
}

/// A linear probe on the probe features (a hub checkpoint's `[probe]` texts) or else on the
/// layer itself with the model's labels file.
fn probe(x: &UnitInputs<'_>, u: &Unit) -> Result<Vec<MetricValue>> {
    let m = x.m;
    let (acts, labels) = match x.probe {
        Some((features, labels)) => (features, labels.to_vec()),
        None => (
            x.acts,
            x.ctx.labels.clone().ok_or_else(|| Error::DataMismatch {
                model: m.label.clone(),
                what: "probe labels".into(),
                expected: "a labels file".into(),
                found: "none".into(),
            })?,
        ),
    };
    let (n, d) = (acts.nrows(), acts.ncols());
    if labels.len() != n {
        return Err(Error::DataMismatch {
            model: m.label.clone(),
            what: format!("labels per point, layer {}", u.layer),
            expected: format!("{n} (points in the activations)"),
            found: labels.len().to_string(),
        });
    }
    let params = repgeom_probe::ProbeParams {
        seed: x.study.manifest.analysis.seed,
        // On the pool, shared with the group's other units, like every unit's metrics.
        parallel: true,
        ..Default::default()
    }
    .check()?;
    let plan = params.plan(
        repgeom_probe::Labels::unnamed(labels)?,
        &repgeom_probe::Split::Stratified,
    )?;
    let mut data = Vec::with_capacity(n * d);
    for i in 0..n {
        for j in 0..d {
            data.push(acts[(i, j)]);
        }
    }
    let p = plan.probe_layer(u.layer, repgeom_probe::Features::new(u.layer, n, d, &data)?)?;
    // Tidy rows: the Wilson interval, whether the fit converged, and the random-label
    // control task (Hewitt & Liang 2019) with the selectivity over it.
    let flag = |b: bool| f64::from(u8::from(b));
    let mut v = vec![
        MetricValue::new("probe_accuracy", "", p.accuracy),
        MetricValue::new("majority_baseline", "", p.majority_baseline),
        MetricValue::new("probe_accuracy_lo", "", p.accuracy_ci.0),
        MetricValue::new("probe_accuracy_hi", "", p.accuracy_ci.1),
        MetricValue::new("probe_converged", "", flag(p.converged)),
    ];
    if let (Some(c), Some(sel)) = (&p.control, p.selectivity()) {
        v.push(MetricValue::new("probe_control_accuracy", "", c.accuracy));
        v.push(MetricValue::new("probe_selectivity", "", sel));
        v.push(MetricValue::new(
            "probe_control_converged",
            "",
            flag(c.converged),
        ));
    }
    Ok(v)
}

/// Every cell of the pair's table with `other` (figure 10), at its own pair of layers, then the
/// aggregates, each with the null that recomputes the table under every draw.
fn cross_table(x: &UnitInputs<'_>, u: &Unit, other: &str) -> Vec<Row> {
    let m = x.m;
    let (p, o) = (&x.cross[other], x.study.model(other).expect("checked pair"));
    let mut rows: Vec<Row> = (p.table.pairs.iter())
        .map(|r| {
            let mut row = cross_row(m, u, r.value.clone())
                .with_other_model(&o.label)
                .with_extra("other_layer", p.layers_b[r.b] as f64);
            row.layer = p.layers_a[r.a] as u32;
            row.relative_depth = repgeom_report::relative_depth(row.layer, m.n_layers);
            row
        })
        .collect();
    rows.extend(p.table.aggregates.iter().map(|r| {
        let mut value = r.value.clone();
        value.metric = format!("{}_{}", value.metric, r.aggregate.name());
        cross_row(m, u, value).with_other_model(&o.label)
    }));
    rows
}

/// This layer against the other model's layer nearest in relative depth: its cell of the pair's
/// table, each metric's rows with its permutation null where its options ask for one.
fn cross(x: &UnitInputs<'_>, u: &Unit, other: &str) -> Vec<Row> {
    let m = x.m;
    let (p, o) = (&x.cross[other], x.study.model(other).expect("checked pair"));
    let cell = cross_cell(m, o, u.layer, &p.layers_a, &p.layers_b);
    (p.table.pairs.iter())
        .filter(|r| (r.a, r.b) == cell)
        .map(|r| cross_row(m, u, r.value.clone()).with_other_model(&o.label))
        .collect()
}

/// A per-layer unit's value as a row of the study's table: the schema's columns only (a
/// metric's extra numbers stay out, so those rows keep their fixed columns), except the rows
/// over every token (`analysis.spectral_tokens`), which keep `n_tokens`, `tolerance` and
/// `stable_from`.
fn to_row(m: &ModelInfo, u: &Unit, v: MetricValue) -> Row {
    let keep = v.metric.ends_with(repgeom_report::ALL_TOKENS);
    let mut r = cross_row(m, u, v);
    if !keep {
        r.extra.clear();
    }
    r
}

/// A cross-model value as a row of the study's table with every number `repgeom compare`
/// reports for it ([`crate::value_row`]): the null columns and every extra of the library's
/// comparison (z and its standard error, both tails, the permutation count, an aggregate's
/// critical value, the tie fractions, the duplicates dropped, ...).
fn cross_row(m: &ModelInfo, u: &Unit, v: MetricValue) -> Row {
    let c = m.checkpoint(&u.checkpoint).expect("planned checkpoint");
    crate::value_row(&m.label, &m.family, m.d, (u.layer as u32, m.n_layers), v)
        .with_checkpoint(&c.name, c.step)
        .with_synthetic(m.synthetic)
}

/// The PGA metric with the manifest's analysis settings at CCR levels `ccr` (the bootstrap only
/// where asked).
fn pga_metric(a: &crate::Analysis, ccr: Vec<usize>, bootstrap: bool) -> Pga {
    let mut p = a.pga();
    p.ccr = ccr;
    if !bootstrap {
        p.bootstrap = None;
    }
    p
}

//! Computing units: loading each model's data once per (model, checkpoint) group and running
//! the group's units in parallel, each written as its own part file as soon as it finishes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::{
    DistanceSpearman, LayerInput, Metric, MetricValue, PairInput, PairMetric, PcReadoutShare, Pga,
};
use repgeom_null::{NullBases, NullParams};
use repgeom_report::Row;

use crate::parts::write_part;
use crate::plan::{ModelInfo, ModelSource, PlannedUnit, Study, Unit, UnitKind};
use crate::{Error, Result};

/// What the progress callback learns about each finished unit.
#[derive(Debug, Clone)]
pub struct UnitDone<'a> {
    /// The unit.
    pub unit: &'a PlannedUnit,
    /// Rows it produced.
    pub rows: usize,
    /// Wall time of its computation.
    pub elapsed: Duration,
}

/// Per-model data shared by all its units.
struct ModelCtx {
    basis: Mat<f64>,
    null: NullBases,
    labels: Option<Vec<usize>>,
}

/// Loads and caches model data. Nothing cached changes a number: every unit's rows depend only
/// on its inputs, whether they were loaded for it or reused.
pub struct Loader<'s> {
    study: &'s Study,
    synthetic: OnceLock<std::result::Result<repgeom_synth::SyntheticStudy, String>>,
    models: Mutex<BTreeMap<String, Arc<ModelCtx>>>,
}

impl std::fmt::Debug for Loader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("origin", &self.study.origin)
            .finish_non_exhaustive()
    }
}

impl<'s> Loader<'s> {
    /// A loader for `study` (loads nothing yet).
    pub fn new(study: &'s Study) -> Self {
        Self {
            study,
            synthetic: OnceLock::new(),
            models: Mutex::new(BTreeMap::new()),
        }
    }

    fn synth(&self) -> Result<&repgeom_synth::SyntheticStudy> {
        let spec = self
            .study
            .manifest
            .synthetic
            .as_ref()
            .expect("synthetic models need a [synthetic] table");
        let s = self.synthetic.get_or_init(|| {
            spec.zoo_params()
                .check()
                .and_then(|z| repgeom_synth::generate_study(&z))
                .map_err(|e| e.to_string())
        });
        s.as_ref().map_err(|e| Error::InvalidManifest {
            manifest: self.study.origin.clone(),
            place: "synthetic".into(),
            reason: e.clone(),
        })
    }

    fn model_ctx(&self, m: &ModelInfo) -> Result<Arc<ModelCtx>> {
        if let Some(c) = self
            .models
            .lock()
            .expect("no panics while locked")
            .get(&m.label)
        {
            return Ok(c.clone());
        }
        let (readout, labels) = match &m.source {
            ModelSource::Synthetic { index, .. } => {
                let run = &self.synth()?.runs[*index];
                (run.space.readout.clone(), Some(run.space.labels.clone()))
            }
            ModelSource::Files(spec) => {
                let mut r = repgeom_io::read_readout(
                    &spec.readout,
                    &repgeom_io::ReadoutOptions {
                        vocab_rows: spec.vocab_rows,
                        tensor: spec.readout_tensor.clone(),
                    },
                )?;
                if self.study.manifest.analysis.readout_fold_norm {
                    let (name, gamma) = repgeom_io::read_final_norm_gain(&spec.readout)?;
                    r.fold_gain(&gamma, &name)?;
                }
                let mx = r.matrix;
                if mx.cols != m.d as usize {
                    return Err(Error::DataMismatch {
                        model: m.label.clone(),
                        what: format!("readout width ({}: {})", spec.readout.display(), r.tensor),
                        expected: format!("d = {}", m.d),
                        found: format!("[{}, {}]", mx.rows, mx.cols),
                    });
                }
                let readout = Mat::from_fn(mx.rows, mx.cols, |i, j| mx.data[i * mx.cols + j]);
                let labels = match &spec.labels {
                    Some(p) => {
                        Some(repgeom_io::read_labels(p, spec.labels_column.as_deref())?.values)
                    }
                    None => None,
                };
                (readout, labels)
            }
        };
        let mut readout = readout;
        if self.study.manifest.analysis.readout_center {
            // Subtract the mean row (over the vocabulary), accumulated in f64.
            let (v, d) = (readout.nrows(), readout.ncols());
            for j in 0..d {
                let mean = (0..v).map(|i| f64::from(readout[(i, j)])).sum::<f64>() / v as f64;
                for i in 0..v {
                    readout[(i, j)] = (f64::from(readout[(i, j)]) - mean) as f32;
                }
            }
        }
        // Decompositions single-threaded: bit-identical bases at any thread count.
        let basis = repgeom_linalg::readout_subspace(readout.as_ref(), m.k, Par::Seq)?;
        let a = &self.study.manifest.analysis;
        let null = NullBases::draw(
            m.d as usize,
            m.k,
            &NullParams {
                n_null: a.n_null,
                seed: a.seed,
            }
            .check()?,
        )?;
        let ctx = Arc::new(ModelCtx {
            basis,
            null,
            labels,
        });
        self.models
            .lock()
            .expect("no panics while locked")
            .insert(m.label.clone(), ctx.clone());
        Ok(ctx)
    }

    /// The given layers of model `m` at checkpoint `ckpt`, as `N × d` matrices.
    fn layers(
        &self,
        m: &ModelInfo,
        ckpt: &str,
        layers: &[usize],
    ) -> Result<BTreeMap<usize, Mat<f32>>> {
        let mut out = BTreeMap::new();
        match &m.source {
            ModelSource::Synthetic { index, .. } => {
                let run = &self.synth()?.runs[*index];
                let ci = m
                    .checkpoints
                    .iter()
                    .position(|c| c.name == ckpt)
                    .expect("planned checkpoint");
                for &l in layers {
                    out.insert(l, run.checkpoints[ci].layers[l].clone());
                }
            }
            ModelSource::Files(spec) => {
                let c = spec
                    .checkpoints
                    .iter()
                    .find(|c| c.name == ckpt)
                    .expect("planned checkpoint");
                let acts = repgeom_io::read_activations(&c.activations, Some(layers))?;
                for la in acts.layers {
                    let mx = la.acts;
                    if mx.cols != m.d as usize {
                        return Err(Error::DataMismatch {
                            model: m.label.clone(),
                            what: format!("width of {} in {}", la.tensor, c.activations.display()),
                            expected: format!("d = {}", m.d),
                            found: format!("[{}, {}]", mx.rows, mx.cols),
                        });
                    }
                    out.insert(
                        la.layer,
                        Mat::from_fn(mx.rows, mx.cols, |i, j| mx.data[i * mx.cols + j]),
                    );
                }
            }
        }
        Ok(out)
    }
}

/// Computes `todo` (units of `study`) and writes each one's part file under `dir` as soon as it
/// is done; `on_done` is called once per unit, from worker threads.
///
/// Units are grouped by (model, checkpoint) in plan order; a group's units run in parallel on
/// the current rayon pool, each single-threaded inside (results do not depend on the thread
/// count).
pub fn run_units(
    study: &Study,
    todo: &[PlannedUnit],
    dir: &Path,
    on_done: &(dyn Fn(&UnitDone<'_>) + Sync),
) -> Result<()> {
    let loader = Loader::new(study);
    let mut groups: Vec<((String, String), Vec<&PlannedUnit>)> = Vec::new();
    for u in todo {
        let key = (u.unit.model.clone(), u.unit.checkpoint.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(u),
            None => groups.push((key, vec![u])),
        }
    }
    for ((model, ckpt), units) in groups {
        let m = study.model(&model).expect("planned model");
        let ctx = loader.model_ctx(m)?;
        let mut needed: Vec<usize> = units.iter().map(|u| u.unit.layer).collect();
        needed.sort_unstable();
        needed.dedup();
        let layers = loader.layers(m, &ckpt, &needed)?;
        units.par_iter().try_for_each(|u| -> Result<()> {
            let t = Instant::now();
            let rows = compute_unit(study, &loader, m, &ctx, &layers[&u.unit.layer], &u.unit)?;
            write_part(dir, u, &rows)?;
            on_done(&UnitDone {
                unit: u,
                rows: rows.len(),
                elapsed: t.elapsed(),
            });
            Ok(())
        })?;
    }
    Ok(())
}

fn to_row(m: &ModelInfo, u: &Unit, v: MetricValue) -> Row {
    let c = m.checkpoint(&u.checkpoint).expect("planned checkpoint");
    let mut r = Row::new(
        &m.label,
        &m.family,
        m.d,
        u.layer as u32,
        m.n_layers,
        v.metric,
        v.variant,
        v.value,
    )
    .with_checkpoint(&c.name, c.step)
    .with_synthetic(m.synthetic);
    r.null_mean = v.null_mean;
    r.null_std = v.null_std;
    r.p_value = v.p_value;
    r
}

fn compute_unit(
    study: &Study,
    loader: &Loader<'_>,
    m: &ModelInfo,
    ctx: &ModelCtx,
    acts: &Mat<f32>,
    u: &Unit,
) -> Result<Vec<Row>> {
    let a = &study.manifest.analysis;
    let synth = if m.synthetic { " (synthetic)" } else { "" };
    let what = format!("{} {} layer {}{synth}", m.label, u.checkpoint, u.layer);
    let input = || -> Result<LayerInput<'_>> {
        Ok(LayerInput::new(acts.as_ref(), what.clone(), Par::Seq)?
            .with_readout(ctx.basis.as_ref())?
            .with_null(&ctx.null)?)
    };
    let values = match &u.kind {
        UnitKind::Pga { ccr } => Pga {
            ccr: ccr.clone(),
            distance: a.distance,
            null: a.null,
            spectrum_tol: a.spectrum_tol.unwrap_or(repgeom_null::DEFAULT_SPECTRUM_TOL),
        }
        .compute(&input()?)?,
        UnitKind::PcShare { m } => PcReadoutShare { m: *m }.compute(&input()?)?,
        UnitKind::Spectral { metric } => repgeom_metrics::metric(metric)?.compute(&input()?)?,
        UnitKind::ValLoss => {
            let c = m.checkpoint(&u.checkpoint).expect("planned checkpoint");
            c.val_loss
                .map(|v| MetricValue::new("val_loss", "", v))
                .into_iter()
                .collect()
        }
        UnitKind::Probe => {
            let labels = ctx.labels.clone().ok_or_else(|| Error::DataMismatch {
                model: m.label.clone(),
                what: "probe labels".into(),
                expected: "a labels file".into(),
                found: "none".into(),
            })?;
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
                seed: a.seed,
                parallel: false,
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
            let p =
                plan.probe_layer(u.layer, repgeom_probe::Features::new(u.layer, n, d, &data)?)?;
            vec![
                MetricValue::new("probe_accuracy", "", p.accuracy),
                MetricValue::new("majority_baseline", "", p.majority_baseline),
            ]
        }
        UnitKind::Cross { other } => {
            let o = study.model(other).expect("checked pair");
            let octx = loader.model_ctx(o)?;
            let depth = repgeom_report::relative_depth(u.layer as u32, m.n_layers);
            let ol = o.nearest_layer(depth);
            let ockpt = o.final_checkpoint().name.clone();
            let olayers = loader.layers(o, &ockpt, &[ol])?;
            let oacts = &olayers[&ol];
            let owhat = format!("{} {ockpt} layer {ol}{synth}", o.label);
            let pair = || -> Result<PairInput<'_>> {
                let b = LayerInput::new(oacts.as_ref(), owhat.clone(), Par::Seq)?
                    .with_readout(octx.basis.as_ref())?
                    .with_null(&octx.null)?;
                Ok(PairInput::new(input()?, b)?)
            };
            let mut v = DistanceSpearman {
                ccr: a.ccr[0],
                readout: true,
                random: true,
            }
            .compute(&pair()?)?;
            v.extend(repgeom_metrics::pair_metric("cka_linear")?.compute(&pair()?)?);
            return Ok(v
                .into_iter()
                .map(|v| to_row(m, u, v).with_other_model(&o.label))
                .collect());
        }
    };
    Ok(values.into_iter().map(|v| to_row(m, u, v)).collect())
}

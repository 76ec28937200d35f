//! Computing units: loading each model's data once per (model, checkpoint) group and running
//! the group's units in parallel, each written as its own part file as soon as it finishes.
//! What one unit computes, kind by kind, is `units.rs`.

mod units;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::LayerInput;
use repgeom_metrics::analysis::{ModelContext, ModelPair, ModelReadout, NullSource, PairModel};
use repgeom_metrics::calibrate::{CompareSettings, Comparison};
use repgeom_null::NullParams;

use self::units::{UnitInputs, compute_unit};
use crate::parts::write_part;
use crate::plan::{ModelInfo, ModelSource, PlannedUnit, Study, UnitKind};
use crate::stage::{self, CheckpointRecord, Extracted};
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
    /// The readout subspace at the model's `k` and its null bases.
    model: ModelContext,
    labels: Option<Vec<usize>>,
    /// One context per k-sensitivity `k`: the leading `k` columns of the readout basis
    /// decomposed once at the largest such `k`, and a null per `k`. Empty without k-sensitivity.
    sensitivity: BTreeMap<usize, ModelContext>,
}

/// The model spec and checkpoint `ckpt` of `m` when it is a hub checkpoint (has a revision).
fn hub_checkpoint<'m>(
    m: &'m ModelInfo,
    ckpt: &str,
) -> Option<(&'m crate::ModelSpec, &'m crate::CheckpointSpec)> {
    let ModelSource::Files(spec) = &m.source else {
        return None;
    };
    let c = spec.checkpoints.iter().find(|c| c.name == ckpt)?;
    c.revision.is_some().then_some((spec, c))
}

/// Loads and caches model data. Nothing cached changes a number: every unit's rows depend only
/// on its inputs, whether they were loaded for it or reused.
pub struct Loader<'s> {
    study: &'s Study,
    synthetic: OnceLock<std::result::Result<repgeom_synth::SyntheticStudy, String>>,
    models: Mutex<BTreeMap<String, Arc<ModelCtx>>>,
    /// The sweep directory (extraction cache, checkpoint records).
    work_dir: PathBuf,
    hub: OnceLock<repgeom_hub::Hub>,
    /// (model, checkpoint) -> audited hub checkpoint and its snapshot folder.
    audited: Mutex<BTreeMap<(String, String), (CheckpointRecord, PathBuf)>>,
    extracted: Mutex<BTreeMap<(String, String), Arc<Extracted>>>,
    /// The `[extract]` corpus, read (or downloaded) once.
    corpus: Mutex<Option<Arc<stage::Corpus>>>,
    /// The `[probe]` texts and labels, read (or downloaded) once.
    probe_texts: Mutex<Option<Arc<stage::ProbeTexts>>>,
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
        Self::with_dir(study, Path::new("."))
    }

    /// A loader whose hub checkpoints are extracted into the cache under sweep directory `dir`.
    pub fn with_dir(study: &'s Study, dir: &Path) -> Self {
        Self {
            study,
            synthetic: OnceLock::new(),
            models: Mutex::new(BTreeMap::new()),
            work_dir: dir.to_path_buf(),
            hub: OnceLock::new(),
            audited: Mutex::new(BTreeMap::new()),
            extracted: Mutex::new(BTreeMap::new()),
            corpus: Mutex::new(None),
            probe_texts: Mutex::new(None),
        }
    }

    /// The `[extract]` corpus (the lock is held while it is read, so it is read once).
    fn corpus(&self, e: &crate::ExtractSpec) -> Result<Arc<stage::Corpus>> {
        let mut c = self.corpus.lock().expect("no panics while locked");
        if let Some(c) = &*c {
            return Ok(c.clone());
        }
        let read = Arc::new(stage::read_corpus(self.hub(), &e.text)?);
        *c = Some(read.clone());
        Ok(read)
    }

    /// The `[probe]` texts and labels (read once).
    pub(crate) fn probe_texts(&self, p: &crate::ProbeSpec) -> Result<Arc<stage::ProbeTexts>> {
        let mut c = self.probe_texts.lock().expect("no panics while locked");
        if let Some(c) = &*c {
            return Ok(c.clone());
        }
        let read = Arc::new(stage::probe_texts(self.hub(), p)?);
        *c = Some(read.clone());
        Ok(read)
    }

    fn hub(&self) -> &repgeom_hub::Hub {
        self.hub.get_or_init(repgeom_hub::Hub::from_env)
    }

    /// Resolves, downloads and hashes hub checkpoint `ckpt` of `m` (once per loader).
    pub fn audit(&self, m: &ModelInfo, ckpt: &str) -> Result<Option<CheckpointRecord>> {
        let Some((spec, c)) = hub_checkpoint(m, ckpt) else {
            return Ok(None);
        };
        let key = (m.label.clone(), ckpt.to_string());
        if let Some((r, _)) = self
            .audited
            .lock()
            .expect("no panics while locked")
            .get(&key)
        {
            return Ok(Some(r.clone()));
        }
        let r = stage::audit(self.hub(), &self.work_dir, spec, c)?;
        self.audited
            .lock()
            .expect("no panics while locked")
            .insert(key, r.clone());
        Ok(Some(r.0))
    }

    /// The extraction of hub checkpoint `ckpt` of `m`, with its probe features when the plan
    /// probes it (cached on disk and in the loader). A checkpoint not audited yet is hashed
    /// while its weights load for the extraction: one read of the weights for both.
    pub(crate) fn extracted(&self, m: &ModelInfo, ckpt: &str) -> Result<Option<Arc<Extracted>>> {
        let key = (m.label.clone(), ckpt.to_string());
        if let Some(e) = self
            .extracted
            .lock()
            .expect("no panics while locked")
            .get(&key)
        {
            return Ok(Some(e.clone()));
        }
        let Some((spec, c)) = hub_checkpoint(m, ckpt) else {
            return Ok(None);
        };
        let audited = self
            .audited
            .lock()
            .expect("no panics while locked")
            .get(&key)
            .cloned();
        let resolved = match audited {
            Some((rec, dir)) => stage::Resolved {
                dir,
                commit: rec.commit.clone(),
                record: Some(rec),
            },
            None => stage::resolve(self.hub(), &self.work_dir, spec, c)?,
        };
        let manifest = &self.study.manifest;
        let corpus = self.corpus(
            manifest
                .extract
                .as_ref()
                .expect("checked: [extract] with revisions"),
        )?;
        let probes = self.study.units.iter().any(|u| {
            u.unit.kind == UnitKind::Probe && u.unit.model == m.label && u.unit.checkpoint == ckpt
        });
        let texts = match (&manifest.probe, probes) {
            (Some(p), true) => Some((p, self.probe_texts(p)?)),
            _ => None,
        };
        let job = texts.as_ref().map(|(p, t)| stage::ProbeJob {
            spec: p,
            texts: &t.texts,
            n_labels: t.labels.len(),
        });
        let snap = resolved.dir.clone();
        let (rec, e) = stage::extract(manifest, &corpus, job, &self.work_dir, spec, c, resolved)?;
        self.audited
            .lock()
            .expect("no panics while locked")
            .insert(key.clone(), (rec, snap));
        let e = Arc::new(e);
        self.extracted
            .lock()
            .expect("no panics while locked")
            .insert(key, e.clone());
        Ok(Some(e))
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
                let w = &run.space.readout;
                let (rows, cols) = (w.nrows(), w.ncols());
                let mut readout = repgeom_io::Matrix {
                    rows,
                    cols,
                    data: (0..rows * cols).map(|x| w[(x / cols, x % cols)]).collect(),
                };
                // File readouts are centred by `read_readout_prepared`; the same code here.
                if self.study.manifest.analysis.readout_center {
                    readout.center_rows();
                }
                (readout, Some(run.space.labels.clone()))
            }
            ModelSource::Files(spec) => {
                let readout_path = match (&spec.readout, &spec.hub) {
                    (Some(p), _) => p.clone(),
                    (None, Some(id)) => {
                        // The readout of the final checkpoint's revision (else `main`).
                        let fin = m.final_checkpoint();
                        let rev = fin.revision.as_deref().unwrap_or("main");
                        // Folding the final norm's gain needs its shard too.
                        let need = if self.study.manifest.analysis.readout_fold_norm {
                            repgeom_hub::Files::Full
                        } else {
                            repgeom_hub::Files::Readout
                        };
                        self.hub().snapshot(id, rev, &need, &mut |_| {})?.dir
                    }
                    (None, None) => unreachable!("checked: hub or readout"),
                };
                let a = &self.study.manifest.analysis;
                let r = repgeom_io::read_readout_prepared(
                    &readout_path,
                    &repgeom_io::ReadoutPrep {
                        options: repgeom_io::ReadoutOptions {
                            vocab_rows: spec.vocab_rows,
                            tensor: spec.readout_tensor.clone(),
                        },
                        fold_norm: a.readout_fold_norm,
                        center: a.readout_center,
                    },
                )?;
                let mx = r.matrix;
                if mx.cols != m.d as usize {
                    return Err(Error::DataMismatch {
                        model: m.label.clone(),
                        what: format!("readout width ({}: {})", readout_path.display(), r.tensor),
                        expected: format!("d = {}", m.d),
                        found: format!("[{}, {}]", mx.rows, mx.cols),
                    });
                }
                let labels = match &spec.labels {
                    Some(p) => {
                        Some(repgeom_io::read_labels(p, spec.labels_column.as_deref())?.values)
                    }
                    None => None,
                };
                (mx, labels)
            }
        };
        let readout = MatRef::from_row_major_slice(&readout.data, readout.rows, readout.cols);
        // Decompositions single-threaded: bit-identical bases at any thread count. The null
        // draws (parallel) run beside the sequential decomposition, on the idle cores.
        let a = &self.study.manifest.analysis;
        let null = NullParams {
            n_null: a.n_null,
            seed: a.seed,
        };
        let what = format!("model {}", m.label);
        let d = m.d as usize;
        let model = ModelContext::new(
            d,
            m.k,
            Some(ModelReadout::Unembedding(readout)),
            Some(NullSource::Draw(null.clone())),
            &what,
            Par::Seq,
        )?
        .with_memory_budget(Some(repgeom_io::default_memory_budget()));
        let ks = m.sensitivity_ks(&a.k_sensitivity);
        let mut sensitivity = BTreeMap::new();
        if let Some(&kmax) = ks.last() {
            let wide = ModelContext::new(
                d,
                kmax,
                Some(ModelReadout::Unembedding(readout)),
                None,
                &what,
                Par::Seq,
            )?;
            let wide = wide.basis().expect("a readout was given");
            for &k in &ks {
                let basis = ModelReadout::Basis(wide.subcols(0, k));
                let null = Some(NullSource::Draw(null.clone()));
                let budget = Some(repgeom_io::default_memory_budget());
                sensitivity.insert(
                    k,
                    ModelContext::new(d, k, Some(basis), null, &what, Par::Seq)?
                        .with_memory_budget(budget),
                );
            }
        }
        let ctx = Arc::new(ModelCtx {
            model,
            labels,
            sensitivity,
        });
        self.models
            .lock()
            .expect("no panics while locked")
            .insert(m.label.clone(), ctx.clone());
        Ok(ctx)
    }

    /// The sequence of each of the `n` points of model `m` at checkpoint `ckpt`, when its
    /// activation file records them (`None` for synthetic models, whose points are independent
    /// draws, and for files without `positions` metadata).
    fn sequences(&self, m: &ModelInfo, ckpt: &str, n: usize) -> Result<Option<Vec<usize>>> {
        match &m.source {
            ModelSource::Synthetic { .. } => Ok(None),
            // An extracted checkpoint's file records its sequence ids like `repgeom extract`'s.
            ModelSource::Files(spec) => Ok(repgeom_io::read_sequence_ids(
                &self.activations_path(m, spec, ckpt)?,
                n,
            )?),
        }
    }

    /// The activation file of file model `m` at checkpoint `ckpt`: the manifest's
    /// `activations`, or the extraction stage's cached file for a hub revision.
    fn activations_path(
        &self,
        m: &ModelInfo,
        spec: &crate::manifest::ModelSpec,
        ckpt: &str,
    ) -> Result<std::path::PathBuf> {
        let c = spec
            .checkpoints
            .iter()
            .find(|c| c.name == ckpt)
            .expect("planned checkpoint");
        Ok(match &c.activations {
            Some(p) => p.clone(),
            None => self
                .extracted(m, ckpt)?
                .expect("checked: revision without activations")
                .acts
                .clone(),
        })
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
                let path = self.activations_path(m, spec, ckpt)?;
                let acts = repgeom_io::read_activations(&path, Some(layers))?;
                for la in acts.layers {
                    let mx = la.acts;
                    if mx.cols != m.d as usize {
                        return Err(Error::DataMismatch {
                            model: m.label.clone(),
                            what: format!("width of {} in {}", la.tensor, path.display()),
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
/// count). A group's `cross` and `cross_table` units take their rows from one comparison per
/// model pair (`cross_pair`), computed first with the pool's threads.
pub fn run_units(
    study: &Study,
    todo: &[PlannedUnit],
    dir: &Path,
    on_done: &(dyn Fn(&UnitDone<'_>) + Sync),
) -> Result<()> {
    let loader = Loader::with_dir(study, dir);
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
        let sequences = match (
            &study.manifest.analysis.pga.options().bootstrap,
            layers.values().next(),
        ) {
            (Some(_), Some(first)) => loader.sequences(m, &ckpt, first.nrows())?,
            _ => None,
        };
        let ext = loader.extracted(m, &ckpt)?;
        // Probe features of a hub checkpoint: mean-pooled over the [probe] texts, computed
        // with its extraction.
        let wants_probe = units.iter().any(|u| u.unit.kind == UnitKind::Probe);
        let probe_layers = match (&study.manifest.probe, &ext, wants_probe) {
            (Some(p), Some(ext), true) => {
                let Some(path) = &ext.probe else {
                    return Err(Error::DataMismatch {
                        model: m.label.clone(),
                        what: format!("probe features of checkpoint {ckpt}"),
                        expected: "features extracted with the activations".into(),
                        found: "none".into(),
                    });
                };
                let labels = loader.probe_texts(p)?.labels.clone();
                let mut out = BTreeMap::new();
                for la in repgeom_io::read_activations(path, Some(&needed))?.layers {
                    let mx = la.acts;
                    out.insert(
                        la.layer,
                        Mat::from_fn(mx.rows, mx.cols, |i, j| mx.data[i * mx.cols + j]),
                    );
                }
                Some((out, labels))
            }
            _ => None,
        };
        // Each pair's comparison once, for all its cross and cross_table units.
        let mut cross: BTreeMap<String, CrossPair> = BTreeMap::new();
        for u in &units {
            if let UnitKind::Cross { other } | UnitKind::CrossTable { other } = &u.unit.kind
                && !cross.contains_key(other)
            {
                let pair = cross_pair(study, &loader, m, &ckpt, &ctx, other, &units)?;
                cross.insert(other.clone(), pair);
            }
        }
        units.par_iter().try_for_each(|u| -> Result<()> {
            let t = Instant::now();
            let acts = &layers[&u.unit.layer];
            let probe = probe_layers
                .as_ref()
                .map(|(l, labels)| (&l[&u.unit.layer], labels.as_slice()));
            let computed_loss = ext
                .as_ref()
                .and_then(|e| e.val_loss.map(|l| (l, e.val_loss_se)));
            let inputs = UnitInputs {
                study,
                loader: &loader,
                m,
                ctx: &ctx,
                acts,
                sequences: sequences.as_deref(),
                probe,
                computed_loss,
                cross: &cross,
            };
            let rows = compute_unit(&inputs, &u.unit)?;
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

/// One model pair's comparison, shared by its `cross` and `cross_table` units.
struct CrossPair {
    /// The analysed layers of this model and of the other, in the table's order.
    layers_a: Vec<usize>,
    layers_b: Vec<usize>,
    /// The cells the units asked for (every cell, and the aggregates, with a `cross_table`
    /// unit among them).
    table: Comparison,
}

/// The comparison of model `m` at `ckpt` (its final checkpoint) with `other` at its final
/// checkpoint, as `repgeom compare --layers-a … --layers-b …` runs it over every analysed layer
/// of both with the same options: [`ModelPair`] prepares both models (the readout bases the
/// models' own units use; model B's null bases from `seed + 1`) and judges the points that are
/// the same input twice on all those layers. Only the cells `units` need are computed (the
/// whole table when one of them is a `cross_table` unit), each in the whole table's shape, so a
/// cell is the same whichever others are computed with it: a `cross` unit's rows are its cell
/// of the `cross_table` unit's table and of `repgeom compare`'s, bit for bit. The draws run on
/// the current pool's threads (the library's results do not depend on their number).
fn cross_pair(
    study: &Study,
    loader: &Loader<'_>,
    m: &ModelInfo,
    ckpt: &str,
    ctx: &ModelCtx,
    other: &str,
    units: &[&PlannedUnit],
) -> Result<CrossPair> {
    let a = &study.manifest.analysis;
    let o = study.model(other).expect("checked pair");
    let octx = loader.model_ctx(o)?;
    let ockpt = o.final_checkpoint().name.clone();
    let mine = loader.layers(m, ckpt, &m.layers)?;
    let theirs = loader.layers(o, &ockpt, &o.layers)?;
    let va: Vec<MatRef<'_, f32>> = mine.values().map(Mat::as_ref).collect();
    let vb: Vec<MatRef<'_, f32>> = theirs.values().map(Mat::as_ref).collect();
    let (what_a, what_b) = (format!("model {}", m.label), format!("model {}", o.label));
    let metrics = a.cross_metrics()?;
    let pair = ModelPair::new(
        &metrics,
        PairModel {
            layers: &va,
            k: m.k,
            readout: ctx.model.basis().map(ModelReadout::Basis),
            what: &what_a,
        },
        PairModel {
            layers: &vb,
            k: o.k,
            readout: octx.model.basis().map(ModelReadout::Basis),
            what: &what_b,
        },
        NullParams {
            n_null: a.n_null,
            seed: a.seed,
        },
        Par::rayon(0),
    )?
    .with_memory_budget(Some(repgeom_io::default_memory_budget()));
    let synth = |x: &ModelInfo| if x.synthetic { " (synthetic)" } else { "" };
    let mut ia = Vec::with_capacity(mine.len());
    for (l, x) in &mine {
        let what = format!("{} {ckpt} layer {l}{}", m.label, synth(m));
        ia.push(pair.a().layer(x.as_ref(), what)?);
    }
    let mut ib = Vec::with_capacity(theirs.len());
    for (l, x) in &theirs {
        let what = format!("{} {ockpt} layer {l}{}", o.label, synth(o));
        ib.push(pair.b().layer(x.as_ref(), what)?);
    }
    let (ra, rb): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
        (ia.iter().collect(), ib.iter().collect());
    let layers_a: Vec<usize> = mine.keys().copied().collect();
    let layers_b: Vec<usize> = theirs.keys().copied().collect();
    let whole = (units.iter())
        .any(|u| matches!(&u.unit.kind, UnitKind::CrossTable { other: x } if x == other));
    let cells: Vec<(usize, usize)> = if whole {
        repgeom_metrics::layer_pairs(layers_a.len(), layers_b.len(), false)
    } else {
        (units.iter())
            .filter(|u| matches!(&u.unit.kind, UnitKind::Cross { other: x } if x == other))
            .map(|u| cross_cell(m, o, u.unit.layer, &layers_a, &layers_b))
            .collect()
    };
    let settings = CompareSettings {
        aggregates: if whole {
            a.cross_aggregate.clone()
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let table = pair.compare(&metrics, &ra, &rb, &cells, &settings, &mut |_| {})?;
    Ok(CrossPair {
        layers_a,
        layers_b,
        table,
    })
}

/// The cell of the `cross` unit at `layer` of `m` in its pair's table: that layer against the
/// analysed layer of `o` nearest in relative depth (indices into `la` and `lb`).
fn cross_cell(
    m: &ModelInfo,
    o: &ModelInfo,
    layer: usize,
    la: &[usize],
    lb: &[usize],
) -> (usize, usize) {
    let ol = o.nearest_layer(repgeom_report::relative_depth(layer as u32, m.n_layers));
    let at = |ls: &[usize], l: usize| ls.iter().position(|&x| x == l).expect("analysed layer");
    (at(la, layer), at(lb, ol))
}

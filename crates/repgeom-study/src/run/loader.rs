//! [`Loader`]: each model's data, loaded once and shared by its units: the synthetic study, the
//! readout contexts, hub checkpoints (audited, extracted), and the `[extract]` corpus and
//! `[probe]` texts. It computes no unit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use repgeom_linalg::{Mat, MatRef, Par, mat_from_row_major};
use repgeom_metrics::analysis::{ModelContext, NullSource, Readout};
use repgeom_null::NullParams;

use super::{Step, StepDone};
use crate::memo::Memo;
use crate::plan::{ModelInfo, ModelSource, Study, UnitKind};
use crate::stage::{self, CheckpointRecord, Extracted};
use crate::{Error, Result};

/// Per-model data shared by all its units.
pub(crate) struct ModelCtx {
    /// The readout subspace at the model's `k` and its null bases.
    pub(super) model: ModelContext,
    /// The model's probe labels, one per point (from its labels file or the synthetic zoo).
    pub(super) labels: Option<Vec<usize>>,
    /// One context per k-sensitivity `k`: the leading `k` columns of the readout basis
    /// decomposed once at the largest such `k`, and a null per `k`. Empty without k-sensitivity.
    pub(super) sensitivity: BTreeMap<usize, ModelContext>,
}

/// A model's readout (`W_U`, prepared) and probe labels, as [`Loader::read_model`] reads them.
pub(crate) type ModelInputs = (repgeom_io::Matrix, Option<Vec<usize>>);

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
///
/// Every cache is a [`Memo`]: a value is computed once per key under that key's lock (a second
/// caller for the same key waits for it; other keys are computed beside it), and an error is
/// not kept, except the synthetic study's, kept as its message.
pub struct Loader<'s> {
    study: &'s Study,
    /// The sweep directory (extraction cache, checkpoint records).
    work_dir: PathBuf,
    /// The built-in synthetic study, generated once (or why it cannot be).
    synthetic: Memo<(), std::result::Result<Arc<repgeom_synth::SyntheticStudy>, String>>,
    /// Model label -> its readout contexts.
    models: Memo<String, Arc<ModelCtx>>,
    /// The hub client, made from the environment once.
    hub: Memo<(), Arc<repgeom_hub::Hub>>,
    /// (model, checkpoint) -> audited hub checkpoint and its snapshot folder.
    audited: Memo<(String, String), (CheckpointRecord, PathBuf)>,
    /// (model, checkpoint) -> the hub checkpoint's extraction.
    extracted: Memo<(String, String), Arc<Extracted>>,
    /// The `[extract]` corpus, read (or downloaded) once.
    corpus: Memo<(), Arc<stage::Corpus>>,
    /// The `[probe]` texts and labels, read (or downloaded) once.
    probe_texts: Memo<(), Arc<stage::ProbeTexts>>,
    /// Told each timed step (extraction, readout contexts).
    on_step: Option<&'s (dyn Fn(&StepDone<'_>) + Sync)>,
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
            work_dir: dir.to_path_buf(),
            synthetic: Memo::new(),
            models: Memo::new(),
            hub: Memo::new(),
            audited: Memo::new(),
            extracted: Memo::new(),
            corpus: Memo::new(),
            probe_texts: Memo::new(),
            on_step: None,
        }
    }

    /// This loader, telling `f` the wall time of each step of an extraction and of each
    /// model's readout contexts as it finishes (from the thread that ran it).
    pub fn on_step(mut self, f: &'s (dyn Fn(&StepDone<'_>) + Sync)) -> Self {
        self.on_step = Some(f);
        self
    }

    /// The study it loads for.
    pub(crate) fn study(&self) -> &'s Study {
        self.study
    }

    /// Tells the step callback that `step` of `model` (at `checkpoint`) took `elapsed`.
    fn step_done(&self, model: &str, checkpoint: Option<&str>, step: Step, elapsed: Duration) {
        if let Some(f) = self.on_step {
            f(&StepDone {
                model,
                checkpoint,
                step,
                elapsed,
            });
        }
    }

    /// The `[extract]` corpus (the lock is held while it is read, so it is read once).
    fn corpus(&self, e: &crate::ExtractSpec) -> Result<Arc<stage::Corpus>> {
        self.corpus.get_or_try_insert_with((), || {
            Ok(Arc::new(stage::read_corpus(&self.hub(), &e.text)?))
        })
    }

    /// The `[probe]` texts and labels (read once).
    pub(crate) fn probe_texts(&self, p: &crate::ProbeSpec) -> Result<Arc<stage::ProbeTexts>> {
        self.probe_texts
            .get_or_try_insert_with((), || Ok(Arc::new(stage::probe_texts(&self.hub(), p)?)))
    }

    /// The hub client (its cache folder and token from the environment, read once).
    fn hub(&self) -> Arc<repgeom_hub::Hub> {
        self.hub
            .get_or_insert_with((), || Arc::new(repgeom_hub::Hub::from_env()))
    }

    /// Resolves, downloads and hashes hub checkpoint `ckpt` of `m` (once per loader).
    pub fn audit(&self, m: &ModelInfo, ckpt: &str) -> Result<Option<CheckpointRecord>> {
        let Some((spec, c)) = hub_checkpoint(m, ckpt) else {
            return Ok(None);
        };
        let key = (m.label.clone(), ckpt.to_string());
        let (r, _) = self
            .audited
            .get_or_try_insert_with(key, || stage::audit(&self.hub(), &self.work_dir, spec, c))?;
        Ok(Some(r))
    }

    /// The extraction of hub checkpoint `ckpt` of `m`, with its probe features when the plan
    /// probes it (cached on disk and in the loader). A checkpoint not audited yet is hashed
    /// while its weights load for the extraction: one read of the weights for both.
    pub(crate) fn extracted(&self, m: &ModelInfo, ckpt: &str) -> Result<Option<Arc<Extracted>>> {
        let Some((spec, c)) = hub_checkpoint(m, ckpt) else {
            return Ok(None);
        };
        let key = (m.label.clone(), ckpt.to_string());
        self.extracted
            .get_or_try_insert_with(key.clone(), || self.extract(m, ckpt, spec, c, key))
            .map(Some)
    }

    /// Extracts hub checkpoint `ckpt` (`c` of `spec`, model `m`) and records it as audited.
    fn extract(
        &self,
        m: &ModelInfo,
        ckpt: &str,
        spec: &crate::ModelSpec,
        c: &crate::CheckpointSpec,
        key: (String, String),
    ) -> Result<Arc<Extracted>> {
        let resolved = match self.audited.get(&key) {
            Some((rec, dir)) => stage::Resolved {
                dir,
                commit: rec.commit.clone(),
                record: Some(rec),
            },
            None => stage::resolve(&self.hub(), &self.work_dir, spec, c)?,
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
        let spectra = manifest.analysis.spectral_tokens.and_then(|t| {
            let layers: std::collections::BTreeSet<usize> = (self.study.units.iter())
                .filter(|u| {
                    matches!(u.unit.kind, UnitKind::Spectral { .. })
                        && u.unit.model == m.label
                        && u.unit.checkpoint == ckpt
                })
                .map(|u| u.unit.layer)
                .collect();
            (!layers.is_empty()).then(|| stage::SpectraJob {
                max_tokens: t.max_tokens(),
                layers: layers.into_iter().collect(),
            })
        });
        let snap = resolved.dir.clone();
        let (rec, e) = stage::extract(
            manifest,
            &corpus,
            job,
            spectra,
            &self.work_dir,
            spec,
            c,
            resolved,
            &|step, elapsed| self.step_done(&m.label, Some(ckpt), step, elapsed),
        )?;
        self.audited.insert(key, (rec, snap));
        Ok(Arc::new(e))
    }

    /// The built-in synthetic study (generated once; its error, if any, kept as its message).
    fn synth(&self) -> Result<Arc<repgeom_synth::SyntheticStudy>> {
        let spec = self
            .study
            .manifest
            .synthetic
            .as_ref()
            .expect("synthetic models need a [synthetic] table");
        let s = self.synthetic.get_or_insert_with((), || {
            spec.zoo_params()
                .check()
                .and_then(|z| repgeom_synth::generate_study(&z))
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        s.map_err(|e| Error::InvalidManifest {
            manifest: self.study.origin.clone(),
            place: "synthetic".into(),
            reason: e,
        })
    }

    /// The readout contexts of model `m` (made once per loader).
    pub(super) fn model_ctx(&self, m: &ModelInfo) -> Result<Arc<ModelCtx>> {
        self.models.get_or_try_insert_with(m.label.clone(), || {
            Ok(Arc::new(self.build_model(m, self.read_model(m)?)?))
        })
    }

    /// [`Loader::model_ctx`] of what [`Loader::read_model`] read (or the contexts made before).
    pub(crate) fn model_ctx_from(&self, m: &ModelInfo, read: ModelInputs) -> Result<Arc<ModelCtx>> {
        self.models
            .get_or_try_insert_with(m.label.clone(), || Ok(Arc::new(self.build_model(m, read)?)))
    }

    /// Whether model `m`'s readout contexts are made.
    pub(crate) fn has_model_ctx(&self, m: &ModelInfo) -> bool {
        self.models.get(&m.label).is_some()
    }

    /// Reads model `m`'s readout (checked against its width) and labels: the part of its
    /// contexts that can fail on bad input, quick beside the decomposition that follows.
    pub(crate) fn read_model(&self, m: &ModelInfo) -> Result<ModelInputs> {
        Ok(match &m.source {
            ModelSource::Synthetic { index, .. } => {
                let synth = self.synth()?;
                let run = &synth.runs[*index];
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
                // The one readout resolver of every front end: a path where it is, a hub id
                // at the final checkpoint's revision (else `main`), downloading only what the
                // analysis reads (the final norm's shard too when folding its gain).
                let source = match (&spec.readout, &spec.hub) {
                    (Some(p), _) => repgeom_hub::ModelRef::Local(p.clone()),
                    (None, Some(id)) => repgeom_hub::ModelRef::Hub {
                        id: id.clone(),
                        revision: (m.final_checkpoint().revision.clone())
                            .unwrap_or_else(|| "main".into()),
                    },
                    (None, None) => unreachable!("checked: hub or readout"),
                };
                let a = &self.study.manifest.analysis;
                let prep = repgeom_io::ReadoutPrep {
                    options: repgeom_io::ReadoutOptions {
                        vocab_rows: spec.vocab_rows,
                        tensor: spec.readout_tensor.clone(),
                    },
                    fold_norm: a.readout_fold_norm,
                    center: a.readout_center,
                };
                let resolved = source.read_readout(&prep, &self.hub(), &mut |_| {})?;
                let (readout_path, r) = (resolved.path, resolved.readout);
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
        })
    }

    /// Prepares model `m`'s readout contexts from its readout and labels, timed
    /// ([`Step::Readout`]).
    fn build_model(&self, m: &ModelInfo, read: ModelInputs) -> Result<ModelCtx> {
        let t = Instant::now();
        let ctx = self.build_model_untimed(m, read)?;
        self.step_done(&m.label, None, Step::Readout, t.elapsed());
        Ok(ctx)
    }

    fn build_model_untimed(
        &self,
        m: &ModelInfo,
        (readout, labels): ModelInputs,
    ) -> Result<ModelCtx> {
        let readout = MatRef::from_row_major_slice(&readout.data, readout.rows, readout.cols);
        // The decomposition is bit-identical at any thread count, so it runs on the current
        // pool: beside the model's null draws, or first and once when other k are wanted.
        let a = &self.study.manifest.analysis;
        let null = NullParams {
            n_null: a.n_null,
            seed: a.seed,
        };
        let what = format!("model {}", m.label);
        let d = m.d as usize;
        // One decomposition, at the largest k the model needs: the top k vectors are the
        // leading k columns of the top kmax, bit for bit, so every k's basis is cut from it.
        let ks = m.sensitivity_ks(&a.k_sensitivity);
        let wide = match ks.last() {
            Some(&kmax) => Some(
                ModelContext::new(
                    d,
                    kmax.max(m.k),
                    Some(Readout::Unembedding(readout)),
                    None,
                    &what,
                    Par::Seq,
                )?
                .basis()
                .expect("a readout was given")
                .to_owned(),
            ),
            None => None,
        };
        let own = match &wide {
            Some(wide) => Readout::Basis(wide.subcols(0, m.k)),
            None => Readout::Unembedding(readout),
        };
        let model = ModelContext::new(
            d,
            m.k,
            Some(own),
            Some(NullSource::Draw(null.clone())),
            &what,
            Par::Seq,
        )?
        .with_memory_budget(Some(repgeom_io::default_memory_budget()))
        .with_device(self.study.manifest.device);
        let mut sensitivity = BTreeMap::new();
        if let Some(wide) = &wide {
            for &k in &ks {
                let basis = Readout::Basis(wide.subcols(0, k));
                let null = Some(NullSource::Draw(null.clone()));
                let budget = Some(repgeom_io::default_memory_budget());
                sensitivity.insert(
                    k,
                    ModelContext::new(d, k, Some(basis), null, &what, Par::Seq)?
                        .with_memory_budget(budget)
                        .with_device(self.study.manifest.device),
                );
            }
        }
        Ok(ModelCtx {
            model,
            labels,
            sensitivity,
        })
    }

    /// The sequence of each of the `n` points of model `m` at checkpoint `ckpt`, when its
    /// activation file records them (`None` for synthetic models, whose points are independent
    /// draws, and for files without `positions` metadata).
    pub(super) fn sequences(
        &self,
        m: &ModelInfo,
        ckpt: &str,
        n: usize,
    ) -> Result<Option<Vec<usize>>> {
        match &m.source {
            ModelSource::Synthetic { .. } => Ok(None),
            // An extracted checkpoint's file records its sequence ids like `repgeom extract`'s.
            ModelSource::Files(spec) => Ok(repgeom_io::read_sequence_ids(
                &self.activations_path(m, spec, ckpt)?,
                n,
            )?),
        }
    }

    /// The activation file of model `m` at `ckpt` and what it records about its `n` points
    /// (design, places, tokens, word windows; [`repgeom_extract::PointsRecord`]), for the
    /// pair rule; `None` for synthetic models, whose points are independent draws.
    pub(super) fn points_record(
        &self,
        m: &ModelInfo,
        ckpt: &str,
        n: usize,
    ) -> Result<Option<(std::path::PathBuf, repgeom_extract::PointsRecord)>> {
        let ModelSource::Files(spec) = &m.source else {
            return Ok(None);
        };
        let path = self.activations_path(m, spec, ckpt)?;
        let record =
            repgeom_extract::PointsRecord::of_file(&path, n).map_err(|e| Error::DataMismatch {
                model: m.label.clone(),
                what: format!("metadata of {}", path.display()),
                expected: "what repgeom extract writes".into(),
                found: e.to_string(),
            })?;
        Ok(Some((path, record)))
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
    pub(super) fn layers(
        &self,
        m: &ModelInfo,
        ckpt: &str,
        layers: &[usize],
    ) -> Result<BTreeMap<usize, Mat<f32>>> {
        let mut out = BTreeMap::new();
        match &m.source {
            ModelSource::Synthetic { index, .. } => {
                let synth = self.synth()?;
                let run = &synth.runs[*index];
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
                    // By tiles on the pool: an entry-by-entry copy was 75 ms of one core per
                    // 2048 × 4096 layer, before any unit of the checkpoint could start.
                    out.insert(
                        la.layer,
                        mat_from_row_major(&mx.data, mx.rows, mx.cols, Par::rayon(0)),
                    );
                }
            }
        }
        Ok(out)
    }
}

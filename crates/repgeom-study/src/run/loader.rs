//! [`Loader`]: each model's data, loaded once and shared by its units: the synthetic study, the
//! readout contexts, hub checkpoints (audited, extracted), and the `[extract]` corpus and
//! `[probe]` texts. It computes no unit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::analysis::{ModelContext, ModelReadout, NullSource};
use repgeom_null::NullParams;

use crate::plan::{ModelInfo, ModelSource, Study, UnitKind};
use crate::stage::{self, CheckpointRecord, Extracted};
use crate::{Error, Result};

/// Per-model data shared by all its units.
pub(super) struct ModelCtx {
    /// The readout subspace at the model's `k` and its null bases.
    pub(super) model: ModelContext,
    /// The model's probe labels, one per point (from its labels file or the synthetic zoo).
    pub(super) labels: Option<Vec<usize>>,
    /// One context per k-sensitivity `k`: the leading `k` columns of the readout basis
    /// decomposed once at the largest such `k`, and a null per `k`. Empty without k-sensitivity.
    pub(super) sensitivity: BTreeMap<usize, ModelContext>,
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

    pub(super) fn model_ctx(&self, m: &ModelInfo) -> Result<Arc<ModelCtx>> {
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

//! Units of work, their ids and config hashes, and sharding.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use repgeom_metrics::Pga;
use repgeom_metrics::pga::BootstrapOptions;

use crate::manifest::{DataSource, FullAt, Manifest, ModelSpec, SyntheticSpec};
use crate::{Error, Result};

/// What one unit computes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum UnitKind {
    /// Subspace PGA at these CCR levels (rows `pga_z`, `rho_readout`, variants `ccrC`).
    Pga {
        /// CCR levels (they share one eigendecomposition).
        ccr: Vec<usize>,
    },
    /// Subspace PGA at one CCR level with a readout dimension `k` other than the model's
    /// (k-sensitivity; rows as `Pga`, variants `ccrC_kK`).
    PgaK {
        /// CCR level.
        ccr: usize,
        /// Readout subspace dimension.
        k: usize,
    },
    /// Share of the top-`m` principal directions in the readout subspace.
    PcShare {
        /// Number of principal directions.
        m: usize,
    },
    /// One spectral metric from the registry.
    Spectral {
        /// Registry name.
        metric: String,
    },
    /// Linear probe accuracy on the model's labels.
    Probe,
    /// The checkpoint's validation loss (one row, on the model's first analysed layer).
    ValLoss,
    /// The pair metrics of `analysis.cross` (by default distance agreement and linear CKA)
    /// against `other` (its final checkpoint, the layer nearest in relative depth).
    Cross {
        /// The other model's label.
        other: String,
    },
    /// The calibrated aggregates of `analysis.cross_aggregate` over the whole layer × layer
    /// table of this model (its final checkpoint) against `other` (one unit per pair, on the
    /// model's first analysed layer).
    CrossTable {
        /// The other model's label.
        other: String,
    },
    /// The weights hash of a hub checkpoint (one `weights_sha256` row on the model's first
    /// analysed layer: the hash as its variant, the parameter count as its value).
    Weights,
}

impl UnitKind {
    /// Short name used in unit ids and logs.
    pub fn tag(&self) -> String {
        match self {
            Self::Pga { ccr } => {
                format!(
                    "pga-ccr{}",
                    ccr.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("+")
                )
            }
            Self::PgaK { ccr, k } => format!("pga-ccr{ccr}-k{k}"),
            Self::PcShare { m } => format!("pcshare{m}"),
            Self::Spectral { metric } => metric.clone(),
            Self::Probe => "probe".into(),
            Self::ValLoss => "val_loss".into(),
            Self::Cross { other } => format!("cross-{other}"),
            Self::CrossTable { other } => format!("cross_table-{other}"),
            Self::Weights => "weights".into(),
        }
    }
}

/// One unit of work: one model, checkpoint, layer and analysis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unit {
    /// Model label.
    pub model: String,
    /// Checkpoint name.
    pub checkpoint: String,
    /// Hidden-state index.
    pub layer: usize,
    /// The analysis.
    pub kind: UnitKind,
}

/// A unit with its stable id and the hash of everything that determines its numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedUnit {
    /// File-name-safe id, unique within a plan.
    pub id: String,
    /// Hex SHA-256 of the canonical JSON of the unit's settings and inputs.
    pub config_hash: String,
    /// The unit.
    pub unit: Unit,
}

/// Where a model's data come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// A width of the built-in synthetic zoo.
    Synthetic {
        /// The zoo.
        spec: SyntheticSpec,
        /// Index into `spec.widths`.
        index: usize,
    },
    /// Files named in the manifest.
    Files(ModelSpec),
}

/// One checkpoint as the runner sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointInfo {
    /// Name (the table's `checkpoint` column).
    pub name: String,
    /// Training step.
    pub step: Option<u64>,
    /// Validation loss, if known.
    pub val_loss: Option<f64>,
    /// Hub revision whose activations are extracted (its loss is computed with
    /// `[extract] loss = true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// One model as the runner sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    /// Label.
    pub label: String,
    /// Family.
    pub family: String,
    /// Width.
    pub d: u32,
    /// Readout subspace dimension.
    pub k: usize,
    /// Hidden-state tensors of the model.
    pub n_layers: u32,
    /// Analysed layers, ascending.
    pub layers: Vec<usize>,
    /// Checkpoints, oldest first (the last is the final one).
    pub checkpoints: Vec<CheckpointInfo>,
    /// Synthetic data.
    pub synthetic: bool,
    /// Has probe labels.
    pub has_labels: bool,
    /// Data source.
    pub source: ModelSource,
}

impl ModelInfo {
    /// The readout dimensions of the k-sensitivity units: `round(f·d)` for each fraction,
    /// kept when `0 < k < d` and different from the model's own `k`, ascending and distinct.
    pub fn sensitivity_ks(&self, fractions: &[f64]) -> Vec<usize> {
        let d = self.d as usize;
        let mut ks: Vec<usize> = fractions
            .iter()
            .map(|&f| repgeom_metrics::k_from_fraction(f, d))
            .filter(|&k| repgeom_metrics::k_fits(k, d) && k != self.k)
            .collect();
        ks.sort_unstable();
        ks.dedup();
        ks
    }

    /// The final checkpoint (largest step; no step counts as latest).
    pub fn final_checkpoint(&self) -> &CheckpointInfo {
        self.checkpoints
            .last()
            .expect("a checked model has checkpoints")
    }
    /// The checkpoint called `name`.
    pub fn checkpoint(&self, name: &str) -> Option<&CheckpointInfo> {
        self.checkpoints.iter().find(|c| c.name == name)
    }
    /// The analysed layer nearest in relative depth to `depth` (ties: the lower layer).
    pub fn nearest_layer(&self, depth: f64) -> usize {
        let rd = |l: usize| repgeom_report::relative_depth(l as u32, self.n_layers);
        let mut best = self.layers[0];
        for &l in &self.layers {
            if (rd(l) - depth).abs() < (rd(best) - depth).abs() - 1e-12 {
                best = l;
            }
        }
        best
    }
}

/// A checked manifest, expanded into models and units.
#[derive(Debug, Clone)]
pub struct Study {
    /// The manifest.
    pub manifest: Manifest,
    /// Where it came from (path or `<built-in synthetic study>`).
    pub origin: String,
    /// The models, synthetic first, then files in manifest order.
    pub models: Vec<ModelInfo>,
    /// Every unit, in plan order.
    pub units: Vec<PlannedUnit>,
    /// SHA-256 of the extraction settings and input files (`[extract]`, `[probe]`), when the
    /// study extracts activations; part of the config hash of units of hub checkpoints.
    pub inputs: Option<String>,
}

/// The hash of what extraction reads: `[extract]` settings and corpus bytes, `[probe]`
/// settings and labelled-text bytes. Missing files are reported here, before any work. A hub
/// dataset enters by its reference (id, revision, config, split, column), as a hub model does
/// by its revision: the bytes it resolves to are hashed into the activation cache key when
/// they are read.
fn extraction_inputs(manifest: &Manifest, origin: &str) -> Result<Option<String>> {
    let Some(e) = &manifest.extract else {
        return Ok(None);
    };
    // A file: its SHA-256, and the path left out (moving the file changes nothing).
    let hash = |place: &str, src: &DataSource| -> Result<(DataSource, Option<String>)> {
        let DataSource::File(p) = src else {
            return Ok((src.clone(), None));
        };
        let bytes = std::fs::read(p).map_err(|err| Error::InvalidManifest {
            manifest: origin.into(),
            place: place.into(),
            reason: format!("cannot read {}: {err}", p.display()),
        })?;
        Ok((
            DataSource::File(std::path::PathBuf::new()),
            Some(hex(&Sha256::digest(&bytes))),
        ))
    };
    let mut e2 = e.clone();
    let (text, text_sha) = hash("extract.text", &e.text)?;
    e2.text = text;
    e2.params.batch_size = 0; // speed only
    let probe = match &manifest.probe {
        Some(p) => {
            let mut p2 = p.clone();
            let (labels, sha) = hash("probe.labels", &p.labels)?;
            p2.labels = labels;
            Some((p2, sha))
        }
        None => None,
    };
    let mut key = serde_json::json!({
        "extract": e2,
        "text_sha256": text_sha,
        "probe": probe,
    });
    if let Some(d) = e.design_keys() {
        key["points"] = d;
    }
    Ok(Some(hex(&Sha256::digest(key.to_string().as_bytes()))))
}

/// Version of what a unit writes. Bump it whenever a unit kind's rows change (new metrics,
/// new tails), so that a resumed sweep recomputes instead of mixing old part files with new
/// ones. 2: PGA's tails and z_se, probe intervals and the control task.
const FORMAT: u32 = 2;

/// Most units a plan may hold (a study of 10 models x 150 checkpoints x 40 layers plans about
/// 60 000): bounds memory and planning time for a manifest with a huge checkpoint list.
const MAX_UNITS: usize = 1 << 20;

fn step_key(c: &CheckpointInfo) -> (bool, u64, String) {
    (c.step.is_none(), c.step.unwrap_or(0), c.name.clone())
}

impl Study {
    /// Checks the manifest and plans every unit.
    pub fn new(manifest: Manifest, origin: &str) -> Result<Self> {
        manifest.check(origin)?;
        let a = &manifest.analysis;
        let mut models = Vec::new();
        if let Some(s) = &manifest.synthetic {
            let zoo = s.zoo_params().check()?;
            for (index, (&w, mp)) in s.widths.iter().zip(zoo.models()).enumerate() {
                models.push(ModelInfo {
                    label: SyntheticSpec::label(w),
                    family: s.family(w).into(),
                    d: w as u32,
                    k: mp.k(),
                    n_layers: s.n_layers as u32,
                    layers: (0..s.n_layers).collect(),
                    checkpoints: s
                        .steps
                        .iter()
                        .map(|&st| CheckpointInfo {
                            name: format!("step{st}"),
                            step: Some(st),
                            val_loss: Some(repgeom_synth::validation_loss(w, st)),
                            revision: None,
                        })
                        .collect(),
                    synthetic: true,
                    has_labels: true,
                    source: ModelSource::Synthetic {
                        spec: s.clone(),
                        index,
                    },
                });
            }
        }
        for m in &manifest.models {
            let mut checkpoints: Vec<CheckpointInfo> = m
                .checkpoints
                .iter()
                .map(|c| CheckpointInfo {
                    name: c.name.clone(),
                    step: c.step,
                    val_loss: c.val_loss,
                    revision: c.revision.clone(),
                })
                .collect();
            checkpoints.sort_by_key(step_key);
            let mut layers = m
                .layers
                .clone()
                .unwrap_or_else(|| (0..m.n_layers as usize).collect());
            layers.sort_unstable();
            models.push(ModelInfo {
                label: m.label.clone(),
                family: m.family.clone(),
                d: m.d,
                k: m.k.unwrap_or_else(|| a.k_for(m.d)),
                n_layers: m.n_layers,
                layers,
                checkpoints,
                synthetic: false,
                has_labels: m.labels.is_some() || (m.hub.is_some() && manifest.probe.is_some()),
                source: ModelSource::Files(m.clone()),
            });
        }
        for m in &models {
            if m.k > m.d as usize {
                return Err(Error::InvalidManifest {
                    manifest: origin.into(),
                    place: format!("model {:?}", m.label),
                    reason: format!("k = {} exceeds d = {}", m.k, m.d),
                });
            }
        }
        let mut units = Vec::new();
        for m in &models {
            let last = m.checkpoints.len() - 1;
            for (ci, c) in m.checkpoints.iter().enumerate() {
                let full = ci == last || a.full_at == FullAt::All;
                let mut kinds = Vec::new();
                let ccr = &a.pga.options().ccr;
                kinds.push(UnitKind::Pga {
                    ccr: if full { ccr.clone() } else { vec![ccr[0]] },
                });
                if full {
                    if a.pc_share > 0 {
                        kinds.push(UnitKind::PcShare { m: a.pc_share });
                    }
                    for s in &a.spectral {
                        kinds.push(UnitKind::Spectral { metric: s.clone() });
                    }
                    if a.probe && m.has_labels {
                        kinds.push(UnitKind::Probe);
                    }
                }
                if ci == last {
                    for k in m.sensitivity_ks(&a.k_sensitivity) {
                        kinds.push(UnitKind::PgaK { ccr: ccr[0], k });
                    }
                    for [x, y] in &manifest.pairs {
                        if *x == m.label {
                            kinds.push(UnitKind::Cross { other: y.clone() });
                        }
                    }
                }
                if units.len() + m.layers.len() * kinds.len() > MAX_UNITS {
                    return Err(Error::InvalidManifest {
                        manifest: origin.into(),
                        place: format!("model {:?}", m.label),
                        reason: format!(
                            "the study plans more than {MAX_UNITS} units: fewer checkpoints or layers"
                        ),
                    });
                }
                for &layer in &m.layers {
                    for kind in &kinds {
                        units.push(Unit {
                            model: m.label.clone(),
                            checkpoint: c.name.clone(),
                            layer,
                            kind: kind.clone(),
                        });
                    }
                }
                let computed_loss = c.revision.is_some()
                    && manifest.extract.as_ref().is_some_and(|e| e.params.loss);
                if c.val_loss.is_some() || computed_loss {
                    units.push(Unit {
                        model: m.label.clone(),
                        checkpoint: c.name.clone(),
                        layer: m.layers[0],
                        kind: UnitKind::ValLoss,
                    });
                }
                if ci == last && !a.cross_aggregate.is_empty() {
                    for [x, y] in &manifest.pairs {
                        if *x == m.label {
                            units.push(Unit {
                                model: m.label.clone(),
                                checkpoint: c.name.clone(),
                                layer: m.layers[0],
                                kind: UnitKind::CrossTable { other: y.clone() },
                            });
                        }
                    }
                }
                if c.revision.is_some() {
                    units.push(Unit {
                        model: m.label.clone(),
                        checkpoint: c.name.clone(),
                        layer: m.layers[0],
                        kind: UnitKind::Weights,
                    });
                }
            }
        }
        let inputs = extraction_inputs(&manifest, origin)?;
        let mut study = Self {
            manifest,
            origin: origin.into(),
            models,
            units: Vec::new(),
            inputs,
        };
        let mut seen = std::collections::BTreeSet::new();
        for unit in units {
            let id = unit_id(&unit);
            if !seen.insert(id.clone()) {
                return Err(Error::InvalidManifest {
                    manifest: origin.into(),
                    place: format!("model {:?}", unit.model),
                    reason: format!("two units map to the id {id} (rename a checkpoint)"),
                });
            }
            let config_hash = study.config_hash(&unit);
            study.units.push(PlannedUnit {
                id,
                config_hash,
                unit,
            });
        }
        Ok(study)
    }

    /// The model labelled `label`.
    pub fn model(&self, label: &str) -> Option<&ModelInfo> {
        self.models.iter().find(|m| m.label == label)
    }

    /// SHA-256 over the canonical JSON of what determines the unit's numbers: the format
    /// version, the unit, `n_null`, the seed, each involved model's source, `k` and layers, and
    /// the analysis options that change numbers or rows (distance, readout options, pair
    /// sampling, bootstrap, the null, any other `pga` option away from its default, and for
    /// cross units the pair metrics).
    pub fn config_hash(&self, unit: &Unit) -> String {
        #[derive(Serialize)]
        struct Key<'a> {
            format: u32,
            unit: &'a Unit,
            n_null: usize,
            seed: u64,
            models: Vec<(&'a str, usize, u32, ModelSource, Option<&'a CheckpointInfo>)>,
            // Left out at their defaults, so that earlier runs keep their hashes.
            #[serde(skip_serializing_if = "is_cosine")]
            distance: repgeom_linalg::Distance,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            readout_fold_norm: bool,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            readout_center: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            max_pairs: Option<usize>,
            // The replicate count alone while seed and level are the study's defaults.
            #[serde(skip_serializing_if = "Option::is_none")]
            bootstrap: Option<serde_json::Value>,
            inputs: Option<&'a str>,
            #[serde(skip_serializing_if = "is_haar")]
            null: repgeom_null::NullKind,
            #[serde(skip_serializing_if = "Option::is_none")]
            spectrum_tol: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cross: Option<&'a [crate::manifest::CrossMetric]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cross_n_perm: Option<usize>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cross_aggregate: Option<&'a [repgeom_metrics::calibrate::Aggregate]>,
            // Version of the cross units' rows, so that a resumed sweep recomputes them rather
            // than mix them with older ones (left out of other units, whose hashes stay). 1: one
            // comparison per pair over every analysed layer of both models, model B's null from
            // seed + 1, duplicated points judged on all those layers. 2: the rows carry every
            // column `repgeom compare` reports (the comparison's extras), not only the null's
            // mean, std and p.
            #[serde(skip_serializing_if = "Option::is_none")]
            cross_version: Option<u32>,
            // Spectral units of hub checkpoints add rows over every token.
            #[serde(skip_serializing_if = "Option::is_none")]
            spectral_tokens: Option<crate::SpectralTokens>,
            // Every other `pga` option that is away from the metric's default (a pair seed
            // other than `seed`, options added to the metric later).
            #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
            pga: serde_json::Map<String, serde_json::Value>,
        }
        fn is_haar(n: &repgeom_null::NullKind) -> bool {
            *n == repgeom_null::NullKind::Haar
        }
        fn is_cosine(d: &repgeom_linalg::Distance) -> bool {
            *d == repgeom_linalg::Distance::Cosine
        }
        let a = &self.manifest.analysis;
        let p = a.pga();
        let mut models = Vec::new();
        let mut involved = vec![(unit.model.as_str(), Some(unit.checkpoint.as_str()))];
        if let UnitKind::Cross { other } | UnitKind::CrossTable { other } = &unit.kind {
            involved.push((other.as_str(), None));
        }
        for (label, ckpt) in involved {
            if let Some(m) = self.model(label) {
                let source = strip_other_checkpoints(
                    &m.source,
                    ckpt.or(Some(m.final_checkpoint().name.as_str())),
                );
                let c = ckpt.map_or_else(|| Some(m.final_checkpoint()), |c| m.checkpoint(c));
                models.push((label, m.k, m.n_layers, source, c));
            }
        }
        let extracted = models
            .iter()
            .any(|(_, _, _, _, c)| c.is_some_and(|c| c.revision.is_some()));
        let key = Key {
            format: FORMAT,
            unit,
            n_null: a.n_null,
            seed: a.seed,
            models,
            distance: p.engine.distance,
            readout_fold_norm: a.readout_fold_norm,
            readout_center: a.readout_center,
            // Pair sampling changes the numbers; the bootstrap adds rows.
            max_pairs: p.engine.max_pairs,
            bootstrap: p.bootstrap.as_ref().map(|b| {
                if b.seed == a.seed && b.level == BootstrapOptions::default().level {
                    b.replicates.into()
                } else {
                    serde_json::to_value(b).expect("plain data serialises")
                }
            }),
            inputs: if extracted {
                self.inputs.as_deref()
            } else {
                None
            },
            null: p.engine.null,
            spectrum_tol: match p.engine.null {
                repgeom_null::NullKind::Haar => None,
                repgeom_null::NullKind::Spectrum => {
                    a.pga.given("spectrum_tol").then_some(p.engine.spectrum_tol)
                }
            },
            pga: other_pga_options(&p, a.seed),
            // Only cross units depend on the pair metrics, and the default list leaves earlier
            // hashes as they were.
            cross: match &unit.kind {
                UnitKind::Cross { .. } | UnitKind::CrossTable { .. }
                    if a.cross != crate::manifest::default_cross() =>
                {
                    Some(&a.cross)
                }
                _ => None,
            },
            cross_n_perm: match &unit.kind {
                UnitKind::Cross { .. } | UnitKind::CrossTable { .. } => a.cross_n_perm,
                _ => None,
            },
            cross_aggregate: match &unit.kind {
                UnitKind::CrossTable { .. } => Some(&a.cross_aggregate),
                _ => None,
            },
            cross_version: match &unit.kind {
                UnitKind::Cross { .. } | UnitKind::CrossTable { .. } => Some(2),
                _ => None,
            },
            spectral_tokens: match &unit.kind {
                UnitKind::Spectral { .. } if extracted => a.spectral_tokens,
                _ => None,
            },
        };
        let json = serde_json::to_string(&key).expect("plain data serialises");
        hex(&Sha256::digest(json.as_bytes()))
    }

    /// A short hash of the whole plan (every unit's id and hash), shown in logs.
    pub fn plan_hash(&self) -> String {
        let mut h = Sha256::new();
        for u in &self.units {
            h.update(u.id.as_bytes());
            h.update(b"\0");
            h.update(u.config_hash.as_bytes());
            h.update(b"\n");
        }
        hex(&h.finalize())[..16].to_owned()
    }
}

/// The model's source with only checkpoint `keep` listed, so that adding or editing another
/// checkpoint leaves this unit's hash unchanged.
/// The `pga` options a unit's hash holds beside the ones it names: every option away from the
/// metric's default, except those named (`ccr` is in the unit, the rest in the key),
/// `max_memory` (never changes a number), and `pair_seed` while it is `seed` (the study's
/// default).
fn other_pga_options(p: &Pga, seed: u64) -> serde_json::Map<String, serde_json::Value> {
    const NAMED: [&str; 7] = [
        "ccr",
        "distance",
        "max_pairs",
        "bootstrap",
        "null",
        "spectrum_tol",
        "max_memory",
    ];
    let defaults = repgeom_metrics::options_of(&Pga::default());
    repgeom_metrics::options_of(p)
        .into_iter()
        .filter(|(k, v)| {
            !NAMED.contains(&k.as_str())
                && defaults.get(k) != Some(v)
                && !(k == "pair_seed" && p.engine.pair_seed == seed)
        })
        .collect()
}

fn strip_other_checkpoints(s: &ModelSource, keep: Option<&str>) -> ModelSource {
    match s {
        ModelSource::Synthetic { .. } => s.clone(),
        ModelSource::Files(m) => {
            let mut m = m.clone();
            m.checkpoints.retain(|c| Some(c.name.as_str()) == keep);
            ModelSource::Files(m)
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file-name-safe id of a unit: `model__checkpoint__L007__kind`, characters outside
/// `[A-Za-z0-9._+-]` replaced by `_` (then a short hash of the exact key is appended, so that
/// two keys never share an id).
pub fn unit_id(u: &Unit) -> String {
    let ckpt = if u.checkpoint.is_empty() {
        "released"
    } else {
        u.checkpoint.as_str()
    };
    let raw = format!("{}__{}__L{:03}__{}", u.model, ckpt, u.layer, u.kind.tag());
    let safe: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == raw && !u.checkpoint.is_empty() {
        safe
    } else {
        let key = serde_json::to_string(u).expect("plain data serialises");
        format!("{safe}-{}", &hex(&Sha256::digest(key.as_bytes()))[..8])
    }
}

/// Parses `--shard i/n`: shard `i` (0-based, `0..n`) of `n`.
pub fn parse_shard(spec: &str) -> Result<(usize, usize)> {
    let bad = |reason: &str| Error::BadShard {
        spec: spec.into(),
        reason: reason.into(),
    };
    let (i, n) = spec
        .split_once('/')
        .ok_or_else(|| bad("expected i/n, e.g. 0/4"))?;
    let i: usize = i
        .trim()
        .parse()
        .map_err(|_| bad("i is not a non-negative integer"))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| bad("n is not a positive integer"))?;
    if n == 0 {
        return Err(bad("n must be at least 1"));
    }
    if i >= n {
        return Err(bad("i must be in 0..n (shards are numbered from 0)"));
    }
    Ok((i, n))
}

/// The shard from SLURM's job-array variables, when both are set: task id minus
/// `SLURM_ARRAY_TASK_MIN` (default 0) out of `SLURM_ARRAY_TASK_COUNT`.
pub fn shard_from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<(usize, usize)>> {
    let (Some(id), Some(count)) = (get("SLURM_ARRAY_TASK_ID"), get("SLURM_ARRAY_TASK_COUNT"))
    else {
        return Ok(None);
    };
    let bad = |reason: String| Error::BadShard {
        spec: format!("SLURM_ARRAY_TASK_ID={id} SLURM_ARRAY_TASK_COUNT={count}"),
        reason,
    };
    let id: usize = id
        .trim()
        .parse()
        .map_err(|_| bad("task id is not an integer".into()))?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| bad("task count is not an integer".into()))?;
    let min: usize = match get("SLURM_ARRAY_TASK_MIN") {
        Some(m) => m
            .trim()
            .parse()
            .map_err(|_| bad("SLURM_ARRAY_TASK_MIN is not an integer".into()))?,
        None => 0,
    };
    let i = id
        .checked_sub(min)
        .ok_or_else(|| bad("task id below SLURM_ARRAY_TASK_MIN".into()))?;
    if count == 0 || i >= count {
        return Err(bad(format!(
            "shard {i} is not in 0..{count} (use a contiguous array, e.g. --array=0-{})",
            count.saturating_sub(1)
        )));
    }
    Ok(Some((i, count)))
}

/// The units of shard `i` of `n`: every unit whose plan index is `i` modulo `n` (the plan order
/// is deterministic, so every task of an array computes the same split without talking).
pub fn shard(units: &[PlannedUnit], i: usize, n: usize) -> Vec<PlannedUnit> {
    units
        .iter()
        .enumerate()
        .filter(|(j, _)| j % n == i)
        .map(|(_, u)| u.clone())
        .collect()
}

//! The study manifest: which models, which files, which analyses. This module holds its types
//! and their parsing (TOML, the built-in study); the rules a manifest must keep are
//! [`Manifest::check`]'s, in `check.rs`.

mod check;

use std::path::{Path, PathBuf};

use repgeom_metrics::Pga;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Name used in messages for the built-in study.
pub const BUILTIN: &str = "<built-in synthetic study>";

/// Most hidden states a model may declare (`n_layers`): real models have a few hundred at most;
/// a mistyped huge value would otherwise allocate the layer list and the unit plan without bound.
pub(crate) const MAX_LAYERS: usize = 4096;

/// A whole study, as written in a TOML manifest (see `docs/study-manifest.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Free-text title shown nowhere numeric (kept for the reader of the manifest).
    #[serde(default)]
    pub title: String,
    /// Where the extraction (at `[extract] dtype`), PGA's null draws and the cross units'
    /// kernel permutation nulls run: `cpu` (default), `cuda` or `cuda:N` (`docs/gpu.md`). A
    /// setting of the run: recorded in each part file it computes, never in a unit's hash
    /// (the numbers agree with the CPU's within the tolerance docs/gpu.md states), so a study
    /// can be resumed on another device. `repgeom sweep --device` overrides it.
    #[serde(default, skip_serializing_if = "repgeom_cuda::Device::is_cpu")]
    pub device: repgeom_cuda::Device,
    /// Analysis settings shared by every model.
    #[serde(default)]
    pub analysis: Analysis,
    /// Figure settings (small/large width classes).
    #[serde(default)]
    pub report: ReportSettings,
    /// Models read from files.
    #[serde(default, rename = "model")]
    pub models: Vec<ModelSpec>,
    /// The built-in synthetic zoo (every model of it is labelled synthetic).
    #[serde(default)]
    pub synthetic: Option<SyntheticSpec>,
    /// Cross-model pairs `[a, b]` (model labels; both need the same points).
    #[serde(default)]
    pub pairs: Vec<[String; 2]>,
    /// How activations of checkpoints given by hub `revision` are extracted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<ExtractSpec>,
    /// Labelled texts whose mean-pooled features feed the probes of hub models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSpec>,
}

/// The `[extract]` table: activations of hub checkpoints, computed inside the study.
///
/// Its keys are the study's own (`text`, `val_fraction`) and the extraction parameters',
/// [`repgeom_extract::ExtractParams`], read by that type itself: same names, same defaults,
/// same checks as `repgeom extract` and Python's `extract`, and an unknown key is an error that
/// lists both sets. The parameters' `loss` asks for the validation loss, which the study
/// computes on the held-out end of the text (`val_fraction`), never on the points' part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtractSpec {
    /// The corpus, split into sequences of `seq_len` tokens: a UTF-8 file, or a hub dataset's
    /// text column (`{ hub = "Salesforce/wikitext", config = "wikitext-103-raw-v1", split =
    /// "test", column = "text" }`; column `text` by default), each row a line.
    pub text: DataSource,
    /// Share of the text's lines, at its end, held out for the loss (never sampled as points).
    pub val_fraction: f64,
    /// The extraction parameters (`n_points`, `seq_len`, `seed`, `points_per_sequence`,
    /// `batch_size`, `loss`, `loss_tokens`, `skip_first`), as keys of `[extract]` itself, and
    /// the point design (`pool`: token positions, or words by `points = "words"` and
    /// `word_pool`; written to the inputs hash and the cache key only when words, so that
    /// token studies keep their keys).
    #[serde(flatten)]
    pub params: repgeom_extract::ExtractParams,
}

/// `[extract]`'s own keys, beside the extraction parameters'. `points` and `word_pool` name
/// the point design (`repgeom extract --points`, `--word-pool`), read by the extraction
/// library's [`repgeom_extract::Pool::from_names`] into the parameters' `pool`.
const EXTRACT_KEYS: [&str; 4] = ["text", "val_fraction", "points", "word_pool"];

/// The default share of held-out lines.
const DEFAULT_VAL_FRACTION: f64 = 0.1;

impl<'de> Deserialize<'de> for ExtractSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut keys = serde_json::Map::deserialize(d)?;
        let text = keys
            .remove("text")
            .ok_or_else(|| D::Error::missing_field("text"))?;
        let text = serde_json::from_value(text).map_err(D::Error::custom)?;
        let val_fraction = match keys.remove("val_fraction") {
            Some(v) => serde_json::from_value(v).map_err(D::Error::custom)?,
            None => DEFAULT_VAL_FRACTION,
        };
        let mut name = |key: &str| -> std::result::Result<Option<String>, D::Error> {
            match keys.remove(key) {
                Some(v) => serde_json::from_value(v)
                    .map(Some)
                    .map_err(|e| D::Error::custom(format!("{key}: {e}"))),
                None => Ok(None),
            }
        };
        let points = name("points")?;
        let word_pool = name("word_pool")?;
        let pool = repgeom_extract::Pool::from_names(
            "tokens",
            points.as_deref().unwrap_or("tokens"),
            word_pool.as_deref(),
        )
        .map_err(D::Error::custom)?;
        let mut params: repgeom_extract::ExtractParams =
            serde_json::from_value(serde_json::Value::Object(keys)).map_err(|e| {
                let own: Vec<String> = EXTRACT_KEYS.iter().map(|k| format!("`{k}`")).collect();
                D::Error::custom(format!(
                    "{e}, or one of the study's own: {}",
                    own.join(", ")
                ))
            })?;
        params.pool = pool;
        Ok(Self {
            text,
            val_fraction,
            params,
        })
    }
}

impl ExtractSpec {
    /// The extraction settings of the points' pass (`check` them); the loss pass
    /// (`Extractor::loss`) reads the same `seq_len`, `seed`, `loss_tokens` and `batch_size`
    /// (with word points, `seq_len` bounds a word window's bytes for the points and is the
    /// loss's sequence length in tokens).
    pub fn params(&self) -> repgeom_extract::ExtractParams {
        repgeom_extract::ExtractParams {
            // The loss runs on the held-out part only, never on the points' text.
            loss: false,
            ..self.params.clone()
        }
    }

    /// The point design's keys as the manifest writes them (`points`, `word_pool`), or
    /// `None` for token points (the default, and what caches made before the key hold).
    pub fn design_keys(&self) -> Option<serde_json::Value> {
        match self.params.pool {
            repgeom_extract::Pool::Words(w) => Some(serde_json::json!({
                "points": "words",
                "word_pool": w.name(),
            })),
            _ => None,
        }
    }

    /// Predicted tokens of the loss sample.
    pub fn loss_tokens(&self) -> usize {
        self.params
            .loss_tokens
            .unwrap_or(repgeom_extract::DEFAULT_LOSS_TOKENS)
    }
}

/// The `[probe]` table: labelled texts for the probes of hub models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// The labelled texts: a CSV in the AG News layout (no header; class 1-4, title,
    /// description; the text is title and description joined by a space), a CSV with a header
    /// naming `label_column` and `text_column`, or a hub dataset's split (`{ hub =
    /// "fancyzhx/ag_news", split = "test" }`; columns `label` and `text` by default).
    pub labels: DataSource,
    /// Label column of a CSV with a header (default: the AG News layout) or of a hub dataset
    /// (default `label`).
    #[serde(default)]
    pub label_column: Option<String>,
    /// Text column of a CSV with a header or of a hub dataset (default `text`).
    #[serde(default)]
    pub text_column: Option<String>,
    /// Use only the first rows (default: all).
    #[serde(default)]
    pub n_examples: Option<usize>,
    /// Most tokens kept of each text.
    #[serde(default = "default_probe_seq_len")]
    pub seq_len: usize,
    /// Replace every backslash of a text by a space (default true: AG News writes its line
    /// breaks as `\`, e.g. `"...said.\\The..."`), also for CSVs with a header. Line breaks
    /// always become spaces (one text per line).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub backslash_to_space: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_probe_seq_len() -> usize {
    128
}

/// Where the texts of `[extract] text` or `[probe] labels` come from.
///
/// In TOML: a path string (relative to the manifest's folder), or a table naming a split of a
/// HuggingFace Hub dataset, whose parquet files are downloaded into the hub cache
/// (`datasets--org--name`) and read there.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DataSource {
    /// A local file.
    File(PathBuf),
    /// A split of a hub dataset.
    Hub(HubData),
}

/// A split of a hub dataset: `{ hub = "org/name", config = "...", split = "test", column =
/// "text", revision = "main" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubData {
    /// The dataset id, `org/name`.
    pub hub: String,
    /// Branch, tag or commit (default `main`; a commit pins the data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The config (subset); default: the dataset's default config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The split.
    pub split: String,
    /// The text column of `[extract] text` (default `text`); `[probe]` names its columns with
    /// `label_column` and `text_column`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

impl HubData {
    /// The dataset reference the hub client takes.
    pub fn dataset_ref(&self) -> repgeom_hub::DatasetRef {
        let mut d = repgeom_hub::DatasetRef::new(&self.hub, &self.split);
        if let Some(c) = &self.config {
            d = d.config(c);
        }
        if let Some(r) = &self.revision {
            d = d.revision(r);
        }
        d
    }
}

impl DataSource {
    /// The file, if this source is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            DataSource::File(p) => Some(p),
            DataSource::Hub(_) => None,
        }
    }
}

impl std::fmt::Display for DataSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataSource::File(p) => write!(f, "{}", p.display()),
            DataSource::Hub(h) => {
                write!(f, "hub dataset {}", h.hub)?;
                if let Some(r) = &h.revision {
                    write!(f, "@{r}")?;
                }
                if let Some(c) = &h.config {
                    write!(f, " config {c}")?;
                }
                write!(f, " split {}", h.split)
            }
        }
    }
}

impl<'de> Deserialize<'de> for DataSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = DataSource;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a file path, or a hub dataset { hub = \"org/name\", split = \"test\" }",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<DataSource, E> {
                Ok(DataSource::File(v.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<DataSource, A::Error> {
                HubData::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(DataSource::Hub)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Analysis settings: the `[analysis]` table.
///
/// Besides the study's own keys, every option of the `pga` metric ([`Pga`]) is an `[analysis]`
/// key under its own name (see [`PgaSettings`]): the study does not restate them, so an option
/// added to the metric is a manifest key at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Analysis {
    /// Readout subspace dimension (a model's own `k` overrides it).
    pub k: usize,
    /// Random subspaces in the null.
    pub n_null: usize,
    /// Seed of the null draws and the probe splits (also of PGA's pair sample and bootstrap,
    /// unless `pair_seed` or `bootstrap.seed` is given).
    pub seed: u64,
    /// Spectral metrics (registry names) per layer.
    pub spectral: Vec<String>,
    /// Also the spectral metrics over every token of the corpus, not only the sampled points:
    /// `"all"` or a most number of tokens. Each hub checkpoint's extraction then streams the
    /// points' part of `[extract] text` through the model, accumulating each analysed hidden
    /// state's covariance, and its spectral units add rows `{metric}_all_tokens` (the
    /// metric's covariance form) at 2¹⁰, 2¹¹, … tokens and over all of them, with the count
    /// after which the value stays within 1 % of its final value (`stable_from`). Needs
    /// `[extract]`; models read from activation files have no corpus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spectral_tokens: Option<SpectralTokens>,
    /// Top principal directions whose readout share is reported (0 = off).
    pub pc_share: usize,
    /// Linear probes on models that have labels.
    pub probe: bool,
    /// `"final"`: full analysis at each model's final checkpoint, PGA at the first CCR level
    /// only at earlier ones; `"all"`: full analysis everywhere.
    pub full_at: FullAt,
    /// Readout subspace dimension as a fraction of each model's width, `k = round(f·d)`,
    /// instead of `k` (a model's own `k` still wins). Either this or `k`, not both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k_frac: Option<f64>,
    /// Multiply `W_U` by the final norm's gain (read from each model's checkpoint directory)
    /// before its SVD.
    pub readout_fold_norm: bool,
    /// Centre `W_U`'s rows (subtract the mean over the vocabulary) before its SVD.
    pub readout_center: bool,
    /// k-sensitivity: at each model's final checkpoint, PGA (first CCR level) again at
    /// `k = round(f·d)` for each fraction `f` here (variants `ccrC_kK`; a `k` equal to the
    /// model's own is not recomputed). Feeds figure 9 (z against k/d). Empty: off.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub k_sensitivity: Vec<f64>,
    /// Pair metrics of the cross-model units (`pairs`), each a registry name or a table with
    /// the name under `metric` and options beside it, e.g.
    /// `["distance_spearman", "cka_linear", { metric = "mutual_knn", k = 20 }]`. Options left
    /// out take the study's settings where it has one (`distance_spearman`'s `ccr` is the
    /// first CCR level; a `seed` option is `analysis.seed`) and the registry's defaults
    /// otherwise. Figure 7 draws `distance_spearman` and a panel per other metric.
    #[serde(skip_serializing_if = "is_default_cross")]
    pub cross: Vec<CrossMetric>,
    /// Permutations of every `cross` metric's null (as `repgeom compare --n-perm`; unset: each
    /// metric's own `n_perm`, 0 for most).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_n_perm: Option<usize>,
    /// Calibrated aggregates over each pair's whole layer × layer table (`max`,
    /// `row_max_mean`, `hungarian`, `diagonal`), as `repgeom compare --aggregate`: one
    /// `cross_table` unit per pair, rows `METRIC_AGGREGATE` and every cell of the table
    /// (extra `other_layer`, figure 10). Needs a null (`cross_n_perm`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross_aggregate: Vec<repgeom_metrics::calibrate::Aggregate>,
    /// The `pga` metric's options (`ccr`, `distance`, `max_pairs`, `pair_seed`, `max_memory`,
    /// `bootstrap`, `null`, `spectrum_tol`, ...), written as keys of `[analysis]` itself.
    #[serde(flatten)]
    pub pga: PgaSettings,
}

/// CCR levels of a study that does not name them (the first is the headline variant).
pub const STUDY_CCR: [usize; 3] = [1, 5, 10];

/// The `pga` metric's options as they were written in `[analysis]`, and the [`Pga`] they make.
///
/// The keys are the metric's own (`repgeom metrics list`), parsed by the metric itself, so an
/// unknown key is an error that lists them. The study differs from the metric's defaults in
/// three ways only: `ccr` defaults to [`STUDY_CCR`]; `bootstrap = B` is short for
/// `bootstrap = { replicates = B }`; and the pair sample's and the bootstrap's seeds default to
/// `analysis.seed` ([`Analysis::pga`] applies that).
#[derive(Debug, Clone, PartialEq)]
pub struct PgaSettings {
    /// The keys as written (serialised back unchanged, so a plan file reads back equal).
    given: serde_json::Map<String, serde_json::Value>,
    /// The metric they configure, seeds not yet resolved.
    options: Pga,
}

impl Default for PgaSettings {
    fn default() -> Self {
        Self::from_given(serde_json::Map::new()).expect("the defaults parse")
    }
}

impl PgaSettings {
    /// Parses the keys as written (the `[analysis]` keys that are not the study's own).
    pub fn from_given(
        given: serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<Self, String> {
        let mut map = given.clone();
        map.entry("ccr")
            .or_insert_with(|| serde_json::json!(STUDY_CCR));
        if let Some(b) = map.get_mut("bootstrap").filter(|b| b.is_number()) {
            *b = serde_json::json!({ "replicates": b.clone() });
        }
        let options: Pga = serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| {
            format!(
                "{e}, or one of the study's own: {}",
                study_keys().join(", ")
            )
        })?;
        Ok(Self { given, options })
    }

    /// Sets one key as if it had been written in `[analysis]`, e.g. `set("bootstrap", 200)`.
    pub fn set(&mut self, key: &str, value: impl Serialize) -> std::result::Result<(), String> {
        let mut given = self.given.clone();
        let value = serde_json::to_value(value).map_err(|e| e.to_string())?;
        given.insert(key.to_owned(), value);
        *self = Self::from_given(given)?;
        Ok(())
    }

    /// Whether `key` was written (rather than left at its default).
    pub fn given(&self, key: &str) -> bool {
        self.given.contains_key(key)
    }

    /// The options as written, the study's seeds not yet applied ([`Analysis::pga`] applies
    /// them): for the settings that do not depend on a seed.
    pub fn options(&self) -> &Pga {
        &self.options
    }
}

/// The study's own `[analysis]` keys, read off the struct (every optional one set so that none
/// is skipped), for messages.
fn study_keys() -> Vec<String> {
    let all = Analysis {
        k_frac: Some(0.1),
        spectral_tokens: Some(SpectralTokens::All),
        k_sensitivity: vec![0.1],
        cross: Vec::new(),
        cross_n_perm: Some(1),
        cross_aggregate: vec![repgeom_metrics::calibrate::Aggregate::Max],
        ..Analysis::default()
    };
    match serde_json::to_value(all) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().map(|(k, _)| format!("`{k}`")).collect(),
        _ => Vec::new(),
    }
}

impl Serialize for PgaSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.given.serialize(s)
    }
}

impl<'de> Deserialize<'de> for PgaSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let given = serde_json::Map::deserialize(d)?;
        Self::from_given(given).map_err(serde::de::Error::custom)
    }
}

/// One entry of `analysis.cross`: a pair metric's registry name, or its configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CrossMetric {
    /// A registry name, e.g. `"mutual_knn"`.
    Name(String),
    /// `{ metric = "mutual_knn", k = 20 }`: the name under `metric`, options beside it.
    Config(serde_json::Map<String, serde_json::Value>),
}

impl CrossMetric {
    fn config(&self) -> serde_json::Map<String, serde_json::Value> {
        match self {
            Self::Name(n) => {
                let mut m = serde_json::Map::new();
                m.insert("metric".into(), serde_json::Value::from(n.as_str()));
                m
            }
            Self::Config(m) => m.clone(),
        }
    }
}

/// The cross-model metrics of a study that does not name them: distance agreement (full,
/// readout and random subspaces) and linear CKA.
pub fn default_cross() -> Vec<CrossMetric> {
    vec![
        CrossMetric::Name("distance_spearman".into()),
        CrossMetric::Name("cka_linear".into()),
    ]
}

fn is_default_cross(c: &[CrossMetric]) -> bool {
    c == default_cross().as_slice()
}

impl Analysis {
    /// The `pga` metric these settings configure: the options as written, with the pair
    /// sample's seed and the bootstrap's seed set to `seed` unless given.
    pub fn pga(&self) -> Pga {
        let mut p = self.pga.options.clone();
        if !self.pga.given("pair_seed") {
            p.engine.pair_seed = self.seed;
        }
        let boot_seed_given = self
            .pga
            .given
            .get("bootstrap")
            .is_some_and(|b| b.get("seed").is_some());
        if let Some(b) = p.bootstrap.as_mut().filter(|_| !boot_seed_given) {
            b.seed = self.seed;
        }
        p
    }

    /// The `k` of a model of width `d` (its own `k` aside): `round(k_frac · d)` when
    /// `k_frac` is set, else `k`.
    pub fn k_for(&self, d: u32) -> usize {
        match self.k_frac {
            Some(f) => repgeom_metrics::k_from_fraction(f, d as usize),
            None => self.k,
        }
    }

    /// The configured pair metrics of `cross`, checked (see [`Analysis::cross`] for how the
    /// study's settings fill options left out).
    pub fn cross_metrics(
        &self,
    ) -> repgeom_metrics::Result<Vec<Box<dyn repgeom_metrics::PairMetric>>> {
        self.cross
            .iter()
            .map(|c| {
                let mut config = c.config();
                let name = config.get("metric").and_then(|v| v.as_str()).unwrap_or("");
                let options = repgeom_metrics::pair_metric(name)
                    .map(|m| repgeom_metrics::options_of(&m))
                    .unwrap_or_default();
                if name == "distance_spearman" {
                    let ccr = self.pga.options().ccr.first().copied().unwrap_or(1);
                    config.entry("ccr").or_insert_with(|| ccr.into());
                }
                if options.contains_key("seed") {
                    config.entry("seed").or_insert_with(|| self.seed.into());
                }
                repgeom_metrics::pair_metric_from_config(&config)
            })
            .collect::<repgeom_metrics::Result<Vec<_>>>()
            .map(|mut metrics| {
                if let Some(n) = self.cross_n_perm {
                    repgeom_metrics::calibrate::set_n_perm(&mut metrics, n);
                }
                metrics
            })
    }
}

impl Default for Analysis {
    fn default() -> Self {
        Self {
            k: repgeom_metrics::DEFAULT_K,
            n_null: repgeom_null::DEFAULT_N_NULL,
            seed: 0,
            spectral: vec![
                "rankme".into(),
                "alpha_req".into(),
                "isotropy".into(),
                "condition_number".into(),
            ],
            spectral_tokens: None,
            pc_share: 3,
            probe: true,
            full_at: FullAt::Final,
            k_frac: None,
            readout_fold_norm: false,
            readout_center: false,
            k_sensitivity: Vec::new(),
            cross: default_cross(),
            cross_n_perm: None,
            cross_aggregate: Vec::new(),
            pga: PgaSettings::default(),
        }
    }
}

/// How many tokens of the corpus `analysis.spectral_tokens` accumulates: `"all"` or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpectralTokens {
    /// Every token of the points' part of the corpus.
    All,
    /// At most this many tokens (the first whole sequences).
    AtMost(usize),
}

impl SpectralTokens {
    /// The most tokens to run (`None`: all).
    pub fn max_tokens(self) -> Option<usize> {
        match self {
            Self::All => None,
            Self::AtMost(n) => Some(n),
        }
    }
}

impl Serialize for SpectralTokens {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::All => s.serialize_str("all"),
            Self::AtMost(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for SpectralTokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Count(u64),
            Text(String),
        }
        let bad = || {
            serde::de::Error::custom(
                "spectral_tokens: expected \"all\" or a positive number of tokens",
            )
        };
        match Given::deserialize(d)? {
            Given::Text(t) if t == "all" => Ok(Self::All),
            Given::Count(n) if n > 0 => usize::try_from(n).map(Self::AtMost).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// Where the full analysis runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FullAt {
    /// Only at each model's final checkpoint.
    Final,
    /// At every checkpoint.
    All,
}

/// Figure settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportSettings {
    /// Models with `d <= small_max_d` are drawn as small.
    pub small_max_d: u32,
    /// Models with `d >= large_min_d` are drawn as large.
    pub large_min_d: u32,
}

impl Default for ReportSettings {
    fn default() -> Self {
        Self {
            small_max_d: 1024,
            large_min_d: 2048,
        }
    }
}

/// One model read from files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Label used in every table row (e.g. `pythia-410m`).
    pub label: String,
    /// Family (e.g. `pythia`).
    pub family: String,
    /// Hidden width.
    pub d: u32,
    /// Readout subspace dimension for this model (default: `analysis.k`).
    #[serde(default)]
    pub k: Option<usize>,
    /// HuggingFace Hub model id (`org/name`): the readout and, for checkpoints with a
    /// `revision`, the activations come from its revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// `W_U` source: `.npy`/`.safetensors` file or checkpoint directory (without `hub`).
    #[serde(default)]
    pub readout: Option<PathBuf>,
    /// Tensor name inside `readout` (default: chosen by architecture).
    #[serde(default)]
    pub readout_tensor: Option<String>,
    /// Keep only the first rows of `W_U` (drop padding rows).
    #[serde(default)]
    pub vocab_rows: Option<usize>,
    /// Labelled probe classes, one per point (`.npy` or `.csv`).
    #[serde(default)]
    pub labels: Option<PathBuf>,
    /// Label column of a CSV label file.
    #[serde(default)]
    pub labels_column: Option<String>,
    /// Hidden-state indices to analyse (default: all in the file).
    #[serde(default)]
    pub layers: Option<Vec<usize>>,
    /// Number of hidden-state tensors of the model (L + 1), for relative depth and the plan.
    pub n_layers: u32,
    /// Training checkpoints, in any order.
    #[serde(rename = "checkpoint")]
    pub checkpoints: Vec<CheckpointSpec>,
}

/// One training checkpoint of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Checkpoint name (`""` for the released model).
    #[serde(default)]
    pub name: String,
    /// Training step, if known.
    #[serde(default)]
    pub step: Option<u64>,
    /// Hub revision (branch such as `step3000`, tag or commit) of the model's `hub` id:
    /// its activations are extracted as the `[extract]` table says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Activation file (`.npy`, `.npz`, `.safetensors`), when not extracted from `revision`.
    #[serde(default)]
    pub activations: Option<PathBuf>,
    /// Validation loss at this checkpoint (typed in; `[extract] loss = true` computes it).
    #[serde(default)]
    pub val_loss: Option<f64>,
}

/// The built-in synthetic zoo (`repgeom-synth`), a subset of its `ZooParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Master seed of the synthetic data.
    pub seed: u64,
    /// Widths, one model each (`synthetic-d{width}`).
    pub widths: Vec<usize>,
    /// Hidden states per model.
    pub n_layers: usize,
    /// Training steps of the checkpoints.
    pub steps: Vec<u64>,
    /// Points per model.
    pub n_points: usize,
    /// Widths up to this one develop the late-layer detour.
    pub detour_max_width: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        let z = repgeom_synth::ZooParams::default();
        Self {
            seed: z.seed,
            widths: z.widths,
            n_layers: z.n_layers,
            steps: z.steps,
            n_points: z.model.n_points,
            detour_max_width: z.detour_max_width,
        }
    }
}

impl SyntheticSpec {
    /// The `repgeom-synth` parameters this spec stands for.
    pub fn zoo_params(&self) -> repgeom_synth::ZooParams {
        let z = repgeom_synth::ZooParams::default();
        repgeom_synth::ZooParams {
            seed: self.seed,
            widths: self.widths.clone(),
            n_layers: self.n_layers,
            steps: self.steps.clone(),
            detour_max_width: self.detour_max_width,
            model: repgeom_synth::ModelParams {
                n_points: self.n_points,
                ..z.model.clone()
            },
            ..z
        }
    }

    /// Model label of a width (as `repgeom-synth` names it).
    pub fn label(width: usize) -> String {
        format!("synthetic-d{width}")
    }

    /// Family of a width: `synthetic-small` (detour) or `synthetic-large`.
    pub fn family(&self, width: usize) -> &'static str {
        if width <= self.detour_max_width {
            "synthetic-small"
        } else {
            "synthetic-large"
        }
    }
}

impl Manifest {
    /// Reads a TOML manifest; relative paths in it are resolved against its directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ManifestRead {
            path: path.to_owned(),
            source,
        })?;
        let mut m: Manifest = toml::from_str(&text).map_err(|e| Error::ManifestParse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        for model in &mut m.models {
            if let Some(r) = &mut model.readout {
                resolve(base, r);
            }
            if let Some(l) = &mut model.labels {
                resolve(base, l);
            }
            for c in &mut model.checkpoints {
                if let Some(a) = &mut c.activations {
                    resolve(base, a);
                }
            }
        }
        if let Some(DataSource::File(t)) = m.extract.as_mut().map(|e| &mut e.text) {
            resolve(base, t);
        }
        if let Some(DataSource::File(l)) = m.probe.as_mut().map(|p| &mut p.labels) {
            resolve(base, l);
        }
        Ok(m)
    }

    /// The built-in synthetic study of `cargo xtask paper` (see `docs/study-manifest.md`).
    ///
    /// Widths 64 and 128 take the late-layer detour ("small"), 256 and 512 do not ("large");
    /// `k = d / 8` per model, 100 null draws, CCR 1/5/10, all four spectral metrics, PC shares,
    /// probes, and cross-model pairs between neighbouring widths (distance agreement, linear
    /// CKA and mutual kNN).
    pub fn synthetic_default() -> Self {
        let spec = SyntheticSpec {
            widths: vec![64, 128, 256, 512],
            ..SyntheticSpec::default()
        };
        let w = spec.widths.clone();
        let pairs = w
            .windows(2)
            .map(|p| [SyntheticSpec::label(p[0]), SyntheticSpec::label(p[1])])
            .collect();
        Self {
            title: "built-in synthetic study (SYNTHETIC DATA, not a real model)".into(),
            device: repgeom_cuda::Device::Cpu,
            analysis: Analysis {
                // Figure 9: z against k/d around the zoo's own k = d/8.
                k_sensitivity: vec![1.0 / 32.0, 1.0 / 16.0, 1.0 / 4.0],
                // Figure 7: mutual kNN (with its permutation null) beside CKA and distance
                // agreement.
                cross: {
                    let mut c = default_cross();
                    c.push(CrossMetric::Name("mutual_knn".into()));
                    c
                },
                // Figure 10: every pair's layer × layer table, each cell and the best-matching
                // pair with their permutation null.
                cross_n_perm: Some(100),
                cross_aggregate: vec![repgeom_metrics::calibrate::Aggregate::Max],
                ..Analysis::default()
            },
            report: ReportSettings {
                small_max_d: spec.detour_max_width as u32,
                large_min_d: 256,
            },
            models: Vec::new(),
            synthetic: Some(spec),
            pairs,
            extract: None,
            probe: None,
        }
    }
}

fn resolve(base: &Path, p: &mut PathBuf) {
    if p.is_relative() {
        *p = base.join(&*p);
    }
}

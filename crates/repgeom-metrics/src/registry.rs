//! The plugin surface: the [`Metric`] and [`PairMetric`] traits and the name registry
//! (typetag's). The traits sit on the floor above the inputs and values they exchange
//! ([`crate::input`], [`crate::value`]) and the permutation null's state ([`crate::permute`]),
//! and below every metric and run that implements or calls them.

use std::collections::BTreeMap;

use repgeom_linalg::Par;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::{Acts, LayerInput, PairInput, Spectrum};
use crate::permute::{Permutations, Prepared};
use crate::value::{MetricInfo, MetricValue};

/// A per-layer metric: one representation (`N × d`) in, tidy values out.
///
/// Implementations are plain option structs with `#[serde(default, deny_unknown_fields)]`,
/// registered under a stable name with `#[typetag::serde(name = "…")]` on the `impl` block.
/// `{"metric": "<name>"}` alone must deserialise to the defaults (the registry builds default
/// instances that way), and [`MetricInfo::name`] must equal the typetag name; the conformance
/// suite checks both.
#[typetag::serde(tag = "metric")]
pub trait Metric: std::fmt::Debug + Send + Sync {
    /// Static description: name, meaning, source, options, inputs and claimed invariances.
    fn info(&self) -> MetricInfo;
    /// Validates the options (the `Params → check()` step of the house style). The default
    /// accepts every configuration: a metric whose options cannot be wrong need not write one.
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// Computes the metric on one layer. Implementations call [`Metric::check`] first.
    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>>;
    /// Computes the metric from a layer's spectrum alone (`n`, `d` and the singular values:
    /// [`Spectrum`]), as a covariance accumulated over every token gives it
    /// ([`crate::CovarianceAccumulator`]). Metrics that read nothing else (RankMe, α-ReQ,
    /// IsoScore, the condition number) override this and let [`Metric::compute`] call it, so
    /// both routes share one body; the default refuses ([`Error::NeedsPoints`]).
    fn compute_spectrum(&self, spectrum: &dyn Spectrum) -> Result<Vec<MetricValue>> {
        Err(Error::NeedsPoints {
            metric: self.info().name.into(),
            what: spectrum.what().into(),
            reason: "it is not a function of the spectrum".into(),
        })
    }

    /// This metric as it is computed over every token, from a covariance's spectrum
    /// ([`Metric::compute_spectrum`]): `None` (the default) when it needs the points; a metric
    /// with both kinds of variants returns itself with the point-based ones off (isotropy
    /// keeps IsoScore). The one rule of which metric (and which of its variants) a covariance
    /// accumulated over a corpus reports, read by `repgeom extract --spectra`, `repgeom
    /// merge` and the study's `spectral_tokens` ([`covariance_form`]).
    fn covariance_form(&self) -> Option<Box<dyn Metric>> {
        None
    }

    /// The metric on one layer given as a faer or ndarray view, `f32` or `f64` (anything that
    /// is `Into<`[`Acts`](Acts)`>`), on the current rayon pool: the library
    /// shape of every metric is options with `Default` → [`Metric::check`] → `run(acts)`, as
    /// [`PgaParams`](crate::PgaParams) is for PGA. A metric that needs the readout or null bases
    /// says so in its error; give it a [`LayerInput`] carrying them ([`Metric::compute`]).
    ///
    /// ```
    /// use ndarray::Array2;
    /// use repgeom_metrics::{Metric, RankMe};
    ///
    /// let acts = Array2::<f64>::from_shape_fn((50, 6), |(i, j)| ((i * 7 + j * j * 3) % 11) as f64);
    /// let rankme = RankMe::default();
    /// rankme.check()?;
    /// let values = rankme.run(&acts)?;
    /// assert_eq!(values[0].metric, "rankme");
    /// assert!(values[0].value > 1.0 && values[0].value <= 6.0);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    fn run<'a>(&self, acts: impl Into<Acts<'a>>) -> Result<Vec<MetricValue>>
    where
        Self: Sized,
    {
        let mut store = None;
        let view = acts.into().as_f32(&mut store);
        let what = format!("activations [{}, {}]", view.nrows(), view.ncols());
        self.compute(&LayerInput::new(view, what, Par::rayon(0))?)
    }
}

/// A metric of two representations of the same `N` points (possibly of different widths).
///
/// Registered like [`Metric`], in its own name space (`#[typetag::serde(name = "…")]`).
#[typetag::serde(tag = "metric")]
pub trait PairMetric: std::fmt::Debug + Send + Sync {
    /// Static description, as for [`Metric::info`].
    fn info(&self) -> MetricInfo;
    /// Validates the options (the default accepts every configuration).
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// Computes the metric on a pair of layers.
    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>>;
    /// Whether this configured metric needs the two readout bases, and the null bases. The
    /// default is [`MetricInfo::needs_readout`] and [`MetricInfo::needs_null`]; a metric
    /// whose options can switch those needs off (`distance_spearman` without its readout or
    /// random variants) overrides it, so front ends load only what the options use.
    fn needs_readout_and_null(&self) -> (bool, bool) {
        let i = self.info();
        (i.needs_readout, i.needs_null)
    }
    /// Whether the value is the same with the two representations swapped (the conformance
    /// suite checks it when claimed). Most pair metrics are; override for those that are not.
    fn symmetric(&self) -> bool {
        true
    }
    /// The permutation null this configured metric asks for: its `n_perm` and `seed` options,
    /// which every pair metric has (see [`crate::calibrate`]).
    fn permutations(&self) -> Permutations;
    /// Sets the permutation null (`repgeom compare --n-perm` sets it for every metric of a run).
    fn set_permutations(&mut self, permutations: Permutations);
    /// Whether a larger value means more alike (a similarity; the default) or less (a
    /// distance): the tail reported as `p_value`, and what "best" means in an aggregate.
    fn larger_is_closer(&self) -> bool {
        true
    }
    /// Per-layer work from which the values under any relabelling of the second side's points
    /// follow (the fast permutation null). The default, `None`, recomputes the metric on the
    /// relabelled rows for each draw.
    fn prepare(&self, _layer: &LayerInput<'_>) -> Result<Option<Prepared>> {
        Ok(None)
    }
    /// Computes into the layer's memo ([`LayerInput`]'s per-layer caches) the work that
    /// [`Self::compute`] shares between the pairs the layer is part of on `side` (its ranked
    /// distances, its singular basis, its neighbour lists). A table runs it for each of its
    /// layers, the layers side by side, before its pairs, which then run side by side without
    /// computing it twice. An error is not kept: `compute` meets it again and reports it
    /// with its pair. The default does nothing, and `compute` must not depend on it having
    /// run.
    fn warm(&self, _layer: &LayerInput<'_>, _side: PairSide) {}
    /// Whether a table may compute this metric's cells side by side (the default). A metric
    /// whose `compute` spreads its own work over the pool with a buffer the size of the pairs
    /// on each worker (`distance_spearman`'s random subspaces) says no: its cells run one after
    /// another, so the buffers are one set per worker and not one per worker and cell.
    fn cells_side_by_side(&self) -> bool {
        true
    }
    /// The observed values of a whole table at once, for a metric whose cells share work
    /// that no layer's memo can keep ([`Self::warm`]): `distance_spearman`'s random subspaces
    /// pair draw `i` of every layer of A with draw `i` of every layer of B, so a table ranks
    /// each layer's draw once and correlates every cell's pair of ranked draws, where its
    /// cells one by one would redo each draw in every cell of its row or column (and keeping
    /// every draw of every layer would take a layer's distances times the draws).
    ///
    /// The cells are `pairs` (`(i, j)`: `a[i]` against `b[j]`), and the result holds one
    /// entry per cell in their order. Each must equal [`Self::compute`] on that cell alone,
    /// bit for bit, its error included (the conformance suite checks it); a metric that
    /// cannot give a cell's value that way gives it by `compute`. `None` (the default): the
    /// table computes its cells with `compute`.
    fn compute_table(
        &self,
        _a: &[&LayerInput<'_>],
        _b: &[&LayerInput<'_>],
        _pairs: &[(usize, usize)],
    ) -> Option<Vec<Result<Vec<MetricValue>>>> {
        None
    }
}

/// Which side of a pair a layer is on: the first representation (model A) or the second
/// (model B, whose points the permutation null relabels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairSide {
    /// The first representation, `PairInput::a`.
    A,
    /// The second representation, `PairInput::b`.
    B,
}

impl PairSide {
    /// The layers of this side that a table's `pairs` (`(a, b)` layer indices) name, each
    /// once, in increasing order.
    pub(crate) fn used_layers(self, pairs: &[(usize, usize)]) -> Vec<usize> {
        let mut used: Vec<usize> = (pairs.iter())
            .map(|&(a, b)| if self == PairSide::A { a } else { b })
            .collect();
        used.sort_unstable();
        used.dedup();
        used
    }
}

// ---------------------------------------------------------------------------------------------
// The registry: typetag's, enumerated through serde.

/// A serde error that captures the list of registered names typetag reports for an unknown tag.
#[derive(Debug)]
enum TagListing {
    Names(&'static [&'static str]),
    Other(String),
}

impl std::fmt::Display for TagListing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagListing::Names(n) => write!(f, "names {n:?}"),
            TagListing::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for TagListing {}

impl serde::de::Error for TagListing {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        TagListing::Other(msg.to_string())
    }
    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        TagListing::Names(expected)
    }
}

/// Names typetag registered for a trait object type `T`, sorted.
fn registered<T: ?Sized>() -> Vec<&'static str>
where
    Box<T>: for<'de> Deserialize<'de>,
{
    use serde::de::value::MapDeserializer;
    // No name starts with a NUL byte, so this tag is always unknown and typetag answers with
    // the full list of registered names.
    let probe = MapDeserializer::<_, TagListing>::new(std::iter::once(("metric", "\u{0}")));
    let mut names = match Box::<T>::deserialize(probe) {
        Err(TagListing::Names(names)) => names.to_vec(),
        _ => Vec::new(),
    };
    names.sort_unstable();
    names
}

fn build<T: ?Sized>(name: &str, known: Vec<&'static str>) -> Result<Box<T>>
where
    Box<T>: for<'de> Deserialize<'de>,
{
    if !known.contains(&name) {
        return Err(Error::UnknownMetric {
            name: name.into(),
            known: known.join(", "),
        });
    }
    let json = serde_json::json!({ "metric": name });
    serde_json::from_value(json).map_err(|e| Error::InvalidOption {
        name: "metric".into(),
        value: name.into(),
        reason: format!("cannot build the default configuration: {e}"),
    })
}

/// Every registered per-layer metric name, sorted.
pub fn metric_names() -> Vec<&'static str> {
    registered::<dyn Metric>()
}

/// Every registered pair metric name, sorted.
pub fn pair_metric_names() -> Vec<&'static str> {
    registered::<dyn PairMetric>()
}

/// The per-layer metric `name` with its default options.
pub fn metric(name: &str) -> Result<Box<dyn Metric>> {
    build::<dyn Metric>(name, metric_names())
}

/// The registered metric `name`, default options, in its covariance form
/// ([`Metric::covariance_form`]); a metric that needs the points is an error saying so.
///
/// ```
/// let iso = repgeom_metrics::covariance_form("isotropy").unwrap();
/// assert_eq!(iso.info().name, "isotropy");
/// assert!(repgeom_metrics::covariance_form("intrinsic_dim_twonn").is_err());
/// ```
pub fn covariance_form(name: &str) -> Result<Box<dyn Metric>> {
    metric(name)?
        .covariance_form()
        .ok_or_else(|| Error::NeedsPoints {
            metric: name.into(),
            what: "a covariance accumulated over every token".into(),
            reason: "it is not a function of the spectrum".into(),
        })
}

/// The metrics with a covariance form ([`Metric::covariance_form`]), in registry order,
/// default options: what a covariance accumulated over every token reports.
pub fn covariance_forms() -> Vec<Box<dyn Metric>> {
    metric_names()
        .into_iter()
        .filter_map(|n| metric(n).ok()?.covariance_form())
        .collect()
}

/// The pair metric `name` with its default options.
pub fn pair_metric(name: &str) -> Result<Box<dyn PairMetric>> {
    build::<dyn PairMetric>(name, pair_metric_names())
}

/// A metric configuration from its serialised form, `{"metric": name, ...options}` (options
/// absent take their defaults): an unknown name lists the registered ones, a bad option names
/// the metric, and the result is checked. The one parser behind the CLI's `NAME:{json}`, the
/// study manifest's metric tables and the Python API.
fn from_config<T: ?Sized>(
    config: &serde_json::Map<String, serde_json::Value>,
    known: Vec<&'static str>,
    check: impl Fn(&T) -> Result<()>,
) -> Result<Box<T>>
where
    Box<T>: for<'de> Deserialize<'de>,
{
    let name = match config.get("metric") {
        Some(serde_json::Value::String(s)) => s.clone(),
        other => {
            return Err(Error::InvalidOption {
                name: "metric".into(),
                value: other.map_or_else(|| "(absent)".into(), ToString::to_string),
                reason: "a metric configuration names its metric as a string under \"metric\""
                    .into(),
            });
        }
    };
    let default = build::<T>(&name, known)?; // unknown names fail here, listing the known ones
    let m = if config.len() == 1 {
        default
    } else {
        serde_json::from_value::<Box<T>>(serde_json::Value::Object(config.clone())).map_err(
            |e| Error::InvalidOption {
                name: name.clone(),
                value: serde_json::Value::Object(config.clone()).to_string(),
                reason: e.to_string(),
            },
        )?
    };
    check(&m)?;
    Ok(m)
}

/// The per-layer metric configured by `config`, `{"metric": name, ...options}`, checked.
///
/// ```
/// let config = serde_json::json!({"metric": "rankme"});
/// let m = repgeom_metrics::metric_from_config(config.as_object().unwrap()).unwrap();
/// assert_eq!(m.info().name, "rankme");
/// let bad = serde_json::json!({"metric": "no_such_metric"});
/// assert!(repgeom_metrics::metric_from_config(bad.as_object().unwrap()).is_err());
/// ```
pub fn metric_from_config(
    config: &serde_json::Map<String, serde_json::Value>,
) -> Result<Box<dyn Metric>> {
    from_config::<dyn Metric>(config, metric_names(), |m| m.check())
}

/// The pair metric configured by `config`, `{"metric": name, ...options}`, checked.
///
/// ```
/// let config = serde_json::json!({"metric": "mutual_knn", "k": 5});
/// let m = repgeom_metrics::pair_metric_from_config(config.as_object().unwrap()).unwrap();
/// assert_eq!(repgeom_metrics::options_of(&m)["k"], 5);
/// let bad = serde_json::json!({"metric": "mutual_knn", "k": 0});
/// assert!(repgeom_metrics::pair_metric_from_config(bad.as_object().unwrap()).is_err());
/// ```
pub fn pair_metric_from_config(
    config: &serde_json::Map<String, serde_json::Value>,
) -> Result<Box<dyn PairMetric>> {
    from_config::<dyn PairMetric>(config, pair_metric_names(), |m| m.check())
}

/// Every registered per-layer metric with default options, sorted by name.
pub fn all_metrics() -> Vec<Box<dyn Metric>> {
    metric_names()
        .into_iter()
        .filter_map(|n| metric(n).ok())
        .collect()
}

/// Every registered pair metric with default options, sorted by name.
pub fn all_pair_metrics() -> Vec<Box<dyn PairMetric>> {
    pair_metric_names()
        .into_iter()
        .filter_map(|n| pair_metric(n).ok())
        .collect()
}

/// The options of a metric configuration with their values (its serialised form minus the
/// `metric` tag), in field-name order.
pub fn options_of<T: Serialize + ?Sized>(config: &T) -> BTreeMap<String, serde_json::Value> {
    match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(map)) => {
            map.into_iter().filter(|(k, _)| k != "metric").collect()
        }
        _ => BTreeMap::new(),
    }
}

/// A whole analysis, written down so that it can be rerun: the readout dimension, the null,
/// and the configured metrics. Serialises to JSON and TOML.
///
/// ```toml
/// k = 100
/// [null]
/// n_null = 100
/// seed = 0
/// [[metrics]]
/// metric = "pga"
/// ccr = [1, 5, 10]
/// [[metrics]]
/// metric = "rankme"
/// ```
#[derive(Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalysisParams {
    /// Readout subspace dimension `k`.
    pub k: usize,
    /// Null distribution (random subspaces).
    pub null: repgeom_null::NullParams,
    /// Per-layer metrics.
    pub metrics: Vec<Box<dyn Metric>>,
    /// Pair metrics (for `compare`).
    pub pair_metrics: Vec<Box<dyn PairMetric>>,
}

impl Default for AnalysisParams {
    fn default() -> Self {
        Self {
            k: crate::DEFAULT_K,
            null: repgeom_null::NullParams::default(),
            metrics: Vec::new(),
            pair_metrics: Vec::new(),
        }
    }
}

impl AnalysisParams {
    /// Checks every metric's options and the null parameters.
    pub fn check(&self) -> Result<()> {
        if self.k == 0 {
            return Err(Error::InvalidOption {
                name: "k".into(),
                value: "0".into(),
                reason: "the readout subspace needs at least one dimension".into(),
            });
        }
        self.null.clone().check()?;
        for m in &self.metrics {
            m.check()?;
        }
        for m in &self.pair_metrics {
            m.check()?;
        }
        Ok(())
    }
}

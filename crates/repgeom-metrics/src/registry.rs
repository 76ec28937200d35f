//! The plugin surface: the [`Metric`] and [`PairMetric`] traits, their inputs and outputs, and
//! the name registry (typetag's).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use repgeom_linalg::{Mat, MatRef, Par, center_columns, first_non_finite};
use repgeom_null::{NullBases, NullSummary};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Fewest points any metric accepts (the unbiased HSIC and rank statistics need 4).
pub const MIN_POINTS: usize = 4;

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

    /// The metric on one layer given as a faer or ndarray view, `f32` or `f64` (anything that
    /// is `Into<`[`Acts`](crate::params::Acts)`>`), on the current rayon pool: the library
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
    fn run<'a>(&self, acts: impl Into<crate::params::Acts<'a>>) -> Result<Vec<MetricValue>>
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
    fn permutations(&self) -> crate::calibrate::Permutations;
    /// Sets the permutation null (`repgeom compare --n-perm` sets it for every metric of a run).
    fn set_permutations(&mut self, permutations: crate::calibrate::Permutations);
    /// Whether a larger value means more alike (a similarity; the default) or less (a
    /// distance): the tail reported as `p_value`, and what "best" means in an aggregate.
    fn larger_is_closer(&self) -> bool {
        true
    }
    /// Per-layer work from which the values under any relabelling of the second side's points
    /// follow (the fast permutation null). The default, `None`, recomputes the metric on the
    /// relabelled rows for each draw.
    fn prepare(&self, _layer: &LayerInput<'_>) -> Result<Option<crate::calibrate::Prepared>> {
        Ok(None)
    }
}

/// One documented option of a metric (its default comes from serialising the default config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDoc {
    /// Field name in the config.
    pub name: &'static str,
    /// One line of meaning.
    pub help: &'static str,
}

/// What a metric is, for `repgeom metrics --list`, the docs and the conformance suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// Registered name (equals the typetag name).
    pub name: &'static str,
    /// One-line meaning.
    pub summary: &'static str,
    /// The paper the definition follows.
    pub source: &'static str,
    /// The options.
    pub options: &'static [OptionDoc],
    /// Whether the metric needs the readout basis.
    pub needs_readout: bool,
    /// Whether the metric needs null bases.
    pub needs_null: bool,
    /// Whether the value is invariant to an orthogonal rotation of the hidden space (applied
    /// to the activations and the readout basis together).
    pub rotation_invariant: bool,
}

/// One tidy output value: maps onto a row of the report schema (model, layer, … are added by
/// the caller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    /// Metric column, e.g. `pga_z`, `rankme`.
    pub metric: String,
    /// Variant column, e.g. `ccr1`, `pc1`, `biased` (empty when there is only one).
    pub variant: String,
    /// The value.
    pub value: f64,
    /// Mean of the null sample, when the value has one.
    pub null_mean: Option<f64>,
    /// Sample standard deviation (ddof 1) of the null sample.
    pub null_std: Option<f64>,
    /// One-sided empirical p-value against the null.
    pub p_value: Option<f64>,
    /// Metric-specific columns (`r2`, `random_expectation`, `rho_readout`, …).
    pub extra: BTreeMap<String, f64>,
}

impl MetricValue {
    /// A value without null statistics or extras.
    pub fn new(metric: &str, variant: &str, value: f64) -> Self {
        Self {
            metric: metric.into(),
            variant: variant.into(),
            value,
            null_mean: None,
            null_std: None,
            p_value: None,
            extra: BTreeMap::new(),
        }
    }

    /// Adds the null statistics (mean, std, p; the z lives in `value` or `extra`).
    pub fn with_null(mut self, s: &NullSummary) -> Self {
        self.null_mean = Some(s.null_mean);
        self.null_std = Some(s.null_std);
        self.p_value = Some(s.p_value);
        self
    }

    /// Adds one extra column.
    pub fn with_extra(mut self, key: &str, value: f64) -> Self {
        self.extra.insert(key.into(), value);
        self
    }
}

/// One layer's representation plus the shared, per-model precomputation (readout basis, null
/// bases) and lazily cached per-layer work (centring, singular values, CCR-corrected
/// matrices) that several metrics, and every pair the layer is part of, reuse.
///
/// Construction validates once for every metric: at least [`MIN_POINTS`] points, finite values,
/// not all points identical.
#[derive(Debug)]
pub struct LayerInput<'a> {
    acts: MatRef<'a, f32>,
    readout_basis: Option<MatRef<'a, f64>>,
    null: Option<&'a NullBases>,
    sequences: Option<&'a [usize]>,
    what: String,
    par: Par,
    memory_budget: Option<u64>,
    centred: OnceLock<Mat<f64>>,
    gram_sq: OnceLock<f64>,
    sv_centred: OnceLock<Vec<f64>>,
    sv_raw: OnceLock<Vec<f64>>,
    ccr: Mutex<Vec<(usize, Arc<Mat<f64>>)>>,
}

impl<'a> LayerInput<'a> {
    /// Wraps an `N × d` layer. `what` names it in messages, e.g.
    /// `"run.safetensors: hidden_states.3 [300, 64]"`.
    pub fn new(acts: MatRef<'a, f32>, what: impl Into<String>, par: Par) -> Result<Self> {
        let what = what.into();
        let (n, d) = (acts.nrows(), acts.ncols());
        if n < MIN_POINTS {
            return Err(Error::TooFewPoints {
                what,
                n,
                min: MIN_POINTS,
            });
        }
        if d == 0 {
            return Err(Error::InvalidOption {
                name: "d".into(),
                value: "0".into(),
                reason: format!("a representation needs at least one dimension ({what})"),
            });
        }
        if let Some((row, col)) = first_non_finite(acts) {
            return Err(Error::NonFinite { what, row, col });
        }
        let constant = (0..d).all(|j| {
            let first = acts[(0, j)];
            (1..n).all(|i| acts[(i, j)] == first)
        });
        if constant {
            return Err(Error::ConstantInput { what, n });
        }
        Ok(Self {
            acts,
            readout_basis: None,
            null: None,
            sequences: None,
            what,
            par,
            memory_budget: None,
            centred: OnceLock::new(),
            gram_sq: OnceLock::new(),
            sv_centred: OnceLock::new(),
            sv_raw: OnceLock::new(),
            ccr: Mutex::new(Vec::new()),
        })
    }

    /// Attaches the readout basis `V_k` (`d × k`, orthonormal columns, `0 < k < d`).
    pub fn with_readout(mut self, basis: MatRef<'a, f64>) -> Result<Self> {
        let (n, d) = (self.acts.nrows(), self.acts.ncols());
        crate::pga::check_basis_shape(n, d, basis, &self.what)?;
        crate::pga::check_basis_values(basis, &self.what)?;
        self.readout_basis = Some(basis);
        Ok(self)
    }

    /// Attaches the null bases (`n_null` random `d × k` subspaces; `k` must match the readout
    /// basis when both are given).
    pub fn with_null(mut self, null: &'a NullBases) -> Result<Self> {
        let d = self.acts.ncols();
        let k = self.readout_basis.map_or(null.k(), |b| b.ncols());
        if null.d() != d || null.k() != k {
            return Err(Error::ShapeMismatch {
                what: format!(
                    "{}: null bases against the layer and readout basis",
                    self.what
                ),
                left: format!("null bases [{}, {}, {}]", null.len(), null.d(), null.k()),
                right: format!("d = {d}, k = {k}"),
            });
        }
        self.null = Some(null);
        Ok(self)
    }

    /// Attaches the sequence each point came from (`N` ids, e.g. from
    /// `repgeom_io::read_sequence_ids`), so that resampling metrics resample whole sequences.
    pub fn with_sequences(mut self, ids: &'a [usize]) -> Result<Self> {
        if ids.len() != self.acts.nrows() {
            return Err(Error::ShapeMismatch {
                what: format!("{}: sequence ids", self.what),
                left: format!("{} sequence ids", ids.len()),
                right: format!("{} points", self.acts.nrows()),
            });
        }
        self.sequences = Some(ids);
        Ok(self)
    }

    /// Sets the memory budget (bytes) of engines that hold per-worker buffers (PGA), for
    /// metrics whose own options leave it unset; like [`Self::par`], an execution resource
    /// that never changes a number. Front ends pass `repgeom_io::default_memory_budget()`.
    pub fn with_memory_budget(mut self, bytes: Option<u64>) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// The memory budget set with [`Self::with_memory_budget`] (`None`: unlimited).
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget
    }

    /// The sequence of each point, when attached with [`Self::with_sequences`].
    pub fn sequences(&self) -> Option<&'a [usize]> {
        self.sequences
    }

    /// The activations (`N × d`, `f32`).
    pub fn acts(&self) -> MatRef<'a, f32> {
        self.acts
    }
    /// Number of points `N`.
    pub fn n(&self) -> usize {
        self.acts.nrows()
    }
    /// Hidden size `d`.
    pub fn d(&self) -> usize {
        self.acts.ncols()
    }
    /// The layer's name for messages.
    pub fn what(&self) -> &str {
        &self.what
    }
    /// The parallelism for GEMMs.
    pub fn par(&self) -> Par {
        self.par
    }
    /// The readout basis if supplied.
    pub fn readout_basis_opt(&self) -> Option<MatRef<'a, f64>> {
        self.readout_basis
    }
    /// The readout basis, or [`Error::MissingInput`] naming `metric`.
    pub fn readout_basis(&self, metric: &str) -> Result<MatRef<'a, f64>> {
        self.readout_basis.ok_or_else(|| Error::MissingInput {
            metric: metric.into(),
            input: "the readout basis (W_U)".into(),
            what: self.what.clone(),
        })
    }
    /// The null bases if supplied.
    pub fn null_opt(&self) -> Option<&'a NullBases> {
        self.null
    }
    /// The null bases, or [`Error::MissingInput`] naming `metric`.
    pub fn null(&self, metric: &str) -> Result<&'a NullBases> {
        self.null.ok_or_else(|| Error::MissingInput {
            metric: metric.into(),
            input: "null bases (random subspaces)".into(),
            what: self.what.clone(),
        })
    }

    /// The activations centred over points, in `f64` (computed once).
    pub fn centred(&self) -> MatRef<'_, f64> {
        self.centred
            .get_or_init(|| center_columns(self.acts))
            .as_ref()
    }

    /// `‖X_cᵀX_c‖²_F` of the centred layer (`tr(K²)` of its linear Gram, linear CKA's
    /// self-similarity), computed once and shared by every pair the layer is part of.
    pub fn centred_gram_frobenius_sq(&self) -> f64 {
        *self.gram_sq.get_or_init(|| {
            let c = self.centred();
            repgeom_linalg::cross_frobenius_sq(c, c, self.par)
        })
    }

    /// CCR-`c` of the layer (centred, its top-`c` principal directions removed, `f64`; see
    /// [`repgeom_linalg::ccr`]), computed once per level and shared by every metric and every
    /// pair that asks for it: `repgeom compare` over L × L layer pairs corrects each layer
    /// once, not once per pair.
    pub fn ccr(&self, c: usize) -> Result<Arc<Mat<f64>>> {
        let mut cache = self.ccr.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, m)) = cache.iter().find(|(level, _)| *level == c) {
            return Ok(Arc::clone(m));
        }
        // the same steps as `repgeom_linalg::ccr`, from the cached centred layer
        let xc = self.centred();
        let m = Arc::new(if c == 0 {
            xc.to_owned()
        } else {
            let u = repgeom_linalg::top_principal_directions(xc, c, self.par)?.directions;
            repgeom_linalg::remove_directions(xc, u.as_ref(), self.par)
        });
        cache.push((c, Arc::clone(&m)));
        Ok(m)
    }

    /// All `min(N, d)` singular values of the centred (`centred = true`) or raw activations,
    /// non-increasing (computed once each).
    pub fn singular_values(&self, centred: bool) -> Result<&[f64]> {
        let cell = if centred {
            &self.sv_centred
        } else {
            &self.sv_raw
        };
        if let Some(v) = cell.get() {
            return Ok(v);
        }
        let values = if centred {
            repgeom_linalg::singular_values(self.centred(), &self.what, self.par)?
        } else {
            let raw = repgeom_linalg::to_f64(self.acts);
            repgeom_linalg::singular_values(raw.as_ref(), &self.what, self.par)?
        };
        Ok(cell.get_or_init(|| values))
    }

    /// Eigenvalues of the covariance $X_c^\top X_c/(N-1)$, non-increasing, padded with zeros
    /// to length `d`.
    pub fn covariance_eigenvalues(&self) -> Result<Vec<f64>> {
        let denom = (self.n() - 1) as f64;
        let mut out: Vec<f64> = self
            .singular_values(true)?
            .iter()
            .map(|s| s * s / denom)
            .collect();
        out.resize(self.d(), 0.0);
        Ok(out)
    }
}

/// Numerical rank of a non-increasing list of singular values of an `n × d` `f32`-sourced
/// matrix: the count above $\sigma_1 \cdot \max(n, d) \cdot \varepsilon_{f32}$ (NumPy's
/// `matrix_rank` rule with the input's precision).
pub fn numerical_rank(singular_values: &[f64], n: usize, d: usize) -> usize {
    let Some(&top) = singular_values.first() else {
        return 0;
    };
    let tol = top * n.max(d) as f64 * f64::from(f32::EPSILON);
    singular_values.iter().take_while(|&&s| s > tol).count()
}

/// Two representations of the same `N` points (e.g. one layer of each of two models),
/// borrowed: a layer paired with many others keeps its cached work (centring, CCR, singular
/// values) across all its pairs.
#[derive(Debug, Clone, Copy)]
pub struct PairInput<'a> {
    /// The first representation (its readout and null bases, if any, travel with it).
    pub a: &'a LayerInput<'a>,
    /// The second representation.
    pub b: &'a LayerInput<'a>,
}

impl<'a> PairInput<'a> {
    /// Pairs two layers; they must hold the same number of points.
    pub fn new(a: &'a LayerInput<'a>, b: &'a LayerInput<'a>) -> Result<Self> {
        if a.n() != b.n() {
            return Err(Error::ShapeMismatch {
                what: "two representations of the same inputs".into(),
                left: format!("{} [{}, {}]", a.what(), a.n(), a.d()),
                right: format!("{} [{}, {}]", b.what(), b.n(), b.d()),
            });
        }
        Ok(Self { a, b })
    }
    /// `"A vs B"` for messages.
    pub fn what(&self) -> String {
        format!("{} vs {}", self.a.what(), self.b.what())
    }
}

/// Which layers of two models a comparison pairs, as index pairs into their layer lists: all
/// `len_a × len_b` of them, or, with `diagonal`, each layer `i` of A with the layer of B at the
/// nearest relative depth, `j = round(i (len_b − 1) / (len_a − 1))` (halves rounded away from
/// zero). Both `repgeom compare` and the Python `compare` pair layers with this.
///
/// ```
/// use repgeom_metrics::layer_pairs;
/// assert_eq!(layer_pairs(2, 2, false), [(0, 0), (0, 1), (1, 0), (1, 1)]);
/// // 3 layers of A against 5 of B: depths 0, 1/2, 1
/// assert_eq!(layer_pairs(3, 5, true), [(0, 0), (1, 2), (2, 4)]);
/// ```
pub fn layer_pairs(len_a: usize, len_b: usize, diagonal: bool) -> Vec<(usize, usize)> {
    if !diagonal {
        return (0..len_a)
            .flat_map(|i| (0..len_b).map(move |j| (i, j)))
            .collect();
    }
    (0..len_a)
        .map(|i| {
            let j = if len_a <= 1 {
                0
            } else {
                ((i as f64) * (len_b - 1) as f64 / (len_a - 1) as f64).round() as usize
            };
            (i, j)
        })
        .collect()
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
            k: 100,
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

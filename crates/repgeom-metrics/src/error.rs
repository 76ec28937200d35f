/// Errors of metric computation: all data-dependent (bad values, degenerate input, bad options).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller's progress callback stopped the run (internal: the engine turns it back into
    /// the callback's own panic, so callers never see this value).
    #[error("cancelled by the progress callback")]
    Cancelled,
    /// Input activations or readout contain NaN or infinity.
    #[error("{what}: non-finite value (NaN or Inf) at row {row}, column {col}")]
    NonFinite {
        /// Which input (e.g. "layer 3 activations").
        what: String,
        /// Row of the first non-finite value.
        row: usize,
        /// Column of the first non-finite value.
        col: usize,
    },
    /// A readout `W_U` whose width is not the activations' `d` (named as a front end loaded
    /// them: [`crate::check_readout_for`]).
    #[error(
        "shape mismatch: activations {acts} have d = {d}, but readout {readout} tensor {tensor} is [{rows}, {cols}]"
    )]
    ReadoutWidth {
        /// The activations (a file, an argument).
        acts: String,
        /// Their hidden size.
        d: usize,
        /// The readout (a file, a hub snapshot, an argument).
        readout: String,
        /// Its tensor's name.
        tensor: String,
        /// `W_U`'s rows.
        rows: usize,
        /// `W_U`'s columns.
        cols: usize,
    },
    /// A readout dimension `k` outside `0 < k < d` ([`crate::check_readout_for`]).
    #[error("k = {k} must satisfy 0 < k < d = {d} ({readout} tensor {tensor} [{rows}, {cols}])")]
    ReadoutK {
        /// The `k` asked for.
        k: usize,
        /// The hidden size.
        d: usize,
        /// The readout.
        readout: String,
        /// Its tensor's name.
        tensor: String,
        /// `W_U`'s rows.
        rows: usize,
        /// `W_U`'s columns.
        cols: usize,
    },
    /// A metric asked of a layer's spectrum alone ([`crate::Metric::compute_spectrum`], e.g.
    /// from a covariance accumulated over every token) that needs the points themselves.
    #[error("{metric} needs the points themselves, not only their spectrum ({what}): {reason}")]
    NeedsPoints {
        /// The metric.
        metric: String,
        /// Which layer.
        what: String,
        /// What of it needs the points (an option to turn off, or the whole metric).
        reason: String,
    },
    /// Two inputs disagree in shape.
    #[error("{what}: shape mismatch: {left} vs {right}")]
    ShapeMismatch {
        /// What was being combined.
        what: String,
        /// Left shape, formatted.
        left: String,
        /// Right shape, formatted.
        right: String,
    },
    /// Too few points.
    #[error("{what}: needs at least {min} points, got {n}")]
    TooFewPoints {
        /// Which computation.
        what: String,
        /// Points given.
        n: usize,
        /// Points needed.
        min: usize,
    },
    /// An option is out of range.
    #[error("invalid option {name} = {value}: {reason}")]
    InvalidOption {
        /// Option name.
        name: String,
        /// Its value, formatted.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The exact engine does not fit in the memory budget.
    #[error(
        "{what}: exact PGA over {pairs} pairs needs about {needed} bytes with one worker, over the budget of {budget} bytes; raise the budget (--max-memory; manifest max_memory) or estimate on sampled pairs (--max-pairs; manifest max_pairs)"
    )]
    MemoryBudget {
        /// Which layer.
        what: String,
        /// Bytes needed with one worker.
        needed: u64,
        /// The budget.
        budget: u64,
        /// Pairs of the exact computation.
        pairs: usize,
    },
    /// An unknown metric name was requested.
    #[error("unknown metric {name:?}; known metrics: {known}")]
    UnknownMetric {
        /// The requested name.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// A metric needs an input the caller did not supply (a readout basis, null bases).
    #[error("metric {metric} needs {input}, which was not supplied ({what})")]
    MissingInput {
        /// The metric's registered name.
        metric: String,
        /// The missing input, in words.
        input: String,
        /// Which layer or pair.
        what: String,
    },
    /// A comparison's metrics use both models' readouts and one or both were not given
    /// ([`crate::analysis::ModelPair::new`]).
    #[error(
        "{metrics} needs both readouts, and none was given for {missing}: give W_U of both \
         models (or choose options that need none, e.g. distance_spearman with readout = \
         false and random = false)"
    )]
    MissingReadouts {
        /// The metrics that use the readout, comma-separated.
        metrics: String,
        /// The model or models without one.
        missing: String,
    },
    /// Per-layer metrics that use the readout, run without one ([`crate::analysis::needs`]).
    #[error("{metrics} {verb} the readout: pass {how}")]
    MissingReadout {
        /// The metrics that use it, comma-separated.
        metrics: String,
        /// "needs" or "need".
        verb: &'static str,
        /// How this front end passes a readout (`--readout W_U`, `readout=W_U`).
        how: String,
    },
    /// The input is constant (every point identical), so no geometry can be measured.
    #[error("{what}: all {n} points are identical, so the geometry is undefined")]
    ConstantInput {
        /// Which layer.
        what: String,
        /// Number of points.
        n: usize,
    },
    /// The statistic is undefined or infinite on this input (e.g. rank deficiency).
    #[error("{what}: {reason}")]
    Degenerate {
        /// Which metric on which layer.
        what: String,
        /// Why the value is undefined.
        reason: String,
    },
    /// The null of one layer could not be drawn or matched (e.g. the spectrum-matched null
    /// cannot reach the readout's captured variance on this layer).
    #[error("{what}: {error}")]
    NullOnLayer {
        /// Which layer, after which CCR.
        what: String,
        /// What the null sampler reported.
        error: repgeom_null::Error,
    },
    /// The numerical core failed (zero-norm rows, constant input, non-convergence).
    #[error(transparent)]
    Linalg(#[from] repgeom_linalg::Error),
    /// The null distribution failed (degenerate null, bad supplied bases).
    #[error(transparent)]
    Null(#[from] repgeom_null::Error),
    /// The device could not be opened or used (`--device cuda`).
    #[error(transparent)]
    Device(#[from] repgeom_cuda::Error),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

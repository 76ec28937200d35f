//! The crate's error type.

/// Everything that can go wrong while probing; all are data-dependent failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The feature buffer does not hold `rows * cols` values.
    #[error(
        "layer {layer}: feature buffer holds {found} values, expected [{rows}, {cols}] = {expected}"
    )]
    FeatureShape {
        /// Layer index.
        layer: usize,
        /// Declared rows.
        rows: usize,
        /// Declared columns.
        cols: usize,
        /// `rows * cols`.
        expected: usize,
        /// Values actually present.
        found: usize,
    },
    /// A feature matrix has no columns or no rows.
    #[error("layer {layer}: feature matrix [{rows}, {cols}] is empty")]
    EmptyFeatures {
        /// Layer index.
        layer: usize,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// The number of feature rows differs from the number of labels.
    #[error(
        "layer {layer}: features [{rows}, {cols}] have {rows} rows but there are {labels} labels"
    )]
    LabelCount {
        /// Layer index.
        layer: usize,
        /// Feature rows.
        rows: usize,
        /// Feature columns.
        cols: usize,
        /// Number of labels.
        labels: usize,
    },
    /// A feature value is NaN or infinite.
    #[error("layer {layer}: feature [{row}, {col}] of [{rows}, {cols}] is {value}")]
    NonFinite {
        /// Layer index.
        layer: usize,
        /// Row (example) of the first bad value.
        row: usize,
        /// Column of the first bad value.
        col: usize,
        /// Feature rows.
        rows: usize,
        /// Feature columns.
        cols: usize,
        /// The offending value.
        value: f32,
    },
    /// A label is not below the number of class names.
    #[error("label {label} of example {index} is out of range for {n_classes} class names")]
    LabelOutOfRange {
        /// Example index.
        index: usize,
        /// The label.
        label: usize,
        /// Number of class names.
        n_classes: usize,
    },
    /// Fewer than two distinct classes: nothing to discriminate.
    #[error("{set} labels hold a single class ({class}); a probe needs at least two")]
    SingleClass {
        /// Which set (`all`, `train`).
        set: &'static str,
        /// The only class present.
        class: String,
    },
    /// A split leaves the training or test set empty.
    #[error("the {set} set is empty ({n_examples} examples)")]
    EmptySet {
        /// `train` or `test`.
        set: &'static str,
        /// Number of examples.
        n_examples: usize,
    },
    /// The training set is too small for the requested cross-validation.
    #[error("{n_train} training examples cannot be split into {folds} cross-validation folds")]
    TooFewForFolds {
        /// Training examples.
        n_train: usize,
        /// Requested folds.
        folds: usize,
    },
    /// A given split does not have one entry per example.
    #[error("split has {found} entries but there are {expected} labelled examples")]
    SplitLength {
        /// Number of labels.
        expected: usize,
        /// Number of split entries.
        found: usize,
    },
    /// A split file line is neither `train` nor `test`.
    #[error("split line {line}: expected `train`, `test`, `1` or `0`, found {found:?}")]
    SplitParse {
        /// 1-based line number.
        line: usize,
        /// The text found.
        found: String,
    },
    /// A parameter is out of range.
    #[error("invalid probe parameter {name} = {value}: {reason}")]
    InvalidParam {
        /// Parameter name.
        name: &'static str,
        /// Its value, formatted.
        value: String,
        /// What is required.
        reason: &'static str,
    },
    /// The optimiser produced a non-finite loss (should not happen on finite, standardised input).
    #[error("layer {layer}: logistic regression diverged at l2 = {l2} (non-finite loss)")]
    Diverged {
        /// Layer index.
        layer: usize,
        /// L2 strength.
        l2: f64,
    },
    /// linfa-logistic failed on one fit of the protocol (`solver = linfa`).
    #[error("layer {layer}: linfa-logistic failed at l2 = {l2}: {source}")]
    LinfaSolver {
        /// Layer index (0 for a [`linfa::traits::Fit`] on a dataset).
        layer: usize,
        /// L2 strength.
        l2: f64,
        /// linfa-logistic's error.
        source: linfa_logistic::error::Error,
    },
    /// An error of linfa itself (e.g. from its cross-validation helpers); linfa's
    /// [`Fit`](linfa::traits::Fit) requires the fit error to convert from it.
    #[error("linfa: {source}")]
    Linfa {
        /// linfa's error.
        #[from]
        source: linfa::Error,
    },
    /// A linfa dataset has no records or no features.
    #[error("dataset records [{rows}, {cols}] are empty")]
    EmptyDataset {
        /// Records (rows).
        rows: usize,
        /// Features (columns).
        cols: usize,
    },
    /// A linfa dataset has a different number of targets than records.
    #[error("dataset has {rows} records but {targets} targets")]
    TargetCount {
        /// Records (rows).
        rows: usize,
        /// Targets.
        targets: usize,
    },
    /// A record value is NaN, infinite, or beyond the f32 range the solver computes in.
    #[error(
        "record [{row}, {col}] of [{rows}, {cols}] is {value:e}; records must be finite f32 values"
    )]
    NonFiniteRecord {
        /// Row of the first bad value.
        row: usize,
        /// Column of the first bad value.
        col: usize,
        /// Records (rows).
        rows: usize,
        /// Features (columns).
        cols: usize,
        /// The offending value.
        value: f64,
    },
    /// Records to predict have a different feature count than the fitted probe.
    #[error("records have {found} features but the probe was fitted on {expected}")]
    FeatureCount {
        /// Features the probe was fitted on.
        expected: usize,
        /// Features of the records.
        found: usize,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Errors of the numerical core: data-dependent failures, never contract violations
/// (shape mismatches between arguments are programmer errors and panic).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A row has (numerically) zero norm, so its cosine distance is undefined.
    #[error("{what}: row {row} has zero norm, so cosine distances to it are undefined")]
    ZeroNorm {
        /// Which matrix (e.g. "activations after CCR-1", "projection onto the readout").
        what: String,
        /// The offending row.
        row: usize,
    },
    /// A value is NaN or infinite.
    #[error("{what}: non-finite value at row {row}, column {col}")]
    NonFinite {
        /// Which matrix.
        what: String,
        /// Row of the first non-finite value.
        row: usize,
        /// Column of the first non-finite value.
        col: usize,
    },
    /// Too few points for the statistic.
    #[error("{what}: needs at least {min} points, got {n}")]
    TooFewPoints {
        /// Which computation.
        what: String,
        /// Points given.
        n: usize,
        /// Points needed.
        min: usize,
    },
    /// A decomposition did not converge.
    #[error("{what} did not converge")]
    NoConvergence {
        /// Which decomposition.
        what: String,
    },
    /// A rank or dimension request cannot be met.
    #[error("{what}: asked for {requested}, but only {available} are available")]
    DimensionTooLarge {
        /// What was asked for.
        what: String,
        /// Requested count.
        requested: usize,
        /// Available count.
        available: usize,
    },
    /// A statistic is undefined because the input has no variation.
    #[error("{what}: input is constant, so the statistic is undefined")]
    Constant {
        /// Which statistic.
        what: String,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

//! The one error type of the crate.

/// Errors of the synthetic generator: invalid parameters, never numerical failures
/// (the generator only multiplies, orthonormalises well-conditioned Gaussian draws and adds).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is out of its allowed range.
    #[error("synthetic {params}: {param} = {value} is invalid: {reason}")]
    InvalidParam {
        /// Which parameter set (`ModelParams`, `ZooParams`, `Regime`).
        params: &'static str,
        /// The field name.
        param: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What the value must satisfy.
        reason: String,
    },
    /// A detour asks for more dark directions than the model reserved.
    #[error(
        "synthetic model {model}: regime asks for {requested} dark directions but only {available} are reserved (raise ModelParams::dark_pool)"
    )]
    DarkDimsTooLarge {
        /// The model label.
        model: String,
        /// Requested dark directions.
        requested: usize,
        /// Reserved dark directions (`dark_pool`).
        available: usize,
    },
    /// The eigendecomposition behind a rotation regime failed to converge.
    #[error("synthetic model {model}: {source}")]
    Numerical {
        /// The model label.
        model: String,
        /// The linear-algebra failure.
        source: repgeom_linalg::Error,
    },
}

/// Result type of the crate.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid(
    params: &'static str,
    param: &'static str,
    value: impl std::fmt::Display,
    reason: impl Into<String>,
) -> Error {
    Error::InvalidParam {
        params,
        param,
        value: value.to_string(),
        reason: reason.into(),
    }
}

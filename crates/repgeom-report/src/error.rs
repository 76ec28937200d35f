//! The crate's single error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while building tables, figures and pages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("write", "read", "rename", ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// polars failed while converting, reading or writing a table.
    #[error("polars ({context}): {source}")]
    Polars {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: polars::error::PolarsError,
    },
    /// JSON (de)serialisation failed.
    #[error("json {path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The file extension names no table format this crate reads.
    #[error("unknown table format for {path}: expected .csv, .parquet or .json")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// A column the tidy schema needs is missing or has the wrong type.
    #[error("column {column}: {problem}")]
    BadColumn {
        /// Column name.
        column: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A row breaks the schema's rules (layer out of range, inconsistent relative depth, ...).
    #[error("invalid row (model {model}, metric {metric}, layer {layer}): {problem}")]
    InvalidRow {
        /// The row's model.
        model: String,
        /// The row's metric.
        metric: String,
        /// The row's layer.
        layer: u32,
        /// What is wrong with it.
        problem: String,
    },
    /// Two rows share the same key (model, checkpoint, step, layer, metric, variant, other_model
    /// and, for layer × layer cells, `other_layer`).
    #[error(
        "duplicate row: model {model}, checkpoint {checkpoint:?}, layer {layer}, metric {metric}, variant {variant:?}, other_model {other_model:?}"
    )]
    DuplicateRow {
        /// Model.
        model: String,
        /// Checkpoint.
        checkpoint: String,
        /// Layer.
        layer: u32,
        /// Metric.
        metric: String,
        /// Variant.
        variant: String,
        /// Other model.
        other_model: String,
    },
    /// The table has no rows a figure needs.
    #[error("figure {figure}: no data (needs metric {metric}{variant_note})")]
    NoData {
        /// Figure name.
        figure: String,
        /// The metric the figure needs.
        metric: String,
        /// ", variant X" when a variant was required, else empty.
        variant_note: String,
    },
    /// A figure option is out of range.
    #[error("invalid figure options: {problem}")]
    InvalidOptions {
        /// What is wrong.
        problem: String,
    },
    /// plotters failed while drawing.
    #[error("drawing figure {figure} ({backend}): {message}")]
    Draw {
        /// Figure name.
        figure: String,
        /// "svg" or "png".
        backend: &'static str,
        /// The backend's message.
        message: String,
    },
    /// PNG encoding failed.
    #[error("encoding PNG for figure {figure}: {message}")]
    Png {
        /// Figure name.
        figure: String,
        /// The encoder's message.
        message: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Wraps a failed file operation: `op` on `path`.
pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

/// Wraps a polars failure while doing `context`.
pub(crate) fn polars_err(
    context: impl Into<String>,
) -> impl FnOnce(polars::error::PolarsError) -> Error {
    let context = context.into();
    move |source| Error::Polars { context, source }
}

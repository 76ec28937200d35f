//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing repgeom files.
///
/// Every variant names the file (and, where it applies, the tensor and the shapes involved),
/// so that a message read in a log is enough to find the offending input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor holds NaN or an infinity where every value must be finite (e.g. `W_U`).
    #[error(
        "{} tensor {tensor} [{rows}, {cols}]: non-finite value (NaN or Inf) at row {row}, column {col}",
        file.display()
    )]
    NonFinite {
        /// The file or checkpoint directory holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The tensor's rows.
        rows: usize,
        /// The tensor's columns.
        cols: usize,
        /// Row of the first non-finite value.
        row: usize,
        /// Column of the first non-finite value.
        col: usize,
    },
    /// A table (parquet file) has no column of that name.
    #[error("{}: no column `{column}`; its columns are {columns:?}", file.display())]
    MissingColumn {
        /// The file.
        file: PathBuf,
        /// The column asked for.
        column: String,
        /// The columns it has.
        columns: Vec<String>,
    },
    /// A column asked for as text holds something else.
    #[error("{}: column `{column}` has dtype {dtype}, not text (a string column)", file.display())]
    ColumnNotText {
        /// The file.
        file: PathBuf,
        /// The column.
        column: String,
        /// Its dtype, as polars names it (`i64`, `binary`, ...).
        dtype: String,
    },
    /// A column asked for as class labels holds neither integers nor strings.
    #[error(
        "{}: column `{column}` has dtype {dtype}, not class labels (an integer or string column)",
        file.display()
    )]
    ColumnNotLabels {
        /// The file.
        file: PathBuf,
        /// The column.
        column: String,
        /// Its dtype, as polars names it (`f64`, `binary`, ...).
        dtype: String,
    },
    /// The operating system refused a read, write, rename or directory listing.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file being accessed.
        file: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The bytes do not follow the container format (npy header, zip, safetensors header, JSON).
    #[error("{}: invalid {format} file: {reason}", file.display())]
    Format {
        /// The file being parsed.
        file: PathBuf,
        /// The format expected (`npy`, `npz`, `safetensors`, `json`, `csv`).
        format: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The file's extension (or the directory layout) is not one this crate reads.
    #[error("{}: unsupported file type (expected {expected})", file.display())]
    UnknownFormat {
        /// The path given.
        file: PathBuf,
        /// The accepted kinds.
        expected: &'static str,
    },
    /// A tensor's element type cannot be used for the requested purpose.
    #[error("{}: tensor `{tensor}` has dtype {dtype}, expected {expected}", file.display())]
    UnsupportedDtype {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The dtype found.
        dtype: String,
        /// The dtypes accepted here.
        expected: &'static str,
    },
    /// A tensor declares more data than the file holds.
    #[error(
        "{}: tensor `{tensor}` with shape {shape:?} needs {needed} bytes but only {available} are present",
        file.display()
    )]
    Truncated {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Bytes the shape and dtype require.
        needed: u64,
        /// Bytes actually available.
        available: u64,
    },
    /// A tensor is followed by bytes that its shape does not account for.
    #[error(
        "{}: tensor `{tensor}` with shape {shape:?} needs {needed} bytes but {available} are present (trailing data)",
        file.display()
    )]
    TrailingData {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Bytes the shape and dtype require.
        needed: u64,
        /// Bytes actually present.
        available: u64,
    },
    /// A declared tensor is absurdly large (more than 2^40 elements or overflowing sizes).
    #[error("{}: tensor `{tensor}` declares shape {shape:?}, which is too large to load", file.display())]
    TooLarge {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The declared shape.
        shape: Vec<usize>,
    },
    /// A tensor has the wrong number of dimensions or the wrong sizes.
    #[error("{}: tensor `{tensor}` has shape {found:?}, expected {expected}", file.display())]
    ShapeMismatch {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// What was expected, in words (e.g. `[L, N, d] or [N, d]`).
        expected: String,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A named tensor is absent.
    #[error("{}: no tensor `{tensor}` (available: {available})", file.display())]
    MissingTensor {
        /// The file or checkpoint directory searched.
        file: PathBuf,
        /// The tensor (or list of candidate names) looked for.
        tensor: String,
        /// The tensors present, comma separated (shortened when there are many).
        available: String,
    },
    /// The final norm of the checkpoint's family has no gain to fold into `W_U` (OLMo-1's
    /// LayerNorm without weight or bias).
    #[error(
        "{}: the final norm of model_type {model_type} is a LayerNorm without weight or bias (no `{tensor}`): there is no gain to fold",
        file.display()
    )]
    NoNormGain {
        /// The checkpoint directory.
        file: PathBuf,
        /// The checkpoint's `model_type`.
        model_type: String,
        /// The gain tensor such a norm would have (e.g. `model.norm.weight`).
        tensor: String,
    },
    /// A requested layer is absent from an activation file.
    #[error("{}: layer {layer} not found (available layers: {available:?})", file.display())]
    MissingLayer {
        /// The activation file.
        file: PathBuf,
        /// The layer asked for.
        layer: usize,
        /// The layers present.
        available: Vec<usize>,
    },
    /// The file holds nothing recognisable as activations, or the layers are inconsistent.
    #[error("{}: {reason}", file.display())]
    BadLayout {
        /// The activation file.
        file: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A shard named by a sharded checkpoint's index is absent.
    #[error("{}: shard `{shard}` listed in the index is missing", index.display())]
    MissingShard {
        /// The `model.safetensors.index.json` file.
        index: PathBuf,
        /// The shard file name.
        shard: String,
    },
    /// A file names another file by a path that would leave its folder (`../x`, `/etc/x`):
    /// refused before anything is opened.
    #[error("{}: refused the file name {name}: a name there must stay inside {}", file.display(), dir.display())]
    UnsafeName {
        /// The file that gave the name (e.g. `model.safetensors.index.json`).
        file: PathBuf,
        /// The folder the name had to stay inside.
        dir: PathBuf,
        /// The name and the rule it breaks.
        name: crate::BadName,
    },
    /// A HuggingFace checkpoint directory is unusable.
    #[error("{}: {reason}", dir.display())]
    Checkpoint {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// More vocabulary rows were requested than the readout holds.
    #[error(
        "{}: tensor `{tensor}` has {available} rows, cannot keep {requested} vocabulary rows",
        file.display()
    )]
    VocabRows {
        /// The readout file or checkpoint.
        file: PathBuf,
        /// The readout tensor.
        tensor: String,
        /// Rows requested.
        requested: usize,
        /// Rows present.
        available: usize,
    },
    /// A label file is malformed.
    #[error("{}: {reason}", file.display())]
    Labels {
        /// The label file.
        file: PathBuf,
        /// What was wrong (names the row or column).
        reason: String,
    },
    /// A [`crate::Matrix`] was built from data whose length does not match `rows x cols`.
    #[error("matrix of {rows} x {cols} needs {expected} values, got {found}")]
    MatrixShape {
        /// Rows requested.
        rows: usize,
        /// Columns requested.
        cols: usize,
        /// `rows * cols` (saturating).
        expected: usize,
        /// Length of the data given.
        found: usize,
    },
    /// Data handed to a writer does not match the shape given with it.
    #[error(
        "{}: tensor `{tensor}` has shape {shape:?} ({expected} values) but {found} values were given",
        file.display()
    )]
    WriteShape {
        /// The output file.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape given.
        shape: Vec<usize>,
        /// Values the shape requires.
        expected: usize,
        /// Values given.
        found: usize,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(file: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            file: file.to_path_buf(),
            source,
        }
    }

    pub(crate) fn format(
        file: &std::path::Path,
        format: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        Error::Format {
            file: file.to_path_buf(),
            format,
            reason: reason.into(),
        }
    }
}

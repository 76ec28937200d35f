//! repgeom-io: tensor file input and output for repgeom, and nothing else (no maths, no
//! printing). It reads per-layer hidden states ([`read_activations`] → [`Activations`]), the
//! unembedding matrix `W_U` ([`read_readout`] → [`Readout`]; which tensor, and the final
//! norm in front of it, come from one table keyed by `model_type`, [`ARCHS`]), HuggingFace
//! checkpoints ([`open_checkpoint`] → [`Checkpoint`]), saved bases ([`read_array_f64`]) and
//! probe labels ([`read_labels`]), and, with the `parquet` feature, a text or label column of
//! datasets' parquet files (`read_parquet_texts`, `read_parquet_labels`); it writes `.npy` and
//! `.safetensors` atomically.
//!
//! The main type is [`Matrix`], a plain row-major `Vec<f32>` with its shape. Key design
//! decision: this crate hands out plain data, not faer or ndarray types, and implements the
//! `.npy` format itself, because (a) only `repgeom-linalg` may depend on faer, (b) inputs are
//! untrusted bytes that must never panic or allocate unchecked sizes, which is easiest to
//! guarantee when every offset and length is checked against the file size in one place
//! (`tensor::check_extent`), and (c) large inputs (multi-GB shards) are memory-mapped and only
//! the requested layers or tensors are converted to f32.
//!
//! Names inside untrusted files (a checkpoint index's shard names) become a [`RelPath`] before
//! they name a file: one that would leave its folder is refused, never opened.
//!
//! It is not a validator of values: NaN and Inf pass through ([`first_non_finite`] lets callers
//! check), and it does not run models or tokenizers.
#![deny(missing_docs)]

mod activations;
mod arch;
mod array;
mod checkpoint;
mod digest;
mod error;
mod labels;
mod mmap;
mod npy;
mod npz;
mod readout;
mod relpath;
mod st;
mod system;
mod tensor;
#[cfg(feature = "parquet")]
mod texts;
mod write;

#[cfg(test)]
mod tests;

pub use activations::{Activations, LayerActs, read_activations};
pub use arch::{ARCHS, Arch, GainConvention, NormKind};
pub use array::{ArrayF64, read_array_f64, read_safetensors_f64};
pub use checkpoint::{Checkpoint, FloatTensor, open_checkpoint, open_checkpoint_partial};
pub use digest::{WeightsDigest, WeightsHasher};
pub use error::{Error, Result};
pub use labels::{AG_NEWS_CLASSES, LabelFile, read_labels};
pub use readout::{
    FinalNormGain, Readout, ReadoutOptions, ReadoutPrep, read_final_norm_gain, read_readout,
    read_readout_prepared, readout_tensor_names,
};
pub use relpath::{BadName, MAX_COMPONENT_BYTES, MAX_NAME_BYTES, RelPath};
pub use system::default_memory_budget;
pub use tensor::FloatValues;
#[cfg(feature = "parquet")]
pub use texts::{read_parquet_labels, read_parquet_texts};
pub use write::{
    atomic_write, write_npy_f32, write_npy_f64, write_safetensors, write_safetensors_f64,
};

use std::collections::BTreeMap;
use std::path::Path;

/// A dense row-major f32 matrix: `data[i * cols + j]` is row `i`, column `j`.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<f32>,
}

impl Matrix {
    /// Builds a matrix, checking that `data.len() == rows * cols`.
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Result<Self> {
        let expected = rows.saturating_mul(cols);
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::MatrixShape {
                rows,
                cols,
                expected,
                found: data.len(),
            });
        }
        Ok(Matrix { rows, cols, data })
    }

    /// Row `i`. Panics if `i >= rows` (a caller bug, like slice indexing).
    #[track_caller]
    pub fn row(&self, i: usize) -> &[f32] {
        assert!(
            i < self.rows,
            "row {i} out of range for a matrix with {} rows",
            self.rows
        );
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// Index of the first NaN or infinite value, if any.
pub fn first_non_finite(values: &[f32]) -> Option<usize> {
    values.iter().position(|v| !v.is_finite())
}

/// Reads the `__metadata__` string map of a `.safetensors` file (empty when absent).
pub fn read_safetensors_metadata(path: &Path) -> Result<BTreeMap<String, String>> {
    Ok(st::StFile::open(path)?.metadata())
}

/// The metadata key of word points (`repgeom extract --points words`): the first character of
/// each point's window, the context its words share (written by `repgeom-extract`).
pub const WORD_CONTEXTS_KEY: &str = "word_contexts";

/// The sequence each of the `n` points of an activation file came from, read from the
/// `positions` metadata that `repgeom extract` writes (a JSON list of `[sequence, position]`
/// pairs, one per point), or for word points from [`WORD_CONTEXTS_KEY`] (the window a word was
/// read in is its sequence: `positions` then holds the word's characters). `Ok(None)` when the
/// file records none (not a `.safetensors` file, or no `positions` entry): callers that
/// resample sequences then fall back to points and say so.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("acts.npy");
/// repgeom_io::write_npy_f32(&path, &[3, 2], &[0.0; 6]).unwrap();
/// assert_eq!(repgeom_io::read_sequence_ids(&path, 3).unwrap(), None);
/// ```
pub fn read_sequence_ids(path: &Path, n: usize) -> Result<Option<Vec<usize>>> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
        && let Some(text) = read_safetensors_metadata(path)?.remove(WORD_CONTEXTS_KEY)
    {
        let ids: Vec<usize> = serde_json::from_str(&text).map_err(|e| {
            Error::format(
                path,
                "safetensors",
                format!("metadata `{WORD_CONTEXTS_KEY}` is not a JSON list of numbers: {e}"),
            )
        })?;
        if ids.len() != n {
            return Err(Error::format(
                path,
                "safetensors",
                format!(
                    "metadata `{WORD_CONTEXTS_KEY}` has {} entries but the activations have {n} points",
                    ids.len()
                ),
            ));
        }
        return Ok(Some(ids));
    }
    Ok(read_positions(path, n)?.map(|pos| pos.iter().map(|p| p[0]).collect()))
}

/// The `[sequence, position]` of each of the `n` points of an activation file, from the
/// `positions` metadata `repgeom extract` writes; `Ok(None)` when the file records none (see
/// [`read_sequence_ids`]). Two files of the same points in the same order have equal lists.
pub fn read_positions(path: &Path, n: usize) -> Result<Option<Vec<[usize; 2]>>> {
    let is_st = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    if !is_st {
        return Ok(None);
    }
    let Some(text) = read_safetensors_metadata(path)?.remove("positions") else {
        return Ok(None);
    };
    let pos: Vec<[usize; 2]> = serde_json::from_str(&text).map_err(|e| {
        Error::format(
            path,
            "safetensors",
            format!("metadata `positions` is not a JSON list of [sequence, position] pairs: {e}"),
        )
    })?;
    if pos.len() != n {
        return Err(Error::format(
            path,
            "safetensors",
            format!(
                "metadata `positions` has {} entries but the activations have {n} points",
                pos.len()
            ),
        ));
    }
    Ok(Some(pos))
}

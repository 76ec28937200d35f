//! repgeom-io: tensor file input and output for repgeom, and nothing else (no maths, no
//! printing). It reads per-layer hidden states ([`read_activations`] → [`Activations`]), the
//! unembedding matrix `W_U` ([`read_readout`] → [`Readout`]), HuggingFace checkpoints
//! ([`open_checkpoint`] → [`Checkpoint`]), saved bases ([`read_array_f64`]) and probe labels
//! ([`read_labels`]); it writes `.npy` and `.safetensors` atomically.
//!
//! The main type is [`Matrix`], a plain row-major `Vec<f32>` with its shape. Key design
//! decision: this crate hands out plain data, not faer or ndarray types, and implements the
//! `.npy` format itself, because (a) only `repgeom-linalg` may depend on faer, (b) inputs are
//! untrusted bytes that must never panic or allocate unchecked sizes, which is easiest to
//! guarantee when every offset and length is checked against the file size in one place
//! (`tensor::check_extent`), and (c) large inputs (multi-GB shards) are memory-mapped and only
//! the requested layers or tensors are converted to f32.
//!
//! It is not a validator of values: NaN and Inf pass through ([`first_non_finite`] lets callers
//! check), and it does not run models or tokenizers.
#![deny(missing_docs)]

mod activations;
mod array;
mod checkpoint;
mod error;
mod labels;
mod mmap;
mod npy;
mod npz;
mod readout;
mod st;
mod tensor;
mod write;

#[cfg(test)]
mod tests;

pub use activations::{Activations, LayerActs, read_activations};
pub use array::{ArrayF64, read_array_f64};
pub use checkpoint::{Checkpoint, open_checkpoint};
pub use error::{Error, Result};
pub use labels::{AG_NEWS_CLASSES, Labels, read_labels};
pub use readout::{Readout, ReadoutOptions, read_final_norm_gain, read_readout};
pub use write::{atomic_write, write_npy_f32, write_npy_f64, write_safetensors};

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

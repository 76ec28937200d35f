//! Generic f64 arrays (subspace bases and null draws) read from `.npy` or `.safetensors`.

use std::borrow::Cow;
use std::path::Path;

use crate::activations::extension;
use crate::st::{StFile, list_names};
use crate::{Error, Result, mmap, npy};

/// An n-dimensional f64 array in C order, e.g. a d x k basis or n_null x d x k draws.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayF64 {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values in C (row-major) order.
    pub data: Vec<f64>,
}

/// Reads an `.npy` (any float or integer dtype, either byte order, C or Fortran order) or a
/// `.safetensors` file holding exactly one tensor, as f64.
pub fn read_array_f64(path: &Path) -> Result<ArrayF64> {
    match extension(path).as_str() {
        "npy" => {
            let map = mmap::map_file(path)?;
            let t = npy::parse(Cow::Borrowed(map.bytes()), path, "array")?;
            let data = t.to_f64(path)?;
            Ok(ArrayF64 {
                shape: t.shape.clone(),
                data,
            })
        }
        "safetensors" => {
            let f = StFile::open(path)?;
            let names = f.names();
            if names.len() != 1 {
                return Err(Error::BadLayout {
                    file: path.to_path_buf(),
                    reason: format!(
                        "expected exactly one tensor, found {}: {}",
                        names.len(),
                        list_names(&names)
                    ),
                });
            }
            let t = f.tensor(&names[0])?;
            let data = t.to_f64(path)?;
            Ok(ArrayF64 {
                shape: t.shape.clone(),
                data,
            })
        }
        _ => Err(Error::UnknownFormat {
            file: path.to_path_buf(),
            expected: ".npy or .safetensors",
        }),
    }
}

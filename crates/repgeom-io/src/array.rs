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

/// Every tensor of a `.safetensors` file as f64 (by name) and its string metadata: for files
/// of several named arrays, such as a streaming accumulator's sums. Each tensor's extent is
/// checked against the file before it is read, as for every `.safetensors` file.
pub fn read_safetensors_f64(
    path: &Path,
) -> Result<(
    std::collections::BTreeMap<String, ArrayF64>,
    std::collections::BTreeMap<String, String>,
)> {
    let f = StFile::open(path)?;
    let mut out = std::collections::BTreeMap::new();
    for name in f.names() {
        let t = f.tensor(&name)?;
        let data = t.to_f64(path)?;
        out.insert(
            name,
            ArrayF64 {
                shape: t.shape.clone(),
                data,
            },
        );
    }
    Ok((out, f.metadata()))
}

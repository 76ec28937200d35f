//! Reading `.safetensors` files through a memory map.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::SafeTensorError;
use safetensors::tensor::{Dtype, Metadata, SafeTensors, TensorInfo};

use crate::mmap::{Mapped, map_file};
use crate::tensor::{DType, RawTensor, check_extent};
use crate::{Error, Result};

/// An opened, header-validated safetensors file.
#[derive(Debug)]
pub(crate) struct StFile {
    pub(crate) path: PathBuf,
    map: Mapped,
    data_start: usize,
    meta: Metadata,
}

impl StFile {
    /// Maps the file and validates its header (offsets contiguous, sizes matching the file).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let map = map_file(path)?;
        let (n, meta) = SafeTensors::read_metadata(map.bytes())
            .map_err(|e| Error::format(path, "safetensors", explain(map.bytes(), e)))?;
        Ok(StFile {
            path: path.to_path_buf(),
            map,
            data_start: 8 + n,
            meta,
        })
    }

    /// Tensor names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.meta.tensors().into_keys().collect();
        v.sort();
        v
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.meta.info(name).is_some()
    }

    /// Shape of a tensor, if present.
    pub(crate) fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.meta.info(name).map(|i| i.shape.clone())
    }

    /// The `__metadata__` map.
    pub(crate) fn metadata(&self) -> BTreeMap<String, String> {
        self.meta
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Drops a tensor's bytes from the resident set once it has been converted
    /// ([`Mapped::release`]); a name the file lacks is a no-op.
    pub(crate) fn release_tensor(&self, name: &str) {
        if let Some(info) = self.meta.info(name) {
            let (s, e) = info.data_offsets;
            if let (Some(a), Some(b)) = (
                self.data_start.checked_add(s),
                self.data_start.checked_add(e),
            ) {
                self.map.release(a..b);
            }
        }
    }

    /// A tensor's safetensors dtype string (`F32`, `BF16`, ...), shape and stored bytes, for
    /// any dtype; `None` for a name the file lacks or bytes outside the file.
    pub(crate) fn raw(&self, name: &str) -> Option<(String, Vec<usize>, &[u8])> {
        let info = self.meta.info(name)?;
        let (s, e) = info.data_offsets;
        let bytes = self
            .map
            .bytes()
            .get(self.data_start.checked_add(s)?..self.data_start.checked_add(e)?)?;
        Some((info.dtype.to_string(), info.shape.clone(), bytes))
    }

    /// Whether a tensor's dtype is one [`StFile::tensor`] converts to f32.
    pub(crate) fn is_float(&self, name: &str) -> bool {
        self.meta
            .info(name)
            .and_then(|i| map_dtype(i.dtype))
            .is_some_and(DType::is_float)
    }

    /// A borrowed view of one tensor.
    pub(crate) fn tensor(&self, name: &str) -> Result<RawTensor<'_>> {
        let info = self.meta.info(name).ok_or_else(|| Error::MissingTensor {
            file: self.path.clone(),
            tensor: name.to_string(),
            available: list_names(&self.names()),
        })?;
        let dtype = map_dtype(info.dtype).ok_or_else(|| Error::UnsupportedDtype {
            file: self.path.clone(),
            tensor: name.to_string(),
            dtype: info.dtype.to_string(),
            expected: "F16, BF16, F32, F64 or an integer type",
        })?;
        let (s, e) = info.data_offsets;
        let bytes = self.map.bytes();
        let slice = self
            .data_start
            .checked_add(s)
            .zip(self.data_start.checked_add(e))
            .and_then(|(a, b)| bytes.get(a..b))
            .ok_or_else(|| {
                Error::format(
                    &self.path,
                    "safetensors",
                    format!("tensor `{name}` lies outside the file"),
                )
            })?;
        check_extent(&self.path, name, &info.shape, dtype, slice.len(), false)?;
        Ok(RawTensor {
            name: name.to_string(),
            dtype,
            big_endian: false,
            shape: info.shape.clone(),
            fortran: false,
            data: Cow::Borrowed(slice),
        })
    }
}

/// The safetensors crate's message, made specific where it names no tensor: for a shape that
/// disagrees with its byte range, which tensor, its dtype, shape and both sizes.
fn explain(bytes: &[u8], e: SafeTensorError) -> String {
    if !matches!(
        e,
        SafeTensorError::TensorInvalidInfo
            | SafeTensorError::ValidationOverflow
            | SafeTensorError::MisalignedSlice
    ) {
        return e.to_string();
    }
    // read_metadata got as far as validation, so the header length and JSON are sound.
    let header = bytes
        .get(..8)
        .and_then(|b| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok())
        .and_then(|n| bytes.get(8..8usize.checked_add(n)?));
    let parsed: Option<BTreeMap<String, serde_json::Value>> =
        header.and_then(|h| serde_json::from_slice(h).ok());
    let mut tensors: Vec<(String, TensorInfo)> = parsed
        .into_iter()
        .flatten()
        .filter(|(k, _)| k != "__metadata__")
        .filter_map(|(k, v)| Some((k, serde_json::from_value::<TensorInfo>(v).ok()?)))
        .collect();
    tensors.sort_by_key(|(_, t)| t.data_offsets);
    for (name, t) in tensors {
        let (s, end) = t.data_offsets;
        let bits = t
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(t.dtype.bitsize()));
        let span = end.saturating_sub(s);
        match bits {
            Some(b) if b % 8 == 0 && b / 8 == span => continue,
            Some(b) => {
                return format!(
                    "tensor `{name}` declares {} shape {:?} ({} bytes) but its data_offsets [{s}, {end}] span {span} bytes",
                    t.dtype,
                    t.shape,
                    b.div_ceil(8)
                );
            }
            None => {
                return format!(
                    "tensor `{name}` declares {} shape {:?}, whose size overflows",
                    t.dtype, t.shape
                );
            }
        }
    }
    e.to_string()
}

fn map_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::U8 => DType::U8,
        Dtype::I8 => DType::I8,
        Dtype::U16 => DType::U16,
        Dtype::I16 => DType::I16,
        Dtype::U32 => DType::U32,
        Dtype::I32 => DType::I32,
        Dtype::U64 => DType::U64,
        Dtype::I64 => DType::I64,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// Joins names for an error message, shortened past 20 entries.
pub(crate) fn list_names(names: &[String]) -> String {
    const SHOW: usize = 20;
    if names.is_empty() {
        return "none".into();
    }
    let mut s = names
        .iter()
        .take(SHOW)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOW {
        s.push_str(&format!(", ... ({} more)", names.len() - SHOW));
    }
    s
}

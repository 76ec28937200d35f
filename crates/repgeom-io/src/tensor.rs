//! A format-neutral borrowed tensor and its conversion to f32 / f64 / integers.

use std::borrow::Cow;
use std::path::Path;

use half::f16;

use crate::{Error, Result};

/// Largest element count this crate will ever allocate for one tensor (2^40).
pub(crate) const MAX_ELEMENTS: u64 = 1 << 40;

/// A floating-point tensor's values at the precision it is stored in: f16 and bf16 kept as
/// they are (a 6.9B-parameter bf16 checkpoint stays 14 GB, and nothing is widened only to be
/// narrowed again), f32 and f64 as f32.
#[derive(Debug, Clone, PartialEq)]
pub enum FloatValues {
    /// IEEE half precision, as stored.
    F16(Vec<f16>),
    /// bfloat16, as stored.
    Bf16(Vec<half::bf16>),
    /// f32 (f64 rounded to f32).
    F32(Vec<f32>),
}

impl FloatValues {
    /// The values widened to f32 (exact).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            FloatValues::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            FloatValues::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
            FloatValues::F32(v) => v.clone(),
        }
    }
}

/// Element types understood across npy and safetensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DType {
    F16,
    BF16,
    F32,
    F64,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    Bool,
}

impl DType {
    pub(crate) fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::F16 | DType::BF16 | DType::U16 | DType::I16 => 2,
            DType::F32 | DType::U32 | DType::I32 => 4,
            DType::F64 | DType::U64 | DType::I64 => 8,
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
}

/// Checked element count of `shape` (None on overflow or above [`MAX_ELEMENTS`]).
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    let n = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))?;
    if n > MAX_ELEMENTS {
        return None;
    }
    usize::try_from(n).ok()
}

/// Checks that `available` bytes hold exactly `shape` of `dtype`; returns the element count.
pub(crate) fn check_extent(
    file: &Path,
    tensor: &str,
    shape: &[usize],
    dtype: DType,
    available: usize,
    allow_trailing: bool,
) -> Result<usize> {
    let too_large = || Error::TooLarge {
        file: file.to_path_buf(),
        tensor: tensor.to_string(),
        shape: shape.to_vec(),
    };
    let numel = checked_numel(shape).ok_or_else(too_large)?;
    let needed = numel.checked_mul(dtype.size()).ok_or_else(too_large)?;
    if needed > available {
        return Err(Error::Truncated {
            file: file.to_path_buf(),
            tensor: tensor.to_string(),
            shape: shape.to_vec(),
            needed: needed as u64,
            available: available as u64,
        });
    }
    if needed < available && !allow_trailing {
        return Err(Error::TrailingData {
            file: file.to_path_buf(),
            tensor: tensor.to_string(),
            shape: shape.to_vec(),
            needed: needed as u64,
            available: available as u64,
        });
    }
    Ok(numel)
}

/// A tensor whose bytes are borrowed from a map (or owned, for npz entries).
///
/// `data` holds exactly `numel * dtype.size()` bytes (checked at construction).
#[derive(Debug)]
pub(crate) struct RawTensor<'a> {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) big_endian: bool,
    /// Shape in logical (C) order.
    pub(crate) shape: Vec<usize>,
    /// True when the bytes are stored column-major (npy `fortran_order: True`).
    pub(crate) fortran: bool,
    pub(crate) data: Cow<'a, [u8]>,
}

impl RawTensor<'_> {
    pub(crate) fn numel(&self) -> usize {
        self.data.len() / self.dtype.size().max(1)
    }

    /// Checks the tensor is floating point, for activations and weights.
    pub(crate) fn require_float(&self, file: &Path) -> Result<()> {
        if self.dtype.is_float() {
            Ok(())
        } else {
            Err(Error::UnsupportedDtype {
                file: file.to_path_buf(),
                tensor: self.name.clone(),
                dtype: self.dtype.name().to_string(),
                expected: "a float type (f16, bf16, f32, f64)",
            })
        }
    }

    /// Returns the same tensor with its bytes in C order (a no-op unless Fortran-ordered).
    pub(crate) fn into_c_order(self) -> Self {
        if !self.fortran {
            return self;
        }
        let data = Cow::Owned(self.c_order_bytes());
        RawTensor {
            fortran: false,
            data,
            ..self
        }
    }

    /// Converts elements `[start, start + len)` (C order) to f32; out-of-range requests are
    /// clamped to the data (callers compute ranges from the checked shape).
    pub(crate) fn f32_range(&self, file: &Path, start: usize, len: usize) -> Result<Vec<f32>> {
        self.require_float(file)?;
        let sz = self.dtype.size();
        let bytes: Cow<'_, [u8]> = if self.fortran {
            Cow::Owned(self.c_order_bytes())
        } else {
            Cow::Borrowed(&self.data[..])
        };
        let a = start.saturating_mul(sz).min(bytes.len());
        let b = start
            .saturating_add(len)
            .saturating_mul(sz)
            .min(bytes.len());
        Ok(convert_f32_pooled(
            &bytes[a..b],
            self.dtype,
            self.big_endian,
        ))
    }

    /// The whole tensor (C order) at the precision it is stored in: f16 and bf16 as they are,
    /// f32 and f64 as f32 (exactly [`RawTensor::to_f32`]'s values, widened or not).
    pub(crate) fn to_stored(&self, file: &Path) -> Result<FloatValues> {
        if !matches!(self.dtype, DType::F16 | DType::BF16) {
            return Ok(FloatValues::F32(self.to_f32(file)?));
        }
        let bytes: Cow<'_, [u8]> = if self.fortran {
            Cow::Owned(self.c_order_bytes())
        } else {
            Cow::Borrowed(&self.data[..])
        };
        use half::vec::HalfBitsVecExt;
        let words = u16_words_pooled(&bytes, self.big_endian);
        Ok(match self.dtype {
            DType::F16 => FloatValues::F16(words.reinterpret_into()),
            _ => FloatValues::Bf16(words.reinterpret_into()),
        })
    }

    /// Converts the whole tensor (C order) to f32.
    pub(crate) fn to_f32(&self, file: &Path) -> Result<Vec<f32>> {
        self.f32_range(file, 0, self.numel())
    }

    /// Converts the whole tensor (C order) to f64; integers are converted exactly when below 2^53.
    pub(crate) fn to_f64(&self, file: &Path) -> Result<Vec<f64>> {
        let bytes = if self.fortran {
            Cow::Owned(self.c_order_bytes())
        } else {
            Cow::Borrowed(&self.data[..])
        };
        let be = self.big_endian;
        let out = match self.dtype {
            DType::F64 => {
                use rayon::prelude::*;
                (bytes.par_chunks_exact(8))
                    .with_min_len(CONVERT_CHUNK)
                    .map(|c| f64::from_bits(u64::from_ne_bytes(word(c, be))))
                    .collect()
            }
            DType::F32 | DType::F16 | DType::BF16 => convert_f64_pooled(&bytes, self.dtype, be),
            _ => {
                let ints = self.to_i128_from(&bytes, file)?;
                ints.into_iter().map(|x| x as f64).collect()
            }
        };
        Ok(out)
    }

    /// Converts an integer tensor to i128 (C order).
    pub(crate) fn to_i128(&self, file: &Path) -> Result<Vec<i128>> {
        let bytes = if self.fortran {
            Cow::Owned(self.c_order_bytes())
        } else {
            Cow::Borrowed(&self.data[..])
        };
        self.to_i128_from(&bytes, file)
    }

    fn to_i128_from(&self, bytes: &[u8], file: &Path) -> Result<Vec<i128>> {
        let be = self.big_endian;
        let out: Vec<i128> = match self.dtype {
            DType::U8 | DType::Bool => bytes.iter().map(|&b| i128::from(b)).collect(),
            DType::I8 => bytes.iter().map(|&b| i128::from(b as i8)).collect(),
            DType::U16 => bytes
                .chunks_exact(2)
                .map(|c| i128::from(u16::from_ne_bytes(word(c, be))))
                .collect(),
            DType::I16 => bytes
                .chunks_exact(2)
                .map(|c| i128::from(i16::from_ne_bytes(word(c, be))))
                .collect(),
            DType::U32 => bytes
                .chunks_exact(4)
                .map(|c| i128::from(u32::from_ne_bytes(word(c, be))))
                .collect(),
            DType::I32 => bytes
                .chunks_exact(4)
                .map(|c| i128::from(i32::from_ne_bytes(word(c, be))))
                .collect(),
            DType::U64 => bytes
                .chunks_exact(8)
                .map(|c| i128::from(u64::from_ne_bytes(word(c, be))))
                .collect(),
            DType::I64 => bytes
                .chunks_exact(8)
                .map(|c| i128::from(i64::from_ne_bytes(word(c, be))))
                .collect(),
            _ => {
                return Err(Error::UnsupportedDtype {
                    file: file.to_path_buf(),
                    tensor: self.name.clone(),
                    dtype: self.dtype.name().to_string(),
                    expected: "an integer type",
                });
            }
        };
        Ok(out)
    }

    /// Reorders Fortran-order bytes into C order.
    fn c_order_bytes(&self) -> Vec<u8> {
        let sz = self.dtype.size();
        let n = self.numel();
        let nd = self.shape.len();
        if nd <= 1 || n == 0 {
            return self.data.to_vec();
        }
        // Fortran strides (in elements): stride[0] = 1, stride[k] = stride[k-1] * shape[k-1].
        let mut fstride = vec![1usize; nd];
        for k in 1..nd {
            fstride[k] = fstride[k - 1] * self.shape[k - 1];
        }
        let mut out = Vec::with_capacity(n * sz);
        let mut idx = vec![0usize; nd];
        for _ in 0..n {
            let off: usize = idx.iter().zip(&fstride).map(|(i, s)| i * s).sum();
            out.extend_from_slice(&self.data[off * sz..(off + 1) * sz]);
            // Advance the C-order multi-index (last axis fastest).
            for k in (0..nd).rev() {
                idx[k] += 1;
                if idx[k] < self.shape[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        out
    }
}

/// Reads a little- or big-endian word into native byte order.
fn word<const N: usize>(c: &[u8], big_endian: bool) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(c);
    let native_big = cfg!(target_endian = "big");
    if big_endian != native_big {
        a.reverse();
    }
    a
}

/// Copies a chunk of exactly `N` bytes into an array.
fn arr<const N: usize>(c: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(c);
    a
}

/// Decodes packed 16-bit words in the given byte order.
pub(crate) fn u16_words(bytes: &[u8], big_endian: bool) -> Vec<u16> {
    let c = bytes.chunks_exact(2);
    if big_endian {
        c.map(|c| u16::from_be_bytes([c[0], c[1]])).collect()
    } else {
        c.map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
    }
}

/// [`u16_words`] by chunks of [`CONVERT_CHUNK`] words on the current rayon pool (a 6.9B
/// model's embedding is 206 million of them).
pub(crate) fn u16_words_pooled(bytes: &[u8], big_endian: bool) -> Vec<u16> {
    use rayon::prelude::*;
    // Zeroed by the system: the pages are first touched by the tasks.
    let mut out = vec![0u16; bytes.len() / 2];
    (out.par_chunks_mut(CONVERT_CHUNK))
        .zip(bytes.par_chunks(CONVERT_CHUNK * 2))
        .for_each(|(o, b)| {
            let c = b.chunks_exact(2);
            if big_endian {
                o.iter_mut()
                    .zip(c)
                    .for_each(|(o, c)| *o = u16::from_be_bytes([c[0], c[1]]));
            } else {
                o.iter_mut()
                    .zip(c)
                    .for_each(|(o, c)| *o = u16::from_le_bytes([c[0], c[1]]));
            }
        });
    out
}

/// Elements per task of the conversions on the pool ([`convert_f32_pooled`],
/// [`convert_f64_pooled`], f64 arrays):
/// 1 MiB of `f32`, large against a task's overhead.
const CONVERT_CHUNK: usize = 1 << 18;

/// [`convert_f32`] by chunks of [`CONVERT_CHUNK`] elements on the current rayon pool: the same
/// values (each is converted alone), with a large array's conversion and first writes spread
/// over the threads (a 6.9B model's `W_U` is 206 million values).
pub(crate) fn convert_f32_pooled(bytes: &[u8], dtype: DType, big_endian: bool) -> Vec<f32> {
    use rayon::prelude::*;
    let size = dtype.size();
    let n = bytes.len() / size.max(1);
    if n <= CONVERT_CHUNK || !dtype.is_float() {
        return convert_f32(bytes, dtype, big_endian);
    }
    // Zeroed by the system: the pages are first touched by the tasks.
    let mut out = vec![0f32; n];
    (out.par_chunks_mut(CONVERT_CHUNK))
        .zip(bytes.par_chunks(CONVERT_CHUNK * size))
        .for_each(|(o, b)| convert_f32_into(b, dtype, big_endian, o));
    out
}

/// [`convert_f32`] widened to `f64`, by chunks of [`CONVERT_CHUNK`] elements on the current
/// rayon pool, each through its task's own `f32` buffer (no `f32` copy of the whole array).
pub(crate) fn convert_f64_pooled(bytes: &[u8], dtype: DType, big_endian: bool) -> Vec<f64> {
    use rayon::prelude::*;
    let size = dtype.size();
    let n = bytes.len() / size.max(1);
    let mut out = vec![0f64; n];
    (out.par_chunks_mut(CONVERT_CHUNK))
        .zip(bytes.par_chunks(CONVERT_CHUNK * size))
        .for_each_init(
            || vec![0f32; CONVERT_CHUNK.min(n)],
            |buf, (o, b)| {
                let buf = &mut buf[..o.len()];
                convert_f32_into(b, dtype, big_endian, buf);
                for (x, &y) in o.iter_mut().zip(buf.iter()) {
                    *x = f64::from(y);
                }
            },
        );
    out
}

/// Converts packed float bytes of `dtype` to f32 (empty for a dtype that is not a float).
pub(crate) fn convert_f32(bytes: &[u8], dtype: DType, big_endian: bool) -> Vec<f32> {
    if !dtype.is_float() {
        return Vec::new();
    }
    let mut out = vec![0f32; bytes.len() / dtype.size()];
    convert_f32_into(bytes, dtype, big_endian, &mut out);
    out
}

/// Converts the whole elements of `bytes`, packed floats of `dtype`, into `out` (as many);
/// a dtype that is not a float leaves `out` as it is.
///
/// Each branch is a simple loop with the byte order decided outside it, so that it vectorises:
/// weight shards are tens of millions of elements.
fn convert_f32_into(bytes: &[u8], dtype: DType, big_endian: bool, out: &mut [f32]) {
    debug_assert_eq!(out.len(), bytes.len() / dtype.size().max(1));
    match dtype {
        DType::F32 => {
            let c = bytes.chunks_exact(4);
            if big_endian {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                }
            } else {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        }
        DType::F64 => {
            let c = bytes.chunks_exact(8);
            if big_endian {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f64::from_be_bytes(arr(c)) as f32;
                }
            } else {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f64::from_le_bytes(arr(c)) as f32;
                }
            }
        }
        DType::BF16 => {
            let c = bytes.chunks_exact(2);
            if big_endian {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f32::from_bits(u32::from(u16::from_be_bytes([c[0], c[1]])) << 16);
                }
            } else {
                for (o, c) in out.iter_mut().zip(c) {
                    *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
                }
            }
        }
        DType::F16 => {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            let words = u16_words(bytes, big_endian);
            let halves: &[f16] = words.reinterpret_cast();
            halves.convert_to_f32_slice(out);
        }
        _ => {}
    }
}

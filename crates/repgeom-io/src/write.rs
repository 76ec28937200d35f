//! Writers: every output is written to a temporary file in the same directory, flushed,
//! synced and renamed over the destination, so readers never see a half-written file.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::tensor::checked_numel;
use crate::{Error, Result, npy};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `path` atomically: `f` writes into a temporary file beside `path`, which is then
/// renamed over it. On any error the temporary file is removed and `path` is untouched.
pub fn atomic_write(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = path.file_name().ok_or_else(|| {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has no file name"),
        )
    })?;
    let (tmp, file) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut name = std::ffi::OsString::from(".");
        name.push(base);
        name.push(format!(".tmp.{}.{n}", std::process::id()));
        let tmp = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(path, e)),
        }
    };
    let result = (|| {
        let mut w = BufWriter::new(file);
        f(&mut w)?;
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

fn check_len(path: &Path, tensor: &str, shape: &[usize], found: usize) -> Result<()> {
    let expected = checked_numel(shape).ok_or_else(|| Error::TooLarge {
        file: path.to_path_buf(),
        tensor: tensor.to_string(),
        shape: shape.to_vec(),
    })?;
    if expected != found {
        return Err(Error::WriteShape {
            file: path.to_path_buf(),
            tensor: tensor.to_string(),
            shape: shape.to_vec(),
            expected,
            found,
        });
    }
    Ok(())
}

/// Writes a C-order little-endian `<f8` `.npy` file atomically.
pub fn write_npy_f64(path: &Path, shape: &[usize], data: &[f64]) -> Result<()> {
    check_len(path, "array", shape, data.len())?;
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    let img = npy::encode("<f8", shape, &bytes);
    atomic_write(path, |w| w.write_all(&img))
}

/// Writes a C-order little-endian `<f4` `.npy` file atomically.
pub fn write_npy_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    check_len(path, "array", shape, data.len())?;
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    let img = npy::encode("<f4", shape, &bytes);
    atomic_write(path, |w| w.write_all(&img))
}

/// Writes F32 tensors and string metadata as one `.safetensors` file, atomically.
///
/// Tensors are laid out in the order given; the JSON header lists `__metadata__` first and then
/// the tensors in that order, so the same inputs always give the same bytes.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, Vec<usize>, &[f32])],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    write_st(path, tensors, metadata, "F32", |x: &f32| x.to_le_bytes())
}

/// [`write_safetensors`] with F64 tensors (sums that must survive a round trip exactly, such
/// as a streaming accumulator's).
pub fn write_safetensors_f64(
    path: &Path,
    tensors: &[(String, Vec<usize>, &[f64])],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    write_st(path, tensors, metadata, "F64", |x: &f64| x.to_le_bytes())
}

/// Values per task of a tensor's conversion to bytes.
const BYTES_CHUNK: usize = 1 << 16;

/// One `.safetensors` writer for every dtype: `dtype` its name, `bytes` one value's
/// little-endian bytes. Each tensor's bytes are made by chunks on the current rayon pool (a
/// 6.9B model's 2,048 points are 1.1 GB), then written.
fn write_st<T: Sync, const W: usize>(
    path: &Path,
    tensors: &[(String, Vec<usize>, &[T])],
    metadata: &BTreeMap<String, String>,
    dtype: &str,
    bytes: impl Fn(&T) -> [u8; W] + Sync,
) -> Result<()> {
    use rayon::prelude::*;
    let mut seen = std::collections::BTreeSet::new();
    for (name, shape, data) in tensors {
        check_len(path, name, shape, data.len())?;
        if name == "__metadata__" || !seen.insert(name.as_str()) {
            return Err(Error::format(
                path,
                "safetensors",
                format!("tensor name `{name}` is reserved or repeated"),
            ));
        }
    }
    let js = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut header = String::from("{");
    let mut parts = Vec::new();
    if !metadata.is_empty() {
        let m: Vec<String> = metadata
            .iter()
            .map(|(k, v)| format!("{}:{}", js(k), js(v)))
            .collect();
        parts.push(format!("\"__metadata__\":{{{}}}", m.join(",")));
    }
    let mut offset = 0usize;
    for (name, shape, data) in tensors {
        let end = offset + std::mem::size_of_val(*data);
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        parts.push(format!(
            "{}:{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
            js(name),
            dims.join(",")
        ));
        offset = end;
    }
    header.push_str(&parts.join(","));
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    atomic_write(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(header.as_bytes())?;
        for (_, _, data) in tensors {
            let mut out = vec![0u8; data.len() * W];
            (out.par_chunks_mut(BYTES_CHUNK * W))
                .zip(data.par_chunks(BYTES_CHUNK))
                .for_each(|(out, data)| {
                    for (o, x) in out.chunks_exact_mut(W).zip(data) {
                        o.copy_from_slice(&bytes(x));
                    }
                });
            w.write_all(&out)?;
        }
        Ok(())
    })
}

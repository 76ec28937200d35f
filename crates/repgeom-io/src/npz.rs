//! `.npz` archives: a zip (stored or deflated) of `.npy` members.

use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::tensor::{MAX_ELEMENTS, RawTensor};
use crate::{Error, Result, npy};

/// Deflate cannot expand data by more than about 1032:1; a member claiming more is corrupt.
const MAX_RATIO: u64 = 1100;

/// Reads every `.npy` member of an archive, in archive order. Names lose their `.npy` suffix.
pub(crate) fn read_all(path: &Path) -> Result<Vec<RawTensor<'static>>> {
    let bad = |reason: String| Error::format(path, "npz", reason);
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip
            .by_index(i)
            .map_err(|e| bad(format!("member {i}: {e}")))?;
        if member.is_dir() {
            continue;
        }
        let full = member.name().to_string();
        let name = full.strip_suffix(".npy").unwrap_or(&full).to_string();
        let size = member.size();
        let limit = member
            .compressed_size()
            .saturating_mul(MAX_RATIO)
            .saturating_add(4096)
            .min(file_len.saturating_mul(MAX_RATIO).saturating_add(4096));
        if size > limit || size > MAX_ELEMENTS.saturating_mul(8) {
            return Err(bad(format!(
                "member `{full}` declares {size} uncompressed bytes, more than its compressed data can hold"
            )));
        }
        let mut buf = Vec::with_capacity(usize::try_from(size.min(1 << 30)).unwrap_or(0));
        (&mut member)
            .take(size)
            .read_to_end(&mut buf)
            .map_err(|e| bad(format!("member `{full}`: {e}")))?;
        if (buf.len() as u64) != size {
            return Err(bad(format!(
                "member `{full}` is truncated: {} of {size} bytes",
                buf.len()
            )));
        }
        out.push(npy::parse(Cow::Owned(buf), path, &name)?);
    }
    Ok(out)
}

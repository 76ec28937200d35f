//! Read-only memory maps of input files: the only module that uses `unsafe`.
#![allow(unsafe_code)] // memmap2::Mmap::map is unsafe; see the SAFETY note below.

use std::fs::File;
use std::path::Path;

use crate::{Error, Result};

/// A read-only view of a whole file's bytes.
#[derive(Debug)]
pub(crate) enum Mapped {
    /// A memory map of a non-empty file.
    Map(memmap2::Mmap),
    /// An empty file (zero-length maps fail on some platforms).
    Empty,
}

impl Mapped {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Mapped::Map(m) => m,
            Mapped::Empty => &[],
        }
    }

    /// Tells the kernel this process is done with `range` of the file for now: its pages leave
    /// the resident set at once (they stay in the page cache, and a later read of the range
    /// faults them in again with the same bytes). Reading a checkpoint tensor by tensor and
    /// releasing each after its conversion keeps the maps from adding the file size to the
    /// peak resident memory. Best effort: a refusal changes memory use, never results.
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Mapped::Map(m) = self
            && range.start < range.end
            && range.end <= m.len()
        {
            // SAFETY: the map is a read-only shared mapping of a file (`Mmap::map`), never
            // written through. MADV_DONTNEED on such a mapping only drops this process's page
            // table entries; any later access, through a slice borrowed before or after, faults
            // the file's pages in again, so every read sees the file's bytes as before (under
            // the same assumption as `map_file`: the file is not rewritten while mapped).
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    range.start,
                    range.end - range.start,
                )
            };
        }
        #[cfg(not(unix))]
        let _ = range;
    }
}

/// Memory-maps `path` read-only.
///
/// Weight shards are gigabytes: mapping lets the kernel page in only the tensors we convert,
/// instead of copying whole shards into memory first.
pub(crate) fn map_file(path: &Path) -> Result<Mapped> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return Ok(Mapped::Empty);
    }
    // SAFETY: the map is read-only and private to this process. The remaining hazard is another
    // process truncating or rewriting the file while it is mapped; repgeom inputs (activation
    // dumps, model checkpoints) are written once and then only read, and every writer in this
    // crate replaces files by atomic rename (which leaves existing maps on the old inode).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    Ok(Mapped::Map(map))
}

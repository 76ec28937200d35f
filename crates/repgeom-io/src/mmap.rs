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

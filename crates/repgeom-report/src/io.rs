//! Atomic file writes, through the workspace's one writer ([`repgeom_io::atomic_write`]).

use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` through a temporary file in the same directory, then renames it
/// ([`repgeom_io::atomic_write`]); a failure names the file and leaves it untouched.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    repgeom_io::atomic_write(path, |w| w.write_all(bytes)).map_err(|e| {
        let source = match e {
            repgeom_io::Error::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        };
        Error::Io {
            op: "write",
            path: path.to_owned(),
            source,
        }
    })
}

//! Helpers shared by the fuzz targets.
//!
//! repgeom's readers take paths (they memory-map large files), so each target writes the fuzz
//! input to a scratch file and calls the real public entry point: that way the mmap path, the
//! extension dispatch and the error construction are all exercised, not a test-only shortcut.

use std::path::PathBuf;
use std::sync::OnceLock;

/// A scratch directory private to this fuzz process (removed and recreated at start).
pub fn scratch_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("repgeom-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create scratch dir");
        d
    })
}

/// Writes `bytes` to `name` inside the scratch directory and returns its path.
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch_dir().join(name);
    std::fs::write(&p, bytes).expect("write scratch file");
    p
}

/// A fresh empty sub-directory of the scratch directory.
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = scratch_dir().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch sub-dir");
    d
}

/// Separator between the parts of a multi-file input (checkpoint target).
pub const SPLIT: &[u8] = b"\n#~#~#\n";

/// Splits `data` on [`SPLIT`].
pub fn split_parts(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(SPLIT.len()).position(|w| w == SPLIT) {
        out.push(&rest[..i]);
        rest = &rest[i + SPLIT.len()..];
    }
    out.push(rest);
    out
}

/// Structural invariants every returned matrix must satisfy (no silently wrong shape).
pub fn check_matrix(m: &repgeom_io::Matrix) {
    assert_eq!(
        Some(m.data.len()),
        m.rows.checked_mul(m.cols),
        "matrix data length disagrees with its shape"
    );
}

/// Invariants of a successful activation read.
pub fn check_activations(a: &repgeom_io::Activations, requested: Option<&[usize]>) {
    for l in &a.layers {
        check_matrix(&l.acts);
    }
    if let Some(r) = requested {
        let got: Vec<usize> = a.layers.iter().map(|l| l.layer).collect();
        assert_eq!(got, r, "layers returned differ from the layers requested");
    }
}

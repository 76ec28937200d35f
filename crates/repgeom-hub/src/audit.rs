//! Content hashes of checkpoint weights, for spotting revisions that serve the same model.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use repgeom_io::WeightsHasher;

use crate::cache::file_name;
use crate::client::read_weight_map;
use crate::{Error, Result};

pub use repgeom_io::WeightsDigest;

struct TensorLoc {
    file: PathBuf,
    dtype: String,
    shape: Vec<u64>,
    /// Absolute byte range in the file.
    start: u64,
    end: u64,
}

/// SHA-256 of a checkpoint's weights, independent of how they are split into files: the hash
/// of [`repgeom_io::WeightsHasher`] (which says exactly what is hashed) over every tensor of
/// every `*.safetensors` file in `dir` (the shards listed by `model.safetensors.index.json`
/// when there is one). A name present in two files is an error.
///
/// `repgeom_io::Checkpoint::read_float_tensors` computes the same hash from the bytes it
/// reads to load a model.
pub fn weights_hash(dir: &Path) -> Result<WeightsDigest> {
    let files = weight_files(dir)?;
    let mut tensors: BTreeMap<String, TensorLoc> = BTreeMap::new();
    for file in &files {
        for (name, loc) in read_header(file)? {
            if tensors.contains_key(&name) {
                return Err(Error::Format {
                    path: file.clone(),
                    reason: format!("tensor `{name}` is also in another weight file"),
                });
            }
            tensors.insert(name, loc);
        }
    }
    let mut h = WeightsHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut open: Option<(PathBuf, File)> = None;
    for (name, t) in &tensors {
        let len = t.end - t.start;
        h.tensor(name, &t.dtype, &t.shape, len);
        if open.as_ref().is_none_or(|(p, _)| p != &t.file) {
            open = Some((
                t.file.clone(),
                File::open(&t.file).map_err(Error::io(&t.file))?,
            ));
        }
        let (_, f) = open.as_mut().expect("opened above");
        f.seek(SeekFrom::Start(t.start))
            .map_err(Error::io(&t.file))?;
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.read_exact(&mut buf[..n]).map_err(Error::io(&t.file))?;
            h.update(&buf[..n]);
            left -= n as u64;
        }
    }
    Ok(h.finish())
}

fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let mut files: Vec<PathBuf> = read_weight_map(&index)?
            .values()
            .filter_map(|v| v.as_str())
            .map(|f| Ok(file_name(f, || format!("{}", index.display()))?.under(dir)))
            .collect::<Result<_>>()?;
        files.sort();
        files.dedup();
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Format {
            path: dir.into(),
            reason: "no *.safetensors weight files".into(),
        });
    }
    Ok(files)
}

fn read_header(path: &Path) -> Result<Vec<(String, TensorLoc)>> {
    let bad = |reason: String| Error::Format {
        path: path.into(),
        reason,
    };
    let mut f = File::open(path).map_err(Error::io(path))?;
    let file_len = f.metadata().map_err(Error::io(path))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(Error::io(path))?;
    let n = u64::from_le_bytes(n);
    if n > 100 << 20 || 8 + n > file_len {
        return Err(bad(format!(
            "safetensors header length {n} does not fit the file"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(Error::io(path))?;
    let js: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("bad safetensors header: {e}")))?;
    let obj = js
        .as_object()
        .ok_or_else(|| bad("safetensors header is not an object".into()))?;
    let base = 8 + n;
    let mut out = Vec::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            continue;
        }
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| bad(format!("tensor `{name}` has no `{k}`")))
        };
        let dtype = field("dtype")?
            .as_str()
            .ok_or_else(|| bad(format!("tensor `{name}`: dtype is not a string")))?
            .to_string();
        let nums = |k: &str| -> Result<Vec<u64>> {
            field(k)?
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_u64()).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| bad(format!("tensor `{name}`: `{k}` is not a list of integers")))
        };
        let shape = nums("shape")?;
        let offs = nums("data_offsets")?;
        if offs.len() != 2 || offs[0] > offs[1] || base + offs[1] > file_len {
            return Err(bad(format!(
                "tensor `{name}`: data_offsets {offs:?} outside the file ({file_len} bytes)"
            )));
        }
        out.push((
            name.clone(),
            TensorLoc {
                file: path.into(),
                dtype,
                shape,
                start: base + offs[0],
                end: base + offs[1],
            },
        ));
    }
    Ok(out)
}

/// One revision of a model, audited: what [`audit_revisions`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionAudit {
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// [`weights_hash`] of its weights.
    pub weights_sha256: String,
    /// Parameters.
    pub parameters: u64,
    /// The first earlier revision (in the order given) with identical weights.
    pub duplicate_of: Option<String>,
}

/// Every branch and tag of model `id`, training-step branches (`step<N>`) first in step
/// order, then the others by name: the order `repgeom checkpoints --all` lists them in.
pub fn all_revisions(hub: &crate::Hub, id: &str) -> Result<Vec<String>> {
    let refs = hub.refs(id)?;
    let mut names: Vec<String> = refs
        .branches
        .iter()
        .chain(&refs.tags)
        .map(|r| r.name.clone())
        .collect();
    names.sort_by(|a, b| match (step_of(a), step_of(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    });
    names.dedup();
    Ok(names)
}

/// The training step in a branch name like `step3000`.
pub fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step")?.parse().ok()
}

/// Downloads (`Files::Weights`) and hashes each revision, and marks revisions whose weights
/// equal an earlier one's: published checkpoints are not always what their names say.
pub fn audit_revisions(
    hub: &crate::Hub,
    id: &str,
    revisions: &[String],
    progress: &mut dyn FnMut(&crate::DownloadProgress<'_>),
) -> Result<Vec<RevisionAudit>> {
    let mut out: Vec<RevisionAudit> = Vec::new();
    for rev in revisions {
        let snap = hub.snapshot(id, rev, &crate::Files::Weights, progress)?;
        let d = weights_hash(&snap.dir)?;
        let duplicate_of = out
            .iter()
            .find(|a| a.weights_sha256 == d.sha256)
            .map(|a| a.revision.clone());
        out.push(RevisionAudit {
            revision: rev.clone(),
            commit: snap.commit,
            weights_sha256: d.sha256,
            parameters: d.parameters,
            duplicate_of,
        });
    }
    Ok(out)
}

//! What a `--model` / `readout` argument names: a local path, or a hub model id at a revision.

use std::path::{Path, PathBuf};

use crate::{DownloadProgress, Error, Files, Hub, Result};

/// Where a model argument points. One rule for every front end (CLI, Python, manifests): a
/// path that exists is local; otherwise `org/name` (exactly one `/`, the hub's id rules) is a
/// hub id at `revision` (default `main`). A missing path that looks like a file (a tensor or
/// text extension) or a bare word is a typo, never a reason to ask the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A file or directory on disk.
    Local(PathBuf),
    /// A hub model id at a revision.
    Hub {
        /// `org/name`.
        id: String,
        /// Branch, tag or commit.
        revision: String,
    },
}

impl ModelRef {
    /// Parses `spec` (with an optional revision, which only a hub id may carry).
    ///
    /// ```
    /// use repgeom_hub::ModelRef;
    /// let m = ModelRef::parse("EleutherAI/pythia-70m", Some("step3000")).unwrap();
    /// assert_eq!(m, ModelRef::Hub { id: "EleutherAI/pythia-70m".into(), revision: "step3000".into() });
    /// assert!(ModelRef::parse("no-such-dir/acts.npy", None).is_err());
    /// // a revision names a file below the cache's refs/: git's ref-name rules apply
    /// assert!(ModelRef::parse("EleutherAI/pythia-70m", Some("../../x")).is_err());
    /// ```
    pub fn parse(spec: &str, revision: Option<&str>) -> Result<Self> {
        let path = Path::new(spec);
        if path.exists() {
            if let Some(r) = revision {
                return Err(Error::RevisionOfLocalPath {
                    path: path.to_path_buf(),
                    revision: r.to_owned(),
                });
            }
            return Ok(ModelRef::Local(path.to_path_buf()));
        }
        let file_like = [".npy", ".npz", ".safetensors", ".json", ".csv", ".txt"]
            .iter()
            .any(|ext| spec.ends_with(ext));
        if file_like || spec.matches('/').count() != 1 || crate::check_id(spec).is_err() {
            return Err(Error::NoSuchModel {
                spec: spec.to_owned(),
            });
        }
        if let Some(r) = revision.filter(|r| !crate::is_commit(r)) {
            crate::cache::ref_name(r, || format!("the revision given for {spec}"))?;
        }
        Ok(ModelRef::Hub {
            id: spec.to_owned(),
            revision: revision.unwrap_or("main").to_owned(),
        })
    }

    /// The local path: the path itself, or the hub snapshot folder after downloading the
    /// `need`ed files that the cache lacks (reported to `progress`).
    pub fn resolve(
        &self,
        hub: &Hub,
        need: &Files,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<PathBuf> {
        match self {
            ModelRef::Local(p) => Ok(p.clone()),
            ModelRef::Hub { id, revision } => Ok(hub.snapshot(id, revision, need, progress)?.dir),
        }
    }
}

//! The hub cache on disk, in the layout Python's `huggingface_hub` writes:
//!
//! ```text
//! <cache>/models--<org>--<name>/      (datasets--<org>--<name>/ for datasets, the same inside)
//!     refs/<revision>                 commit hash of a branch or tag (no trailing newline)
//!     blobs/<etag>                    file contents, named by the hub's ETag
//!     blobs/<etag>.incomplete         a partial download, resumed with a Range request
//!     snapshots/<commit>/<path>       relative symlink to ../../blobs/<etag>
//! <cache>/.locks/models--<org>--<name>/<etag>.lock
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use repgeom_io::RelPath;

use crate::{Error, Result};

/// `name` as a file path below a folder, or [`Error::UnsafeName`] saying it came from
/// `origin()`.
pub(crate) fn file_name(name: &str, origin: impl FnOnce() -> String) -> Result<RelPath> {
    RelPath::new(name).map_err(|name| Error::UnsafeName {
        name,
        origin: origin(),
    })
}

/// A blob's name (an ETag or object id): one safe path component.
pub(crate) fn blob_name(etag: &str, origin: impl Fn() -> String) -> Result<RelPath> {
    let p = file_name(etag, &origin)?;
    if p.contains('/') {
        return Err(Error::UnsafeName {
            name: repgeom_io::BadName {
                name: etag.into(),
                reason: "has a `/` (a blob name is one component)",
            },
            origin: origin(),
        });
    }
    Ok(p)
}

/// Checks that `revision` is a commit hash or a branch or tag name under git's rules for ref
/// names (no `..`, no leading `/`, no control characters, no backslash, ...): a revision names a
/// file below the cache's `refs/` folder, and comes from a command line or a shared manifest.
///
/// ```
/// assert!(repgeom_hub::check_revision("step3000").is_ok());
/// assert!(repgeom_hub::check_revision("refs/pr/1").is_ok());
/// let e = repgeom_hub::check_revision("../../../../escaped_ref").unwrap_err();
/// assert!(e.to_string().contains("has a `..` component"), "{e}");
/// ```
pub fn check_revision(revision: &str) -> Result<()> {
    ref_name(revision, || "a revision (branch, tag or commit)".into()).map(|_| ())
}

pub(crate) fn ref_name(revision: &str, origin: impl FnOnce() -> String) -> Result<RelPath> {
    RelPath::git_ref(revision).map_err(|name| Error::UnsafeName {
        name,
        origin: origin(),
    })
}

/// The kind of a hub repository: its API path, URLs and cache folder differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepoType {
    /// A model (`/api/models/...`, `/{id}/resolve/...`, `models--org--name`).
    #[default]
    Model,
    /// A dataset (`/api/datasets/...`, `/datasets/{id}/resolve/...`, `datasets--org--name`).
    Dataset,
}

impl RepoType {
    /// The plural used in API paths and cache folder names: `models`, `datasets`.
    pub fn plural(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
        }
    }

    /// The singular, for messages: `model`, `dataset`.
    pub(crate) fn singular(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
        }
    }

    /// The prefix of file URLs before the id: empty for models, `datasets/` for datasets.
    pub(crate) fn url_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => "datasets/",
        }
    }
}

/// One repository's folder in a hub cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    /// The cache root (`HF_HUB_CACHE`).
    pub root: PathBuf,
    /// The repository id, `org/name`.
    pub id: String,
    /// Model or dataset.
    pub kind: RepoType,
}

/// Whether `s` is a full commit hash (40 lowercase hex digits).
pub fn is_commit(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Strips `W/` and quotes from an ETag, as `huggingface_hub` does before naming a blob.
pub(crate) fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

impl RepoCache {
    /// The cache of model `id` under `root`.
    pub fn new(root: &Path, id: &str) -> Self {
        RepoCache::of(RepoType::Model, root, id)
    }

    /// The cache of repository `id` of kind `kind` under `root`.
    ///
    /// ```
    /// use std::path::Path;
    /// use repgeom_hub::{RepoCache, RepoType};
    /// let c = RepoCache::of(RepoType::Dataset, Path::new("/c"), "fancyzhx/ag_news");
    /// assert_eq!(c.dir(), Path::new("/c/datasets--fancyzhx--ag_news"));
    /// ```
    pub fn of(kind: RepoType, root: &Path, id: &str) -> Self {
        RepoCache {
            root: root.to_path_buf(),
            id: id.to_string(),
            kind,
        }
    }

    fn folder_name(&self) -> String {
        format!("{}--{}", self.kind.plural(), self.id.replace('/', "--"))
    }

    /// `<cache>/models--org--name` (`datasets--org--name` for a dataset).
    pub fn dir(&self) -> PathBuf {
        self.root.join(self.folder_name())
    }

    /// The commit a branch or tag points to in the cache, if recorded; a commit hash is its
    /// own answer.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let name = RelPath::git_ref(revision).ok()?;
        let s = fs::read_to_string(name.under(&self.dir().join("refs"))).ok()?;
        let s = s.trim();
        is_commit(s).then(|| s.to_string())
    }

    /// Records that `revision` points to `commit` (`refs/<revision>`), atomically. A revision
    /// that is not a git ref name ([`check_revision`]) is refused before anything is written.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let name = ref_name(revision, || format!("the revision asked of {}", self.id))?;
        let path = name.under(&self.dir().join("refs"));
        if fs::read_to_string(&path).is_ok_and(|s| s.trim() == commit) {
            return Ok(());
        }
        let parent = path.parent().expect("refs/<revision> has a parent");
        fs::create_dir_all(parent).map_err(Error::io(parent))?;
        let tmp = parent.join(format!(
            ".{}.{}.tmp",
            path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        fs::write(&tmp, commit).map_err(Error::io(&tmp))?;
        fs::rename(&tmp, &path).map_err(Error::io(&path))
    }

    /// `snapshots/<commit>`.
    pub fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.dir().join("snapshots").join(commit)
    }

    /// `blobs/<etag>`.
    pub fn blob(&self, etag: &RelPath) -> PathBuf {
        etag.under(&self.dir().join("blobs"))
    }

    /// `snapshots/<commit>/<file>`.
    pub fn snapshot_file(&self, commit: &str, file: &RelPath) -> PathBuf {
        file.under(&self.snapshot_dir(commit))
    }

    /// `.locks/models--org--name/<etag>.lock`.
    pub(crate) fn lock(&self, etag: &RelPath) -> PathBuf {
        self.root
            .join(".locks")
            .join(self.folder_name())
            .join(format!("{etag}.lock"))
    }

    /// Whether the snapshot of `commit` has `file` (following the symlink to its blob).
    pub fn has_file(&self, commit: &str, file: &RelPath) -> bool {
        self.snapshot_file(commit, file).is_file()
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative symlink (a copy
    /// where the file system has no symlinks).
    pub(crate) fn link(&self, commit: &str, file: &RelPath, etag: &RelPath) -> Result<PathBuf> {
        let dst = self.snapshot_file(commit, file);
        let parent = dst.parent().expect("snapshot file has a parent");
        fs::create_dir_all(parent).map_err(Error::io(parent))?;
        // snapshots/<commit>/<a>/<b> -> ../../../blobs/<etag>: one `..` per path component
        // below the model folder.
        let depth = 2 + file.components().count() - 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag.as_str());
        if fs::symlink_metadata(&dst).is_ok() {
            fs::remove_file(&dst).map_err(Error::io(&dst))?;
        }
        link_or_copy(&target, &self.blob(etag), &dst)?;
        Ok(dst)
    }
}

#[cfg(unix)]
fn link_or_copy(relative: &Path, _absolute: &Path, dst: &Path) -> Result<()> {
    std::os::unix::fs::symlink(relative, dst).map_err(Error::io(dst))
}

#[cfg(not(unix))]
fn link_or_copy(_relative: &Path, absolute: &Path, dst: &Path) -> Result<()> {
    fs::copy(absolute, dst).map(|_| ()).map_err(Error::io(dst))
}

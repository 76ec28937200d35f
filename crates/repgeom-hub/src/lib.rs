//! `repgeom-hub` finds HuggingFace Hub models by name and revision: it resolves `org/name`
//! at a branch (`step3000`), tag or commit in the hub's own cache, downloads only the files
//! a run needs, and hashes checkpoint weights so that revisions serving the same model can
//! be spotted.
//!
//! The main type is [`Hub`] (configured from the environment by [`HubConfig::from_env`]:
//! `HF_ENDPOINT`, `HF_HUB_CACHE`/`HF_HOME`, `HF_TOKEN`, `HF_HUB_OFFLINE`); its
//! [`Hub::snapshot`] returns a [`Snapshot`] folder that opens as a checkpoint directory.
//! [`weights_hash`] is the content hash of a checkpoint's tensors.
//!
//! Key design decisions. The cache is the one Python's `huggingface_hub` writes
//! (`models--org--name/{refs,blobs,snapshots}`, blobs named by ETag, relative symlinks,
//! `blobs/<etag>.incomplete` partials, `.locks/`), so a checkpoint downloaded by either tool
//! is used by the other without a second download. The protocol (`/api/models/{id}/revision`,
//! `/tree`, `/refs`, `HEAD`+`GET /{id}/resolve/{rev}/{file}` with `X-Repo-Commit`,
//! `X-Linked-Etag`, `X-Linked-Size` and `Range`) is written here on the small blocking
//! client `ureq` instead of taken from the `hf-hub` crate: hf-hub 1.0.0 is async only (tokio,
//! reqwest, hf-xet: several minutes of extra build on two cores for a tool that downloads
//! one file at a time), has no `HF_HUB_OFFLINE` handling, restarts rather than resumes a
//! partial download, and does not list refs. Partial downloads are resumed with `Range`,
//! checked against the announced size and, for LFS files, SHA-256, and only then renamed
//! into `blobs/`: the cache never holds a corrupt blob. A branch already recorded in the
//! cache with a complete snapshot is used without any request (training-step branches do
//! not move; [`HubConfig::refresh`] re-asks).
//!
//! It is not a general hub client: no uploads, no datasets or spaces, no Xet transfers
//! (the hub serves every file over plain HTTP too), and no PyTorch `.bin` weights (a
//! revision with only those is an error that says what to do).
#![deny(missing_docs)]

mod audit;
mod cache;
mod client;
mod error;
mod model_ref;
#[cfg(feature = "test-server")]
pub mod test_server;

pub use audit::{
    RevisionAudit, WeightsDigest, all_revisions, audit_revisions, step_of, weights_hash,
};
pub use cache::{RepoCache, is_commit};
pub use client::{
    DEFAULT_ENDPOINT, DownloadProgress, Files, GitRef, Hub, HubConfig, LfsInfo, Refs, RepoFile,
    Snapshot, check_id, default_cache_dir,
};
pub use error::{Error, Result};
pub use model_ref::ModelRef;

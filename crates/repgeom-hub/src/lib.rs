//! `repgeom-hub` finds HuggingFace Hub models (and datasets) by name and revision: it resolves `org/name`
//! at a branch (`step3000`), tag or commit in the hub's own cache, downloads only the files
//! a run needs, and hashes checkpoint weights so that revisions serving the same model can
//! be spotted.
//!
//! The main type is [`Hub`] (configured from the environment by [`HubConfig::from_env`]:
//! `HF_ENDPOINT`, `HF_HUB_CACHE`/`HF_HOME`, `HF_TOKEN`, `HF_HUB_OFFLINE`); its
//! [`Hub::snapshot`] returns a [`Snapshot`] folder that opens as a checkpoint directory.
//! [`weights_hash`] is the content hash of a checkpoint's tensors. [`read_readout`] is the one
//! loader of a model's readout `W_U` for analysis by reference (a local path or a hub id at a
//! revision: resolve, download what is missing, then `repgeom-io`'s prepared readout).
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
//! Nothing the hub or a repo sends can write or read outside the cache: listed paths, blob
//! ids, ETags, shard names in index files and revisions become a [`RelPath`] (git's ref-name
//! rules for revisions, [`check_revision`]) before they name a file, and a refused name is an
//! [`Error::UnsafeName`] that says which name, where it came from and why, before anything is
//! written.
//!
//! Every request is retried on rate limits (`429`), an unavailable hub (`503`), refused
//! connections and timeouts, waiting the hub's `Retry-After` or a capped exponential
//! back-off, within the bounds of one [`RetryPolicy`] (`REPGEOM_HUB_MAX_RETRY_WAIT`, default
//! 300 s per request); each retry is one note on stderr. Other errors are not retried.
//!
//! Datasets by name: [`Hub::dataset`] resolves a [`DatasetRef`] (`org/name`, revision,
//! optional config, split) to the parquet files of that config and split, chosen as the
//! `datasets` library chooses them ([`dataset_configs`]: the card's `configs:`, else the
//! file layout), downloaded into `datasets--org--name/` in the same cache layout.
//!
//! It is not a general hub client: no uploads, no spaces, no dataset formats but parquet, no
//! Xet transfers
//! (the hub serves every file over plain HTTP too), and no PyTorch `.bin` weights (a
//! revision with only those is an error that says what to do).
#![deny(missing_docs)]

mod audit;
mod cache;
mod client;
mod dataset;
mod error;
mod model_ref;
mod readout;
mod retry;
#[cfg(feature = "test-server")]
pub mod test_server;

pub use audit::{
    RevisionAudit, WeightsDigest, all_revisions, audit_revisions, step_of, weights_hash,
};
pub use cache::{RepoCache, RepoType, check_revision, is_commit};
pub use client::{
    DEFAULT_ENDPOINT, DownloadProgress, Files, GitRef, Hub, HubConfig, LfsInfo, Refs, RepoFile,
    Snapshot, check_id, default_cache_dir, parse_listing,
};
pub use dataset::{DataConfig, DatasetFiles, DatasetRef, dataset_configs};
pub use error::{Error, Result};
pub use model_ref::ModelRef;
pub use readout::{ResolvedReadout, read_readout};
pub use repgeom_io::{BadName, RelPath};
pub use retry::{MAX_RETRY_WAIT_VAR, RetryPolicy};

//! The crate's one error type.

use std::path::PathBuf;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong resolving or downloading a model, or reading its readout.
/// Every variant names the model, and where it applies the revision and the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model argument is neither an existing path nor a hub model id.
    #[error("{spec}: no such file or directory, and not a hub model id (org/name)")]
    NoSuchModel {
        /// What was given.
        spec: String,
    },
    /// A revision was given with a local path (revisions select hub checkpoints).
    #[error(
        "revision `{revision}` applies to hub model ids (org/name), but {} is a local path",
        path.display()
    )]
    RevisionOfLocalPath {
        /// The local path.
        path: PathBuf,
        /// The revision given.
        revision: String,
    },
    /// A name that came from outside the command line (a hub listing, an index file, a
    /// revision) would leave the cache folder it is joined to: refused before anything touches
    /// the file system.
    #[error(
        "refused {name}, from {origin}: names from a hub, a repo or a manifest must stay inside the cache"
    )]
    UnsafeName {
        /// The name and the rule it breaks.
        name: repgeom_io::BadName,
        /// Where it came from: the repo, revision and file, or the argument.
        origin: String,
    },
    /// The model id is not of the form `org/name`.
    #[error("`{id}` is not a hub model id (expected `org/name`, or a local directory)")]
    BadId {
        /// What was given.
        id: String,
    },
    /// The hub does not know the model (or hides it: private and gated repositories answer
    /// 401 to requests without a token).
    #[error(
        "{model}: no such model on {endpoint}{}",
        if *token_set { "" } else { " (if it is gated or private, set HF_TOKEN)" }
    )]
    ModelNotFound {
        /// The model id.
        model: String,
        /// The hub endpoint asked.
        endpoint: String,
        /// Whether a token was sent.
        token_set: bool,
    },
    /// The hub does not know the dataset (or hides it: private and gated repositories answer
    /// 401 to requests without a token).
    #[error(
        "{dataset}: no such dataset on {endpoint}{}",
        if *token_set { "" } else { " (if it is gated or private, set HF_TOKEN)" }
    )]
    DatasetNotFound {
        /// The dataset id.
        dataset: String,
        /// The hub endpoint asked.
        endpoint: String,
        /// Whether a token was sent.
        token_set: bool,
    },
    /// The dataset has no such config (subset).
    #[error("{dataset}@{revision}: no config `{config}`; its configs are {configs:?}")]
    NoSuchConfig {
        /// The dataset id.
        dataset: String,
        /// The revision.
        revision: String,
        /// The config asked for.
        config: String,
        /// The configs it has.
        configs: Vec<String>,
    },
    /// The dataset's config has no such split. (No revision field: it would make every
    /// `Result` of this crate 8 bytes larger, past clippy's `result_large_err` bound.)
    #[error("{dataset}: config `{config}` has no split `{split}`; its splits are {splits:?}")]
    NoSuchSplit {
        /// The dataset id.
        dataset: String,
        /// The config.
        config: String,
        /// The split asked for.
        split: String,
        /// The splits it has.
        splits: Vec<String>,
    },
    /// No config was named and the dataset has several, none of them the default.
    #[error("{dataset}@{revision}: no default config; name one of {configs:?} (`config = ...`)")]
    NoDefaultConfig {
        /// The dataset id.
        dataset: String,
        /// The revision.
        revision: String,
        /// The configs it has.
        configs: Vec<String>,
    },
    /// The dataset revision has no parquet data files, the only format read here.
    #[error(
        "{dataset}@{revision}: no *.parquet data files (files: {files:?}); the hub keeps a \
         parquet conversion of most datasets at revision `refs/convert/parquet`"
    )]
    NoParquet {
        /// The dataset id.
        dataset: String,
        /// The revision.
        revision: String,
        /// Every file the revision has (at most 20).
        files: Vec<String>,
    },
    /// The model exists but has no such branch, tag or commit.
    #[error("{model}: no revision `{revision}` on {endpoint}")]
    RevisionNotFound {
        /// The model id.
        model: String,
        /// The revision asked for.
        revision: String,
        /// The hub endpoint asked.
        endpoint: String,
    },
    /// The revision has no such file.
    #[error("{model}@{revision}: no file `{file}` in this revision")]
    FileNotFound {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The file path inside the repository.
        file: String,
    },
    /// The hub refused access: a gated model without a token, or a token without access.
    #[error(
        "{model}@{revision}: access refused (HTTP {status}); {}",
        if *token_set {
            "the token in HF_TOKEN has no access: accept the model's licence on its hub page"
        } else {
            "this model is gated: accept its licence on the hub page and set HF_TOKEN"
        }
    )]
    Unauthorized {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The HTTP status (401 or 403).
        status: u16,
        /// Whether a token was sent.
        token_set: bool,
    },
    /// The revision has weights only as PyTorch pickles, which repgeom does not read.
    #[error(
        "{model}@{revision}: no *.safetensors weights, only {found:?}; repgeom reads safetensors \
         only: look for a safetensors conversion among the model's pull requests (the hub's \
         bot opens them; pass `--revision refs/pr/N`) or convert the checkpoint with \
         transformers (`save_pretrained(..., safe_serialization=True)`)"
    )]
    NoSafetensors {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The PyTorch weight files found.
        found: Vec<String>,
    },
    /// The revision has neither safetensors nor PyTorch weights.
    #[error("{model}@{revision}: no weight files at all (files: {files:?})")]
    NoWeights {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// Every file the revision has.
        files: Vec<String>,
    },
    /// `HF_HUB_OFFLINE=1` and the cache lacks what the run needs.
    #[error(
        "{model}@{revision}: HF_HUB_OFFLINE=1 and the cache {} lacks {missing:?}; \
         download them first (unset HF_HUB_OFFLINE)",
        cache.display()
    )]
    Offline {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The model's folder in the cache.
        cache: PathBuf,
        /// What is missing: the revision's ref, or files.
        missing: Vec<String>,
    },
    /// A download kept failing; the partial file stays in the cache for the next attempt.
    #[error(
        "{model}@{revision}: {file}: download failed after {attempts} attempts at byte \
         {offset} of {size} (the partial file is kept and resumed next time): {reason}"
    )]
    Download {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The file path inside the repository.
        file: String,
        /// Attempts made.
        attempts: usize,
        /// Bytes on disk.
        offset: u64,
        /// Bytes expected.
        size: u64,
        /// The last failure.
        reason: String,
    },
    /// A completed download does not match the size or checksum the hub announced; it was
    /// deleted, never moved into the cache.
    #[error("{model}@{revision}: {file}: downloaded file does not match the hub's {what}")]
    Corrupt {
        /// The model id.
        model: String,
        /// The revision.
        revision: String,
        /// The file path inside the repository.
        file: String,
        /// What did not match, with both values.
        what: String,
    },
    /// The hub answered with an unexpected status.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The request.
        url: String,
        /// The status.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The hub kept answering 429 (rate limit) or 503, or kept refusing or timing out the
    /// connection, until the retry policy's bounds ([`crate::RetryPolicy`]) were reached.
    #[error(
        "{what}: gave up after {attempts} attempts and {waited_s:.1}s of waiting; last: {last} \
         ({url}); the hub is rate-limiting or unavailable: try again later, or let a request \
         wait longer than {max_wait_s}s with {var}",
        var = crate::retry::MAX_RETRY_WAIT_VAR
    )]
    RetriesExhausted {
        /// What was asked: the repository, revision and file or API call.
        what: String,
        /// The last request.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Seconds spent waiting between them.
        waited_s: f64,
        /// The policy's bound on the total wait, in seconds.
        max_wait_s: f64,
        /// The last answer: `HTTP 429 Too Many Requests`, or the connection error.
        last: String,
    },
    /// An environment variable has a value the client cannot use.
    #[error("{var}={value:?}: expected {expected}")]
    BadEnv {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What it should be.
        expected: String,
    },
    /// The hub could not be reached, or its answer could not be read.
    #[error("{url}: {reason}")]
    Network {
        /// The request.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The hub's answer did not follow the protocol.
    #[error("{url}: unexpected answer: {reason}")]
    Protocol {
        /// The request.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// A file in a checkpoint could not be parsed (weights hashing).
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The readout could not be read or prepared from the resolved file or folder
    /// ([`crate::read_readout`]); the message is the loader's, which names the file, the
    /// tensor and its shape.
    #[error(transparent)]
    Readout {
        /// The loader's error (boxed: it is larger than this enum's other variants).
        source: Box<repgeom_io::Error>,
    },
    /// A file system operation failed (for instance a full disk mid-download).
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

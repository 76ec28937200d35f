//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while planning, running or merging a study.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The manifest file could not be read.
    #[error("cannot read manifest {}: {source}", path.display())]
    ManifestRead {
        /// The manifest path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The manifest is not valid TOML or has unknown/missing fields.
    #[error("manifest {}: {message}", path.display())]
    ManifestParse {
        /// The manifest path.
        path: PathBuf,
        /// The parser's message (names the line and field).
        message: String,
    },
    /// A manifest value is out of range or inconsistent.
    #[error("manifest {manifest}: {place}: {reason}")]
    InvalidManifest {
        /// The manifest path (or `<built-in synthetic study>`).
        manifest: String,
        /// Where in the manifest, e.g. `model "pythia-70m"` or `analysis.k`.
        place: String,
        /// What is wrong.
        reason: String,
    },
    /// Loaded data disagree with the manifest (width, layer count, point count).
    #[error("model {model}: {what}: expected {expected}, found {found}")]
    DataMismatch {
        /// The model label.
        model: String,
        /// What was compared.
        what: String,
        /// What the manifest or the other files say.
        expected: String,
        /// What the data hold.
        found: String,
    },
    /// The two models of a pair do not hold the same points (another design, count, place,
    /// token or word window: [`repgeom_extract::same_points`]).
    #[error("pairs [{a:?}, {b:?}]: {} against {}: {reason}", file_a.display(), file_b.display())]
    PairPoints {
        /// The first model's label.
        a: String,
        /// The second's.
        b: String,
        /// The first model's points file.
        file_a: PathBuf,
        /// The second's.
        file_b: PathBuf,
        /// What differs.
        reason: Box<repgeom_extract::PointsDiffer>,
    },
    /// A part file or directory could not be read or written.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation, e.g. `read part`.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A part file is not valid.
    #[error("part file {}: {reason}", path.display())]
    BadPart {
        /// The part file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Parts were computed with settings different from the plan's.
    #[error(
        "part file {}: unit {unit} was computed with config hash {found}, the plan in {} expects {expected}; \
         rerun `repgeom sweep` with the same manifest (it recomputes stale units) or use a fresh directory",
        path.display(), plan.display()
    )]
    MixedSettings {
        /// The offending part file.
        path: PathBuf,
        /// The plan file.
        plan: PathBuf,
        /// The unit id.
        unit: String,
        /// Hash the plan expects.
        expected: String,
        /// Hash the part carries.
        found: String,
    },
    /// The sweep directory has no plan (no sweep was started there).
    #[error("{}: no plan.json: run `repgeom sweep --manifest M --out DIR` (or `cargo xtask paper`) first", dir.display())]
    NoPlan {
        /// The sweep directory.
        dir: PathBuf,
    },
    /// The sweep directory lacks units of its plan (a report needs all of them).
    #[error("{}: {missing} of {planned} units have no part file (first: {first}); finish the sweep first", dir.display())]
    Incomplete {
        /// The sweep directory.
        dir: PathBuf,
        /// Units without a part file.
        missing: usize,
        /// Units planned.
        planned: usize,
        /// The first missing unit's id.
        first: String,
    },
    /// Bad `--shard i/n` (or SLURM array variables).
    #[error("shard {spec}: {reason}")]
    BadShard {
        /// The shard as given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading inputs failed.
    #[error(transparent)]
    Input(Box<repgeom_io::Error>),
    /// A numerical kernel failed.
    #[error(transparent)]
    Linalg(Box<repgeom_linalg::Error>),
    /// Null sampling failed.
    #[error(transparent)]
    Null(Box<repgeom_null::Error>),
    /// A metric failed.
    #[error(transparent)]
    Metrics(Box<repgeom_metrics::Error>),
    /// A probe failed.
    #[error(transparent)]
    Probe(Box<repgeom_probe::Error>),
    /// The manifest's `device` could not be opened.
    #[error(transparent)]
    Device(Box<repgeom_cuda::Error>),
    /// Building the table, the figures or the report failed.
    #[error(transparent)]
    Report(Box<repgeom_report::Error>),
    /// Generating the synthetic study failed.
    #[error(transparent)]
    Synth(Box<repgeom_synth::Error>),
    /// Resolving or downloading a hub checkpoint failed (the message names model, revision
    /// and file).
    #[error(transparent)]
    Hub(Box<repgeom_hub::Error>),
    /// The texts of `[extract] text` or `[probe] labels` cannot be read.
    #[error("{place} ({data}): {reason}")]
    Data {
        /// The manifest key (`extract.text`, `probe.labels`).
        place: &'static str,
        /// The file or hub dataset it names.
        data: String,
        /// What is wrong.
        reason: String,
    },
    /// Extracting activations of a hub checkpoint failed.
    #[error("model {model} revision {revision}: extraction from {}: {reason}", file.display())]
    Extract {
        /// The model label.
        model: String,
        /// The hub revision.
        revision: String,
        /// The input file (corpus or labelled texts).
        file: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl From<repgeom_io::Error> for Error {
    fn from(e: repgeom_io::Error) -> Self {
        Self::Input(Box::new(e))
    }
}

impl From<repgeom_linalg::Error> for Error {
    fn from(e: repgeom_linalg::Error) -> Self {
        Self::Linalg(Box::new(e))
    }
}

impl From<repgeom_null::Error> for Error {
    fn from(e: repgeom_null::Error) -> Self {
        Self::Null(Box::new(e))
    }
}

impl From<repgeom_cuda::Error> for Error {
    fn from(e: repgeom_cuda::Error) -> Self {
        Self::Device(Box::new(e))
    }
}

impl From<repgeom_metrics::Error> for Error {
    fn from(e: repgeom_metrics::Error) -> Self {
        Self::Metrics(Box::new(e))
    }
}

impl From<repgeom_probe::Error> for Error {
    fn from(e: repgeom_probe::Error) -> Self {
        Self::Probe(Box::new(e))
    }
}

impl From<repgeom_report::Error> for Error {
    fn from(e: repgeom_report::Error) -> Self {
        Self::Report(Box::new(e))
    }
}

impl From<repgeom_hub::Error> for Error {
    fn from(e: repgeom_hub::Error) -> Self {
        match e {
            // A readout that was found but cannot be read is an input error, as before the
            // hub's resolver read it.
            repgeom_hub::Error::Readout { source } => Self::Input(source),
            e => Self::Hub(Box::new(e)),
        }
    }
}

impl From<repgeom_synth::Error> for Error {
    fn from(e: repgeom_synth::Error) -> Self {
        Self::Synth(Box::new(e))
    }
}

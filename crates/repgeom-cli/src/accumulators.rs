//! Streaming accumulators on disk: `repgeom extract --save-accumulators` writes one file per
//! hidden state (covariance) or pair (CKA), and `repgeom merge` reads shards of a corpus back,
//! checks that they come from the same model, hidden states and settings, and merges them
//! exactly. Shared by `extract` and `merge`, so neither command module imports the other.
//!
//! A file is a `.safetensors` of the accumulator's `f64` sums (`AccumulatorState`, written and
//! read back bit for bit) with string metadata: `format` (`repgeom-accumulator`), `version`,
//! `kind` (`covariance` or `cka`), `n` (tokens), `model`, `d`, `n_hidden`, `layers` (`3`, or
//! `0:6` for a pair) and `settings` (the extraction settings that change the sums:
//! `seq_len`, `skip_first`); a CKA accumulator between two models adds `other_model` and
//! `other_d` (the pair's second hidden state is that model's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use repgeom_metrics::{AccumulatorState, Metric};

/// The `format` of every accumulator file.
pub(crate) const FORMAT: &str = "repgeom-accumulator";
/// The version this build writes and reads.
pub(crate) const VERSION: &str = "1";

/// What an accumulator file says besides its sums; equal across the shards `merge` accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The model's label (`name` or `name@revision`).
    pub(crate) model: String,
    /// Width of its hidden states.
    pub(crate) d: usize,
    /// Hidden states it has (embeddings + blocks).
    pub(crate) n_hidden: usize,
    /// `3` (a hidden state) or `0:6` (a pair).
    pub(crate) layers: String,
    /// The extraction settings that change the sums, as JSON.
    pub(crate) settings: String,
    /// A CKA accumulator between two models (`extract --other-model`): the second model's
    /// label and width (its hidden state is the second of `layers`).
    pub(crate) other: Option<(String, usize)>,
}

/// One accumulator file read back.
#[derive(Debug)]
pub(crate) struct AccFile {
    pub(crate) path: PathBuf,
    pub(crate) origin: Origin,
    pub(crate) state: AccumulatorState,
}

/// The file name (without `.safetensors`) of an accumulator of `kind` over hidden states
/// `layers`: `covariance-3`, `cka-0-6`. `extract --save-accumulators` writes these names and
/// `merge --save` into a folder writes them again.
pub(crate) fn file_stem(kind: &str, layers: &str) -> String {
    format!("{kind}-{}", layers.replace(':', "-"))
}

/// Writes `state` with `origin` to `path` (temp file, then rename).
pub(crate) fn write(path: &Path, state: &AccumulatorState, origin: &Origin) -> anyhow::Result<()> {
    let meta: BTreeMap<String, String> = [
        ("format", FORMAT.to_owned()),
        ("version", VERSION.to_owned()),
        ("kind", state.kind.clone()),
        ("n", state.n.to_string()),
        ("model", origin.model.clone()),
        ("d", origin.d.to_string()),
        ("n_hidden", origin.n_hidden.to_string()),
        ("layers", origin.layers.clone()),
        ("settings", origin.settings.clone()),
    ]
    .into_iter()
    .chain(
        origin
            .other
            .iter()
            .flat_map(|(model, d)| [("other_model", model.clone()), ("other_d", d.to_string())]),
    )
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let tensors: Vec<(String, Vec<usize>, &[f64])> = (state.arrays.iter())
        .map(|(name, (shape, data))| (name.clone(), shape.clone(), data.as_slice()))
        .collect();
    repgeom_io::write_safetensors_f64(path, &tensors, &meta)?;
    Ok(())
}

/// Reads an accumulator file: a `.safetensors` with this format's metadata; anything else (a
/// foreign or truncated file, another version) is an error naming the file.
pub(crate) fn read(path: &Path) -> anyhow::Result<AccFile> {
    let (arrays, meta) = repgeom_io::read_safetensors_f64(path)?;
    let get = |key: &str| -> anyhow::Result<&String> {
        meta.get(key).with_context(|| {
            format!(
                "{}: not a repgeom accumulator file (no `{key}` in its metadata; write one with `repgeom extract --save-accumulators`)",
                path.display()
            )
        })
    };
    anyhow::ensure!(
        get("format")? == FORMAT,
        "{}: not a repgeom accumulator file (metadata format {:?}, expected {FORMAT:?})",
        path.display(),
        get("format")?
    );
    anyhow::ensure!(
        get("version")? == VERSION,
        "{}: accumulator file version {}, this build reads version {VERSION}",
        path.display(),
        get("version")?
    );
    let number = |key: &str| -> anyhow::Result<u64> {
        let v = get(key)?;
        v.parse()
            .with_context(|| format!("{}: metadata {key} = {v:?} is not a count", path.display()))
    };
    let state = AccumulatorState {
        kind: get("kind")?.clone(),
        n: number("n")?,
        arrays: arrays
            .into_iter()
            .map(|(name, a)| (name, (a.shape, a.data)))
            .collect(),
    };
    let origin = Origin {
        model: get("model")?.clone(),
        d: usize::try_from(number("d")?)?,
        n_hidden: usize::try_from(number("n_hidden")?)?,
        layers: get("layers")?.clone(),
        settings: get("settings")?.clone(),
        other: match meta.get("other_model") {
            Some(model) => Some((model.clone(), usize::try_from(number("other_d")?)?)),
            None => None,
        },
    };
    Ok(AccFile {
        path: path.to_path_buf(),
        origin,
        state,
    })
}

/// The spectral metrics reported over every token: every registered metric's covariance form
/// ([`repgeom_metrics::covariance_forms`]: RankMe, α-ReQ, IsoScore, the condition number).
pub(crate) fn spectral_metrics() -> Vec<Box<dyn Metric>> {
    repgeom_metrics::covariance_forms()
}

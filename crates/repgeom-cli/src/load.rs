//! Loading a model's data for analysis on the command line: the readout `W_U` (through
//! [`repgeom_hub::read_readout`], the libraries' one resolver and loader, with progress bars,
//! then the width and `k` checks naming both files), analysis files and metric specs. Shared
//! by `pga`, `metrics` and `compare`, so no command module imports another.

use std::path::Path;

use anyhow::Context as _;
use repgeom_metrics::AnalysisParams;

use crate::context::Context;

/// Reads an analysis file, TOML or JSON by extension.
pub(crate) fn read_analysis(path: &Path) -> anyhow::Result<AnalysisParams> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let parsed = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => serde_json::from_str(&text).map_err(anyhow::Error::from),
        Some("toml") => toml::from_str(&text).map_err(anyhow::Error::from),
        _ => anyhow::bail!("{}: analysis files are .toml or .json", path.display()),
    };
    parsed.with_context(|| format!("parsing the analysis in {}", path.display()))
}

/// Parses `NAME` or `NAME:{json options}` into a checked metric configuration with the
/// registry's parser (`from_config`: [`repgeom_metrics::metric_from_config`] or its pair twin).
pub(crate) fn parse_spec<T>(
    spec: &str,
    from_config: impl Fn(&serde_json::Map<String, serde_json::Value>) -> repgeom_metrics::Result<T>,
) -> anyhow::Result<T> {
    let (name, options) = match spec.split_once(':') {
        Some((name, json)) => (name.trim(), Some(json)),
        None => (spec.trim(), None),
    };
    let mut config = match options {
        None => serde_json::Map::new(),
        Some(json) => match serde_json::from_str(json) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => anyhow::bail!("options of --metric {name}: expected a JSON object, got {json:?}"),
        },
    };
    config.insert("metric".into(), serde_json::Value::from(name));
    Ok(from_config(&config)?)
}

/// The default model label: the file stem.
pub(crate) fn model_label(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned())
}

/// Which readout to read and how to prepare it.
pub(crate) struct ReadoutChoice {
    /// Tensor, rows, gain folding and centring.
    pub(crate) prep: repgeom_io::ReadoutPrep,
    /// Hub revision when the readout is given as a hub model id.
    pub(crate) revision: Option<String>,
}

/// The readout `W_U` of a model (downloaded first for a hub id, by the libraries' one
/// resolver, [`repgeom_hub::read_readout`]), prepared as `choice` says and checked against the
/// activations' `d` and the requested `k`: every error of the file shows here, before any
/// decomposition starts.
pub(crate) fn read_readout(
    path: &Path,
    choice: &ReadoutChoice,
    k: usize,
    d: usize,
    acts_path: &Path,
    ctx: &Context,
) -> anyhow::Result<repgeom_io::Matrix> {
    // The loader's messages name the file, tensor and shape (and, for --readout-fold-norm,
    // the final norm's gain it looked for).
    let repgeom_hub::ResolvedReadout {
        path: resolved,
        readout,
    } = repgeom_hub::read_readout(
        &path.to_string_lossy(),
        choice.revision.as_deref(),
        &choice.prep,
        &repgeom_hub::Hub::from_env(),
        &mut crate::hub::download_bar(ctx),
    )?;
    let path = resolved.as_path();
    if let Some(note) = &readout.note {
        ctx.note(note);
    }
    let m = &readout.matrix;
    repgeom_metrics::check_readout_for(
        repgeom_linalg::MatRef::from_row_major_slice(&m.data, m.rows, m.cols),
        d,
        k,
        &acts_path.display().to_string(),
        &path.display().to_string(),
        &readout.tensor,
    )?;
    Ok(readout.matrix)
}

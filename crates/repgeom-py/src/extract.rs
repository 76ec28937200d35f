//! `repgeom.extract`: hidden states of a checkpoint (a local folder or a hub id) by the native
//! forward passes of `repgeom-extract` (feature `extract`).

use std::path::PathBuf;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use crate::errors::Failure;
use crate::run::{check_cancel, progress_bar, run_blocking};

/// A model reference, by the rule every front end shares ([`repgeom_hub::ModelRef::parse`]):
/// an existing local path is used as it is; otherwise a hub model id `org/name` is resolved in
/// the HuggingFace cache at `revision` (default `main`), downloading only the files `need`
/// names.
fn resolve_model(
    reference: &std::path::Path,
    revision: Option<&str>,
    need: &repgeom_hub::Files,
    progress: Option<bool>,
) -> Result<PathBuf, Failure> {
    let m = repgeom_hub::ModelRef::parse(&reference.to_string_lossy(), revision)?;
    let bar = progress_bar(0, "download", progress);
    let dir = m.resolve(&repgeom_hub::Hub::from_env(), need, &mut |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
        bar.set_message(p.file.to_owned());
    })?;
    bar.finish_and_clear();
    Ok(dir)
}

/// Hidden states of a local checkpoint on `text`: `(layer, [N, d] float32 array)` per layer,
/// the token positions and the metadata `repgeom extract` writes.
#[pyfunction]
#[pyo3(signature = (model, text, *, n_points, seq_len, seed, pool, progress, revision=None, points_per_sequence=None, points=None, word_pool=None, device="cpu".to_string(), dtype="f32".to_string()))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn extract<'py>(
    py: Python<'py>,
    model: PathBuf,
    text: String,
    n_points: Option<usize>,
    seq_len: usize,
    seed: u64,
    pool: String,
    progress: Option<bool>,
    revision: Option<String>,
    points_per_sequence: Option<usize>,
    points: Option<String>,
    word_pool: Option<String>,
    device: String,
    dtype: String,
) -> PyResult<(
    Vec<Bound<'py, PyAny>>,
    Vec<(usize, usize)>,
    Vec<(String, String)>,
)> {
    let invalid = |msg: String| Err(Failure::Invalid(msg).into_py(py));
    // The design by its names, through the library's one rule (the command line's flags and
    // a study's [extract] read the same).
    let pool = match repgeom_extract::Pool::from_names(
        &pool,
        points.as_deref().unwrap_or("tokens"),
        word_pool.as_deref(),
    ) {
        Ok(p) => p,
        Err(e) => return invalid(e.to_string()),
    };
    // The precision and the device before any input is read, as on the command line.
    let precision: repgeom_extract::Precision = match dtype.parse() {
        Ok(p) => p,
        Err(e) => return invalid(format!("{e}")),
    };
    let device = crate::pga::open_device(py, &device)?;
    let ex = run_blocking(py, move |cancel| {
        let model = resolve_model(
            &model,
            revision.as_deref(),
            &repgeom_hub::Files::Full,
            progress,
        )?;
        let params = repgeom_extract::ExtractParams {
            n_points,
            seq_len,
            seed,
            pool,
            points_per_sequence,
            dtype: precision,
            ..repgeom_extract::ExtractParams::default()
        }
        .check()?;
        let bar = progress_bar(0, "extract", progress);
        let mut extractor = repgeom_extract::Extractor::load(&model)?;
        let gpu = device.open().map_err(repgeom_extract::Error::from)?;
        extractor.place(gpu, precision)?;
        let ex = extractor.extract(&text, &params, &mut |p| {
            check_cancel(cancel);
            bar.set_length(p.sequences_total as u64);
            bar.set_position(p.sequences_done as u64);
        })?;
        bar.finish_and_clear();
        Ok(ex)
    })?;
    let d = ex.hidden_size;
    let n = ex.n_points;
    let arrays = ex
        .hidden_states
        .into_iter()
        .map(|h| Ok(PyArray1::from_vec(py, h).reshape([n, d])?.into_any()))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((arrays, ex.positions, ex.metadata.into_iter().collect()))
}

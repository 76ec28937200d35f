//! `repgeom-py` is the native half of the `repgeom` Python package (`repgeom._native`): the
//! Rust engine behind `repgeom.pga`, `repgeom.metrics`, `repgeom.compare`, `repgeom.probe`,
//! `repgeom.extract` and friends, built into one abi3 wheel by maturin.
//!
//! Its main entry point is [`pga`], which takes NumPy arrays or DLPack tensors, views `f32`
//! memory in place (any strides) and runs the same library path as `repgeom pga`
//! ([`repgeom_metrics::Pga::run_model`]), so the numbers equal the command
//! line's bit for bit. Key design decisions: results cross the boundary as the JSON of the Rust
//! result types (serde), so a field added to `PgaResult` or `MetricValue` appears in Python
//! without a change here; every computation runs on a worker thread with the GIL released
//! while the calling thread polls for Ctrl-C every 100 ms and cancels at the next null draw;
//! panics are caught and raised as `repgeom.InternalError`.
//!
//! It is not a Python API of its own: argument handling, result classes and DataFrames live in
//! the pure-Python package (`python/repgeom`), and no numerical code lives here.

// glibc's malloc hands each freed multi-megabyte tensor buffer back to the kernel and faults
// it in again on the next allocation; mimalloc reuses them (about +25 % tokens/s in
// extraction, docs/extraction.md *Speed*).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod errors;
mod input;
#[cfg(feature = "test-plugin")]
mod test_plugin;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::analysis::{
    Hooks, ModelContext, ModelInput, ModelLayer, ModelPair, ModelReadout, NullSource, PairModel,
    pair_needs,
};
use repgeom_metrics::calibrate::CompareSettings;
use repgeom_metrics::{LayerInput, layer_pairs};
use repgeom_null::NullBases;

use errors::Failure;
use input::{Keep, Matrix32, Raw, read_array};

/// Raised by `on_draw` to unwind the engine after Ctrl-C.
struct Cancelled;

/// Runs `f` on a worker thread with the GIL released. The calling thread checks for signals
/// every 100 ms; on Ctrl-C it sets the flag `f` polls (through its progress callbacks) and
/// returns the `KeyboardInterrupt` once `f` has unwound. A panic becomes `InternalError`.
fn run_blocking<T: Send>(
    py: Python<'_>,
    f: impl FnOnce(&AtomicBool) -> Result<T, Failure> + Send,
) -> PyResult<T> {
    let cancel = AtomicBool::new(false);
    let outcome = py.detach(|| {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let cancel = &cancel;
            s.spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(cancel)));
                let _ = tx.send(r);
            });
            let mut interrupt: Option<PyErr> = None;
            loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(r) => break (r, interrupt),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if interrupt.is_none()
                            && let Err(e) = Python::attach(|py| py.check_signals())
                        {
                            cancel.store(true, Ordering::SeqCst);
                            interrupt = Some(e);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        break (
                            Ok(Err(Failure::Panic("worker thread vanished".into()))),
                            interrupt,
                        );
                    }
                }
            }
        })
    });
    let result = match outcome {
        (Ok(r), None) => r,
        (Ok(Ok(_)), Some(e)) | (Ok(Err(_)), Some(e)) => Err(Failure::Interrupted(e)),
        (Err(payload), interrupt) => {
            if payload.downcast_ref::<Cancelled>().is_some() {
                match interrupt {
                    Some(e) => Err(Failure::Interrupted(e)),
                    None => Err(Failure::Panic("cancelled without an interrupt".into())),
                }
            } else {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a Rust panic".to_owned());
                Err(Failure::Panic(msg))
            }
        }
    };
    result.map_err(|e| e.into_py(py))
}

/// Unwinds out of the engine when Ctrl-C was pressed (called from progress callbacks).
fn check_cancel(cancel: &AtomicBool) {
    if cancel.load(Ordering::Relaxed) {
        std::panic::resume_unwind(Box::new(Cancelled));
    }
}

/// A progress bar on stderr: drawn in terminals, hidden elsewhere (notebooks, logs, pipes) or
/// when `progress` is false.
fn progress_bar(total: u64, what: &str, progress: Option<bool>) -> indicatif::ProgressBar {
    if progress == Some(false) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::Panic(format!("serialising a result: {e}")))
}

/// One layer handed in from Python: its index and its 2-D array.
struct LayerArg<'py> {
    index: usize,
    raw: Raw<'py>,
    what: String,
}

fn read_layers<'py>(
    layers: Vec<(usize, Bound<'py, PyAny>)>,
    name: &str,
    keep: &mut Keep<'py>,
) -> Result<Vec<LayerArg<'py>>, Failure> {
    if layers.is_empty() {
        return Err(Failure::Invalid(format!("{name}: no layers to analyse")));
    }
    let mut out = Vec::with_capacity(layers.len());
    for (index, obj) in layers {
        let arr = read_array(&obj, &format!("{name}[{index}]"), keep)?;
        if arr.shape.len() != 2 {
            return Err(Failure::Invalid(format!(
                "{name}[{index}]: expected a 2-D [N, d] layer, got shape {:?}",
                arr.shape
            )));
        }
        let raw = arr.slice(0);
        let what = format!("{name}[{index}] [{}, {}]", raw.rows, raw.cols);
        out.push(LayerArg { index, raw, what });
    }
    let d = out[0].raw.cols;
    if let Some(bad) = out.iter().find(|l| l.raw.cols != d) {
        return Err(Failure::Invalid(format!(
            "{name}: layers disagree in hidden size: {} has d = {}, {} has d = {d}",
            bad.what, bad.raw.cols, out[0].what
        )));
    }
    Ok(out)
}

/// Where the readout comes from: a file or checkpoint directory, or an array.
enum ReadoutArg<'py> {
    Path(PathBuf),
    Array(Raw<'py>),
}

fn read_readout_arg<'py>(
    readout: Option<Bound<'py, PyAny>>,
    keep: &mut Keep<'py>,
) -> Result<Option<ReadoutArg<'py>>, Failure> {
    let Some(obj) = readout else {
        return Ok(None);
    };
    if let Ok(path) = obj.extract::<PathBuf>() {
        return Ok(Some(ReadoutArg::Path(path)));
    }
    let arr = read_array(&obj, "readout", keep)?;
    if arr.shape.len() != 2 {
        return Err(Failure::Invalid(format!(
            "readout: expected W_U [V, d] or a basis [d, k], got shape {:?}",
            arr.shape
        )));
    }
    Ok(Some(ReadoutArg::Array(arr.slice(0))))
}

/// Options of the readout, mirroring `repgeom pga`'s flags.
struct ReadoutSpec<'py> {
    arg: ReadoutArg<'py>,
    is_basis: bool,
    k: usize,
    vocab_rows: Option<usize>,
    tensor: Option<String>,
    /// Hub revision when the path is a hub model id (`org/name`).
    revision: Option<String>,
    progress: Option<bool>,
    /// `repgeom_io::ReadoutPrep`: fold the final norm's effective gain, centre the rows.
    fold_norm: bool,
    center: bool,
}

/// A model reference, by the rule every front end shares ([`repgeom_hub::ModelRef::parse`]):
/// an existing local path is used as it is; otherwise a hub model id `org/name` is resolved in
/// the HuggingFace cache at `revision` (default `main`), downloading only the files `need`
/// names.
#[cfg(feature = "extract")]
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

/// The progress bar of a hub model's downloads: one bar, set to each file in turn, drawn from
/// the first report on (nothing shows for a local path or a complete cache).
struct DownloadBar {
    progress: Option<bool>,
    bar: Option<indicatif::ProgressBar>,
}

impl DownloadBar {
    fn new(progress: Option<bool>) -> Self {
        DownloadBar {
            progress,
            bar: None,
        }
    }

    fn report(&mut self, p: &repgeom_hub::DownloadProgress<'_>) {
        let progress = self.progress;
        let bar = (self.bar).get_or_insert_with(|| progress_bar(0, "download", progress));
        bar.set_length(p.total);
        bar.set_position(p.done);
        bar.set_message(p.file.to_owned());
    }

    /// Clears the bar once the files are there (whether or not the readout then reads); a
    /// failed download leaves it standing where it stopped.
    fn finish<T>(self, result: repgeom_hub::Result<T>) -> repgeom_hub::Result<T> {
        if let Some(bar) = self.bar
            && matches!(result, Ok(_) | Err(repgeom_hub::Error::Readout { .. }))
        {
            bar.finish_and_clear();
        }
        result
    }
}

/// A model's readout subspace and null bases prepared once for its layers (the library's
/// [`ModelContext`]), from the readout `spec` names (read with the command line's checks and
/// messages) and the null drawn from `null`, each only when given.
fn model_context(
    spec: Option<&ReadoutSpec<'_>>,
    k: usize,
    null: Option<repgeom_null::NullParams>,
    d: usize,
    acts: &str,
) -> Result<ModelContext, Failure> {
    let loaded = spec.map(|s| load_readout(s, d, acts)).transpose()?;
    let (readout, k) = match &loaded {
        None => (None, k),
        Some(Loaded::Basis(b)) => (Some(ModelReadout::Basis(b.as_ref())), b.ncols()),
        Some(Loaded::Unembedding(w)) => (Some(ModelReadout::Unembedding(w.as_ref())), k),
    };
    Ok(ModelContext::new(
        d,
        k,
        readout,
        null.map(NullSource::Draw),
        acts,
        Par::rayon(0),
    )?
    .with_memory_budget(Some(repgeom_io::default_memory_budget())))
}

/// A readout read and checked: a basis to use as it is, or `W_U` (`V × d`, the rows kept)
/// whose top-`k` subspace is still to be computed.
enum Loaded {
    Basis(Mat<f64>),
    Unembedding(Mat<f32>),
}

impl Loaded {
    /// The readout as the library takes it.
    fn view(&self) -> ModelReadout<'_> {
        match self {
            Loaded::Basis(b) => ModelReadout::Basis(b.as_ref()),
            Loaded::Unembedding(w) => ModelReadout::Unembedding(w.as_ref()),
        }
    }
}

/// Reads the readout `spec` names (downloading a hub id's shard first) and checks it against
/// the activations' `d` (and `k`), with the command line's messages: every error of the
/// readout shows here, before any decomposition.
fn load_readout(spec: &ReadoutSpec<'_>, d: usize, acts: &str) -> Result<Loaded, Failure> {
    let check_basis = |b: Mat<f64>, name: &str| -> Result<Mat<f64>, Failure> {
        repgeom_metrics::analysis::check_readout_basis(b.as_ref(), d, name)?;
        Ok(b)
    };
    let k = spec.k;
    let wu_checked = |view: MatRef<'_, f32>, name: &str, tensor: &str| -> Result<Loaded, Failure> {
        let (rows, cols) = (view.nrows(), view.ncols());
        if cols != d {
            return Err(Failure::Invalid(format!(
                "shape mismatch: activations {acts} have d = {d}, but readout {name} tensor {tensor} is [{rows}, {cols}]"
            )));
        }
        if !(k > 0 && k < d) {
            return Err(Failure::Invalid(format!(
                "k = {k} must satisfy 0 < k < d = {d} ({name} tensor {tensor} [{rows}, {cols}])"
            )));
        }
        if let Some((row, col)) = repgeom_linalg::first_non_finite(view) {
            return Err(Failure::Invalid(format!(
                "{name} tensor {tensor} [{rows}, {cols}]: non-finite value (NaN or Inf) at row {row}, column {col}"
            )));
        }
        Ok(Loaded::Unembedding(view.to_owned()))
    };
    if let (Some(r), true) = (
        &spec.revision,
        spec.is_basis || matches!(spec.arg, ReadoutArg::Array(_)),
    ) {
        return Err(Failure::Invalid(format!(
            "revision = {r:?}: a revision selects a checkpoint of a hub model id; the readout here is an array or a basis"
        )));
    }
    match (&spec.arg, spec.is_basis) {
        (ReadoutArg::Path(path), true) => {
            let arr = repgeom_io::read_array_f64(path)?;
            if arr.shape.len() != 2 {
                return Err(Failure::Invalid(format!(
                    "{}: readout basis has shape {:?}, expected [{d}, k] to match the activations' d = {d}",
                    path.display(),
                    arr.shape
                )));
            }
            let (rows, cols) = (arr.shape[0], arr.shape[1]);
            let b = Mat::<f64>::from_fn(rows, cols, |i, j| arr.data[i * cols + j]);
            check_basis(b, &path.display().to_string()).map(Loaded::Basis)
        }
        (ReadoutArg::Array(raw), true) => check_basis(raw.to_f64(), "readout").map(Loaded::Basis),
        (ReadoutArg::Path(path), false) => {
            let prep = repgeom_io::ReadoutPrep {
                options: repgeom_io::ReadoutOptions {
                    vocab_rows: spec.vocab_rows,
                    tensor: spec.tensor.clone(),
                },
                fold_norm: spec.fold_norm,
                center: spec.center,
            };
            // The libraries' one resolver: a local path, or a hub id's files downloaded first
            // (the whole checkpoint only when the final norm's gain is folded).
            let mut bar = DownloadBar::new(spec.progress);
            let resolved = repgeom_hub::read_readout(
                &path.to_string_lossy(),
                spec.revision.as_deref(),
                &prep,
                &repgeom_hub::Hub::from_env(),
                &mut |p| bar.report(p),
            );
            let r = bar.finish(resolved)?;
            let m = &r.readout.matrix;
            let view = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
            wu_checked(view, &r.path.display().to_string(), &r.readout.tensor)
        }
        (ReadoutArg::Array(raw), false) => {
            if spec.fold_norm {
                return Err(Failure::Invalid(
                    "readout_fold_norm: the final norm's gain is read from a checkpoint directory or hub id; the readout here is an array".into(),
                ));
            }
            let m = raw.to_f32();
            let rows = spec.vocab_rows.unwrap_or(raw.rows).min(raw.rows);
            let view = m.as_ref().subrows(0, rows);
            if !spec.center {
                return wu_checked(view, "readout", "W_U");
            }
            // Centred as a file's W_U is (`repgeom_io::ReadoutPrep`): one copy, then the rows.
            let mut w = repgeom_io::Matrix {
                rows,
                cols: view.ncols(),
                data: (0..rows * view.ncols())
                    .map(|x| view[(x / view.ncols(), x % view.ncols())])
                    .collect(),
            };
            w.center_rows();
            wu_checked(
                MatRef::from_row_major_slice(&w.data, w.rows, w.cols),
                "readout",
                "W_U",
            )
        }
    }
}

/// Null bases: drawn (by the model run, from `n_null` and `seed`), read from a `.npy` file, or
/// given as an array.
enum NullArg<'py> {
    Draw,
    Path(PathBuf),
    Array(input::RawNd<'py>),
}

/// Supplied null bases (`None` when they are to be drawn, by the library's model run), checked
/// against `(d, k)`.
fn supplied_null(arg: &NullArg<'_>, d: usize, k: usize) -> Result<Option<NullBases>, Failure> {
    let tol = repgeom_metrics::analysis::BASIS_TOL;
    match arg {
        NullArg::Draw => Ok(None),
        NullArg::Path(path) => {
            let arr = repgeom_io::read_array_f64(path)?;
            NullBases::from_array(&arr.shape, &arr.data, d, k, tol)
                .map(Some)
                .map_err(|e| {
                    Failure::Invalid(format!("reading null bases from {}: {e}", path.display()))
                })
        }
        NullArg::Array(arr) => {
            let n = arr.shape[0];
            let mut data = Vec::with_capacity(arr.shape.iter().product());
            for i in 0..n {
                let m = arr.slice(i).to_f64();
                for r in 0..m.nrows() {
                    for c in 0..m.ncols() {
                        data.push(m[(r, c)]);
                    }
                }
            }
            NullBases::from_array(&arr.shape, &data, d, k, tol)
                .map(Some)
                .map_err(|e| Failure::Invalid(format!("null_bases: {e}")))
        }
    }
}

fn read_null_arg<'py>(
    null_bases: Option<Bound<'py, PyAny>>,
    keep: &mut Keep<'py>,
) -> Result<NullArg<'py>, Failure> {
    let Some(obj) = null_bases else {
        return Ok(NullArg::Draw);
    };
    if let Ok(path) = obj.extract::<PathBuf>() {
        return Ok(NullArg::Path(path));
    }
    let arr = read_array(&obj, "null_bases", keep)?;
    if arr.shape.len() != 3 {
        return Err(Failure::Invalid(format!(
            "null_bases: expected an [n_null, d, k] array, got shape {:?}",
            arr.shape
        )));
    }
    Ok(NullArg::Array(arr))
}

/// Subspace PGA of each layer through the library's one model run
/// ([`repgeom_metrics::Pga::run_model`], as `repgeom pga`); `options` is the JSON of the
/// [`repgeom_metrics::Pga`] option struct, so every PGA option reaches Python by its own name.
/// One JSON object (a `PgaResult` plus `layer`) per layer, `k` and CCR.
#[pyfunction]
#[pyo3(signature = (layers, readout, *, options, ks, k_frac, n_null, seed, readout_is_basis, null_bases, progress, vocab_rows, readout_tensor, revision=None, readout_fold_norm=false, readout_center=false))]
fn pga<'py>(
    py: Python<'py>,
    layers: Vec<(usize, Bound<'py, PyAny>)>,
    readout: Bound<'py, PyAny>,
    options: String,
    ks: Vec<usize>,
    k_frac: Option<f64>,
    n_null: usize,
    seed: u64,
    readout_is_basis: bool,
    null_bases: Option<Bound<'py, PyAny>>,
    progress: Option<bool>,
    vocab_rows: Option<usize>,
    readout_tensor: Option<String>,
    revision: Option<String>,
    readout_fold_norm: bool,
    readout_center: bool,
) -> PyResult<Vec<String>> {
    let pga: repgeom_metrics::Pga = serde_json::from_str(&options)
        .map_err(|e| Failure::Invalid(format!("invalid pga options {options}: {e}")).into_py(py))?;
    repgeom_metrics::Metric::check(&pga).map_err(|e| Failure::from(e).into_py(py))?;
    if null_bases.is_none() {
        // Refused up front with the library's message, as the command line does (never raised
        // to 2 behind the caller's back).
        repgeom_null::NullParams { n_null, seed }
            .check()
            .map_err(|e| Failure::from(e).into_py(py))?;
    }
    let mut keep = Keep::new();
    let prepared = (|| -> Result<_, Failure> {
        let layers = read_layers(layers, "acts", &mut keep)?;
        let arg = read_readout_arg(Some(readout), &mut keep)?.expect("readout given");
        let null = read_null_arg(null_bases, &mut keep)?;
        Ok((layers, arg, null))
    })();
    let (layers, arg, null) = prepared.map_err(|e| e.into_py(py))?;
    run_blocking(py, move |cancel| {
        let (d, first) = (layers[0].raw.cols, layers[0].what.clone());
        let ks = repgeom_metrics::analysis::k_values(&ks, k_frac, d)?;
        let spec = ReadoutSpec {
            arg,
            is_basis: readout_is_basis,
            k: *ks.iter().max().expect("k_values gives one or more"),
            vocab_rows,
            tensor: readout_tensor,
            revision,
            progress,
            fold_norm: readout_fold_norm,
            center: readout_center,
        };
        // W_U is read and checked now; the library decomposes it beside the first layer.
        let loaded = load_readout(&spec, d, &first)?;
        let k0 = match &loaded {
            Loaded::Basis(basis) => basis.ncols(),
            Loaded::Unembedding(_) => ks[0],
        };
        let given_null = supplied_null(&null, d, k0)?;
        let acts: Vec<Matrix32<'_>> = layers.iter().map(|l| l.raw.to_f32()).collect();
        let input = ModelInput {
            layers: layers
                .iter()
                .zip(&acts)
                .map(|(l, m)| ModelLayer {
                    layer: l.index,
                    acts: m.as_ref(),
                    what: l.what.clone(),
                })
                .collect(),
            readout: match &loaded {
                Loaded::Basis(b) => ModelReadout::Basis(b.as_ref()),
                Loaded::Unembedding(w) => ModelReadout::Unembedding(w.as_ref()),
            },
            ks: ks.clone(),
            null: match &given_null {
                Some(n) => NullSource::Given(n),
                None => NullSource::Draw(repgeom_null::NullParams { n_null, seed }),
            },
            sequences: None,
            memory_budget: Some(repgeom_io::default_memory_budget()),
        };
        let n_draws = given_null.as_ref().map_or(n_null, NullBases::len);
        let boot = pga.bootstrap.as_ref().map_or(0, |b| b.replicates);
        let total = (layers.len() * pga.ccr.len() * ks.len() * n_draws * (1 + boot)) as u64;
        let bar = progress_bar(total, "pga", progress);
        let on_draw = || {
            check_cancel(cancel);
            bar.inc(1);
        };
        let run = pga.run_model(
            &input,
            Par::rayon(0),
            &Hooks {
                on_draw: Some(&on_draw),
                on_layer: Some(&|layer, k| bar.set_message(format!("layer {layer} k {k}"))),
            },
        )?;
        bar.finish_and_clear();
        run.rows
            .into_iter()
            .map(|r| Ok(with_layer(r.layer, to_json(&r.result)?)))
            .collect()
    })
}

/// `{"layer": i, ...rest}` from the JSON object `rest`.
fn with_layer(layer: usize, json: String) -> String {
    match json.strip_prefix('{') {
        Some("}") => format!("{{\"layer\":{layer}}}"),
        Some(rest) => format!("{{\"layer\":{layer},{rest}"),
        None => json,
    }
}

/// Parses metric configurations (`{"metric": name, ...options}` JSON) with the registry's
/// parser (`from_config`), so unknown names and bad options read as they do on the CLI.
fn parse_configs<T>(
    configs: &[String],
    from_config: impl Fn(&serde_json::Map<String, serde_json::Value>) -> repgeom_metrics::Result<T>,
) -> Result<Vec<T>, Failure> {
    configs
        .iter()
        .map(|c| match serde_json::from_str(c) {
            Ok(serde_json::Value::Object(o)) => Ok(from_config(&o)?),
            Ok(_) => Err(Failure::Invalid(format!(
                "metric options {c}: expected a JSON object"
            ))),
            Err(e) => Err(Failure::Invalid(format!("metric options {c}: {e}"))),
        })
        .collect()
}

/// Registered per-layer metrics on each layer; one JSON object (a `MetricValue` plus `layer`)
/// per value.
#[pyfunction]
#[pyo3(signature = (layers, configs, readout, *, k, n_null, seed, readout_is_basis, progress, revision=None, readout_fold_norm=false, readout_center=false))]
fn metrics<'py>(
    py: Python<'py>,
    layers: Vec<(usize, Bound<'py, PyAny>)>,
    configs: Vec<String>,
    readout: Option<Bound<'py, PyAny>>,
    k: usize,
    n_null: usize,
    seed: u64,
    readout_is_basis: bool,
    progress: Option<bool>,
    revision: Option<String>,
    readout_fold_norm: bool,
    readout_center: bool,
) -> PyResult<Vec<String>> {
    let mut keep = Keep::new();
    let prepared = (|| -> Result<_, Failure> {
        let metrics = parse_configs(&configs, repgeom_metrics::metric_from_config)?;
        for m in &metrics {
            m.check()?;
        }
        let layers = read_layers(layers, "acts", &mut keep)?;
        let arg = read_readout_arg(readout, &mut keep)?;
        Ok((metrics, layers, arg))
    })();
    let (metrics, layers, arg) = prepared.map_err(|e| e.into_py(py))?;
    run_blocking(py, move |cancel| {
        if metrics.is_empty() {
            return Err(Failure::Invalid(
                "no metrics chosen: name one or more (see repgeom.list_metrics())".into(),
            ));
        }
        let needs_readout: Vec<&str> = metrics
            .iter()
            .filter(|m| m.info().needs_readout)
            .map(|m| m.info().name)
            .collect();
        let needs_null = metrics.iter().any(|m| m.info().needs_null);
        let (d, first) = (layers[0].raw.cols, layers[0].what.clone());
        let spec = match (arg, needs_readout.is_empty()) {
            (_, true) => None,
            (None, false) => {
                let verb = if needs_readout.len() == 1 {
                    "needs"
                } else {
                    "need"
                };
                return Err(Failure::Invalid(format!(
                    "{} {verb} the readout: pass readout=W_U",
                    needs_readout.join(", ")
                )));
            }
            (Some(arg), false) => Some(ReadoutSpec {
                arg,
                is_basis: readout_is_basis,
                k,
                vocab_rows: None,
                tensor: None,
                revision: revision.clone(),
                progress,
                fold_norm: readout_fold_norm,
                center: readout_center,
            }),
        };
        let null = needs_null.then_some(repgeom_null::NullParams { n_null, seed });
        let model = model_context(spec.as_ref(), k, null, d, &first)?;
        let bar = progress_bar((layers.len() * metrics.len()) as u64, "metrics", progress);
        let mut out = Vec::new();
        for layer in &layers {
            let acts = layer.raw.to_f32();
            let input = model.layer(acts.as_ref(), layer.what.clone())?;
            for metric in &metrics {
                check_cancel(cancel);
                bar.set_message(format!("layer {} {}", layer.index, metric.info().name));
                for v in metric.compute(&input)? {
                    out.push(with_layer(layer.index, to_json(&v)?));
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        Ok(out)
    })
}

/// Pair metrics between the layers of two representations of the same inputs.
#[pyfunction]
#[pyo3(signature = (a, b, configs, readout_a, readout_b, *, k, n_null, seed, diagonal, progress, readout_fold_norm=false, readout_center=false, n_perm=None, aggregates=Vec::new(), alpha=None))]
fn compare<'py>(
    py: Python<'py>,
    a: Vec<(usize, Bound<'py, PyAny>)>,
    b: Vec<(usize, Bound<'py, PyAny>)>,
    configs: Option<Vec<String>>,
    readout_a: Option<Bound<'py, PyAny>>,
    readout_b: Option<Bound<'py, PyAny>>,
    k: usize,
    n_null: usize,
    seed: u64,
    diagonal: bool,
    progress: Option<bool>,
    readout_fold_norm: bool,
    readout_center: bool,
    n_perm: Option<usize>,
    aggregates: Vec<String>,
    alpha: Option<f64>,
) -> PyResult<Vec<String>> {
    let mut keep = Keep::new();
    let prepared = (|| -> Result<_, Failure> {
        let mut metrics = match &configs {
            Some(c) => parse_configs(c, repgeom_metrics::pair_metric_from_config)?,
            None => repgeom_metrics::all_pair_metrics(),
        };
        if let Some(n_perm) = n_perm {
            repgeom_metrics::calibrate::set_n_perm(&mut metrics, n_perm);
        }
        for m in &metrics {
            m.check()?;
        }
        let defaults = CompareSettings::default();
        let settings = CompareSettings {
            aggregates: (aggregates.iter())
                .map(|a| a.parse())
                .collect::<repgeom_metrics::Result<_>>()?,
            alpha: alpha.unwrap_or(defaults.alpha),
        };
        settings.check()?;
        let la = read_layers(a, "a", &mut keep)?;
        let lb = read_layers(b, "b", &mut keep)?;
        let ra = read_readout_arg(readout_a, &mut keep)?;
        let rb = read_readout_arg(readout_b, &mut keep)?;
        Ok((metrics, settings, la, lb, ra, rb))
    })();
    let (metrics, settings, la, lb, ra, rb) = prepared.map_err(|e| e.into_py(py))?;
    run_blocking(py, move |cancel| {
        if metrics.is_empty() {
            return Err(Failure::Invalid("no pair metrics chosen".into()));
        }
        let (needs_readout, _) = pair_needs(&metrics);
        // W_U where a metric uses it, read with the command line's checks; a missing one is
        // the pair's error (ModelPair::new).
        let read = |layers: &[LayerArg<'_>],
                    readout: Option<ReadoutArg<'_>>|
         -> Result<Option<Loaded>, Failure> {
            let Some(arg) = readout.filter(|_| needs_readout) else {
                return Ok(None);
            };
            let spec = ReadoutSpec {
                arg,
                is_basis: false,
                k,
                vocab_rows: None,
                tensor: None,
                revision: None,
                progress,
                fold_norm: readout_fold_norm,
                center: readout_center,
            };
            load_readout(&spec, layers[0].raw.cols, &layers[0].what).map(Some)
        };
        let (wa, wb) = (read(&la, ra)?, read(&lb, rb)?);
        // Every layer of both sides in f32 (a view when it already is), paired or not: the
        // pair judges duplicated points on all of them, and the table has the command line's
        // shape, so its numbers are the command line's.
        let xa: Vec<Matrix32<'_>> = la.iter().map(|l| l.raw.to_f32()).collect();
        let xb: Vec<Matrix32<'_>> = lb.iter().map(|l| l.raw.to_f32()).collect();
        let va: Vec<MatRef<'_, f32>> = xa.iter().map(Matrix32::as_ref).collect();
        let vb: Vec<MatRef<'_, f32>> = xb.iter().map(Matrix32::as_ref).collect();
        let pair = ModelPair::new(
            &metrics,
            PairModel {
                layers: &va,
                k,
                readout: wa.as_ref().map(Loaded::view),
                what: &la[0].what,
            },
            PairModel {
                layers: &vb,
                k,
                readout: wb.as_ref().map(Loaded::view),
                what: &lb[0].what,
            },
            repgeom_null::NullParams { n_null, seed },
            Par::rayon(0),
        )?
        .with_memory_budget(Some(repgeom_io::default_memory_budget()));
        // One input per layer: its caches (centring, CCR, spectra) and its per-draw work under
        // the permutation null serve every pair and every metric it is part of.
        let ia = (xa.iter().zip(&la))
            .map(|(x, l)| pair.a().layer(x.as_ref(), l.what.clone()))
            .collect::<repgeom_metrics::Result<Vec<_>>>()?;
        let ib = (xb.iter().zip(&lb))
            .map(|(x, l)| pair.b().layer(x.as_ref(), l.what.clone()))
            .collect::<repgeom_metrics::Result<Vec<_>>>()?;
        let (refs_a, refs_b): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
            (ia.iter().collect(), ib.iter().collect());
        let pairs = layer_pairs(la.len(), lb.len(), diagonal);
        let row = |i: usize, j: usize, json: String| {
            with_layer(lb[j].index, json).replacen(
                "{\"layer\"",
                &format!("{{\"layer\":{},\"other_layer\"", la[i].index),
                1,
            )
        };
        let bar = progress_bar(metrics.len() as u64, "compare", progress);
        let table = pair.compare(&metrics, &refs_a, &refs_b, &pairs, &settings, &mut |name| {
            check_cancel(cancel);
            bar.set_message(name.to_string());
            bar.inc(1);
        })?;
        let mut out = Vec::new();
        // In the CLI's order: each layer pair's metrics, then the aggregates.
        for r in &table.pairs {
            out.push(row(r.a, r.b, to_json(&r.value)?));
        }
        for r in &table.aggregates {
            let json = to_json(&r.value)?;
            out.push(match json.strip_prefix('{') {
                Some(rest) => format!("{{\"aggregate\":\"{}\",{rest}", r.aggregate.name()),
                None => json,
            });
        }
        bar.finish_and_clear();
        Ok(out)
    })
}

/// The metric registry: one JSON object per registered metric (per-layer and pair).
#[pyfunction]
fn list_metrics() -> PyResult<Vec<String>> {
    let describe =
        |kind: &str,
         info: repgeom_metrics::MetricInfo,
         defaults: std::collections::BTreeMap<String, serde_json::Value>| {
            let options: Vec<serde_json::Value> = info
                .options
                .iter()
                .map(|o| {
                    serde_json::json!({
                        "name": o.name,
                        "default": defaults.get(o.name).cloned().unwrap_or(serde_json::Value::Null),
                        "help": o.help,
                    })
                })
                .collect();
            serde_json::json!({
                "name": info.name,
                "kind": kind,
                "summary": info.summary,
                "source": info.source,
                "options": options,
                "needs_readout": info.needs_readout,
                "needs_null": info.needs_null,
                "rotation_invariant": info.rotation_invariant,
            })
            .to_string()
        };
    let mut out = Vec::new();
    for m in repgeom_metrics::all_metrics() {
        out.push(describe("layer", m.info(), repgeom_metrics::options_of(&m)));
    }
    for m in repgeom_metrics::all_pair_metrics() {
        out.push(describe("pair", m.info(), repgeom_metrics::options_of(&m)));
    }
    Ok(out)
}

/// Reads an activation file: `(layer, tensor name, [N, d] float32 array)` per layer.
#[pyfunction]
#[pyo3(signature = (path, layers=None))]
fn read_activations<'py>(
    py: Python<'py>,
    path: PathBuf,
    layers: Option<Vec<usize>>,
) -> PyResult<Vec<(usize, String, Bound<'py, PyAny>)>> {
    let acts = run_blocking(py, move |_| {
        Ok(repgeom_io::read_activations(&path, layers.as_deref())?)
    })?;
    acts.layers
        .into_iter()
        .map(|l| {
            let (rows, cols) = (l.acts.rows, l.acts.cols);
            let arr = PyArray1::from_vec(py, l.acts.data).reshape([rows, cols])?;
            Ok((l.layer, l.tensor, arr.into_any()))
        })
        .collect()
}

/// `n` Haar-random `d × k` bases from `seed`, as an `[n, d, k]` float64 array (the bases
/// `repgeom pga --save-null-bases` writes for the same arguments).
#[pyfunction]
fn null_bases<'py>(
    py: Python<'py>,
    d: usize,
    k: usize,
    n: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let (shape, data) = run_blocking(py, move |_| {
        let params = repgeom_null::NullParams { n_null: n, seed }.check()?;
        Ok(NullBases::draw(d, k, &params)?.to_array())
    })?;
    Ok(PyArray1::from_vec(py, data).reshape(shape)?.into_any())
}

/// Linear probes per layer: one JSON object (a `LayerProbe`) per layer.
#[pyfunction]
#[pyo3(signature = (layers, labels, class_names, options))]
fn probe<'py>(
    py: Python<'py>,
    layers: Vec<(usize, Bound<'py, PyAny>)>,
    labels: Vec<usize>,
    class_names: Vec<String>,
    options: String,
) -> PyResult<Vec<String>> {
    let mut keep = Keep::new();
    let layers = read_layers(layers, "features", &mut keep).map_err(|e| e.into_py(py))?;
    run_blocking(py, move |cancel| {
        let mut value: serde_json::Value = serde_json::from_str(&options)
            .map_err(|e| Failure::Invalid(format!("probe options: {e}")))?;
        let defaults = serde_json::to_value(repgeom_probe::ProbeParams::default())
            .map_err(|e| Failure::Panic(e.to_string()))?;
        if let (Some(obj), Some(def)) = (value.as_object_mut(), defaults.as_object()) {
            for key in obj.keys() {
                if !def.contains_key(key) {
                    let known: Vec<&str> = def.keys().map(String::as_str).collect();
                    return Err(Failure::Invalid(format!(
                        "unknown probe option {key:?}; known options: {}",
                        known.join(", ")
                    )));
                }
            }
        }
        let params: repgeom_probe::ProbeParams = serde_json::from_value(value.take())
            .map_err(|e| Failure::Invalid(format!("probe options: {e}")))?;
        let params = params.check()?;
        let labels = repgeom_probe::Labels::new(labels, class_names)?;
        let plan = params.plan(labels, &repgeom_probe::Split::Stratified)?;
        let mut out = Vec::new();
        for l in &layers {
            check_cancel(cancel);
            let m = l.raw.to_f32();
            let view = m.as_ref();
            let data: Vec<f32> = (0..view.nrows())
                .flat_map(|i| (0..view.ncols()).map(move |j| view[(i, j)]))
                .collect();
            let f = repgeom_probe::Features::new(l.index, l.raw.rows, l.raw.cols, &data)?;
            out.push(to_json(&plan.probe_layer(l.index, f)?)?);
        }
        Ok(out)
    })
}

#[cfg(feature = "extract")]
/// Hidden states of a local checkpoint on `text`: `(layer, [N, d] float32 array)` per layer,
/// the token positions and the metadata `repgeom extract` writes.
#[pyfunction]
#[pyo3(signature = (model, text, *, n_points, seq_len, seed, pool, progress, revision=None, points_per_sequence=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn extract<'py>(
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
) -> PyResult<(
    Vec<Bound<'py, PyAny>>,
    Vec<(usize, usize)>,
    Vec<(String, String)>,
)> {
    let pool = match pool.as_str() {
        "tokens" => repgeom_extract::Pool::Tokens,
        "mean" => repgeom_extract::Pool::Mean,
        other => {
            return Err(Failure::Invalid(format!(
                "pool = {other:?}: expected \"tokens\" or \"mean\""
            ))
            .into_py(py));
        }
    };
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
            ..repgeom_extract::ExtractParams::default()
        }
        .check()?;
        let bar = progress_bar(0, "extract", progress);
        let ex = repgeom_extract::extract(&model, &text, &params, &mut |p| {
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

/// How an input reaches the engine: `(address of element (0, 0), copied?, dtype)`. Used by the
/// tests to check that arrays are not copied.
#[pyfunction]
fn input_info(obj: &Bound<'_, PyAny>) -> PyResult<(usize, bool, &'static str)> {
    let py = obj.py();
    let mut keep = Keep::new();
    let arr = read_array(obj, "input", &mut keep).map_err(|e| e.into_py(py))?;
    let raw = arr.slice(0);
    let m = raw.to_f32();
    let addr = if m.copied() {
        m.as_ref().as_ptr() as usize
    } else {
        raw.addr()
    };
    Ok((addr, m.copied(), arr.elem().name()))
}

/// Raises a Rust panic (for the test of `InternalError`).
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    run_blocking(py, |_| -> Result<(), Failure> {
        panic!("deliberate panic for the test suite")
    })
}

/// Cargo features this module was built with.
#[pyfunction]
fn build_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "example-plugin") {
        f.push("example-plugin");
    }
    if cfg!(feature = "test-plugin") {
        f.push("test-plugin");
    }
    f
}

/// Keeps the example plugin crate linked, so its metric registers.
#[cfg(feature = "example-plugin")]
#[allow(dead_code)]
fn link_example_plugin() -> custom_metric::ParticipationRatio {
    custom_metric::ParticipationRatio::default()
}

/// The `repgeom._native` extension module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pga, m)?)?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(list_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(read_activations, m)?)?;
    m.add_function(wrap_pyfunction!(null_bases, m)?)?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    #[cfg(feature = "extract")]
    m.add_function(wrap_pyfunction!(extract, m)?)?;
    m.add_function(wrap_pyfunction!(input_info, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(build_features, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

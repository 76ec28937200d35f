//! `repgeom-py` is the native half of the `repgeom` Python package (`repgeom._native`): the
//! Rust engine behind `repgeom.pga`, `repgeom.metrics`, `repgeom.compare`, `repgeom.probe`,
//! `repgeom.extract` and friends, built into one abi3 wheel by maturin.
//!
//! Its main entry point is [`pga::pga`], which takes NumPy arrays or DLPack tensors, views `f32`
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
//!
//! One module per concern: a file per Python entry point (`pga`, `metrics` with the registry's
//! listing, `compare`, `probe`, `extract`, `arrays` for the arrays handed back,
//! `diagnostics` for the test suite), and what they share: `run` (the worker thread, Ctrl-C,
//! progress bars), `layers` and `readout` (the layer, readout and null arguments, read and
//! checked), `input` (arrays as views), `json` (results out, metric configurations in) and
//! `errors`. This file only registers the functions.

// glibc's malloc hands each freed multi-megabyte tensor buffer back to the kernel and faults
// it in again on the next allocation; mimalloc reuses them (about +25 % tokens/s in
// extraction, docs/extraction.md *Speed*).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod arrays;
mod compare;
mod diagnostics;
mod errors;
#[cfg(feature = "extract")]
mod extract;
mod input;
mod json;
mod layers;
mod metrics;
mod pga;
mod probe;
mod readout;
mod run;
#[cfg(feature = "test-plugin")]
mod test_plugin;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The libraries' defaults that the Python signatures read (`k`, `n_null`, and with extraction
/// `n_points`, `seq_len`, `points_per_sequence`), so that they are the command line's and the
/// study's by construction.
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("k", repgeom_metrics::DEFAULT_K)?;
    d.set_item("n_null", repgeom_null::DEFAULT_N_NULL)?;
    #[cfg(feature = "extract")]
    {
        d.set_item("n_points", repgeom_extract::DEFAULT_N_POINTS)?;
        d.set_item("seq_len", repgeom_extract::DEFAULT_SEQ_LEN)?;
        d.set_item(
            "points_per_sequence",
            repgeom_extract::DEFAULT_POINTS_PER_SEQUENCE,
        )?;
    }
    Ok(d)
}

/// The `repgeom._native` extension module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pga::pga, m)?)?;
    m.add_function(wrap_pyfunction!(pga::open_device_py, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::metrics, m)?)?;
    m.add_function(wrap_pyfunction!(compare::compare, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::list_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::read_activations, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::null_bases, m)?)?;
    m.add_function(wrap_pyfunction!(probe::probe, m)?)?;
    #[cfg(feature = "extract")]
    m.add_function(wrap_pyfunction!(extract::extract, m)?)?;
    m.add_function(wrap_pyfunction!(diagnostics::input_info, m)?)?;
    m.add_function(wrap_pyfunction!(diagnostics::_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(diagnostics::build_features, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULTS", defaults(m.py())?)?;
    Ok(())
}

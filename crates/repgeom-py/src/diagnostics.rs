//! What the test suite asks of the module itself: how an input reaches the engine, a
//! deliberate panic, and the Cargo features it was built with (with the example plugin kept
//! linked when it is one of them).

use pyo3::prelude::*;

use crate::errors::Failure;
use crate::input::{Keep, read_array};
use crate::run::run_blocking;

/// How an input reaches the engine: `(address of element (0, 0), copied?, dtype)`. Used by the
/// tests to check that arrays are not copied.
#[pyfunction]
pub(crate) fn input_info(obj: &Bound<'_, PyAny>) -> PyResult<(usize, bool, &'static str)> {
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
pub(crate) fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    run_blocking(py, |_| -> Result<(), Failure> {
        panic!("deliberate panic for the test suite")
    })
}

/// Cargo features this module was built with.
#[pyfunction]
pub(crate) fn build_features() -> Vec<&'static str> {
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

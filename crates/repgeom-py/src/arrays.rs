//! Arrays handed back to Python: an activation file's layers (`repgeom.read_activations`) and
//! seeded Haar null bases (`repgeom.null_bases`).

use std::path::PathBuf;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use repgeom_null::NullBases;

use crate::run::run_blocking;

/// Reads an activation file: `(layer, tensor name, [N, d] float32 array)` per layer.
#[pyfunction]
#[pyo3(signature = (path, layers=None))]
pub(crate) fn read_activations<'py>(
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
pub(crate) fn null_bases<'py>(
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

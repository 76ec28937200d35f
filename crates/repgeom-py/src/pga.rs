//! `repgeom.pga`: Subspace PGA of each layer through the library's one model run, as
//! `repgeom pga`.

use pyo3::prelude::*;
use repgeom_linalg::Par;
use repgeom_metrics::analysis::{Hooks, ModelInput, ModelLayer, NullSource, Readout};

use crate::errors::Failure;
use crate::input::{Keep, Matrix32};
use crate::json::{to_json, with_layer};
use crate::layers::read_layers;
use crate::readout::{
    Loaded, ReadoutSpec, load_readout, read_null_arg, read_readout_arg, supplied_null,
};
use crate::run::{check_cancel, progress_bar, run_blocking};

/// Subspace PGA of each layer through the library's one model run
/// ([`repgeom_metrics::Pga::run_model`], as `repgeom pga`); `options` is the JSON of the
/// [`repgeom_metrics::Pga`] option struct, so every PGA option reaches Python by its own name.
/// One JSON object (a `PgaResult` plus `layer`) per layer, `k` and CCR.
#[pyfunction]
#[pyo3(signature = (layers, readout, *, options, ks, k_frac, n_null, seed, readout_is_basis, null_bases, progress, vocab_rows, readout_tensor, revision=None, readout_fold_norm=false, readout_center=false, device="cpu"))]
pub(crate) fn pga<'py>(
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
    device: &str,
) -> PyResult<Vec<String>> {
    let device = open_device(py, device)?;
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
                Loaded::Basis(b) => Readout::Basis(b.as_ref()),
                Loaded::Unembedding(w) => Readout::Unembedding(w.as_ref()),
            },
            ks: ks.clone(),
            null: match &given_null {
                Some(n) => NullSource::Given(n),
                None => NullSource::Draw(repgeom_null::NullParams { n_null, seed }),
            },
            sequences: None,
            memory_budget: Some(repgeom_io::default_memory_budget()),
            device,
        };
        let bar = progress_bar(pga.draws(&input), "pga", progress);
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

/// Parses and opens a device name (`cpu`, `cuda`, `cuda:N`): the check `repgeom.pga` makes
/// before it reads any input, as the command line does, with the command line's message.
pub(crate) fn open_device(py: Python<'_>, device: &str) -> PyResult<repgeom_cuda::Device> {
    let device: repgeom_cuda::Device = device
        .parse()
        .map_err(|e: repgeom_cuda::Error| Failure::Invalid(e.to_string()).into_py(py))?;
    device
        .open()
        .map_err(|e| Failure::from(repgeom_metrics::Error::from(e)).into_py(py))?;
    Ok(device)
}

/// [`open_device`] for Python (`_native.open_device`).
#[pyfunction]
#[pyo3(name = "open_device")]
pub(crate) fn open_device_py(py: Python<'_>, device: &str) -> PyResult<()> {
    open_device(py, device).map(|_| ())
}

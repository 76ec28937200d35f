//! `repgeom.metrics`: registered per-layer metrics on each layer of one model, over a
//! [`ModelContext`] as the command line's; and `repgeom.list_metrics`, the registry.

use pyo3::prelude::*;
use repgeom_linalg::Par;
use repgeom_metrics::analysis::{ModelContext, NullSource, Readout};

use crate::errors::Failure;
use crate::input::Keep;
use crate::json::{parse_configs, to_json, with_layer};
use crate::layers::read_layers;
use crate::readout::{Loaded, ReadoutSpec, load_readout, read_readout_arg};
use crate::run::{check_cancel, progress_bar, run_blocking};

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
        Some(Loaded::Basis(b)) => (Some(Readout::Basis(b.as_ref())), b.ncols()),
        Some(Loaded::Unembedding(w)) => (Some(Readout::Unembedding(w.as_ref())), k),
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

/// Registered per-layer metrics on each layer; one JSON object (a `MetricValue` plus `layer`)
/// per value.
#[pyfunction]
#[pyo3(signature = (layers, configs, readout, *, k, n_null, seed, readout_is_basis, progress, revision=None, readout_fold_norm=false, readout_center=false, device="cpu"))]
pub(crate) fn metrics<'py>(
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
    device: &str,
) -> PyResult<Vec<String>> {
    let device = crate::pga::open_device(py, device)?;
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
        let (needs_readout, needs_null) =
            repgeom_metrics::analysis::needs(&metrics, arg.is_some(), "readout=W_U")?;
        let (d, first) = (layers[0].raw.cols, layers[0].what.clone());
        let spec = arg.filter(|_| needs_readout).map(|arg| ReadoutSpec {
            arg,
            is_basis: readout_is_basis,
            k,
            vocab_rows: None,
            tensor: None,
            revision: revision.clone(),
            progress,
            fold_norm: readout_fold_norm,
            center: readout_center,
        });
        let null = needs_null.then_some(repgeom_null::NullParams { n_null, seed });
        let model = model_context(spec.as_ref(), k, null, d, &first)?.with_device(device);
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

/// The metric registry: one JSON object per registered metric (per-layer and pair).
#[pyfunction]
pub(crate) fn list_metrics() -> PyResult<Vec<String>> {
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

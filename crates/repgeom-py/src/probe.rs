//! `repgeom.probe`: linear probes per layer with one split and one set of CV folds for all
//! layers (`repgeom-probe`), options as the JSON of its `ProbeParams`.

use pyo3::prelude::*;

use crate::errors::Failure;
use crate::input::Keep;
use crate::json::to_json;
use crate::layers::read_layers;
use crate::run::{check_cancel, run_blocking};

/// Linear probes per layer: one JSON object (a `LayerProbe`) per layer.
#[pyfunction]
#[pyo3(signature = (layers, labels, class_names, options))]
pub(crate) fn probe<'py>(
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

//! Layers handed in from Python: `(index, array)` pairs read as 2-D views of one width.

use pyo3::prelude::*;

use crate::errors::Failure;
use crate::input::{Keep, Raw, read_array};

/// One layer handed in from Python: its index and its 2-D array.
pub(crate) struct LayerArg<'py> {
    pub(crate) index: usize,
    pub(crate) raw: Raw<'py>,
    pub(crate) what: String,
}

pub(crate) fn read_layers<'py>(
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

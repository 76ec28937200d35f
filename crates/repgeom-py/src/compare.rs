//! `repgeom.compare`: pair metrics between the layers of two models on the same inputs,
//! through the library's [`ModelPair`] and permutation null, in the command line's table order.

use pyo3::prelude::*;
use repgeom_linalg::{MatRef, Par};
use repgeom_metrics::analysis::{ModelPair, PairModel, pair_needs};
use repgeom_metrics::calibrate::CompareSettings;
use repgeom_metrics::{LayerInput, layer_pairs};

use crate::errors::Failure;
use crate::input::{Keep, Matrix32};
use crate::json::{parse_configs, to_json, with_layer};
use crate::layers::{LayerArg, read_layers};
use crate::readout::{Loaded, ReadoutArg, ReadoutSpec, load_readout, read_readout_arg};
use crate::run::{check_cancel, progress_bar, run_blocking};

/// Pair metrics between the layers of two representations of the same inputs.
#[pyfunction]
#[pyo3(signature = (a, b, configs, readout_a, readout_b, *, k, n_null, seed, diagonal, progress, readout_fold_norm=false, readout_center=false, n_perm=None, aggregates=Vec::new(), alpha=None, device="cpu".to_string()))]
pub(crate) fn compare<'py>(
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
    device: String,
) -> PyResult<Vec<String>> {
    let device = crate::pga::open_device(py, &device)?;
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
        .with_memory_budget(Some(repgeom_io::default_memory_budget()))
        .with_device(device);
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

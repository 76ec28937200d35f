//! Computing units: loading each model's data once per (model, checkpoint) group and running
//! the group's units in parallel, each written as its own part file as soon as it finishes.
//! Loading and caching a model's data is `loader.rs`; what one unit computes, kind by kind, is
//! `units.rs`.

mod loader;
mod units;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::LayerInput;
use repgeom_metrics::analysis::{ModelPair, PairModel, Readout};
use repgeom_metrics::calibrate::{CompareSettings, Comparison};
use repgeom_null::NullParams;

pub use self::loader::Loader;
use self::loader::ModelCtx;
use self::units::{UnitInputs, compute_unit};
use crate::parts::write_part;
use crate::plan::{ModelInfo, PlannedUnit, Study, UnitKind};
use crate::{Error, Result};

/// What the progress callback learns about each finished unit.
#[derive(Debug, Clone)]
pub struct UnitDone<'a> {
    /// The unit.
    pub unit: &'a PlannedUnit,
    /// Rows it produced.
    pub rows: usize,
    /// Wall time of its computation.
    pub elapsed: Duration,
}

/// A timed step of a sweep that is not a unit: part of a hub checkpoint's extraction, or the
/// preparation of a model's readout contexts. Only timings: no number depends on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The weights hash: one sequential SHA-256 pass over a checkpoint met for the first
    /// time, on its own thread beside [`Step::Load`], [`Step::Points`] and [`Step::Loss`].
    WeightsHash,
    /// Reading the weights and building the model, and moving it to the device when there is
    /// one.
    Load,
    /// The points (`[extract]`'s hidden states).
    Points,
    /// The validation loss on the held-out part of the corpus.
    Loss,
    /// The probe features.
    ProbeFeatures,
    /// The spectra over every token (`spectral_tokens`).
    Spectra,
    /// A model's readout contexts: `W_U`'s decomposition (once, at the largest `k` it needs)
    /// and the null bases.
    Readout,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::WeightsHash => "weights hash",
            Step::Load => "load",
            Step::Points => "points",
            Step::Loss => "loss",
            Step::ProbeFeatures => "probe features",
            Step::Spectra => "spectra",
            Step::Readout => "readout contexts",
        })
    }
}

/// What the step callback learns about each finished [`Step`].
#[derive(Debug, Clone)]
pub struct StepDone<'a> {
    /// The model's label.
    pub model: &'a str,
    /// The checkpoint, for a step of its extraction (`None` for [`Step::Readout`]).
    pub checkpoint: Option<&'a str>,
    /// The step.
    pub step: Step,
    /// Its wall time.
    pub elapsed: Duration,
}

/// Computes `todo` (units of `study`) and writes each one's part file under `dir` as soon as it
/// is done; `on_done` is called once per unit, from worker threads.
///
/// Units are grouped by (model, checkpoint) in plan order; a group's units run in parallel on
/// the current rayon pool, one per thread, each free to use the threads the others leave
/// (results do not depend on the thread count). A group's `cross` and `cross_table` units take
/// their rows from one comparison per model pair (`cross_pair`), computed first with the
/// pool's threads.
pub fn run_units(
    study: &Study,
    todo: &[PlannedUnit],
    dir: &Path,
    on_done: &(dyn Fn(&UnitDone<'_>) + Sync),
) -> Result<()> {
    run_units_with(&Loader::with_dir(study, dir), todo, dir, on_done)
}

/// [`run_units`] with the data `loader` has loaded already (a sweep's extractions and
/// readout contexts).
pub(crate) fn run_units_with(
    loader: &Loader<'_>,
    todo: &[PlannedUnit],
    dir: &Path,
    on_done: &(dyn Fn(&UnitDone<'_>) + Sync),
) -> Result<()> {
    let study = loader.study();
    // The device first: a machine without it fails before any unit is computed.
    study.manifest.device.open()?;
    let mut groups: Vec<((String, String), Vec<&PlannedUnit>)> = Vec::new();
    for u in todo {
        let key = (u.unit.model.clone(), u.unit.checkpoint.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(u),
            None => groups.push((key, vec![u])),
        }
    }
    for ((model, ckpt), units) in groups {
        let m = study.model(&model).expect("planned model");
        let mut needed: Vec<usize> = units.iter().map(|u| u.unit.layer).collect();
        needed.sort_unstable();
        needed.dedup();
        // The model's readout contexts (the readout's decomposition: seconds at d = 4096) on
        // their own thread, beside the checkpoint's layers (its extraction on the CPU or the
        // device, when a hub checkpoint is met for the first time): neither needs the other.
        // The readout is read and checked first, so that a bad one fails before any
        // extraction, as before.
        let read = if loader.has_model_ctx(m) {
            None
        } else {
            Some(loader.read_model(m)?)
        };
        let (ctx, layers) = std::thread::scope(|s| {
            let ctx = s.spawn(|| match read {
                Some(read) => loader.model_ctx_from(m, read),
                None => loader.model_ctx(m),
            });
            let layers = loader.layers(m, &ckpt, &needed);
            let ctx = ctx
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (ctx, layers)
        });
        let (ctx, layers) = (ctx?, layers?);
        let sequences = match (
            &study.manifest.analysis.pga.options().bootstrap,
            layers.values().next(),
        ) {
            (Some(_), Some(first)) => loader.sequences(m, &ckpt, first.nrows())?,
            _ => None,
        };
        let ext = loader.extracted(m, &ckpt)?;
        // Probe features of a hub checkpoint: mean-pooled over the [probe] texts, computed
        // with its extraction.
        let wants_probe = units.iter().any(|u| u.unit.kind == UnitKind::Probe);
        let probe_layers = match (&study.manifest.probe, &ext, wants_probe) {
            (Some(p), Some(ext), true) => {
                let Some(path) = &ext.probe else {
                    return Err(Error::DataMismatch {
                        model: m.label.clone(),
                        what: format!("probe features of checkpoint {ckpt}"),
                        expected: "features extracted with the activations".into(),
                        found: "none".into(),
                    });
                };
                let labels = loader.probe_texts(p)?.labels.clone();
                let mut out = BTreeMap::new();
                for la in repgeom_io::read_activations(path, Some(&needed))?.layers {
                    let mx = la.acts;
                    out.insert(
                        la.layer,
                        repgeom_linalg::mat_from_row_major(
                            &mx.data,
                            mx.rows,
                            mx.cols,
                            Par::rayon(0),
                        ),
                    );
                }
                Some((out, labels))
            }
            _ => None,
        };
        // Each pair's comparison once, for all its cross and cross_table units.
        let mut cross: BTreeMap<String, CrossPair> = BTreeMap::new();
        for u in &units {
            if let UnitKind::Cross { other } | UnitKind::CrossTable { other } = &u.unit.kind
                && !cross.contains_key(other)
            {
                let pair = cross_pair(study, loader, m, &ckpt, &ctx, other, &units)?;
                cross.insert(other.clone(), pair);
            }
        }
        // The spectra over every token of a hub checkpoint (`analysis.spectral_tokens`).
        let spectra = match ext.as_ref().and_then(|e| e.spectra.as_ref()) {
            Some(path) => Some(crate::stage::read_spectra(path)?),
            None => None,
        };
        let inputs = |u: &PlannedUnit| UnitInputs {
            study,
            loader,
            m,
            ctx: &ctx,
            acts: &layers[&u.unit.layer],
            sequences: sequences.as_deref(),
            probe: probe_layers
                .as_ref()
                .map(|(l, labels)| (&l[&u.unit.layer], labels.as_slice())),
            computed_loss: ext
                .as_ref()
                .and_then(|e| e.val_loss.map(|l| (l, e.val_loss_se))),
            spectra: spectra
                .as_ref()
                .and_then(|s| s.get(&u.unit.layer))
                .map(Vec::as_slice),
            cross: &cross,
        };
        // As many units at once as the PGA engines' memory allows on this pool: each unit
        // may use every thread, so each counts a worker's bytes per thread.
        let threads = rayon::current_num_threads();
        let at_once = (units.iter())
            .filter_map(|u| units::memory(&inputs(u), &u.unit))
            .map(|(est, budget)| est.at_once(budget, threads))
            .fold(units.len(), usize::min);
        for_each_unit(units.len(), at_once, |i| -> Result<()> {
            let u = units[i];
            let t = Instant::now();
            let rows = compute_unit(&inputs(u), &u.unit)?;
            write_part(dir, u, &rows, study.manifest.device)?;
            on_done(&UnitDone {
                unit: u,
                rows: rows.len(),
                elapsed: t.elapsed(),
            });
            Ok(())
        })?;
    }
    Ok(())
}

/// Runs `f(i)` for every unit `i < n` of a group on the current rayon pool, at most
/// `at_once` at a time: one worker loop on each of the first `at_once` threads (a broadcast)
/// takes the next unit in order, and every unit's metrics may use the whole pool
/// (`Par::rayon(0)`): while each thread has a unit the work stays mostly on its own thread,
/// and the threads without a unit help the ones running (a Pythia-70M checkpoint's 7 PGA
/// units on 16 threads, or the last of 33). A thread never holds two units at once (a
/// parallel iterator over the units would let a thread waiting inside one unit's parallel
/// work start another, and hold both units' memory), so at most `min(at_once, threads)` units
/// are in memory. No number depends on it (every metric is the same at any thread count).
/// After a failure no unit starts, and the error of the first failing unit in order is
/// returned.
pub(crate) fn for_each_unit(
    n: usize,
    at_once: usize,
    f: impl Fn(usize) -> Result<()> + Sync,
) -> Result<()> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (next, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
    let errors: Mutex<Vec<(usize, Error)>> = Mutex::new(Vec::new());
    rayon::broadcast(|thread| {
        if thread.index() >= at_once.max(1) {
            return;
        }
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            if let Err(e) = f(i) {
                failed.store(true, Ordering::Relaxed);
                errors
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((i, e));
            }
        }
    });
    // Units start in order, so every unit before the first failing one has run.
    let errors = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match errors.into_iter().min_by_key(|(i, _)| *i) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// One model pair's comparison, shared by its `cross` and `cross_table` units.
struct CrossPair {
    /// The analysed layers of this model and of the other, in the table's order.
    layers_a: Vec<usize>,
    layers_b: Vec<usize>,
    /// The cells the units asked for (every cell, and the aggregates, with a `cross_table`
    /// unit among them).
    table: Comparison,
}

/// The comparison of model `m` at `ckpt` (its final checkpoint) with `other` at its final
/// checkpoint, as `repgeom compare --layers-a … --layers-b …` runs it over every analysed layer
/// of both with the same options: [`ModelPair`] prepares both models (the readout bases the
/// models' own units use; model B's null bases from `seed + 1`) and judges the points that are
/// the same input twice on all those layers. Only the cells `units` need are computed (the
/// whole table when one of them is a `cross_table` unit), each in the whole table's shape, so a
/// cell is the same whichever others are computed with it: a `cross` unit's rows are its cell
/// of the `cross_table` unit's table and of `repgeom compare`'s, bit for bit. The draws run on
/// the current pool's threads (the library's results do not depend on their number).
fn cross_pair(
    study: &Study,
    loader: &Loader<'_>,
    m: &ModelInfo,
    ckpt: &str,
    ctx: &ModelCtx,
    other: &str,
    units: &[&PlannedUnit],
) -> Result<CrossPair> {
    let a = &study.manifest.analysis;
    let o = study.model(other).expect("checked pair");
    let octx = loader.model_ctx(o)?;
    let ockpt = o.final_checkpoint().name.clone();
    let mine = loader.layers(m, ckpt, &m.layers)?;
    let theirs = loader.layers(o, &ockpt, &o.layers)?;
    // Both hold the same points (one design, places, tokens, word windows): the rule
    // `repgeom compare` applies, from the same library function.
    let rows = |x: &BTreeMap<usize, Mat<f32>>| x.values().next().map_or(0, Mat::nrows);
    if let (Some((fa, pa)), Some((fb, pb))) = (
        loader.points_record(m, ckpt, rows(&mine))?,
        loader.points_record(o, &ockpt, rows(&theirs))?,
    ) {
        repgeom_extract::same_points(&pa, &pb).map_err(|reason| Error::PairPoints {
            a: m.label.clone(),
            b: o.label.clone(),
            file_a: fa,
            file_b: fb,
            reason: Box::new(reason),
        })?;
    }
    let va: Vec<MatRef<'_, f32>> = mine.values().map(Mat::as_ref).collect();
    let vb: Vec<MatRef<'_, f32>> = theirs.values().map(Mat::as_ref).collect();
    let (what_a, what_b) = (format!("model {}", m.label), format!("model {}", o.label));
    let metrics = a.cross_metrics()?;
    let pair = ModelPair::new(
        &metrics,
        PairModel {
            layers: &va,
            k: m.k,
            readout: ctx.model.basis().map(Readout::Basis),
            what: &what_a,
        },
        PairModel {
            layers: &vb,
            k: o.k,
            readout: octx.model.basis().map(Readout::Basis),
            what: &what_b,
        },
        NullParams {
            n_null: a.n_null,
            seed: a.seed,
        },
        Par::rayon(0),
    )?
    .with_memory_budget(Some(repgeom_io::default_memory_budget()))
    .with_device(study.manifest.device);
    let synth = |x: &ModelInfo| if x.synthetic { " (synthetic)" } else { "" };
    let mut ia = Vec::with_capacity(mine.len());
    for (l, x) in &mine {
        let what = format!("{} {ckpt} layer {l}{}", m.label, synth(m));
        ia.push(pair.a().layer(x.as_ref(), what)?);
    }
    let mut ib = Vec::with_capacity(theirs.len());
    for (l, x) in &theirs {
        let what = format!("{} {ockpt} layer {l}{}", o.label, synth(o));
        ib.push(pair.b().layer(x.as_ref(), what)?);
    }
    let (ra, rb): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
        (ia.iter().collect(), ib.iter().collect());
    let layers_a: Vec<usize> = mine.keys().copied().collect();
    let layers_b: Vec<usize> = theirs.keys().copied().collect();
    let whole = (units.iter())
        .any(|u| matches!(&u.unit.kind, UnitKind::CrossTable { other: x } if x == other));
    let cells: Vec<(usize, usize)> = if whole {
        repgeom_metrics::layer_pairs(layers_a.len(), layers_b.len(), false)
    } else {
        (units.iter())
            .filter(|u| matches!(&u.unit.kind, UnitKind::Cross { other: x } if x == other))
            .map(|u| cross_cell(m, o, u.unit.layer, &layers_a, &layers_b))
            .collect()
    };
    let settings = CompareSettings {
        aggregates: if whole {
            a.cross_aggregate.clone()
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let table = pair.compare(&metrics, &ra, &rb, &cells, &settings, &mut |_| {})?;
    Ok(CrossPair {
        layers_a,
        layers_b,
        table,
    })
}

/// The cell of the `cross` unit at `layer` of `m` in its pair's table: that layer against the
/// analysed layer of `o` nearest in relative depth (indices into `la` and `lb`).
fn cross_cell(
    m: &ModelInfo,
    o: &ModelInfo,
    layer: usize,
    la: &[usize],
    lb: &[usize],
) -> (usize, usize) {
    let ol = o.nearest_layer(repgeom_report::relative_depth(layer as u32, m.n_layers));
    let at = |ls: &[usize], l: usize| ls.iter().position(|&x| x == l).expect("analysed layer");
    (at(la, layer), at(lb, ol))
}

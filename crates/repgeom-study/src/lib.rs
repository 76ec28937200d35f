//! `repgeom-study` runs a whole study: several models, every layer, several training
//! checkpoints, as named by a TOML manifest (or the built-in synthetic study). It backs
//! `cargo xtask paper` and `repgeom sweep`.
//!
//! The main type is [`Study`]: a checked [`Manifest`] expanded into [`ModelInfo`]s and a
//! deterministic list of [`PlannedUnit`]s (model × checkpoint × layer × analysis), each with a
//! stable id and a config hash. [`run_units`] computes units and writes each one's rows as its
//! own part file; [`merge`] collects the parts into one [`repgeom_report::ResultsTable`].
//!
//! Key design decision: the unit, not the run, is the atom of work and of durability. Every
//! unit's rows are written atomically to `DIR/parts/<id>.json` with the SHA-256 of everything
//! that determines them, so a sweep killed at any moment resumes by skipping units whose part
//! carries the current hash, a SLURM array splits the plan by index modulo n with no
//! coordinator, and the merged table is the same bytes whichever way the parts were made
//! (floats are stored as shortest round-trip strings; the table sorts its rows by key).
//!
//! This crate computes no metric itself (that is `repgeom-metrics`, `repgeom-probe`) and draws
//! nothing (that is `repgeom-report`); it never prints: progress goes through a callback.
#![deny(missing_docs)]

mod checks;
mod error;
pub mod field_bench;
mod manifest;
mod memo;
mod parts;
mod plan;
mod report;
mod run;
pub mod selftest;
mod stage;

#[cfg(test)]
mod tests;

pub use error::{Error, Result};
pub use manifest::{
    Analysis, BUILTIN, CheckpointSpec, CrossMetric, DataSource, ExtractSpec, FullAt, HubData,
    Manifest, ModelSpec, PgaSettings, ProbeSpec, ReportSettings, STUDY_CCR, SpectralTokens,
    SyntheticSpec, default_cross,
};
pub use parts::{
    MergeReport, PART_FORMAT, PLAN_FORMAT, Part, PlanFile, is_done, merge, part_path, parts_dir,
    plan_path, read_part, read_plan, write_part, write_plan,
};
pub use plan::{
    CheckpointInfo, ModelInfo, ModelSource, PlannedUnit, Study, Unit, UnitKind, parse_shard, shard,
    shard_from_env, unit_id,
};
pub use report::{Report, check_report, report};
pub use run::{Loader, Step, StepDone, UnitDone, run_units};
pub use stage::{
    CheckpointRecord, Duplicate, checkpoint_record_path, duplicates, read_checkpoint_records,
};

/// A metric value as a row of the tidy table with every number it carries: its value, the
/// schema's null columns (`null_mean`, `null_std`, `p_value`) and each of its extras as a column
/// of its own. The one mapping of a [`repgeom_metrics::MetricValue`] onto a
/// [`repgeom_report::Row`]: the `repgeom` commands print their rows through it and the study's
/// cross-model rows are made by it, so a cross row of a study's table has the columns
/// `repgeom compare` prints for the same pair, which the library's comparison
/// ([`repgeom_metrics::analysis::ModelPair::compare`]) decides. `family` may be empty; the
/// caller sets checkpoint, other model and the like.
pub fn value_row(
    model: &str,
    family: &str,
    d: u32,
    (layer, n_layers): (u32, u32),
    v: repgeom_metrics::MetricValue,
) -> repgeom_report::Row {
    let repgeom_metrics::MetricValue {
        metric,
        variant,
        value,
        null_mean,
        null_std,
        p_value,
        extra,
    } = v;
    let mut r = repgeom_report::Row::new(model, family, d, layer, n_layers, metric, variant, value);
    r.null_mean = null_mean;
    r.null_std = null_std;
    r.p_value = p_value;
    r.extra = extra;
    r
}

/// Figure options for a study: its small/large width classes, `k`, and its spectral metrics as
/// figure 5's panels (the default four when it has none).
pub fn figure_options(study: &Study) -> repgeom_report::FigureOptions {
    let r = &study.manifest.report;
    let spectral = &study.manifest.analysis.spectral;
    repgeom_report::FigureOptions {
        spectral: if spectral.is_empty() {
            repgeom_report::DEFAULT_SPECTRAL.map(str::to_owned).to_vec()
        } else {
            spectral.clone()
        },
        small_max_d: r.small_max_d,
        large_min_d: r.large_min_d,
        readout_k: study.manifest.analysis.k as u32,
        readout_k_by_model: study
            .models
            .iter()
            .map(|m| (m.label.clone(), m.k as u32))
            .collect(),
        ..Default::default()
    }
}

/// What [`sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Units in the whole plan.
    pub planned: usize,
    /// Units in this shard.
    pub in_shard: usize,
    /// Units of this shard skipped because their part was already there with the current hash.
    pub skipped: usize,
    /// Units computed now.
    pub computed: usize,
    /// Hub checkpoints of this shard, resolved and hashed (plan order).
    pub checkpoints: Vec<CheckpointRecord>,
    /// Checkpoints among them whose weights equal an earlier checkpoint's of the same model.
    pub duplicates: Vec<Duplicate>,
}

/// Writes the plan, then computes every unit of shard `shard = (i, n)` (all when `None`) whose
/// part is missing or stale. `on_start` gets the stats after the shard's hub checkpoints are
/// extracted and before any unit runs (for a progress bar); `on_step` the wall time of each
/// step of an extraction and of each model's readout contexts.
pub fn sweep(
    study: &Study,
    dir: &std::path::Path,
    shard_of: Option<(usize, usize)>,
    on_start: &dyn Fn(&SweepStats),
    on_step: &(dyn Fn(&StepDone<'_>) + Sync),
    on_done: &(dyn Fn(&UnitDone<'_>) + Sync),
) -> Result<SweepStats> {
    write_plan(dir, study)?;
    let mine = match shard_of {
        Some((i, n)) => shard(&study.units, i, n),
        None => study.units.clone(),
    };
    let todo: Vec<PlannedUnit> = mine.iter().filter(|u| !is_done(dir, u)).cloned().collect();
    let loader = Loader::with_dir(study, dir).on_step(on_step);
    // Extraction is sharded too: of the hub checkpoints this shard's pending units need, shard
    // i extracts those at positions i mod n (plan order) first, so the tasks of an array start
    // on different checkpoints; a checkpoint another task is extracting is waited for (a lock
    // per cache key) and then reused, never extracted twice. A checkpoint extracted here is
    // hashed from the same read of its weights that loads it.
    let mut hub_ckpts: Vec<(String, String)> = Vec::new();
    for u in &study.units {
        let key = (u.unit.model.clone(), u.unit.checkpoint.clone());
        let is_hub = study
            .model(&key.0)
            .and_then(|m| m.checkpoint(&key.1))
            .is_some_and(|c| c.revision.is_some());
        if is_hub && !hub_ckpts.contains(&key) {
            hub_ckpts.push(key);
        }
    }
    let pending: std::collections::BTreeSet<(String, String)> = todo
        .iter()
        .map(|u| (u.unit.model.clone(), u.unit.checkpoint.clone()))
        .collect();
    let (i, n) = shard_of.unwrap_or((0, 1));
    for (m, c) in hub_ckpts.iter().skip(i).step_by(n) {
        if pending.contains(&(m.clone(), c.clone())) {
            let model = study.model(m).expect("planned model");
            // The model's readout contexts (W_U's decomposition: seconds at d = 4096 on many
            // cores) beside its first extraction here, which does not need them; the units
            // need both. The readout is read and checked first, so that a bad one fails
            // before any extraction.
            let read = if loader.has_model_ctx(model) {
                None
            } else {
                Some(loader.read_model(model)?)
            };
            let (ctx, extracted) = std::thread::scope(|s| {
                let ctx = read.map(|read| s.spawn(|| loader.model_ctx_from(model, read)));
                let extracted = loader.extracted(model, c);
                let ctx = ctx.map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                });
                (ctx, extracted)
            });
            ctx.transpose()?;
            extracted?;
        }
    }
    // Every hub checkpoint of this shard resolved and hashed (those extracted above already
    // are; the others are hashed on their own), so duplicates are known before any unit runs.
    let mut checkpoints = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for u in &mine {
        if seen.insert((u.unit.model.clone(), u.unit.checkpoint.clone())) {
            let m = study.model(&u.unit.model).expect("planned model");
            if let Some(r) = loader.audit(m, &u.unit.checkpoint)? {
                checkpoints.push(r);
            }
        }
    }
    let stats = SweepStats {
        planned: study.units.len(),
        in_shard: mine.len(),
        skipped: mine.len() - todo.len(),
        computed: todo.len(),
        duplicates: duplicates(&checkpoints),
        checkpoints,
    };
    on_start(&stats);
    run::run_units_with(&loader, &todo, dir, on_done)?;
    Ok(stats)
}

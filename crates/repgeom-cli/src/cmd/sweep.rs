//! `repgeom sweep`: run a study manifest as resumable, shardable units, and merge the parts.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a subcommand reports on its streams

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use repgeom_study::{BUILTIN, Manifest, Study, UnitDone, UnitKind};

use crate::context::Context;

/// Arguments of `repgeom sweep`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct SweepArgs {
    #[command(subcommand)]
    pub(crate) action: Option<SweepAction>,
    /// The study manifest (TOML; see docs/study-manifest.md).
    #[arg(long, required_unless_present = "synthetic")]
    pub(crate) manifest: Option<PathBuf>,
    /// Run the built-in synthetic study instead of a manifest (synthetic data).
    #[arg(long, conflicts_with = "manifest")]
    pub(crate) synthetic: bool,
    /// Sweep directory: plan.json, parts/ and, once complete, results.{csv,parquet}.
    #[arg(long, required_unless_present = "dry_run")]
    pub(crate) out: Option<PathBuf>,
    /// Run only shard i of n (0-based, e.g. 0/8). Default: SLURM_ARRAY_TASK_ID/COUNT when set.
    #[arg(long)]
    pub(crate) shard: Option<String>,
    /// List the units and estimate the work, compute nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Where the extraction, PGA's null draws and the cross units' kernel nulls run: cpu, cuda
    /// or cuda:N [default: the manifest's `device`, else cpu]. Never changes a unit's hash
    /// (docs/gpu.md).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub(crate) device: Option<repgeom_cuda::Device>,
}

/// Sub-modes of `repgeom sweep`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum SweepAction {
    /// Merge the part files of a sweep directory into results.parquet and results.csv.
    Merge(MergeArgs),
}

/// Arguments of `repgeom sweep merge`.
#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// The sweep directory (as given to `repgeom sweep --out`).
    pub(crate) dir: PathBuf,
    /// Write the table even when units are missing (the missing ones are listed).
    #[arg(long)]
    pub(crate) allow_partial: bool,
}

pub(crate) fn run(args: &SweepArgs, ctx: &Context) -> anyhow::Result<()> {
    if let Some(SweepAction::Merge(m)) = &args.action {
        return merge(&m.dir, m.allow_partial, ctx);
    }
    let (mut manifest, origin) = match &args.manifest {
        Some(p) => (Manifest::load(p)?, p.display().to_string()),
        None => (Manifest::synthetic_default(), BUILTIN.to_owned()),
    };
    if let Some(device) = args.device {
        manifest.device = device;
    }
    let study = Study::new(manifest, &origin)?;
    let shard = match &args.shard {
        Some(s) => Some(repgeom_study::parse_shard(s)?),
        None => repgeom_study::shard_from_env(|k| std::env::var(k).ok())?,
    };
    if args.dry_run {
        return dry_run(&study, shard, args.out.as_deref());
    }
    let out = args.out.as_ref().context("--out is required")?;
    let bar = ctx.progress(0, "sweep");
    let quiet = ctx.quiet;
    let log = Mutex::new(());
    let on_start = |s: &repgeom_study::SweepStats| {
        bar.set_length(s.computed as u64);
        for d in &s.duplicates {
            bar.suspend(|| {
                eprintln!(
                    "warning: model {} checkpoint {} (revision {}) has the same weights as checkpoint {}: \
                     the hub serves one model under both names; its rows repeat the other's",
                    d.model, d.checkpoint, d.revision, d.duplicate_of
                );
            });
        }
        let shard_note = shard.map_or(String::new(), |(i, n)| {
            format!(", shard {i}/{n}: {} units", s.in_shard)
        });
        if !quiet {
            bar.suspend(|| {
                eprintln!(
                    "sweep: {} ({} units, plan {}{shard_note}); {} done already, {} to compute",
                    study.origin,
                    s.planned,
                    study.plan_hash(),
                    s.skipped,
                    s.computed
                );
            });
        }
    };
    // Where a checkpoint's time goes: each step of its extraction (the weights hash runs
    // beside the others when it is met for the first time) and each model's readout contexts.
    let on_step = |s: &repgeom_study::StepDone<'_>| {
        let _g = log.lock();
        if !quiet {
            let at = s.checkpoint.map_or(String::new(), |c| format!(" {c}"));
            bar.suspend(|| {
                eprintln!(
                    "step {}{at}: {} {:.2} s",
                    s.model,
                    s.step,
                    s.elapsed.as_secs_f64()
                );
            });
        }
    };
    let on_done = |u: &UnitDone<'_>| {
        let _g = log.lock();
        if !quiet {
            bar.suspend(|| {
                eprintln!(
                    "done {} ({} rows, {:.2} s)",
                    u.unit.id,
                    u.rows,
                    u.elapsed.as_secs_f64()
                );
            });
        }
        bar.inc(1);
    };
    let stats = repgeom_study::sweep(&study, out, shard, &on_start, &on_step, &on_done);
    crate::args::print_profile(study.manifest.device);
    let stats = stats?;
    bar.finish_and_clear();
    if shard.is_some() {
        if !quiet {
            eprintln!(
                "sweep: shard finished ({} computed, {} skipped); run `repgeom sweep merge {}` once every shard is done",
                stats.computed,
                stats.skipped,
                out.display()
            );
        }
        return Ok(());
    }
    merge(out, false, ctx)
}

fn merge(dir: &std::path::Path, allow_partial: bool, ctx: &Context) -> anyhow::Result<()> {
    let (table, report) = repgeom_study::merge(dir)?;
    for (id, files) in &report.duplicates {
        ctx.note(format!(
            "merge: unit {id} found in {} identical part files (merged once)",
            files.len()
        ));
    }
    for f in &report.extra {
        ctx.note(format!(
            "merge: ignoring {} (unit not in plan.json)",
            f.display()
        ));
    }
    if !report.complete() {
        let shown: Vec<&str> = report.missing.iter().take(10).map(String::as_str).collect();
        let msg = format!(
            "{} of {} units missing in {} (e.g. {}); rerun the sweep (or the missing shards) to compute them",
            report.missing.len(),
            report.planned,
            dir.display(),
            shown.join(", ")
        );
        if !allow_partial {
            bail!("{msg}");
        }
        eprintln!("merge: {msg}; writing a PARTIAL table (--allow-partial)");
    }
    table.write_parquet(&dir.join("results.parquet"))?;
    table.write_csv(&dir.join("results.csv"))?;
    write_checkpoints(dir)?;
    if !ctx.quiet {
        eprintln!(
            "merge: {} units, {} rows -> {}",
            report.merged,
            table.len(),
            dir.join("results.{parquet,csv}").display()
        );
    }
    Ok(())
}

/// `DIR/checkpoints.csv`: every hub checkpoint's revision, commit, weights hash, parameter
/// count and `duplicate_of`, from the records the shards wrote; duplicates are warned about.
fn write_checkpoints(dir: &std::path::Path) -> anyhow::Result<()> {
    let records = repgeom_study::read_checkpoint_records(dir)?;
    if records.is_empty() {
        return Ok(());
    }
    let plan = repgeom_study::read_plan(dir)?;
    // Plan order (checkpoints by step), so duplicate_of names the earliest.
    let mut ordered: Vec<repgeom_study::CheckpointRecord> = Vec::new();
    for u in &plan.units {
        let (m, c) = (&u.unit.model, &u.unit.checkpoint);
        if ordered.iter().any(|r| &r.model == m && &r.checkpoint == c) {
            continue;
        }
        if let Some(r) = records.iter().find(|r| &r.model == m && &r.checkpoint == c) {
            ordered.push(r.clone());
        }
    }
    let dups = repgeom_study::duplicates(&ordered);
    let mut csv = String::from(
        "model,checkpoint,hub,revision,commit,weights_sha256,parameters,duplicate_of\n",
    );
    for r in &ordered {
        let dup = dups
            .iter()
            .find(|d| d.model == r.model && d.checkpoint == r.checkpoint)
            .map(|d| d.duplicate_of.as_str())
            .unwrap_or("");
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            r.model, r.checkpoint, r.hub, r.revision, r.commit, r.weights_sha256, r.parameters, dup
        ));
    }
    for d in &dups {
        eprintln!(
            "merge: warning: model {} checkpoint {} (revision {}) has the same weights as checkpoint {}",
            d.model, d.checkpoint, d.revision, d.duplicate_of
        );
    }
    let path = dir.join("checkpoints.csv");
    repgeom_io::atomic_write(&path, |w| w.write_all(csv.as_bytes()))?;
    Ok(())
}

fn dry_run(
    study: &Study,
    shard: Option<(usize, usize)>,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let units = match shard {
        Some((i, n)) => repgeom_study::shard(&study.units, i, n),
        None => study.units.clone(),
    };
    let a = &study.manifest.analysis;
    let mut rankings: u64 = 0;
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let mut done = 0;
    for u in &units {
        let done_mark = out.is_some_and(|o| repgeom_study::is_done(o, u));
        done += usize::from(done_mark);
        println!("{}{}", u.id, if done_mark { "  (done)" } else { "" });
        let key = match &u.unit.kind {
            UnitKind::Pga { .. } => "pga",
            UnitKind::PgaK { .. } => "pga_k",
            UnitKind::PcShare { .. } => "pc_share",
            UnitKind::Spectral { .. } => "spectral",
            UnitKind::Probe => "probe",
            UnitKind::ValLoss => "val_loss",
            UnitKind::Cross { .. } => "cross",
            UnitKind::CrossTable { .. } => "cross_table",
            UnitKind::Weights => "weights",
        };
        *kinds.entry(key.to_owned()).or_default() += 1;
        rankings += match &u.unit.kind {
            UnitKind::Pga { ccr } => (ccr.len() * (a.n_null + 1)) as u64,
            UnitKind::PgaK { .. } => (a.n_null + 1) as u64,
            UnitKind::Cross { .. } => (a.n_null + 3) as u64,
            _ => 0,
        };
    }
    let by_kind: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "\n{} units{} ({}); {} already done; work: {} distance-rank correlations of N(N-1)/2 pairs each \
         (dominant cost), plus one SVD per model and one eigendecomposition per layer and checkpoint",
        units.len(),
        shard.map_or(String::new(), |(i, n)| format!(
            " in shard {i}/{n} of {}",
            study.units.len()
        )),
        by_kind.join(", "),
        done,
        rankings
    );
    Ok(())
}

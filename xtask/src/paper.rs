//! `cargo xtask paper`: the study sweep, the merged table and the report, or `--check` against
//! the committed `docs/figures/`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use repgeom_study::{BUILTIN, Manifest, Study, UnitDone};

use crate::{USAGE, root};

struct PaperArgs {
    manifest: Option<PathBuf>,
    out: PathBuf,
    work: PathBuf,
    threads: usize,
    check: bool,
}

fn parse_paper(args: &[String]) -> anyhow::Result<PaperArgs> {
    let mut p = PaperArgs {
        manifest: None,
        out: root().join("target/paper"),
        work: root().join("target/paper-work"),
        threads: 0,
        check: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--manifest" => p.manifest = Some(value("--manifest")?.into()),
            "--out" => p.out = value("--out")?.into(),
            "--work" => p.work = value("--work")?.into(),
            "--threads" => {
                p.threads = value("--threads")?
                    .parse()
                    .context("--threads takes a number")?
            }
            "--check" => p.check = true,
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if p.check && p.manifest.is_some() {
        bail!("--check compares the built-in study with docs/figures/; it takes no --manifest");
    }
    Ok(p)
}

pub(crate) fn paper(args: &[String]) -> anyhow::Result<()> {
    let p = parse_paper(args)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(p.threads)
        .build()?;
    pool.install(|| {
        if p.check {
            return check();
        }
        let study = load_study(p.manifest.as_deref())?;
        produce(&study, &p.work, &p.out)
    })
}

fn load_study(manifest: Option<&Path>) -> anyhow::Result<Study> {
    Ok(match manifest {
        Some(m) => Study::new(Manifest::load(m)?, &m.display().to_string())?,
        None => Study::new(Manifest::synthetic_default(), BUILTIN)?,
    })
}

/// Sweep (resuming), merge, and write the report.
fn produce(study: &Study, work: &Path, out: &Path) -> anyhow::Result<()> {
    let t0 = Instant::now();
    sweep(study, work, t0)?;
    write_report(work, out, t0, t0.elapsed())
}

/// Sweep (resuming) with progress lines timed from `t0`.
fn sweep(study: &Study, work: &Path, t0: Instant) -> anyhow::Result<()> {
    let synthetic = study.models.iter().any(|m| m.synthetic);
    println!(
        "paper: {} ({} models, {} units, plan {}){}",
        study.origin,
        study.models.len(),
        study.units.len(),
        study.plan_hash(),
        if synthetic { " -- SYNTHETIC DATA" } else { "" }
    );
    let done = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    let on_start = |s: &repgeom_study::SweepStats| {
        total.store(s.computed, Ordering::Relaxed);
        println!(
            "paper: {} units already done in {}, computing {}",
            s.skipped,
            work.display(),
            s.computed
        );
        for d in &s.duplicates {
            println!(
                "paper: warning: model {} checkpoint {} (revision {}) has the same weights as checkpoint {}",
                d.model, d.checkpoint, d.revision, d.duplicate_of
            );
        }
    };
    let on_done = |u: &UnitDone<'_>| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        let t = total.load(Ordering::Relaxed).max(1);
        if n == t || n.is_multiple_of((t / 20).max(1)) {
            let el = t0.elapsed().as_secs_f64();
            println!(
                "paper: {n}/{t} units ({:.0}%), {el:.0} s elapsed, eta {:.0} s (last: {}, {:.2} s)",
                100.0 * n as f64 / t as f64,
                el / n as f64 * (t - n) as f64,
                u.unit.id,
                u.elapsed.as_secs_f64()
            );
        }
    };
    repgeom_study::sweep(study, work, None, &on_start, &|_| {}, &on_done)?;
    Ok(())
}

/// The report of the finished sweep in `work`, written into `out`.
fn write_report(work: &Path, out: &Path, t0: Instant, t_sweep: Duration) -> anyhow::Result<()> {
    let r = repgeom_study::report(work, out)?;
    if !r.merge.extra.is_empty() {
        println!(
            "paper: ignored {} part files of units not in this plan",
            r.merge.extra.len()
        );
    }
    for s in &r.files.skipped {
        println!("paper: {s}");
    }
    println!(
        "paper: {} rows, {} files in {} (sweep {:.1} s, total {:.1} s); open {}",
        r.rows,
        r.files.files.len(),
        out.display(),
        t_sweep.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        out.join("index.html").display()
    );
    Ok(())
}

fn check() -> anyhow::Result<()> {
    let committed = root().join("docs/figures");
    let tmp = tempfile::tempdir()?;
    let work = tmp.path().join("work");
    let study = load_study(None)?;
    sweep(&study, &work, Instant::now())?;
    // Draws the report once, into its own temporary directory, and compares.
    let stale = repgeom_study::check_report(&work, &committed)?;
    if !stale.is_empty() {
        bail!(
            "docs/figures/ is stale ({} files differ: {}): run `cargo xtask paper --out docs/figures` locally and commit",
            stale.len(),
            stale.join(", ")
        );
    }
    println!("paper --check: docs/figures/ is up to date");
    Ok(())
}

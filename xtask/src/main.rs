//! `cargo xtask`: project automation.
//!
//! - `cargo xtask paper [--manifest M] [--out DIR] [--work DIR] [--threads N]`: run (or resume)
//!   the study sweep, merge it, and write the results table, every figure (SVG + PNG), the
//!   summary and `index.html` into DIR (default `target/paper`). Without `--manifest` it runs
//!   the built-in synthetic study. Part files live in the work directory (default
//!   `target/paper-work`), so an interrupted run resumes where it stopped.
//! - `cargo xtask paper --check`: regenerate the default study from scratch in a temporary
//!   directory and fail if the committed `docs/figures/` differ (SVGs, `results.csv`,
//!   `summary.md`).
//! - `cargo xtask bench [NAME...]`: `cargo bench --workspace` (or the named benches);
//!   `bench pair` adds the NumPy references of the pair metrics and the spectrum null.
//! - `cargo xtask validate`: every check CI runs, cheapest first: `cargo fmt --check`,
//!   `cargo clippy --workspace --all-targets -D warnings`, `cargo test --workspace` (the
//!   README's test command) and `paper --check`; stops at the first failure.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool reports on its streams

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail};
use repgeom_study::{BUILTIN, Manifest, Study, UnitDone};

const USAGE: &str = "usage:
  cargo xtask paper [--manifest study.toml] [--out DIR (default target/paper)] [--work DIR (default target/paper-work)] [--threads N]
  cargo xtask paper --check        # fail if committed docs/figures/ are stale
  cargo xtask bench [BENCH...]     # cargo bench --workspace, or only the named benches
  cargo xtask bench scaling [--quick]  # PGA time and peak memory against N and d, with growth exponents
  cargo xtask bench extract        # extraction tokens/s (Pythia-70M shape) beside transformers
  cargo xtask bench pair           # pair metrics and the spectrum null beside their NumPy references
  cargo xtask validate             # fmt --check, clippy -D warnings, cargo test --workspace, paper --check";

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("paper") => paper(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("validate") => validate(),
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n{USAGE}"),
    }
}

/// `cargo xtask validate`: CI's checks, cheapest first, stopping at the first failure.
fn validate() -> anyhow::Result<()> {
    let steps: [(&str, &[&str]); 4] = [
        ("format", &["fmt", "--all", "--check"]),
        (
            "lints",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        ("tests", &["test", "--workspace"]),
        ("figures", &["xtask", "paper", "--check"]),
    ];
    for (what, args) in steps {
        let t = Instant::now();
        eprintln!("validate: {what}: cargo {}", args.join(" "));
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .current_dir(root())
            .args(args)
            .status()
            .with_context(|| format!("validate: could not run cargo {}", args.join(" ")))?;
        if !status.success() {
            bail!(
                "validate: {what} failed (cargo {}: {status})",
                args.join(" ")
            );
        }
        eprintln!("validate: {what} ok ({:.0} s)", t.elapsed().as_secs_f64());
    }
    eprintln!("validate: all checks passed");
    Ok(())
}

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_owned()
}

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

fn paper(args: &[String]) -> anyhow::Result<()> {
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
    repgeom_study::sweep(study, work, None, &on_start, &on_done)?;
    let t_sweep = t0.elapsed();
    let (table, report) = repgeom_study::merge(work)?;
    if !report.complete() {
        bail!(
            "{} of {} units have no part file in {} (first: {})",
            report.missing.len(),
            report.planned,
            work.display(),
            report.missing[0]
        );
    }
    if !report.extra.is_empty() {
        println!(
            "paper: ignored {} part files of units not in this plan",
            report.extra.len()
        );
    }
    let files = repgeom_report::write_report(out, &table, &repgeom_study::figure_options(study))?;
    for s in &files.skipped {
        println!("paper: {s}");
    }
    println!(
        "paper: {} rows, {} files in {} (sweep {:.1} s, total {:.1} s); open {}",
        table.len(),
        files.files.len(),
        out.display(),
        t_sweep.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        out.join("index.html").display()
    );
    Ok(())
}

/// Files `--check` compares: every SVG, the CSV table and the summary.
fn checked_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("list {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".svg") || n == "results.csv" || n == "summary.md")
        .collect();
    names.sort();
    Ok(names)
}

fn check() -> anyhow::Result<()> {
    let committed = root().join("docs/figures");
    let tmp = tempfile::tempdir()?;
    let (work, out) = (tmp.path().join("work"), tmp.path().join("out"));
    let study = load_study(None)?;
    produce(&study, &work, &out)?;
    let fresh = checked_files(&out)?;
    let old = if committed.is_dir() {
        checked_files(&committed)?
    } else {
        Vec::new()
    };
    let mut stale = Vec::new();
    for n in fresh
        .iter()
        .chain(old.iter().filter(|n| !fresh.contains(n)))
    {
        let a = std::fs::read(out.join(n)).ok();
        let b = std::fs::read(committed.join(n)).ok();
        if a != b {
            stale.push(n.clone());
        }
    }
    if !stale.is_empty() {
        bail!(
            "docs/figures/ is stale ({} files differ: {}): run `cargo xtask paper --out docs/figures` locally and commit",
            stale.len(),
            stale.join(", ")
        );
    }
    println!(
        "paper --check: docs/figures/ is up to date ({} files compared)",
        fresh.len()
    );
    Ok(())
}

fn bench(names: &[String]) -> anyhow::Result<()> {
    if names.first().map(String::as_str) == Some("scaling") {
        return scaling(&names[1..]);
    }
    if names.first().map(String::as_str) == Some("extract") {
        return bench_extract();
    }
    if names.first().map(String::as_str) == Some("pair") {
        return bench_pair();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(root()).args(["bench", "--workspace"]);
    for n in names {
        cmd.args(["--bench", n]);
    }
    let status = cmd.status().context("run cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    println!(
        "bench: criterion reports are in {}",
        root().join("target/criterion").display()
    );
    Ok(())
}

/// The criterion directory (under `CARGO_TARGET_DIR` when it is set).
fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), PathBuf::from)
        .join("criterion")
}

/// `cargo xtask bench pair`: the `pair` criterion bench of repgeom-metrics (the pair metrics
/// at N = 2000, d = 256 / 384, and the spectrum-matched null at N = 2000, d = 512, k = 50,
/// 100 draws), then, in the same run, the NumPy references on the same shapes
/// (`fixtures/pair/time_numpy.py`, `fixtures/pga/time_spectrum_numpy.py`), and one table of
/// seconds with the ratio.
fn bench_pair() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["bench", "-p", "repgeom-metrics", "--bench", "pair"])
        .status()
        .context("run cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let ours = |group: &str, name: &str| -> anyhow::Result<f64> {
        let path = criterion_dir()
            .join(group)
            .join(name)
            .join("new/estimates.json");
        let est: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
        )?;
        Ok(est["mean"]["point_estimate"]
            .as_f64()
            .context("criterion estimate")?
            * 1e-9)
    };
    let mut theirs: Vec<(String, f64)> = Vec::new();
    for (script, args) in [
        ("fixtures/pair/time_numpy.py", &["2000", "256", "384"][..]),
        (
            "fixtures/pga/time_spectrum_numpy.py",
            &["2000", "512", "50", "100"][..],
        ),
    ] {
        match std::process::Command::new("python3")
            .current_dir(root())
            .arg(script)
            .args(args)
            .output()
        {
            Ok(out) if out.status.success() => {
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    let v: serde_json::Value = serde_json::from_str(line)?;
                    theirs.push((
                        v["metric"].as_str().unwrap_or("").to_owned(),
                        v["seconds"].as_f64().unwrap_or(f64::NAN),
                    ));
                }
            }
            Ok(out) => println!(
                "{script} not run: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next_back()
                    .unwrap_or("")
            ),
            Err(e) => println!("{script} not run: {e}"),
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "pair bench: seconds per call (load average {})",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<14} {:>10} {:>10} {:>8}",
        "metric", "repgeom", "NumPy", "ratio"
    );
    let rows = [
        ("pair_n2000_d256_d384", "mutual_knn"),
        ("pair_n2000_d256_d384", "cknna"),
        ("pair_n2000_d256_d384", "svcca"),
        ("pair_n2000_d256_d384", "pwcca"),
        ("pair_n2000_d256_d384", "procrustes"),
        ("pair_n2000_d256_d384", "rsa"),
        ("pair_n2000_d256_d384", "cka_linear"),
        ("spectrum_null_n2000_d512_k50", "match_100_draws"),
    ];
    for (group, name) in rows {
        let a = ours(group, name)?;
        let key = if name == "match_100_draws" {
            "spectrum_null"
        } else {
            name
        };
        match theirs.iter().find(|t| t.0 == key) {
            Some((_, b)) => println!("{key:<14} {a:>10.3} {b:>10.3} {:>7.1}x", b / a),
            None => println!("{key:<14} {a:>10.3} {:>10} {:>8}", "-", "-"),
        }
    }
    Ok(())
}

/// `cargo xtask bench extract`: the `forward` criterion bench of repgeom-extract (8 sequences
/// of 256 tokens through a random Pythia-70M-shaped model, batch 1 and the default batch,
/// hidden states only and with the loss), then, in the same run, transformers on the same
/// shape (`fixtures/extract/time_torch.py`, when `python3` has torch and transformers), and
/// one table of tokens/s with the ratio.
fn bench_extract() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["bench", "-p", "repgeom-extract", "--bench", "forward"])
        .status()
        .context("run cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let tokens = 8.0 * 256.0;
    let mut ours = Vec::new();
    for loss in [false, true] {
        for batch in [1, 8] {
            let name = format!(
                "batch{batch}_{}",
                if loss { "with_loss" } else { "hidden_states" }
            );
            let path = root()
                .join("target/criterion/pythia70m_random_8x256")
                .join(&name)
                .join("new/estimates.json");
            let est: serde_json::Value = serde_json::from_slice(
                &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
            )?;
            let ns = est["mean"]["point_estimate"]
                .as_f64()
                .context("criterion estimate")?;
            ours.push((batch, loss, tokens / (ns * 1e-9)));
        }
    }
    let torch = std::process::Command::new("python3")
        .current_dir(root())
        .arg("fixtures/extract/time_torch.py")
        .output();
    let mut theirs = Vec::new();
    match torch {
        Ok(out) if out.status.success() => {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let v: serde_json::Value = serde_json::from_str(line)?;
                theirs.push((
                    v["batch"].as_u64().unwrap_or(0) as usize,
                    v["loss"].as_bool().unwrap_or(false),
                    v["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
                ));
            }
        }
        Ok(out) => println!(
            "transformers side not run: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next_back()
                .unwrap_or("")
        ),
        Err(e) => println!("transformers side not run: {e}"),
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "extract bench: tokens/s, 8 x 256 tokens, random Pythia-70M shape (load average {})",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<8} {:<6} {:>12} {:>14}",
        "batch", "loss", "repgeom", "transformers"
    );
    for &(b, l, t) in &ours {
        let hf = theirs
            .iter()
            .find(|x| x.0 == b && x.1 == l)
            .map_or("-".to_string(), |x| format!("{:.0}", x.2));
        println!("{b:<8} {l:<6} {t:>12.0} {hf:>14}");
    }
    for loss in [false, true] {
        let best = |v: &[(usize, bool, f64)]| {
            v.iter()
                .filter(|x| x.1 == loss)
                .map(|x| x.2)
                .fold(f64::NAN, f64::max)
        };
        let (a, b) = (best(&ours), best(&theirs));
        if b.is_finite() {
            println!(
                "best of batch 1 and 8, loss {loss}: repgeom {a:.0}, transformers {b:.0}, ratio {:.2}",
                a / b
            );
        }
    }
    Ok(())
}

/// `cargo xtask bench scaling [--quick]`: time and peak memory of one PGA layer (k = 100,
/// CCR-1) against N (d = 2048) and against d (N = 2048), each size in a fresh process, with
/// the fitted growth exponents (least squares on log-log). The default uses 10 null draws
/// per size and reports the time scaled to 100 draws alongside; `--quick` stops at N = 4000.
fn scaling(args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args([
            "build",
            "--release",
            "-p",
            "repgeom-metrics",
            "--example",
            "pga_scaling",
        ])
        .status()
        .context("build the pga_scaling example")?;
    if !status.success() {
        bail!("building pga_scaling failed ({status})");
    }
    let exe = root().join("target/release/examples/pga_scaling");
    let n_null = 10u64;
    let run = |n: u64, d: u64| -> anyhow::Result<(f64, f64)> {
        let out = std::process::Command::new(&exe)
            .args([
                n.to_string(),
                d.to_string(),
                "100".into(),
                n_null.to_string(),
            ])
            .output()
            .context("run pga_scaling")?;
        if !out.status.success() {
            bail!(
                "pga_scaling {n} {d} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let secs = v["seconds"].as_f64().unwrap_or(f64::NAN);
        let rss = v["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN);
        println!(
            "  N = {n:>6}  d = {d:>5}  {secs:>8.2} s for {n_null} draws  peak {:>8.1} MiB",
            rss / (1u64 << 20) as f64
        );
        Ok((secs, rss))
    };
    let fit = |xs: &[f64], ys: &[f64]| -> f64 {
        let lx: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
        let ly: Vec<f64> = ys.iter().map(|y| y.ln()).collect();
        let (mx, my) = (
            lx.iter().sum::<f64>() / lx.len() as f64,
            ly.iter().sum::<f64>() / ly.len() as f64,
        );
        let sxy: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
        sxy / sxx
    };
    let ns: Vec<u64> = if quick {
        vec![1000, 2000, 4000]
    } else {
        vec![1000, 2000, 4000, 7000, 10000]
    };
    println!("scaling in N (d = 2048, k = 100, {n_null} null draws, CCR-1):");
    let (mut t, mut m) = (Vec::new(), Vec::new());
    for &n in &ns {
        let (s, r) = run(n, 2048)?;
        t.push(s);
        m.push(r);
    }
    let x: Vec<f64> = ns.iter().map(|&n| n as f64).collect();
    println!(
        "  time ~ N^{:.2}, peak memory ~ N^{:.2}",
        fit(&x, &t),
        fit(&x, &m)
    );
    let ds: Vec<u64> = vec![512, 1024, 2048, 4096];
    println!("scaling in d (N = 2048, k = 100, {n_null} null draws, CCR-1):");
    let (mut t, mut m) = (Vec::new(), Vec::new());
    for &d in &ds {
        let (s, r) = run(2048, d)?;
        t.push(s);
        m.push(r);
    }
    let x: Vec<f64> = ds.iter().map(|&d| d as f64).collect();
    println!(
        "  time ~ d^{:.2}, peak memory ~ d^{:.2}",
        fit(&x, &t),
        fit(&x, &m)
    );
    Ok(())
}

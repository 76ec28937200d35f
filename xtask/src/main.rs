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
//!   `bench pair` adds the NumPy references of the pair metrics and the spectrum null;
//!   `bench pga` times the `repgeom pga` command end to end beside NumPy/SciPy.
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
  cargo xtask bench pga            # `repgeom pga` end to end on the standard workload beside NumPy/SciPy
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
    if names.first().map(String::as_str) == Some("pga") {
        return bench_pga();
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

/// Cargo's target directory (`CARGO_TARGET_DIR` when it is set).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The criterion directory.
fn criterion_dir() -> PathBuf {
    target_dir().join("criterion")
}

/// Builds the release CLI and returns its path.
fn build_release_cli() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["build", "--release", "-p", "repgeom-cli"])
        .status()
        .context("build the release CLI")?;
    if !status.success() {
        bail!("building repgeom failed ({status})");
    }
    Ok(target_dir().join("release/repgeom"))
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

/// `cargo xtask bench pga`: the command a user runs, end to end, on the standard workload (one
/// layer, N = 2048, d = 2048, `W_U` 4000 × 2048, k = 100, CCR-1, 100 Haar draws), beside the
/// NumPy/SciPy version of the same computation on the same files
/// (`fixtures/pga/time_end_to_end.py`, skipped with a message when `python3` lacks NumPy or
/// SciPy). The release CLI runs in three configurations (best of 3 wall times each): as a user
/// first runs it; with the readout basis and the null bases read from the files the first run
/// saved (what a sweep reuses); with 2 draws (the fixed costs: loading, CCR, the readout
/// subspace, the full-space ranking). Then, on the same files, the unavoidable parts of the
/// run on one thread (`profile_pga`, see [`pga_parts`]): their sum over the core count is the
/// floor the user's run is compared with.
fn bench_pga() -> anyhow::Result<()> {
    let exe = build_release_cli()?;
    let dir = target_dir().join("bench-pga");
    std::fs::create_dir_all(&dir)?;
    let (acts, wu) = (dir.join("acts.npy"), dir.join("wu.npy"));
    if !(acts.exists() && wu.exists()) {
        write_pga_workload(&acts, &wu, 2048, 2048)?;
    }
    let (basis, null) = (dir.join("readout_basis.npy"), dir.join("null_bases.npy"));
    let common = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "pga",
            "--quiet",
            "--format",
            "csv",
            "--acts",
            &acts.to_string_lossy(),
            "--ccr",
            "1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    let b = basis.to_string_lossy().into_owned();
    let nb = null.to_string_lossy().into_owned();
    let w = wu.to_string_lossy().into_owned();
    let configs: [(&str, Vec<String>); 4] = [
        (
            "first run, saving the readout basis and null bases",
            common(&[
                "--readout",
                &w,
                "-k",
                "100",
                "--n-null",
                "100",
                "--save-readout-basis",
                &b,
                "--save-null-bases",
                &nb,
            ]),
        ),
        (
            "as a user runs it",
            common(&["--readout", &w, "-k", "100", "--n-null", "100"]),
        ),
        (
            "readout basis and null bases from those files",
            common(&["--readout-basis", &b, "--null-bases", &nb]),
        ),
        (
            "fixed costs only (2 draws)",
            common(&["--readout", &w, "-k", "100", "--n-null", "2"]),
        ),
    ];
    let mut ours = Vec::new();
    let mut rho = String::new();
    for (i, (what, args)) in configs.iter().enumerate() {
        let reps = if i == 0 { 1 } else { 3 };
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            let out = std::process::Command::new(&exe)
                .args(args)
                .output()
                .context("run repgeom pga")?;
            let secs = t.elapsed().as_secs_f64();
            if !out.status.success() {
                bail!(
                    "repgeom {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            best = best.min(secs);
            if i == 1 {
                rho = csv_field(&String::from_utf8_lossy(&out.stdout), "rho_readout")
                    .unwrap_or_default();
            }
        }
        ours.push((*what, best));
    }
    let parts = pga_parts(&dir)?;
    let scipy = std::process::Command::new("python3")
        .current_dir(root())
        .arg("fixtures/pga/time_end_to_end.py")
        .arg(&dir)
        .output();
    let theirs: Option<serde_json::Value> = match scipy {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            Some(serde_json::from_str(text.lines().last().unwrap_or("{}"))?)
        }
        Ok(out) => {
            println!(
                "NumPy/SciPy side not run: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next_back()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            println!("NumPy/SciPy side not run: python3: {e}");
            None
        }
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "pga bench: N = 2048, d = 2048, W_U 4000 x 2048, k = 100, CCR-1, 100 Haar draws; files in {} (load average {})",
        dir.display(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<56} {:>9}",
        "repgeom pga (release), best of 3", "seconds"
    );
    for (what, s) in &ours {
        println!("{what:<56} {s:>9.2}");
    }
    println!("rho_readout (repgeom): {rho}");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let floor = parts.1 / cores as f64;
    println!(
        "unavoidable parts, single thread (profile_pga on the same files, each stage at its best of 3, draws of 5): {}",
        parts.0
    );
    println!(
        "floor on {cores} cores (their sum / {cores}): {floor:.2} s; as a user runs it: {:.2}x the floor",
        ours[1].1 / floor
    );
    if let Some(v) = theirs {
        let total = v["seconds"].as_f64().unwrap_or(f64::NAN);
        println!(
            "NumPy/SciPy: {total:.2} s (load + CCR-1 {}, readout SVD {}, readout rho {}, {} draws {}); rho_readout {}",
            v["load_ccr"],
            v["readout_svd"],
            v["readout_rho"],
            v["draws"],
            v["null_draws"],
            v["rho_readout"]
        );
        println!(
            "ratio, as a user runs it: {:.1}x; with cached bases: {:.1}x",
            total / ours[1].1,
            total / ours[2].1
        );
    }
    Ok(())
}

/// The unavoidable parts of one `repgeom pga` run on the bench files in `dir`, measured on one
/// thread by the release `profile_pga` example (loading, the readout subspace, the null bases,
/// CCR-1, the full-space ranking, 101 draws at their best time): its summary line and their sum
/// in seconds.
fn pga_parts(dir: &Path) -> anyhow::Result<(String, f64)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args([
            "build",
            "--release",
            "-p",
            "repgeom-metrics",
            "--example",
            "profile_pga",
        ])
        .status()
        .context("build the profile_pga example")?;
    if !status.success() {
        bail!("building profile_pga failed ({status})");
    }
    let out = std::process::Command::new(target_dir().join("release/examples/profile_pga"))
        .env("PGA_FILES", dir)
        .env("RAYON_NUM_THREADS", "1")
        .env("REPS", "5")
        .env("STAGE_REPS", "3")
        .output()
        .context("run profile_pga")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "profile_pga on {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let summary = text
        .lines()
        .find_map(|l| l.strip_prefix("parts of one run: "))
        .context("profile_pga printed no parts line")?;
    let sum = text
        .lines()
        .find_map(|l| l.strip_prefix("sum_s="))
        .and_then(|v| v.parse::<f64>().ok())
        .context("profile_pga printed no sum_s= line")?;
    Ok((summary.to_owned(), sum))
}

/// The value of column `name` in the first data row of a CSV table.
fn csv_field(csv: &str, name: &str) -> Option<String> {
    let mut lines = csv.lines();
    let col = lines.next()?.split(',').position(|c| c == name)?;
    lines.next()?.split(',').nth(col).map(str::to_owned)
}

/// A PGA workload's files, seeded: a layer with a rank-64 signal plus noise,
/// `h = z G + 0.5 ε` (`n × d`), and a Gaussian `W_U` (`4000 × d`), both `f32`. The standard
/// workload is `n = d = 2048`.
fn write_pga_workload(acts: &Path, wu: &Path, n: usize, d: usize) -> anyhow::Result<()> {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let (r, v) = (64, 4000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut normal =
        |len: usize| -> Vec<f32> { (0..len).map(|_| StandardNormal.sample(&mut rng)).collect() };
    let (z, g, noise) = (normal(n * r), normal(r * d), normal(n * d));
    let mut h = vec![0.0f32; n * d];
    for i in 0..n {
        let row = &mut h[i * d..(i + 1) * d];
        for (t, &zt) in z[i * r..(i + 1) * r].iter().enumerate() {
            for (x, &gv) in row.iter_mut().zip(&g[t * d..(t + 1) * d]) {
                *x += zt * gv;
            }
        }
        for (x, &e) in row.iter_mut().zip(&noise[i * d..(i + 1) * d]) {
            *x += 0.5 * e;
        }
    }
    repgeom_io::write_npy_f32(acts, &[n, d], &h)?;
    repgeom_io::write_npy_f32(wu, &[v, d], &normal(v * d))?;
    Ok(())
}

/// `cargo xtask bench scaling [--quick]`: time and peak memory of one PGA layer (k = 100,
/// CCR-1) against N (d = 2048) and against d (N = 2048), each size in a fresh process, with
/// the fitted growth exponents (least squares on log-log) of the engine; beside each size,
/// the release `repgeom pga` end to end on files of that size (`W_U` 4000 × d). The default uses 10 null draws
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
    let cli = build_release_cli()?;
    let exe = target_dir().join("release/examples/pga_scaling");
    let work = tempfile::tempdir().context("a directory for the workload files")?;
    let n_null = 10u64;
    // The command a user runs on files of that size: reading W_U (4000 × d) and the layer,
    // the readout subspace, the null bases, CCR-1 and the draws; wall time and, where
    // `/usr/bin/time` exists, peak memory.
    let end_to_end = |n: u64, d: u64| -> anyhow::Result<(f64, Option<f64>)> {
        let (acts, wu) = (work.path().join("acts.npy"), work.path().join("wu.npy"));
        write_pga_workload(&acts, &wu, n as usize, d as usize)?;
        let args = [
            "pga".to_owned(),
            "--quiet".into(),
            "--acts".into(),
            acts.to_string_lossy().into_owned(),
            "--readout".into(),
            wu.to_string_lossy().into_owned(),
            "-k".into(),
            "100".into(),
            "--ccr".into(),
            "1".into(),
            "--n-null".into(),
            n_null.to_string(),
        ];
        let timer = Path::new("/usr/bin/time");
        let t = Instant::now();
        let out = if timer.exists() {
            std::process::Command::new(timer)
                .args(["-f", "%M"])
                .arg(&cli)
                .args(&args)
                .output()
        } else {
            std::process::Command::new(&cli).args(&args).output()
        }
        .context("run repgeom pga")?;
        let secs = t.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!(
                "repgeom pga at N = {n}, d = {d} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let kib = timer
            .exists()
            .then(|| {
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next_back()
                    .and_then(|l| l.trim().parse::<f64>().ok())
            })
            .flatten();
        Ok((secs, kib.map(|k| k * 1024.0)))
    };
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
        let (cli_secs, cli_rss) = end_to_end(n, d)?;
        println!(
            "  N = {n:>6}  d = {d:>5}  engine {secs:>7.2} s, peak {:>7.1} MiB | repgeom pga end to end {cli_secs:>7.2} s, peak {}",
            rss / (1u64 << 20) as f64,
            cli_rss.map_or("-".to_owned(), |r| format!(
                "{:.1} MiB",
                r / (1u64 << 20) as f64
            )),
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

//! `cargo xtask bench calibrate`: the calibrated aggregate over a 12 × 12 layer table beside
//! `calibrated-similarity` 0.1.1 on the same arrays.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{build_release_cli, target_dir};
use crate::root;

/// The bench's script (data and the calibrated-similarity side).
const SCRIPT: &str = "fixtures/calibrate/time_calibrated_similarity.py";
/// Permutations of repgeom's runs (the target workload).
const N_PERM: usize = 1000;
/// Permutations of the calibrated-similarity side of the p-value check (the small workload).
const SMALL_PERMS: usize = 200;
/// The pair metrics of the target.
const METRICS: [&str; 2] = ["cka_linear", "mutual_knn"];

/// `cargo xtask bench calibrate [--perms K]`: the issue-32 target. Two 12-layer random
/// networks over the same N = 2000 inputs, d = 512 (the script's `make`), compared with the
/// calibrated maximum over all 12 × 12 layer pairs, 1000 permutations, for `cka_linear` and
/// `mutual_knn`:
///
/// - repgeom: `repgeom compare --metric M --n-perm 1000 --aggregate max` (release), end to end
///   (reading the files included), one metric per run;
/// - calibrated-similarity: `calibrate_layers(agg="max")` with the strongest sims its API
///   allows (see the script), run with K = `--perms` draws (default 3: at these sizes one of
///   its draws takes seconds) and extrapolated to 1000 as the observed table's time plus 1000
///   times the time per draw. Python is `$PYTHON` (default `python3`), which needs NumPy,
///   PyTorch and calibrated-similarity 0.1.1.
///
/// Then the p-values: on a small workload (N = 300, d = 64, 12 × 12, inputs sharing 2 of 64
/// coordinates, so the aggregates' p-values are not at their floors) repgeom with 1000
/// permutations and calibrated-similarity with 200; the difference against its permutation
/// standard error.
pub(crate) fn bench_calibrate(args: &[String]) -> anyhow::Result<()> {
    let perms: usize = match args {
        [] => 3,
        [flag, k] if flag == "--perms" => k.parse().context("--perms K")?,
        _ => bail!("usage: cargo xtask bench calibrate [--perms K]"),
    };
    let exe = build_release_cli()?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let base = target_dir().join("bench-calibrate");
    let (big, small) = (base.join("big"), base.join("small"));
    for (dir, make) in [
        (&big, &["--n", "2000", "--d", "512", "--shared", "8"][..]),
        (&small, &["--n", "300", "--d", "64", "--shared", "2"][..]),
    ] {
        std::fs::create_dir_all(dir)?;
        if !(dir.join("a.npy").exists() && dir.join("b.npy").exists()) {
            python_json(&python, "make", dir, make)?;
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    println!(
        "calibrate bench: 12 x 12 layers, N = 2000, d = 512, max over layer pairs, {N_PERM} permutations; {cores} cores, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut ours = Vec::new();
    for m in METRICS {
        let t = Instant::now();
        let agg = repgeom_max(&exe, &big, m, N_PERM)?;
        ours.push((t.elapsed().as_secs_f64(), agg));
    }
    let mut metric_args = Vec::new();
    for m in METRICS {
        metric_args.extend(["--metric", m]);
    }
    let perms_s = perms.to_string();
    let mut time_args = vec!["--perms", perms_s.as_str()];
    time_args.extend(&metric_args);
    let theirs = python_json(&python, "time", &big, &time_args)?;
    println!(
        "calibrated-similarity: torch {} on {} threads, {perms} draws timed and extrapolated",
        theirs["torch"], theirs["threads"]
    );
    println!(
        "{:<12} {:>12} {:>18} {:>8}   {:>10} {:>10}",
        "metric", "repgeom s", "calib.-sim. s", "ratio", "max (rg)", "max (cs)"
    );
    for (m, (s, agg)) in METRICS.iter().zip(&ours) {
        let t = &theirs[*m];
        let per = t["per_draw_s"].as_f64().unwrap_or(f64::NAN);
        let est = t["observed_table_s"].as_f64().unwrap_or(f64::NAN) + N_PERM as f64 * per;
        println!(
            "{m:<12} {s:>12.1} {est:>18.0} {:>7.0}x   {:>10.6} {:>10.6}",
            est / s,
            agg.value,
            t["max"].as_f64().unwrap_or(f64::NAN)
        );
        println!(
            "{:<12} (calibrated-similarity: {per:.2} s per draw, observed table {:.2} s)",
            "",
            t["observed_table_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "p-values of the max, small workload (N = 300, d = 64, 12 x 12): repgeom {N_PERM} permutations, calibrated-similarity {SMALL_PERMS}"
    );
    let small_perms = SMALL_PERMS.to_string();
    let mut args = vec!["--perms", small_perms.as_str()];
    args.extend(&metric_args);
    let theirs = python_json(&python, "time", &small, &args)?;
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "metric", "p (rg)", "p (cs)", "tau (rg)", "tau (cs)", "|dp|/se"
    );
    for m in METRICS {
        let ours = repgeom_max(&exe, &small, m, N_PERM)?;
        let t = &theirs[m];
        let p_cs = t["p_value"].as_f64().unwrap_or(f64::NAN);
        // The standard error of the difference of two independent permutation p-values.
        let p = 0.5 * (ours.p_value + p_cs);
        let se = (p * (1.0 - p) * (1.0 / N_PERM as f64 + 1.0 / SMALL_PERMS as f64)).sqrt();
        println!(
            "{m:<12} {:>10.4} {p_cs:>10.4} {:>10.6} {:>10.6} {:>8.2}",
            ours.p_value,
            ours.tau,
            t["tau"].as_f64().unwrap_or(f64::NAN),
            (ours.p_value - p_cs).abs() / se.max(1e-12)
        );
    }
    Ok(())
}

/// The `max` aggregate row of one `repgeom compare` run.
struct AggregateRow {
    value: f64,
    p_value: f64,
    tau: f64,
}

fn repgeom_max(
    exe: &Path,
    dir: &Path,
    metric: &str,
    n_perm: usize,
) -> anyhow::Result<AggregateRow> {
    let out = std::process::Command::new(exe)
        .args(["compare", "--quiet", "--format", "csv", "--a"])
        .arg(dir.join("a.npy"))
        .arg("--b")
        .arg(dir.join("b.npy"))
        .args([
            "--metric",
            metric,
            "--n-perm",
            &n_perm.to_string(),
            "--aggregate",
            "max",
        ])
        .output()
        .context("run repgeom compare")?;
    if !out.status.success() {
        bail!(
            "repgeom compare failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .context("empty compare output")?
        .split(',')
        .collect();
    let col = |name: &str| header.iter().position(|c| *c == name);
    let (agg, value, p, tau) = (
        col("aggregate").context("aggregate column")?,
        col("value").context("value column")?,
        col("p_value").context("p_value column")?,
        col("tau").context("tau column")?,
    );
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.get(agg) == Some(&"max") {
            let num = |i: usize| f.get(i).and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
            return Ok(AggregateRow {
                value: num(value),
                p_value: num(p),
                tau: num(tau),
            });
        }
    }
    bail!("no max aggregate row in repgeom compare's output")
}

/// Runs the bench script's `cmd` on `dir` and parses its last stdout line as JSON (`make`
/// prints nothing: `Null`).
fn python_json(
    python: &str,
    cmd: &str,
    dir: &Path,
    args: &[&str],
) -> anyhow::Result<serde_json::Value> {
    let out = std::process::Command::new(python)
        .current_dir(root())
        .arg(SCRIPT)
        .arg(cmd)
        .arg(dir)
        .args(args)
        .output()
        .with_context(|| format!("run {python} {SCRIPT}"))?;
    if !out.status.success() {
        bail!(
            "{SCRIPT} {cmd} failed (it needs NumPy, PyTorch and calibrated-similarity 0.1.1; set PYTHON to an interpreter that has them): {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next_back()
                .unwrap_or("")
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next_back() {
        Some(line) => Ok(serde_json::from_str(line)?),
        None => Ok(serde_json::Value::Null),
    }
}

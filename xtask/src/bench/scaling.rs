//! `cargo xtask bench scaling`: PGA time and peak memory against N and d, with growth exponents.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::build_release_cli;
use super::pga::write_pga_workload;

/// `cargo xtask bench scaling [--quick]`: time and peak memory of one PGA layer (k = 100,
/// CCR-1) against N (d = 2048) and against d (N = 2048), each size in a fresh process, with
/// the fitted growth exponents (least squares on log-log) of the engine; beside each size,
/// the release `repgeom pga` end to end on files of that size (`W_U` 4000 × d). The default uses 10 null draws
/// per size and reports the time scaled to 100 draws alongside; `--quick` stops at N = 4000.
pub(crate) fn scaling(args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let cli = build_release_cli()?;
    let exe = super::build_release_example("repgeom-metrics", "pga_scaling")?;
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

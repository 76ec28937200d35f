//! `cargo xtask bench pair`: the pair metrics and the spectrum null beside their NumPy references.

use anyhow::{Context as _, bail};

use super::criterion_dir;
use crate::root;

/// `cargo xtask bench pair`: the `pair` criterion bench of repgeom-metrics (the pair metrics
/// at N = 2000, d = 256 / 384, and the spectrum-matched null at N = 2000, d = 512, k = 50,
/// 100 draws), then, in the same run, the NumPy references on the same shapes
/// (`fixtures/pair/time_numpy.py`, `fixtures/pga/time_spectrum_numpy.py`), and one table of
/// seconds with the ratio.
pub(crate) fn bench_pair() -> anyhow::Result<()> {
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

//! `cargo xtask bench pga`: `repgeom pga` end to end on the standard workload beside NumPy/SciPy,
//! and the workload's files.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{build_release_cli, target_dir};
use crate::root;

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
pub(crate) fn bench_pga() -> anyhow::Result<()> {
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
    let exe = super::build_release_example("repgeom-metrics", "profile_pga")?;
    let out = std::process::Command::new(exe)
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
pub(crate) fn write_pga_workload(acts: &Path, wu: &Path, n: usize, d: usize) -> anyhow::Result<()> {
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

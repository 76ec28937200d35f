//! `repgeom sweep`: a real sweep process killed part-way and rerun ends with the same table as
//! an uninterrupted run; shards and merge.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MANIFEST: &str = r#"
title = "kill test (synthetic)"
pairs = [["synthetic-d64", "synthetic-d128"]]

[analysis]
n_null = 20
ccr = [1, 5]

[synthetic]
widths = [64, 128]
n_layers = 4
steps = [100, 1000, 10000]
n_points = 96
"#;

fn repgeom() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_repgeom"));
    c.args(["--quiet", "--threads", "1"]);
    c
}

fn sweep(manifest: &Path, out: &Path, extra: &[&str]) {
    let o = repgeom()
        .arg("sweep")
        .arg("--manifest")
        .arg(manifest)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "sweep failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn parts(out: &Path) -> usize {
    std::fs::read_dir(out.join("parts")).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                !n.starts_with('.') && n.ends_with(".json")
            })
            .count()
    })
}

fn planned(out: &Path) -> usize {
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("plan.json")).unwrap()).unwrap();
    plan["units"].as_array().unwrap().len()
}

#[test]
fn killed_sweep_resumes_to_the_same_table() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("study.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();

    let straight = tmp.path().join("straight");
    sweep(&manifest, &straight, &[]);
    let reference = std::fs::read(straight.join("results.csv")).unwrap();
    let total = planned(&straight);
    assert_eq!(parts(&straight), total);

    // Start a real sweep, wait for a few finished units, SIGKILL it mid-run.
    let killed = tmp.path().join("killed");
    let mut child = repgeom()
        .arg("sweep")
        .arg("--manifest")
        .arg(&manifest)
        .arg("--out")
        .arg(&killed)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while parts(&killed) < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no parts appeared"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "sweep ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done = parts(&killed);
    assert!(
        done < total,
        "the kill came too late: {done} of {total} units done"
    );
    assert!(!killed.join("results.csv").exists());

    // merge refuses the incomplete directory and names what is missing.
    let o = repgeom()
        .args(["sweep", "merge"])
        .arg(&killed)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing"));

    // Rerun: skips the finished units, computes the rest, same bytes.
    sweep(&manifest, &killed, &[]);
    assert_eq!(parts(&killed), total);
    assert!(
        std::fs::read(killed.join("results.csv")).unwrap() == reference,
        "resumed table differs"
    );
}

#[test]
fn shards_and_merge_give_the_same_table() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("study.toml");
    std::fs::write(&manifest, MANIFEST.replace("n_null = 20", "n_null = 5")).unwrap();
    let straight = tmp.path().join("straight");
    sweep(&manifest, &straight, &[]);
    let sharded = tmp.path().join("sharded");
    sweep(&manifest, &sharded, &["--shard", "0/2"]);
    assert!(
        !sharded.join("results.csv").exists(),
        "a shard does not merge"
    );
    // The second shard through SLURM's variables.
    let o = repgeom()
        .arg("sweep")
        .arg("--manifest")
        .arg(&manifest)
        .arg("--out")
        .arg(&sharded)
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = repgeom()
        .args(["sweep", "merge"])
        .arg(&sharded)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read(sharded.join("results.csv")).unwrap()
            == std::fs::read(straight.join("results.csv")).unwrap(),
        "sharded table differs"
    );
    let o = repgeom()
        .args(["sweep", "--dry-run", "--manifest"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("synthetic-d64__step100__L000__pga-ccr1"),
        "{text}"
    );
    assert!(text.contains("distance-rank correlations"), "{text}");
}

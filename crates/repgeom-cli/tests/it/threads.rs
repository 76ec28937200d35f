//! The same bits at any thread count: every output column of `pga` (CCR sweep, both nulls,
//! captured variance), `metrics`, `compare` and `extract` (f32 and bf16 weights, the loss, the
//! covariance spectra), and the study's results, at 1, 2, 3 and 16 threads, on inputs large
//! enough (`N · d ≥ 256²`) that faer would parallelise a product on its own.

use std::path::Path;
use std::process::Command;

use crate::root;

/// Runs `repgeom --quiet --threads T ARGS` and returns stdout, failing on a non-zero exit.
fn at(threads: usize, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_repgeom"))
        .args(["--quiet", "--threads", &threads.to_string()])
        .args(args)
        .current_dir(root())
        .output()
        .expect("run repgeom");
    assert!(
        out.status.success(),
        "threads {threads}, {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `run(threads)` gives the same output at 2, 3 and 16 threads as at 1.
fn check(what: &str, run: &dyn Fn(usize) -> String) {
    let one = run(1);
    assert!(!one.trim().is_empty(), "{what}: no output");
    for t in [2, 3, 16] {
        assert!(
            run(t) == one,
            "{what}: output at {t} threads differs from 1 thread"
        );
    }
}

/// Two models' activations (`L × N × d`) and readouts, written as `.npy`: smooth, full-rank,
/// deterministic values, the second model a rotation-and-noise of the first.
fn inputs(dir: &Path, n: usize, d: usize, layers: usize) {
    let val = |m: usize, l: usize, i: usize, j: usize| -> f32 {
        let x = ((i * 37 + j * 11 + l * 5 + m * 3) % 97) as f32 / 97.0 - 0.5;
        x + 0.3 * ((i as f32) * 0.013 + (j as f32) * (1.0 + l as f32) * 0.7 + m as f32).sin()
    };
    for m in 0..2 {
        let data: Vec<f32> = (0..layers)
            .flat_map(|l| (0..n).flat_map(move |i| (0..d).map(move |j| val(m, l, i, j))))
            .collect();
        repgeom_io::write_npy_f32(&dir.join(format!("acts{m}.npy")), &[layers, n, d], &data)
            .unwrap();
        let v = 300;
        let w: Vec<f32> = (0..v)
            .flat_map(|i| (0..d).map(move |j| ((i * 13 + j * 7 + m) as f32 * 0.017).sin()))
            .collect();
        repgeom_io::write_npy_f32(&dir.join(format!("wu{m}.npy")), &[v, d], &w).unwrap();
    }
}

#[test]
fn every_command_gives_the_same_bits_at_1_2_3_and_16_threads() {
    let tmp = tempfile::tempdir().unwrap();
    // Two shapes above faer's threshold: a 70M-like width and a narrow, long one.
    for (n, d) in [(520, 128), (1100, 64)] {
        let dir = tmp.path().join(format!("{n}x{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        inputs(&dir, n, d, 3);
        let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
        let (a, b, wa, wb) = (p("acts0.npy"), p("acts1.npy"), p("wu0.npy"), p("wu1.npy"));
        for null in ["haar", "spectrum"] {
            check(&format!("pga {n}x{d} {null}"), &|t| {
                at(
                    t,
                    &[
                        "pga",
                        "--acts",
                        &a,
                        "--readout",
                        &wa,
                        "-k",
                        "8",
                        "--n-null",
                        "20",
                        "--ccr",
                        "0,1,2",
                        "--null",
                        null,
                        "--format",
                        "json",
                    ],
                )
            });
        }
        check(&format!("metrics {n}x{d}"), &|t| {
            at(
                t,
                &[
                    "metrics",
                    "--acts",
                    &a,
                    "--readout",
                    &wa,
                    "-k",
                    "8",
                    "--n-null",
                    "10",
                    "--all",
                    "--format",
                    "json",
                ],
            )
        });
        check(&format!("compare {n}x{d}"), &|t| {
            at(
                t,
                &[
                    "compare",
                    "--a",
                    &a,
                    "--b",
                    &b,
                    "--readout-a",
                    &wa,
                    "--readout-b",
                    &wb,
                    "-k",
                    "8",
                    "--n-null",
                    "10",
                    "--n-perm",
                    "20",
                    "--aggregate",
                    "max",
                    "--format",
                    "json",
                ],
            )
        });
    }
    // f32 weights; bf16 weights (widened on use in parallel chunks) with the loss's tiles
    // (the loss is in the file's metadata); the same at `--dtype stored` (bf16 products: AMX
    // tiles on a CPU that has them)
    let bf16 = "fixtures/extract/gptneox_serial_bf16";
    for (model, extra) in [
        ("fixtures/extract/gptneox_parallel", &[][..]),
        (bf16, &["--loss"][..]),
        (bf16, &["--loss", "--dtype", "stored"][..]),
    ] {
        check(&format!("extract {model} {extra:?}"), &|t| {
            let out = tmp.path().join(format!("x{t}.safetensors"));
            let mut args = vec![
                "extract",
                "--model",
                model,
                "--text",
                "fixtures/study/corpus.txt",
                "--n-points",
                "40",
                "--seq-len",
                "16",
                "--out",
                out.to_str().unwrap(),
            ];
            args.extend_from_slice(extra);
            at(t, &args);
            let bytes = std::fs::read(&out).unwrap();
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        });
    }
    // the covariance spectra over every token (two decompositions side by side)
    check("extract bf16 --spectra all", &|t| {
        let out = tmp.path().join(format!("spectra_{t}.json"));
        at(
            t,
            &[
                "extract",
                "--model",
                bf16,
                "--text",
                "fixtures/study/corpus.txt",
                "--seq-len",
                "16",
                "--spectra",
                "all",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        std::fs::read_to_string(&out).unwrap()
    });
}

/// The study: a synthetic sweep with cross-model pairs and a calibrated aggregate, its
/// results table the same bytes at any thread count. Widths 256 and 320 over 300 points
/// put every layer above faer's threshold.
#[test]
fn the_study_gives_the_same_table_at_1_3_and_16_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("study.toml");
    std::fs::write(
        &manifest,
        r#"
title = "threads (synthetic)"
pairs = [["synthetic-d256", "synthetic-d320"]]

[analysis]
n_null = 10
ccr = [1, 2]
cross_n_perm = 10
cross_aggregate = ["max"]

[synthetic]
widths = [256, 320]
n_layers = 3
steps = [1000]
n_points = 300
"#,
    )
    .unwrap();
    let run = |t: usize| {
        let out = tmp.path().join(format!("t{t}"));
        at(
            t,
            &[
                "sweep",
                "--manifest",
                manifest.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        std::fs::read_to_string(out.join("results.csv")).unwrap()
    };
    let one = run(1);
    for t in [3, 16] {
        assert!(
            run(t) == one,
            "the study's results differ between 1 and {t} threads"
        );
    }
}

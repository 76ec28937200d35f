//! `repgeom extract`: batched output is the same at any thread count.

use std::process::Command;

use crate::root;

/// Runs `repgeom extract` on a fixture with `threads` worker threads (both the CLI pool and
/// candle's `RAYON_NUM_THREADS`) and returns the written file's bytes.
fn check_extract_threads(threads: &str, batch: &str, dir: &std::path::Path) -> Vec<u8> {
    let text = dir.join("corpus.txt");
    let line =
        "The quick brown fox jumps over the lazy dog. A language model predicts the next token.\n";
    std::fs::write(&text, line.repeat(12)).unwrap();
    let out = dir.join(format!("acts-{threads}-{batch}.safetensors"));
    let status = Command::new(env!("CARGO_BIN_EXE_repgeom"))
        .env("RAYON_NUM_THREADS", threads)
        .args(["--quiet", "--threads", threads, "extract", "--model"])
        .arg(root().join("fixtures/extract/gemma2_softcap_window"))
        .arg("--text")
        .arg(&text)
        .args([
            "--seq-len",
            "16",
            "--n-points",
            "40",
            "--loss",
            "--batch-size",
            batch,
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run repgeom");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    std::fs::read(&out).unwrap()
}

#[test]
fn extract_output_does_not_depend_on_the_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let one = check_extract_threads("1", "4", tmp.path());
    let two = check_extract_threads("2", "4", tmp.path());
    assert!(one == two, "1 and 2 threads wrote different files");
}

#[test]
fn extract_refuses_a_zero_batch_size() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("acts.safetensors");
    let run = crate::repgeom(&[
        "extract",
        "--model",
        "fixtures/extract/gptneox_parallel",
        "--text",
        "README.md",
        "--batch-size",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("batch_size"), "{}", run.stderr);
    assert!(!out.exists(), "no output on error");
}

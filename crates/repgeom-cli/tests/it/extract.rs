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

/// `repgeom extract --points POINTS` on `model` (a fixture), `n` points of the word fixture
/// text (`--seq-len 40 --seed 5`).
fn extract_points(
    model: &str,
    points: &str,
    n: &str,
    extra: &[&str],
    out: &std::path::Path,
) -> crate::Run {
    let mut args = vec![
        "extract",
        "--model",
        model,
        "--text",
        "fixtures/extract/words/text.txt",
        "--points",
        points,
        "--n-points",
        n,
        "--seq-len",
        "40",
        "--seed",
        "5",
    ];
    args.extend(extra);
    args.extend(["--out", out.to_str().unwrap()]);
    crate::repgeom(&args)
}

/// [`extract_points`] with word points.
fn extract_words(model: &str, n: &str, extra: &[&str], out: &std::path::Path) -> crate::Run {
    extract_points(model, "words", n, extra, out)
}

/// `repgeom compare --metric cka_linear` of two points files into `out`.
fn compare_cka(a: &std::path::Path, b: &std::path::Path, out: &std::path::Path) -> crate::Run {
    crate::repgeom(&[
        "compare",
        "--a",
        a.to_str().unwrap(),
        "--b",
        b.to_str().unwrap(),
        "--metric",
        "cka_linear",
        "--out",
        out.to_str().unwrap(),
    ])
}

/// Word points of two models with different tokenizers hold the same points (their
/// `positions` are the words' characters), so `compare` takes the pair; a token-point file
/// against a word-point file is refused, naming both files and both designs, nothing written.
#[test]
fn word_points_of_different_tokenizers_compare_and_mixed_designs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("gpt2-words.safetensors");
    let b = tmp.path().join("llama-words.safetensors");
    for (model, out) in [
        ("fixtures/extract/gpt2_tied", &a),
        ("fixtures/extract/words/llama_metaspace", &b),
    ] {
        let run = extract_words(model, "20", &["--word-pool", "mean"], out);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let meta_a = repgeom_io::read_safetensors_metadata(&a).unwrap();
    let meta_b = repgeom_io::read_safetensors_metadata(&b).unwrap();
    assert_eq!(meta_a["pool"], "words");
    assert_eq!(meta_a["word_pool"], "mean");
    assert_eq!(meta_a["positions"], meta_b["positions"]);
    assert_ne!(
        meta_a["token_ids"], meta_b["token_ids"],
        "different tokenizers"
    );
    let table = tmp.path().join("cmp.csv");
    let run = compare_cka(&a, &b, &table);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(table.is_file());

    // the same model's token points against its word points: refused by design
    let tokens = tmp.path().join("gpt2-tokens.safetensors");
    let run = extract_points("fixtures/extract/gpt2_tied", "tokens", "20", &[], &tokens);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let refused = tmp.path().join("refused.csv");
    let run = compare_cka(&tokens, &a, &refused);
    assert_ne!(run.code, 0);
    for f in [
        "gpt2-tokens.safetensors",
        "gpt2-words.safetensors",
        "design tokens",
        "design words (mean over tokens)",
    ] {
        assert!(run.stderr.contains(f), "{f:?} not in {}", run.stderr);
    }
    assert!(!refused.exists(), "nothing written on error");

    // token points of two tokenizers: refused (not the same inputs), naming the remedy
    let other = tmp.path().join("llama-tokens.safetensors");
    let run = extract_points(
        "fixtures/extract/words/llama_metaspace",
        "tokens",
        "20",
        &[],
        &other,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = compare_cka(&tokens, &other, &refused);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("use points = words"), "{}", run.stderr);
    assert!(!refused.exists(), "nothing written on error");
}

/// Bad word-point requests: more words than the text has, and word points mixed with line
/// means or a word pool without word points; each an error naming the problem, no file.
#[test]
fn word_point_errors_name_the_mismatch_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("w.safetensors");
    let run = extract_words("fixtures/extract/gpt2_tied", "5000", &[], &out);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("n_points = 5000") && run.stderr.contains("words"),
        "{}",
        run.stderr
    );
    let run = extract_words("fixtures/extract/gpt2_tied", "5", &["--pool", "mean"], &out);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("pool = mean makes one point per line"),
        "{}",
        run.stderr
    );
    let run = extract_words(
        "fixtures/extract/gpt2_tied",
        "5",
        &["--word-pool", "first"],
        &out,
    );
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("last, mean"), "{}", run.stderr);
    assert!(!out.exists(), "nothing written on error");
}

/// An output folder that does not exist: one error naming the file, the OS's reason said once.
#[test]
fn an_output_in_a_missing_folder_is_named_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("missing/points.safetensors");
    let run = crate::repgeom(&[
        "extract",
        "--model",
        "fixtures/extract/gpt2_tied",
        "--text",
        "fixtures/extract/words/text.txt",
        "--n-points",
        "8",
        "--seq-len",
        "40",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("missing/points.safetensors"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        run.stderr
    );
}

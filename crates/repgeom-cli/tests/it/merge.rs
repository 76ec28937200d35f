//! `repgeom merge`: a corpus split in shards (`extract --shard I/N --save-accumulators`) and
//! merged equals one pass over the whole text, for the covariance (spectral metrics) and for
//! CKA; files that do not measure the same thing, and files that are not accumulators, are
//! refused before anything is written.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{repgeom, root};

/// Shards and one pass agree to this, relative to the value (the sums are exact; the merge
/// re-expresses them about one shift, rounding only).
const MERGE_TOL: f64 = 1e-12;

const MODEL: &str = "fixtures/extract/gptneox_parallel";

/// A text of a few thousand tokens in a temporary folder.
fn corpus(dir: &Path) -> String {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let path = dir.join("corpus.txt");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `(metric, variant, layer) → value` of a table's rows with the most tokens.
fn finals(csv: &Path) -> BTreeMap<(String, String, String), f64> {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (m, v, l, x, t) = (
        col("metric"),
        col("variant"),
        col("layer"),
        col("value"),
        col("n_tokens"),
    );
    let mut best: BTreeMap<(String, String, String), (f64, f64)> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let key = (f[m].to_owned(), f[v].to_owned(), f[l].to_owned());
        let (tokens, value): (f64, f64) = (f[t].parse().unwrap(), f[x].parse().unwrap());
        let e = best.entry(key).or_insert((tokens, value));
        if tokens >= e.0 {
            *e = (tokens, value);
        }
    }
    best.into_iter().map(|(k, (_, v))| (k, v)).collect()
}

fn check_equal(merged: &Path, whole: &Path) {
    let (a, b) = (finals(merged), finals(whole));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, &x) in &a {
        let y = b[k];
        assert!(
            (x - y).abs() <= MERGE_TOL * y.abs().max(1.0),
            "{k:?}: merged {x}, one pass {y}"
        );
    }
}

#[test]
fn shards_merged_equal_one_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let text = corpus(tmp.path());
    let out = |name: &str| tmp.path().join(name).display().to_string();
    for (flag, spec, file) in [
        ("--spectra", "0,2", "covariance-2"),
        ("--cka-pairs", "0:2", "cka-0-2"),
    ] {
        let whole = out(&format!("whole{file}.csv"));
        let r = repgeom(&[
            "extract",
            "--model",
            MODEL,
            "--text",
            &text,
            "--seq-len",
            "32",
            flag,
            spec,
            "--out",
            &whole,
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let mut parts = Vec::new();
        for i in 0..3 {
            let dir = out(&format!("shard{i}"));
            let shard = format!("{i}/3");
            let table = out(&format!("shard{i}-{file}.csv"));
            let r = repgeom(&[
                "extract",
                "--model",
                MODEL,
                "--text",
                &text,
                "--seq-len",
                "32",
                flag,
                spec,
                "--shard",
                &shard,
                "--save-accumulators",
                &dir,
                "--out",
                &table,
            ]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            parts.push(format!("{dir}/{file}.safetensors"));
        }
        let merged = out(&format!("merged-{file}.csv"));
        let saved = out(&format!("merged-{file}.safetensors"));
        let mut args = vec!["merge"];
        args.extend(parts.iter().map(String::as_str));
        args.extend(["--out", merged.as_str(), "--save", saved.as_str()]);
        let r = repgeom(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            r.stdout.contains("merged 3 accumulator files"),
            "{}",
            r.stdout
        );
        if flag == "--spectra" {
            // The one-pass table has layers 0 and 2; compare layer 2 only.
            let whole_2 = out("whole-layer2.csv");
            let text = std::fs::read_to_string(&whole).unwrap();
            let kept: Vec<&str> = text
                .lines()
                .enumerate()
                .filter(|(n, l)| *n == 0 || l.split(',').nth(1) == Some("2"))
                .map(|(_, l)| l)
                .collect();
            std::fs::write(&whole_2, kept.join("\n")).unwrap();
            check_equal(Path::new(&merged), Path::new(&whole_2));
        } else {
            check_equal(Path::new(&merged), Path::new(&whole));
        }
        // The merged accumulator merges again: with nothing else, the same values.
        let again = out(&format!("again-{file}.csv"));
        let r = repgeom(&["merge", &saved, "--out", &again]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        check_equal(Path::new(&again), Path::new(&merged));
    }
}

#[test]
fn what_does_not_merge_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let text = corpus(tmp.path());
    let dir = tmp.path().join("acc").display().to_string();
    let table = tmp.path().join("t.csv").display().to_string();
    let r = repgeom(&[
        "extract",
        "--model",
        MODEL,
        "--text",
        &text,
        "--seq-len",
        "32",
        "--spectra",
        "0,2",
        "--max-tokens",
        "500",
        "--save-accumulators",
        &dir,
        "--out",
        &table,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (l0, l2) = (
        format!("{dir}/covariance-0.safetensors"),
        format!("{dir}/covariance-2.safetensors"),
    );
    let merged = tmp.path().join("merged.csv");
    let m = merged.display().to_string();
    let refused = |args: &[&str], want: &str| {
        let r = repgeom(args);
        assert_ne!(r.code, 0);
        assert!(r.stderr.contains(want), "{}", r.stderr);
        assert!(!merged.exists(), "nothing written");
    };
    // Two accumulators of one run are reported together; a shard short of one is refused.
    let shard = tmp.path().join("shard").display().to_string();
    let other = |extra: &[&str], dir: &str| {
        let mut args = vec![
            "extract",
            "--model",
            MODEL,
            "--text",
            &text,
            "--spectra",
            "0",
            "--max-tokens",
            "500",
            "--save-accumulators",
            dir,
            "--out",
            &table,
        ];
        args.extend(extra);
        let r = repgeom(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        format!("{dir}/covariance-0.safetensors")
    };
    let half = other(&["--seq-len", "32", "--shard", "0/2"], &shard);
    refused(
        &["merge", &dir, &shard, "--out", &m],
        "covariance of hidden states 2 is in 1 of the files but another accumulator is in 2",
    );
    refused(
        &["merge", &l0, &half, &l0, "--out", &m],
        "are the same file: a shard given twice would be counted twice",
    );
    let copy = tmp.path().join("copy.safetensors");
    std::fs::copy(&l0, &copy).unwrap();
    refused(
        &["merge", &l0, &copy.display().to_string(), "--out", &m],
        "hold the same sums: a shard given twice",
    );
    let seq16 = tmp.path().join("seq16").display().to_string();
    let short = other(&["--seq-len", "16"], &seq16);
    refused(&["merge", &l0, &short, "--out", &m], "settings differ");
    let gpt2 = tmp.path().join("gpt2").display().to_string();
    let r = repgeom(&[
        "extract",
        "--model",
        "fixtures/extract/gpt2_tied",
        "--text",
        &text,
        "--seq-len",
        "32",
        "--spectra",
        "0",
        "--max-tokens",
        "500",
        "--save-accumulators",
        &gpt2,
        "--out",
        &table,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    refused(
        &[
            "merge",
            &l0,
            &format!("{gpt2}/covariance-0.safetensors"),
            "--out",
            &m,
        ],
        "model differ",
    );
    let r = repgeom(&["merge", &l0, &l2, "--out", &m]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("merged 2 accumulator files (2 accumulators of ")
            && r.stdout
                .contains("  covariance of hidden states 0: 1 files")
            && r.stdout
                .contains("  covariance of hidden states 2: 1 files"),
        "{}",
        r.stdout
    );
    std::fs::remove_file(&merged).unwrap();
    // A safetensors file that is not an accumulator: the activations of a plain extract.
    let acts = tmp.path().join("acts.safetensors").display().to_string();
    let r = repgeom(&[
        "extract",
        "--model",
        MODEL,
        "--text",
        &text,
        "--seq-len",
        "32",
        "--n-points",
        "40",
        "--out",
        &acts,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    refused(
        &["merge", &l0, &acts, "--out", &m],
        "not a repgeom accumulator file",
    );
    // A truncated accumulator.
    let bytes = std::fs::read(&l0).unwrap();
    let cut = tmp.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    refused(
        &["merge", &l0, &cut.display().to_string(), "--out", &m],
        "cut.safetensors",
    );
    // Sampled points take none of the streaming flags.
    let r = repgeom(&[
        "extract", "--model", MODEL, "--text", &text, "--shard", "0/2", "--out", &acts,
    ]);
    assert!(
        r.code != 0
            && r.stderr
                .contains("--shard applies to --cka-pairs and --spectra"),
        "{}",
        r.stderr
    );
}

/// CKA between two models (`--other-model`, one tokenizer, widths 16 and 64) over every token,
/// split in two shards and merged, equals one pass; the table names both models, and shards of
/// another pair of models are refused.
#[test]
fn a_pair_of_models_shards_and_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let text = corpus(tmp.path());
    let out = |name: &str| tmp.path().join(name).display().to_string();
    let (a, b) = (
        "fixtures/trained/neox-d16/step600",
        "fixtures/trained/neox-d64/step600",
    );
    let run = |other: &str, extra: &[&str], table: &str| {
        let mut args = vec![
            "extract",
            "--model",
            a,
            "--other-model",
            other,
            "--text",
            &text,
            "--seq-len",
            "32",
            "--cka-pairs",
            "0:0,2:4",
            "--out",
            table,
        ];
        args.extend(extra);
        let r = repgeom(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let whole = out("whole.csv");
    let said = run(b, &[], &whole);
    // Two folders named step600: labelled by the paths as given.
    assert!(said.contains(&format!("from {a} and {b}")), "{said}");
    let header = std::fs::read_to_string(&whole).unwrap();
    assert!(
        header.starts_with("model,layer,other_model,other_layer,metric,"),
        "{header}"
    );
    let mut dirs = Vec::new();
    for i in 0..2 {
        let dir = out(&format!("shard{i}"));
        let shard = format!("{i}/2");
        run(
            b,
            &["--shard", &shard, "--save-accumulators", &dir],
            &out(&format!("shard{i}.csv")),
        );
        dirs.push(dir);
    }
    let merged = out("merged.csv");
    let r = repgeom(&["merge", &dirs[0], &dirs[1], "--out", &merged]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(finals(Path::new(&merged)).len(), 4); // 2 pairs x (biased, debiased)
    check_equal(Path::new(&merged), Path::new(&whole));
    let text_merged = std::fs::read_to_string(&merged).unwrap();
    assert!(
        text_merged
            .lines()
            .skip(1)
            .all(|l| l.starts_with(&format!("{a},")) && l.split(',').nth(2) == Some(b)),
        "{text_merged}"
    );
    // Another pair of models: refused.
    let other_dir = out("other");
    run(
        "fixtures/trained/neox-d32/step600",
        &["--shard", "1/2", "--save-accumulators", &other_dir],
        &out("other.csv"),
    );
    let r = repgeom(&[
        "merge",
        &format!("{}/cka-0-0.safetensors", dirs[0]),
        &format!("{other_dir}/cka-0-0.safetensors"),
        "--out",
        &out("refused.csv"),
    ]);
    assert!(
        r.code != 0 && r.stderr.contains("other model differ"),
        "{}",
        r.stderr
    );
    assert!(!tmp.path().join("refused.csv").exists());
}

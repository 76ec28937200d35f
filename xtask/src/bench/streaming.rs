//! `cargo xtask bench streaming`: peak memory of `repgeom extract --cka-pairs` at 100 k and
//! 1 M tokens of a 512-wide layer pair (memory must not grow with the token count).

use std::path::Path;

use anyhow::{Context as _, bail};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use super::build_release_cli;
use crate::root;

/// Width of the bench's model: the 512-wide layer pair (Pythia-70M's width).
const WIDTH: usize = 512;
/// Transformer blocks of the bench's model (hidden states 0, 1, 2).
const BLOCKS: usize = 2;

/// `cargo xtask bench streaming`: writes a random GPT-NeoX checkpoint of width 512 (2 blocks,
/// the byte-level BPE tokenizer of the `gptneox_parallel` fixture) and a seeded text, then runs
/// the release `repgeom extract --cka-pairs 0:2` over texts of 100,000 and 1,000,000 tokens
/// (`--max-tokens` stops at exactly that many) and prints
/// each run's tokens, time, peak resident memory (the CLI's own `VmHWM`) and CKA values.
pub(crate) fn bench_streaming(args: &[String]) -> anyhow::Result<()> {
    let exe = build_release_cli()?;
    let dir = tempfile::tempdir()?;
    if args.first().map(String::as_str) == Some("70m") {
        return bench_70m(&exe, dir.path());
    }
    let model = dir.path().join("model");
    write_checkpoint(&model, BLOCKS, None)?;
    println!(
        "streaming CKA bench: random GPT-NeoX, d = {WIDTH}, {BLOCKS} blocks, seq_len 256, hidden states 0:2"
    );
    println!(
        "{:>10} {:>9} {:>14} {:>12} {:>12}",
        "tokens", "seconds", "peak RSS MiB", "biased", "debiased"
    );
    for tokens in [100_000usize, 1_000_000] {
        // A text of about the size asked (every word is a token or more): the text is read,
        // tokenised and run in blocks, so none of it should grow with its length.
        let text = dir.path().join(format!("corpus-{tokens}.txt"));
        write_text(&text, tokens)?;
        let out = dir.path().join(format!("cka-{tokens}.csv"));
        let tokens_arg = tokens.to_string();
        let (secs, rss) = run_extract(
            &exe,
            &model,
            &text,
            &["--cka-pairs", "0:2", "--max-tokens", &tokens_arg],
            &out,
        )?;
        let table = std::fs::read_to_string(&out)?;
        let value = |variant: &str| -> String {
            table
                .lines()
                .find(|l| l.contains(&format!(",{variant},")))
                .and_then(|l| l.split(',').nth(5))
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "{tokens:>10} {secs:>9} {rss:>14} {:>12} {:>12}",
            value("biased"),
            value("debiased")
        );
    }
    bench_spectra(&exe, &model, dir.path())?;
    println!("command: cargo xtask bench streaming");
    Ok(())
}

/// Tokens of the spectra comparison: enough for many batches, few enough that the reference
/// run, which keeps every token's hidden states, fits in memory.
const SPECTRA_TOKENS: usize = 100_000;

/// `--spectra all` (the covariance of every hidden state, its metrics at 2^10, 2^11, ...
/// tokens) against the same tokens run without accumulators (`--n-points` of every position
/// of the same sequences, which keeps the hidden states instead) and against the study's point
/// extraction (2,048 points): time and peak resident memory side by side.
fn bench_spectra(exe: &Path, model: &Path, dir: &Path) -> anyhow::Result<()> {
    let text = dir.join("corpus-spectra.txt");
    write_text(&text, SPECTRA_TOKENS)?;
    let tokens = SPECTRA_TOKENS.to_string();
    let runs: [(&str, Vec<&str>); 3] = [
        (
            "spectra all (covariances)",
            vec!["--spectra", "all", "--max-tokens", &tokens],
        ),
        (
            "same tokens, no accumulators",
            vec!["--n-points", &tokens, "--points-per-sequence", "255"],
        ),
        ("point extraction, 2048 points", vec!["--n-points", "2048"]),
    ];
    println!(
        "\nspectra bench: the same model, {SPECTRA_TOKENS} tokens, seq_len 256 (hidden states 0, 1, 2)"
    );
    println!("{:>32} {:>9} {:>14}", "run", "seconds", "peak RSS MiB");
    for (i, (name, flags)) in runs.iter().enumerate() {
        let ext = if i == 0 { "csv" } else { "safetensors" };
        let out = dir.join(format!("spectra-{i}.{ext}"));
        let (secs, rss) = run_extract(exe, model, &text, flags, &out)?;
        println!("{name:>32} {secs:>9} {rss:>14}");
    }
    Ok(())
}

/// Runs the release `repgeom extract` on `model` and `text` with `flags`, writing `out`; the
/// run's seconds and peak resident memory (MiB) as its report line gives them.
fn run_extract(
    exe: &Path,
    model: &Path,
    text: &Path,
    flags: &[&str],
    out: &Path,
) -> anyhow::Result<(String, String)> {
    let run = std::process::Command::new(exe)
        .args(["--quiet", "extract", "--model"])
        .arg(model)
        .arg("--text")
        .arg(text)
        .args(flags)
        .arg("--out")
        .arg(out)
        .output()
        .context("run repgeom extract")?;
    if !run.status.success() {
        bail!(
            "repgeom extract failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let report = String::from_utf8_lossy(&run.stdout).to_string();
    Ok(report_fields(&report))
}

/// The seconds and peak resident memory (MiB) of a `ran N tokens in S s (...), peak resident
/// memory M MiB` report line.
fn report_fields(report: &str) -> (String, String) {
    let field = |after: &str, end: &str| -> Option<String> {
        let rest = &report[report.find(after)? + after.len()..];
        Some(rest[..rest.find(end)?].trim().to_string())
    };
    (
        field(" in ", " s (").unwrap_or_else(|| "?".into()),
        field("peak resident memory ", " MiB").unwrap_or_else(|| "?".into()),
    )
}

/// Tokens of the 70M-shaped run: the target corpus.
const TARGET_TOKENS: usize = 1_000_000;

/// `cargo xtask bench streaming 70m`: a random Pythia-70M-shaped checkpoint (d = 512, 6 blocks,
/// vocabulary 50304) over 1,000,000 tokens: `--spectra all` (the covariance of all 7 hidden
/// states) against the same streaming pass with nothing accumulated (the `stream_baseline`
/// example of repgeom-extract, built in release) and against the study's point extraction
/// (2,048 points); seconds and peak resident memory side by side, then the ratios.
fn bench_70m(exe: &Path, dir: &Path) -> anyhow::Result<()> {
    let baseline = super::build_release_example("repgeom-extract", "stream_baseline")?;
    let model = dir.join("model-70m");
    write_checkpoint(&model, 6, Some(50_304))?;
    let text = dir.join("corpus-1m.txt");
    write_text(&text, TARGET_TOKENS)?;
    let tokens = TARGET_TOKENS.to_string();
    println!(
        "70M-shaped bench: random GPT-NeoX, d = {WIDTH}, 6 blocks, vocabulary 50304, seq_len 256, batch 8, {TARGET_TOKENS} tokens"
    );
    println!("{:>40} {:>9} {:>14}", "run", "seconds", "peak RSS MiB");
    let out = dir.join("spectra-70m.csv");
    let (s_secs, s_rss) = run_extract(
        exe,
        &model,
        &text,
        &["--spectra", "all", "--max-tokens", &tokens],
        &out,
    )?;
    println!(
        "{:>40} {s_secs:>9} {s_rss:>14}",
        "spectra all (7 covariances)"
    );
    let run = std::process::Command::new(&baseline)
        .arg(&model)
        .arg(&text)
        .arg(&tokens)
        .output()
        .context("run stream_baseline")?;
    if !run.status.success() {
        bail!(
            "stream_baseline failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let report = String::from_utf8_lossy(&run.stdout).to_string();
    let (b_secs, b_rss) = report_fields(&report);
    println!(
        "{:>40} {b_secs:>9} {b_rss:>14}",
        "same pass, nothing accumulated"
    );
    let out = dir.join("points-70m.safetensors");
    let (p_secs, p_rss) = run_extract(exe, &model, &text, &["--n-points", "2048"], &out)?;
    println!(
        "{:>40} {p_secs:>9} {p_rss:>14}",
        "point extraction, 2048 points"
    );
    let ratio = |a: &str, b: &str| -> String {
        match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(a), Ok(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "?".into(),
        }
    };
    println!(
        "time: spectra / nothing accumulated = {} (target <= 1.3); peak memory: spectra / point extraction = {} (target <= 1.2)",
        ratio(&s_secs, &b_secs),
        ratio(&s_rss, &p_rss)
    );
    println!("command: cargo xtask bench streaming 70m");
    Ok(())
}

/// A GPT-NeoX checkpoint of width [`WIDTH`] and `blocks` blocks with N(0, 0.02²) weights (unit
/// layer norms), the fixture's config and tokenizer otherwise (`vocab`: a larger embedding,
/// e.g. Pythia's 50304 rows; the fixture's tokenizer uses the first ones).
pub(super) fn write_checkpoint(
    dir: &Path,
    blocks: usize,
    vocab: Option<usize>,
) -> anyhow::Result<()> {
    let fixture = root().join("fixtures/extract/gptneox_parallel");
    std::fs::create_dir_all(dir)?;
    std::fs::copy(fixture.join("tokenizer.json"), dir.join("tokenizer.json"))?;
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.join("config.json"))?)?;
    let vocab = match vocab {
        Some(v) => v,
        None => config["vocab_size"].as_u64().context("vocab_size")? as usize,
    };
    config["vocab_size"] = vocab.into();
    config["hidden_size"] = WIDTH.into();
    config["intermediate_size"] = (4 * WIDTH).into();
    config["num_attention_heads"] = 8.into();
    config["num_hidden_layers"] = blocks.into();
    config["max_position_embeddings"] = 2048.into();
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let normal = Normal::new(0.0f32, 0.02)?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let mut put = |name: String, shape: Vec<usize>, fill: Option<f32>| {
        let n = shape.iter().product();
        let data = match fill {
            Some(v) => vec![v; n],
            None => (0..n).map(|_| normal.sample(&mut rng)).collect(),
        };
        tensors.push((name, shape, data));
    };
    let d = WIDTH;
    put("gpt_neox.embed_in.weight".into(), vec![vocab, d], None);
    for i in 0..blocks {
        let p = format!("gpt_neox.layers.{i}");
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            put(format!("{p}.{norm}.weight"), vec![d], Some(1.0));
            put(format!("{p}.{norm}.bias"), vec![d], Some(0.0));
        }
        for (name, rows, cols) in [
            ("attention.query_key_value", 3 * d, d),
            ("attention.dense", d, d),
            ("mlp.dense_h_to_4h", 4 * d, d),
            ("mlp.dense_4h_to_h", d, 4 * d),
        ] {
            put(format!("{p}.{name}.weight"), vec![rows, cols], None);
            put(format!("{p}.{name}.bias"), vec![rows], Some(0.0));
        }
    }
    put(
        "gpt_neox.final_layer_norm.weight".into(),
        vec![d],
        Some(1.0),
    );
    put("gpt_neox.final_layer_norm.bias".into(), vec![d], Some(0.0));
    put("embed_out.weight".into(), vec![vocab, d], None);
    let refs: Vec<(String, Vec<usize>, &[f32])> = tensors
        .iter()
        .map(|(n, s, d)| (n.clone(), s.clone(), d.as_slice()))
        .collect();
    repgeom_io::write_safetensors(
        &dir.join("model.safetensors"),
        &refs,
        &std::collections::BTreeMap::from([("format".to_string(), "pt".to_string())]),
    )?;
    Ok(())
}

/// A seeded text of at least `tokens` tokens (words drawn from a small vocabulary; the
/// fixture's byte-level BPE makes a few tokens of each).
fn write_text(path: &Path, tokens: usize) -> anyhow::Result<()> {
    const WORDS: &[&str] = &[
        "the",
        "model",
        "predicts",
        "next",
        "token",
        "from",
        "its",
        "hidden",
        "state",
        "layer",
        "geometry",
        "readout",
        "subspace",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "and",
        "a",
        "of",
        "in",
        "language",
        "representation",
        "distance",
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut text = String::new();
    // Each word is at least one token: enough words make enough tokens.
    for i in 0..tokens {
        text.push_str(WORDS[rand::Rng::random_range(&mut rng, 0..WORDS.len())]);
        text.push(if i % 17 == 16 { '\n' } else { ' ' });
    }
    std::fs::write(path, text)?;
    Ok(())
}

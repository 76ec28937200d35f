//! `repgeom extract`: hidden states of a HuggingFace checkpoint on a text, no Python.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use repgeom_extract::{ExtractParams, Extractor, Pool};

use crate::context::Context;

/// How points are made from the hidden states.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolArg {
    /// One point per sampled token position.
    Tokens,
    /// One point per input line: the mean over the line's tokens (for probes).
    Mean,
}

/// Run a checkpoint on a text and save every layer's hidden states (HF output_hidden_states order).
#[derive(clap::Args, Debug)]
pub(crate) struct ExtractArgs {
    /// Checkpoint directory (config.json, tokenizer.json, *.safetensors; HF cache snapshots
    /// work), or a hub model id org/name (downloaded into the hub cache as needed).
    #[arg(long)]
    model: String,
    /// Hub revision (branch such as step3000, tag or commit) when --model is a hub id.
    #[arg(long)]
    revision: Option<String>,
    /// UTF-8 text file: split into sequences (tokens), or one example per line (--pool mean).
    #[arg(long)]
    text: PathBuf,
    /// Token positions to sample (tokens; default 2048), or the first lines to use (mean; default all).
    #[arg(long)]
    n_points: Option<usize>,
    /// Tokens per sequence (with --pool mean: the most tokens kept of one line).
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// Seed of the position sampler (and of the loss's sequence sample).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Token positions taken from each sampled sequence: 1 draws every point uniformly from
    /// all positions (nearly a sequence per point); M >= 2 takes M distinct positions from
    /// each of ceil(n_points / M) sampled sequences, running M times fewer tokens [default:
    /// 16, or every position of shorter sequences].
    #[arg(long)]
    points_per_sequence: Option<usize>,
    /// Also sample position 0 of each sequence (skipped by default: its norm is outsized).
    #[arg(long)]
    keep_first: bool,
    /// Points are token positions, or one mean per line.
    #[arg(long, value_enum, default_value_t = PoolArg::Tokens)]
    pool: PoolArg,
    /// Also report the mean next-token cross-entropy (with its standard error over
    /// sequences), over every sequence of the text or the sample --loss-tokens asks for.
    #[arg(long)]
    loss: bool,
    /// With --loss: the loss over a seeded sample of sequences predicting at least this many
    /// tokens in all (every sequence when the text has fewer).
    #[arg(long, requires = "loss", default_value_t = repgeom_extract::DEFAULT_LOSS_TOKENS)]
    loss_tokens: usize,
    /// Sequences (or lines) per forward pass; results do not depend on it (to f32 rounding).
    /// Refused, with the size that fits, when one batch would not fit in available memory.
    #[arg(long, default_value_t = repgeom_extract::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Output safetensors file (hidden_states.{i}, [N, d] f32, with metadata).
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run(args: &ExtractArgs, ctx: &Context) -> anyhow::Result<()> {
    let pool = match args.pool {
        PoolArg::Tokens => Pool::Tokens,
        PoolArg::Mean => Pool::Mean,
    };
    let n_points = match pool {
        Pool::Tokens => Some(args.n_points.unwrap_or(2048)),
        _ => args.n_points,
    };
    let params = ExtractParams {
        seq_len: args.seq_len,
        n_points,
        seed: args.seed,
        points_per_sequence: args.points_per_sequence,
        skip_first: !args.keep_first,
        pool,
        loss: args.loss,
        loss_tokens: Some(args.loss_tokens),
        batch_size: args.batch_size,
        memory_budget: repgeom_extract::available_memory(),
    }
    .check()?;
    let text = std::fs::read_to_string(&args.text)
        .with_context(|| format!("reading {}", args.text.display()))?;
    let dir = crate::hub::model_path(
        &args.model,
        args.revision.as_deref(),
        &repgeom_hub::Files::Full,
        ctx,
    )?;
    let extractor = Extractor::load(&dir)?;

    let bar = if ctx.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "extract [{bar:30}] {pos}/{len} tokens, {msg} ({elapsed}, eta {eta})",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let start = Instant::now();
    let mut tokens = 0usize;
    let out = extractor.extract(&text, &params, &mut |p| {
        bar.set_length(p.tokens_total as u64);
        bar.set_position(p.tokens_done as u64);
        tokens = p.tokens_done;
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("{:.0} tokens/s", p.tokens_done as f64 / secs));
    })?;
    bar.finish_and_clear();
    out.write(&args.out)?;

    let secs = start.elapsed().as_secs_f64();
    #[allow(clippy::print_stdout)] // the command's report
    {
        let (name, revision) = extractor.name();
        println!(
            "wrote {} ({} points x {} hidden states of d = {}) from {}{}",
            args.out.display(),
            out.n_points,
            out.hidden_states.len(),
            out.hidden_size,
            name,
            revision.map(|r| format!(" @ {r}")).unwrap_or_default()
        );
        println!(
            "ran {tokens} tokens in {secs:.1} s ({:.0} tokens/s), {:.1} tokens per point kept",
            tokens as f64 / secs.max(1e-9),
            tokens as f64 / out.n_points.max(1) as f64
        );
        if let Some(loss) = out.loss {
            println!(
                "loss {:.6} ± {:.6} (mean next-token cross-entropy over {} tokens of {} sequences, nats; ± one standard error over sequences)",
                loss.mean, loss.se, loss.tokens, loss.sequences
            );
        }
    }
    Ok(())
}

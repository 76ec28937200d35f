//! `repgeom extract`: hidden states of a HuggingFace checkpoint on a text, no Python.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use repgeom_extract::{ExtractParams, Extractor, Pool, WordPool};

use crate::context::Context;

/// How points are made from the hidden states.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolArg {
    /// One point per sampled token position.
    Tokens,
    /// One point per input line: the mean over the line's tokens (for probes).
    Mean,
}

/// What a point is.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PointsArg {
    /// Token positions (or, with --pool mean, lines).
    Tokens,
    /// Words of the text, sampled from the text alone: the same points for every tokenizer.
    Words,
}

/// `--word-pool`: a name the library knows (`WordPool::from_name`).
fn parse_word_pool(s: &str) -> Result<WordPool, String> {
    WordPool::from_name(s).ok_or_else(|| format!("expected one of {}", WordPool::NAMES))
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
    /// Token positions (tokens) or words (--points words) to sample (default 2048), or the
    /// first lines to use (mean; default all).
    #[arg(long)]
    n_points: Option<usize>,
    /// Tokens per sequence (with --pool mean: the most tokens kept of one line).
    #[arg(long, default_value_t = repgeom_extract::DEFAULT_SEQ_LEN)]
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
    /// Points are token positions, or words of the text (Unicode word boundaries) read in
    /// windows of at most --seq-len - 1 bytes: models with different tokenizers then hold the
    /// same points, read after the same characters (docs/extraction.md, Word-aligned points).
    /// With words, --n-points counts words and --points-per-sequence words per window.
    #[arg(long, value_enum, default_value_t = PointsArg::Tokens)]
    points: PointsArg,
    /// With --points words: a word's state is its last token's (last, the default) or the mean
    /// over its tokens (mean).
    #[arg(long, value_name = "last|mean", value_parser = parse_word_pool)]
    word_pool: Option<WordPool>,
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
    /// Instead of sampled points: exact linear CKA (biased and debiased) between these pairs
    /// of hidden states over *every* token of the text (position 0 of each sequence left out
    /// unless --keep-first), accumulated batch by batch, so memory does not grow with the
    /// text. A:B pairs, e.g. 0:6,3:6, or `all` (every pair). --out is then a table (.csv,
    /// .json or .txt).
    #[arg(long, value_name = "PAIRS", conflicts_with_all = ["loss", "n_points", "points_per_sequence", "pool", "points", "word_pool"])]
    cka_pairs: Option<String>,
    /// With --cka-pairs: CKA between two models on the same batches, A:B pairing hidden
    /// state A of --model with hidden state B of this one (`all`: every such pair). Both must
    /// tokenise the text identically (one tokenizer; checked, an error otherwise). A
    /// checkpoint directory or a hub id, as --model.
    #[arg(long, value_name = "MODEL", requires = "cka_pairs")]
    other_model: Option<String>,
    /// Hub revision of --other-model when it is a hub id.
    #[arg(long, requires = "other_model")]
    other_revision: Option<String>,
    /// Instead of sampled points: the spectral metrics (RankMe, alpha-ReQ, IsoScore, the
    /// condition number) of these hidden states over *every* token of the text, from their
    /// covariance accumulated batch by batch (d x d memory per layer), each at 2^10, 2^11, ...
    /// tokens and over all of them, with the count after which it stays within 1 % of its
    /// final value (column stable_from). Layers as 0,3,6 or `all`. --out is then a table.
    #[arg(long, value_name = "LAYERS", conflicts_with_all = ["loss", "n_points", "points_per_sequence", "pool", "points", "word_pool", "cka_pairs"])]
    spectra: Option<String>,
    /// With --cka-pairs or --spectra: stop after this many tokens (default: the whole text).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// With --cka-pairs or --spectra: also write each pair's or hidden state's accumulator
    /// (its exact f64 sums) into this folder, as cka-A-B.safetensors or
    /// covariance-L.safetensors, for `repgeom merge` to combine shards of a corpus exactly.
    #[arg(long, value_name = "DIR")]
    save_accumulators: Option<PathBuf>,
    /// With --cka-pairs or --spectra: run only shard i of n of the text's sequences (0-based,
    /// e.g. 2/4: sequences 2, 6, 10, ...), so that n jobs (a SLURM array) split a corpus and
    /// `repgeom merge` combines their --save-accumulators files exactly. Default: the whole
    /// text.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Output safetensors file (hidden_states.{i}, [N, d] f32, with metadata), or with
    /// --cka-pairs the table of CKA values.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    device: crate::args::DeviceArgs,
    /// Compute in f32 (f32, the default: within 1e-4 of transformers in f32, a GPU's
    /// numbers the CPU's to the rounding of the products), or with the weights as stored
    /// (stored: bf16/f16 products accumulated in f32, as transformers on a GPU; on a GPU
    /// half the memory, on a CPU with AMX faster; about transformers' numbers in that dtype).
    #[arg(long, value_name = "f32|stored", default_value = "f32", value_parser = crate::args::parse_precision)]
    dtype: repgeom_extract::Precision,
}

pub(crate) fn run(args: &ExtractArgs, ctx: &Context) -> anyhow::Result<()> {
    // The device first: a missing device fails before any input is read.
    let gpu = args.device.device.open()?;
    let done = run_on(args, ctx, gpu.as_ref());
    crate::args::print_profile(args.device.device);
    done
}

fn run_on(
    args: &ExtractArgs,
    ctx: &Context,
    gpu: Option<&std::sync::Arc<repgeom_cuda::Gpu>>,
) -> anyhow::Result<()> {
    let on_device = |mut ex: Extractor| -> anyhow::Result<Extractor> {
        ex.place(gpu.cloned(), args.dtype)?;
        Ok(ex)
    };
    // The design by its names, through the library's one rule (Python and a study's
    // [extract] read the same).
    let pool = Pool::from_names(
        match args.pool {
            PoolArg::Tokens => "tokens",
            PoolArg::Mean => "mean",
        },
        match args.points {
            PointsArg::Tokens => "tokens",
            PointsArg::Words => "words",
        },
        args.word_pool.map(WordPool::name),
    )?;
    let n_points = match pool {
        Pool::Tokens | Pool::Words(_) => {
            Some(args.n_points.unwrap_or(repgeom_extract::DEFAULT_N_POINTS))
        }
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
        dtype: args.dtype,
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
    let extractor = on_device(Extractor::load(&dir)?)?;
    if let Some(spec) = &args.cka_pairs {
        let other = match &args.other_model {
            Some(m) => {
                let dir = crate::hub::model_path(
                    m,
                    args.other_revision.as_deref(),
                    &repgeom_hub::Files::Full,
                    ctx,
                )?;
                Some(on_device(Extractor::load(&dir)?)?)
            }
            None => None,
        };
        return run_cka(
            args,
            ctx,
            (&extractor, other.as_ref()),
            &text,
            &params,
            spec,
        );
    }
    if let Some(spec) = &args.spectra {
        return run_spectra(args, ctx, &extractor, &text, &params, spec);
    }
    for (given, flag) in [
        (args.max_tokens.is_some(), "--max-tokens"),
        (args.save_accumulators.is_some(), "--save-accumulators"),
        (args.shard.is_some(), "--shard"),
    ] {
        anyhow::ensure!(
            !given,
            "{flag} applies to --cka-pairs and --spectra (streaming every token), not to sampled points"
        );
    }

    let bar = progress_bar(ctx);
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
    if let Some(note) = out.metadata.get("points_per_sequence_note") {
        ctx.note(note);
    }

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
            "ran {tokens} tokens in {secs:.1} s ({:.0} tokens/s), {:.1} tokens per point kept{}",
            tokens as f64 / secs.max(1e-9),
            tokens as f64 / out.n_points.max(1) as f64,
            peak_rss_mib()
                .map(|m| format!(", peak resident memory {m:.0} MiB"))
                .unwrap_or_default()
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

/// The extraction's progress bar (hidden with --quiet).
fn progress_bar(ctx: &Context) -> ProgressBar {
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
    bar
}

/// `--cka-pairs`: the pairs of hidden states `spec` names, for a model with `n_hidden` of them
/// (`all`: every pair `i < j`).
/// `--cka-pairs`: `A:B` pairs of hidden states below `n_hidden` of the model, or with a second
/// model of `other_hidden`, A of the first and B of the second; `all` is every pair `A < B` of
/// one model, or every `A × B` of two.
fn parse_pairs(
    spec: &str,
    n_hidden: usize,
    other_hidden: Option<usize>,
) -> anyhow::Result<Vec<(usize, usize)>> {
    if spec.trim() == "all" {
        return Ok(match other_hidden {
            Some(m) => (0..n_hidden)
                .flat_map(|i| (0..m).map(move |j| (i, j)))
                .collect(),
            None => (0..n_hidden)
                .flat_map(|i| (i + 1..n_hidden).map(move |j| (i, j)))
                .collect(),
        });
    }
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parsed = part
            .split_once(':')
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        let Some((a, b)) = parsed else {
            anyhow::bail!(
                "bad layer pair {part:?} in --cka-pairs {spec:?}: expected A:B, e.g. 0:6"
            );
        };
        anyhow::ensure!(
            a < n_hidden,
            "--cka-pairs {part}: the model has {n_hidden} hidden states (0 = embeddings … {})",
            n_hidden - 1
        );
        let m = other_hidden.unwrap_or(n_hidden);
        anyhow::ensure!(
            b < m,
            "--cka-pairs {part}: the {} has {m} hidden states (0 = embeddings … {})",
            if other_hidden.is_some() {
                "other model"
            } else {
                "model"
            },
            m - 1
        );
        out.push((a, b));
    }
    anyhow::ensure!(!out.is_empty(), "empty --cka-pairs {spec:?}");
    Ok(out)
}

/// Linear CKA of every pair of hidden states in `pairs` over every token `stream` runs, one
/// [`CkaAccumulator`](repgeom_metrics::CkaAccumulator) per pair fed each batch; with a second
/// model, the pair's second hidden state is that model's, both run on the same batches.
#[allow(clippy::too_many_arguments)]
fn stream_cka(
    (extractor, other): (&Extractor, Option<&Extractor>),
    text: &str,
    params: &repgeom_extract::ValidExtractParams,
    max_tokens: Option<usize>,
    shard: (usize, usize),
    pairs: &[(usize, usize)],
    progress: &mut dyn FnMut(repgeom_extract::Progress),
) -> anyhow::Result<(
    repgeom_extract::Streamed,
    Vec<repgeom_metrics::StreamingCka>,
    Vec<repgeom_metrics::CkaAccumulator>,
)> {
    let sorted = |it: &mut dyn Iterator<Item = usize>| {
        let mut v: Vec<usize> = it.collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let dx = extractor.model().config().hidden_size;
    let (first, second, dy) = match other {
        // One model: one list of hidden states; both sides index into it.
        None => {
            let all = sorted(&mut pairs.iter().flat_map(|&(a, b)| [a, b]));
            (all.clone(), all, dx)
        }
        Some(o) => (
            sorted(&mut pairs.iter().map(|&(a, _)| a)),
            sorted(&mut pairs.iter().map(|&(_, b)| b)),
            o.model().config().hidden_size,
        ),
    };
    // Views: `first`'s, then (two models) `second`'s.
    let offset = if other.is_some() { first.len() } else { 0 };
    let slot = |list: &[usize], l: usize| list.binary_search(&l).unwrap_or(0);
    let mut accs: Vec<_> = (pairs.iter())
        .map(|_| repgeom_metrics::CkaAccumulator::new(dx, dy))
        .collect();
    let what = |(a, b): (usize, usize)| match other {
        Some(_) => format!("hidden state {a} and the other model's {b}"),
        None => format!("hidden states {a} and {b}"),
    };
    // The pairs' accumulators in parallel: each its own sums, so no number depends on the
    // thread count; the first failing pair (in order) is the error.
    let mut visit = |views: &[repgeom_linalg::MatRef<'_, f32>]| -> anyhow::Result<()> {
        use rayon::prelude::*;
        let results: Vec<_> = (accs.par_iter_mut().zip(pairs.par_iter()))
            .map(|(acc, &(a, b))| {
                let (x, y) = (views[slot(&first, a)], views[offset + slot(&second, b)]);
                acc.update(x, y, &what((a, b)))
            })
            .collect();
        for r in results {
            r?;
        }
        Ok(())
    };
    let streamed = match other {
        None => extractor.stream_shard(
            text, params, max_tokens, &first, shard, &mut visit, progress,
        )?,
        Some(o) => extractor.stream_pair_shard(
            o,
            text,
            params,
            max_tokens,
            (&first, &second),
            shard,
            &mut visit,
            progress,
        )?,
    };
    let values = (accs.iter().zip(pairs))
        .map(|(acc, &p)| acc.finish(&what(p)))
        .collect::<Result<_, _>>()?;
    Ok((streamed, values, accs))
}

fn run_cka(
    args: &ExtractArgs,
    ctx: &Context,
    (extractor, other): (&Extractor, Option<&Extractor>),
    text: &str,
    params: &repgeom_extract::ValidExtractParams,
    spec: &str,
) -> anyhow::Result<()> {
    let c = extractor.model().config();
    let other_hidden = other.map(|o| o.model().config().n_layers + 1);
    let pairs = parse_pairs(spec, c.n_layers + 1, other_hidden)?;
    let shard = parse_shard(args.shard.as_deref())?;
    let bar = progress_bar(ctx);
    let start = Instant::now();
    let (streamed, values, accs) = stream_cka(
        (extractor, other),
        text,
        params,
        args.max_tokens,
        shard,
        &pairs,
        &mut |p| show_progress(&bar, start, p),
    )?;
    bar.finish_and_clear();
    let mut label = model_label(extractor);
    let mut other_label = other.map(model_label);
    // Two checkpoint folders of one name (`.../d16/step600`, `.../d64/step600`): named as given.
    if other_label.as_ref() == Some(&label) {
        let with = |m: &str, r: &Option<String>| match r {
            Some(r) => format!("{m}@{r}"),
            None => m.to_owned(),
        };
        label = with(&args.model, &args.revision);
        other_label = args
            .other_model
            .as_ref()
            .map(|m| with(m, &args.other_revision));
    }
    let label_ref = label.as_str();
    let rows: Vec<_> = (values.iter().zip(&pairs))
        .flat_map(|(v, &(a, b))| {
            let other_label = other_label.clone();
            v.values().into_iter().map(move |value| {
                let row =
                    crate::output::metric_row(label_ref, c.hidden_size, (a, c.n_layers + 1), value)
                        .with_extra("other_layer", b as f64);
                match &other_label {
                    Some(o) => row.with_other_model(o.clone()),
                    None => row,
                }
            })
        })
        .collect();
    let keys: &[&str] = match other {
        Some(_) => &["model", "layer", "other_model", "other_layer"],
        None => &["model", "layer", "other_layer"],
    };
    let table = crate::output::tidy_cells(&rows, keys);
    crate::output::emit(&table, None, Some(&args.out))?;
    let states = (accs.iter().zip(&pairs)).map(|(acc, &(a, b))| (format!("{a}:{b}"), acc.state()));
    let other_origin = other
        .zip(other_label.clone())
        .map(|(o, l)| (l, o.model().config().hidden_size));
    save_accumulators(args, &label, c, params, other_origin, states)?;
    let secs = start.elapsed().as_secs_f64();
    #[allow(clippy::print_stdout)] // the command's report
    {
        println!(
            "wrote {} (linear CKA of {} pairs of hidden states over {} tokens of {} sequences) from {label}{}",
            args.out.display(),
            pairs.len(),
            streamed.tokens_kept,
            streamed.sequences,
            other_label.map(|o| format!(" and {o}")).unwrap_or_default(),
        );
        println!("{}", ran_line(&streamed, secs));
    }
    Ok(())
}

/// `--shard I/N` (default: the whole text, `0/1`).
fn parse_shard(spec: Option<&str>) -> anyhow::Result<(usize, usize)> {
    let Some(spec) = spec else {
        return Ok((0, 1));
    };
    let parsed = spec
        .split_once('/')
        .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => Ok((i, n)),
        _ => anyhow::bail!("--shard {spec:?}: expected I/N with 0 <= I < N, e.g. 0/4"),
    }
}

/// `--spectra`: the hidden states `spec` names (`all`: every one), for a model with `n_hidden`.
fn parse_layers(spec: &str, n_hidden: usize) -> anyhow::Result<Vec<usize>> {
    if spec.trim() == "all" {
        return Ok((0..n_hidden).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Ok(l) = part.parse::<usize>() else {
            anyhow::bail!("bad layer {part:?} in --spectra {spec:?}: expected e.g. 0,3,6 or all");
        };
        anyhow::ensure!(
            l < n_hidden,
            "--spectra {l}: the model has {n_hidden} hidden states (0 = embeddings … {})",
            n_hidden - 1
        );
        out.push(l);
    }
    out.sort_unstable();
    out.dedup();
    anyhow::ensure!(!out.is_empty(), "empty --spectra {spec:?}");
    Ok(out)
}

/// The convergence record of every hidden state in `layers` over every token `stream` runs.
#[allow(clippy::too_many_arguments)]
fn stream_spectra(
    extractor: &Extractor,
    text: &str,
    params: &repgeom_extract::ValidExtractParams,
    max_tokens: Option<usize>,
    shard: (usize, usize),
    layers: &[usize],
    progress: &mut dyn FnMut(repgeom_extract::Progress),
) -> anyhow::Result<(
    repgeom_extract::Streamed,
    Vec<repgeom_metrics::SpectralConvergence>,
)> {
    let d = extractor.model().config().hidden_size;
    let mut records: Vec<_> = (layers.iter())
        .map(|l| repgeom_metrics::SpectralConvergence::new(d, format!("hidden state {l}")))
        .collect();
    let streamed = extractor.stream_shard(
        text,
        params,
        max_tokens,
        layers,
        shard,
        &mut |views| -> anyhow::Result<()> {
            repgeom_metrics::SpectralConvergence::update_each(&mut records, views)?;
            Ok(())
        },
        progress,
    )?;
    Ok((streamed, records))
}

fn run_spectra(
    args: &ExtractArgs,
    ctx: &Context,
    extractor: &Extractor,
    text: &str,
    params: &repgeom_extract::ValidExtractParams,
    spec: &str,
) -> anyhow::Result<()> {
    let c = extractor.model().config();
    let layers = parse_layers(spec, c.n_layers + 1)?;
    let shard = parse_shard(args.shard.as_deref())?;
    let bar = progress_bar(ctx);
    let start = Instant::now();
    let (streamed, records) = stream_spectra(
        extractor,
        text,
        params,
        args.max_tokens,
        shard,
        &layers,
        &mut |p| show_progress(&bar, start, p),
    )?;
    bar.finish_and_clear();
    let label = model_label(extractor);
    let metrics = crate::accumulators::spectral_metrics();
    let metrics: Vec<&dyn repgeom_metrics::Metric> = metrics.iter().map(AsRef::as_ref).collect();
    let mut rows = Vec::new();
    for (record, &layer) in records.iter().zip(&layers) {
        for report in record.reports(&metrics, repgeom_metrics::CONVERGENCE_TOL)? {
            rows.extend(report.values().into_iter().map(|v| {
                crate::output::metric_row(&label, c.hidden_size, (layer, c.n_layers + 1), v)
            }));
        }
    }
    let table = crate::output::tidy_cells(&rows, &["model", "layer"]);
    crate::output::emit(&table, None, Some(&args.out))?;
    let states = (records.iter().zip(&layers))
        .map(|(record, &l)| (l.to_string(), record.accumulator().state()));
    save_accumulators(args, &label, c, params, None, states)?;
    let secs = start.elapsed().as_secs_f64();
    #[allow(clippy::print_stdout)] // the command's report
    {
        println!(
            "wrote {} (spectral metrics of {} hidden states over {} tokens of {} sequences, at 2^10, 2^11, ... tokens and all) from {label}",
            args.out.display(),
            layers.len(),
            streamed.tokens_kept,
            streamed.sequences,
        );
        println!("{}", ran_line(&streamed, secs));
    }
    Ok(())
}

/// The model's label in tables and accumulator files: `name` or `name@revision`.
fn model_label(extractor: &Extractor) -> String {
    match extractor.name() {
        (name, Some(r)) => format!("{name}@{r}"),
        (name, None) => name.to_string(),
    }
}

/// A streamed run's progress on `bar`: tokens run and tokens/s since `start`.
fn show_progress(bar: &ProgressBar, start: Instant, p: repgeom_extract::Progress) {
    bar.set_length(p.tokens_total as u64);
    bar.set_position(p.tokens_done as u64);
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    bar.set_message(format!("{:.0} tokens/s", p.tokens_done as f64 / secs));
}

/// The report line of a streamed run: tokens run, time, tokens/s and peak memory.
fn ran_line(streamed: &repgeom_extract::Streamed, secs: f64) -> String {
    format!(
        "ran {} tokens in {secs:.1} s ({:.0} tokens/s){}",
        streamed.tokens_run,
        streamed.tokens_run as f64 / secs.max(1e-9),
        peak_rss_mib()
            .map(|m| format!(", peak resident memory {m:.0} MiB"))
            .unwrap_or_default()
    )
}

/// `--save-accumulators DIR`: each `(hidden states, state)` written to
/// `DIR/{stem}.safetensors` ([`crate::accumulators::file_stem`]) with this run's origin.
fn save_accumulators(
    args: &ExtractArgs,
    label: &str,
    c: &repgeom_extract::ModelConfig,
    params: &repgeom_extract::ValidExtractParams,
    other: Option<(String, usize)>,
    states: impl Iterator<Item = (String, repgeom_metrics::AccumulatorState)>,
) -> anyhow::Result<()> {
    let Some(dir) = &args.save_accumulators else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (layers, state) in states {
        let stem = crate::accumulators::file_stem(&state.kind, &layers);
        let path = dir.join(format!("{stem}.safetensors"));
        let origin = crate::accumulators::Origin {
            other: other.clone(),
            ..origin(label, c, params, layers)
        };
        crate::accumulators::write(&path, &state, &origin)?;
    }
    Ok(())
}

/// What an accumulator file of this run says of where its sums come from: the model, its
/// shape, the hidden states (`layers`) and the settings that change the sums.
fn origin(
    label: &str,
    c: &repgeom_extract::ModelConfig,
    params: &repgeom_extract::ValidExtractParams,
    layers: String,
) -> crate::accumulators::Origin {
    let p = params.get();
    crate::accumulators::Origin {
        model: label.to_owned(),
        d: c.hidden_size,
        n_hidden: c.n_layers + 1,
        layers,
        settings: serde_json::json!({ "seq_len": p.seq_len, "skip_first": p.skip_first })
            .to_string(),
        other: None,
    }
}

/// This process's peak resident memory (`VmHWM` of `/proc/self/status`), where Linux reports it.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use repgeom_linalg::{MatRef, Par};
    use repgeom_metrics::{CkaLinear, LayerInput, PairInput, PairMetric};

    use super::*;

    /// Streamed and full-batch CKA agree to this (relative to 1).
    const STREAM_TOL: f64 = 1e-10;

    fn fixture() -> (Extractor, String) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/extract/gptneox_parallel");
        let text = "The quick brown fox jumps over the lazy dog. A language model predicts \
                    the next token, and its hidden states carry what it needs.\n"
            .repeat(9);
        (Extractor::load(&dir).unwrap(), text)
    }

    /// The streaming tests' settings: sequences of 16 tokens, 2 per batch (so the fixture's
    /// text runs in several batches).
    fn stream_params() -> repgeom_extract::ValidExtractParams {
        repgeom_extract::ExtractParams {
            seq_len: 16,
            batch_size: 2,
            ..Default::default()
        }
        .check()
        .unwrap()
    }

    /// Every streamed token of `layers` gathered whole (row-major, one vector per layer), and
    /// the stream's counts.
    fn gather(
        ex: &Extractor,
        text: &str,
        params: &repgeom_extract::ValidExtractParams,
        max_tokens: Option<usize>,
        layers: &[usize],
    ) -> (Vec<Vec<f32>>, repgeom_extract::Streamed) {
        let mut whole: Vec<Vec<f32>> = vec![Vec::new(); layers.len()];
        let streamed = ex
            .stream(
                text,
                params,
                max_tokens,
                layers,
                &mut |views| -> anyhow::Result<()> {
                    for (w, v) in whole.iter_mut().zip(views) {
                        for i in 0..v.nrows() {
                            w.extend((0..v.ncols()).map(|j| v[(i, j)]));
                        }
                    }
                    Ok(())
                },
                &mut |_| {},
            )
            .unwrap();
        (whole, streamed)
    }

    /// `cka_linear` (biased, debiased) on the whole of two row-major `[n, d]` matrices.
    fn full_batch(x: &[f32], y: &[f32], d: usize) -> (f64, f64) {
        full_batch_2(x, y, (d, d))
    }

    /// `cka_linear` (biased, debiased) of row-major `[n, dx]` and `[n, dy]` matrices.
    fn full_batch_2(x: &[f32], y: &[f32], (dx, dy): (usize, usize)) -> (f64, f64) {
        let n = x.len() / dx;
        let ia = LayerInput::new(MatRef::from_row_major_slice(x, n, dx), "X", Par::Seq).unwrap();
        let ib = LayerInput::new(MatRef::from_row_major_slice(y, n, dy), "Y", Par::Seq).unwrap();
        let input = PairInput::new(&ia, &ib).unwrap();
        let v = |debiased| {
            CkaLinear {
                debiased,
                ..CkaLinear::default()
            }
            .compute(&input)
            .unwrap()[0]
                .value
        };
        (v(false), v(true))
    }

    /// Every token of the text streamed in batches of 2 sequences: the accumulated CKA of each
    /// pair equals full-batch `cka_linear` on the same rows gathered whole, and `max_tokens`
    /// stops where asked (mid-sequence).
    #[test]
    fn streamed_cka_equals_the_full_batch() {
        let (ex, text) = fixture();
        let params = stream_params();
        let d = ex.model().config().hidden_size;
        let pairs = parse_pairs("0:3,1:2,2:2", 4, None).unwrap();
        for max_tokens in [None, Some(37)] {
            let (whole, streamed) = gather(&ex, &text, &params, max_tokens, &[0, 1, 2, 3]);
            let (s, values, _) = stream_cka(
                (&ex, None),
                &text,
                &params,
                max_tokens,
                (0, 1),
                &pairs,
                &mut |_| {},
            )
            .unwrap();
            assert_eq!(s, streamed);
            assert_eq!(s.tokens_kept, max_tokens.unwrap_or(s.sequences * 15));
            assert!(
                s.sequences > params.get().batch_size,
                "more than one batch: {s:?}"
            );
            for (&(a, b), v) in pairs.iter().zip(&values) {
                let (biased, debiased) = full_batch(&whole[a], &whole[b], d);
                assert_eq!(v.n, s.tokens_kept as u64);
                assert!(
                    (v.biased - biased).abs() < STREAM_TOL,
                    "{a}:{b} biased {} vs {biased}",
                    v.biased
                );
                let vd = v.debiased.unwrap();
                assert!(
                    (vd - debiased).abs() < STREAM_TOL,
                    "{a}:{b} debiased {vd} vs {debiased}"
                );
            }
        }
    }

    /// Two models of one tokenizer and different widths (the trained fixtures, d = 16 and
    /// 64) on the same batches: each pair's accumulated CKA equals full-batch `cka_linear` on
    /// the two models' rows gathered from separate streams; a model of another tokenizer is
    /// refused, naming both tokenizer files.
    #[test]
    fn cka_between_two_models_on_the_same_batches_equals_the_full_batch() {
        let trained = |w: usize| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../../fixtures/trained/neox-d{w}/step600"));
            Extractor::load(&dir).unwrap()
        };
        let (a, b) = (trained(16), trained(64));
        let text = fixture().1;
        let params = stream_params();
        let all = [0, 1, 2, 3, 4];
        let ((wa, _), (wb, _)) = (
            gather(&a, &text, &params, None, &all),
            gather(&b, &text, &params, None, &all),
        );
        let pairs = parse_pairs("0:0,2:4,4:1", 5, Some(5)).unwrap();
        let (s, values, _) = stream_cka(
            (&a, Some(&b)),
            &text,
            &params,
            None,
            (0, 1),
            &pairs,
            &mut |_| {},
        )
        .unwrap();
        assert!(s.sequences > 2, "more than one batch: {s:?}");
        for (&(x, y), v) in pairs.iter().zip(&values) {
            let (biased, debiased) = full_batch_2(&wa[x], &wb[y], (16, 64));
            assert_eq!(v.n, s.tokens_kept as u64);
            assert!(
                (v.biased - biased).abs() < STREAM_TOL,
                "{x}:{y} biased {} vs {biased}",
                v.biased
            );
            let vd = v.debiased.unwrap();
            assert!(
                (vd - debiased).abs() < STREAM_TOL,
                "{x}:{y} debiased {vd} vs {debiased}"
            );
        }
        let (other, _) = fixture();
        let e = stream_cka(
            (&a, Some(&other)),
            &text,
            &params,
            None,
            (0, 1),
            &pairs[..1],
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tokenise the text differently")
                && e.contains("neox-d16/step600/tokenizer.json")
                && e.contains("gptneox_parallel/tokenizer.json"),
            "{e}"
        );
    }

    #[test]
    fn cka_pairs_are_parsed_and_checked() {
        assert_eq!(
            parse_pairs("all", 3, None).unwrap(),
            [(0, 1), (0, 2), (1, 2)]
        );
        assert_eq!(parse_pairs("0:6, 3:6", 7, None).unwrap(), [(0, 6), (3, 6)]);
        let e = parse_pairs("0:7", 7, None).unwrap_err().to_string();
        assert!(e.contains("7 hidden states"), "{e}");
        let e = parse_pairs("0-6", 7, None).unwrap_err().to_string();
        assert!(e.contains("expected A:B"), "{e}");
        // Two models: A of the first, B of the second; `all` is every A x B.
        assert_eq!(
            parse_pairs("all", 2, Some(3)).unwrap(),
            [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        );
        assert_eq!(parse_pairs("1:4", 2, Some(5)).unwrap(), [(1, 4)]);
        let e = parse_pairs("1:5", 2, Some(5)).unwrap_err().to_string();
        assert!(e.contains("the other model has 5 hidden states"), "{e}");
    }

    /// Every token's spectral metrics, streamed, equal the same metrics on the tokens gathered
    /// (the fixture's text is short: the report has the final checkpoint only).
    #[test]
    fn streamed_spectra_equal_the_gathered_tokens() {
        let (ex, text) = fixture();
        let params = stream_params();
        let d = ex.model().config().hidden_size;
        let layers = parse_layers("3, 1", 4).unwrap();
        assert_eq!(layers, [1, 3]);
        let (whole, _) = gather(&ex, &text, &params, None, &layers);
        let (s, records) =
            stream_spectra(&ex, &text, &params, None, (0, 1), &layers, &mut |_| {}).unwrap();
        for (record, w) in records.iter().zip(&whole) {
            let x = MatRef::from_row_major_slice(w, w.len() / d, d);
            assert_eq!(x.nrows(), s.tokens_kept);
            let input = LayerInput::new(x, "gathered", Par::Seq).unwrap();
            for m in crate::accumulators::spectral_metrics() {
                let report = record
                    .report(m.as_ref(), repgeom_metrics::CONVERGENCE_TOL)
                    .unwrap();
                let direct = m.compute(&input).unwrap()[0].value;
                let streamed = *report.values.last().unwrap();
                assert!(
                    (streamed - direct).abs() <= STREAM_TOL * direct.abs().max(1.0),
                    "{}: streamed {streamed}, gathered {direct}",
                    m.info().name
                );
            }
        }
        let e = parse_layers("4", 4).unwrap_err().to_string();
        assert!(e.contains("4 hidden states"), "{e}");
        assert!(parse_layers("x", 4).is_err() && parse_layers("", 4).is_err());
    }
}

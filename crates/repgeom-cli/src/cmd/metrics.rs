//! `repgeom metrics`: registered per-layer metrics of one activation file, as a tidy long table
//! (one row per layer × metric × variant), or `--list` to describe the registry.

use std::path::PathBuf;

use repgeom_linalg::MatRef;
use repgeom_metrics::{AnalysisParams, LayerInput, Metric, MetricInfo, options_of};
use repgeom_null::{NullBases, NullParams};

use super::Context;
use crate::load::{ReadoutChoice, model_label, parse_spec, read_analysis, readout_basis};
use crate::output::{Cell, Format, OutputArgs, Table, metric_table};

/// Arguments of `repgeom metrics`.
#[derive(clap::Args, Debug)]
pub(crate) struct MetricsArgs {
    /// List every registered metric (name, meaning, options with defaults, source) and exit.
    #[arg(long)]
    pub(crate) list: bool,
    /// Activations: .npy [L, N, d] or [N, d], .npz (one array per layer) or .safetensors.
    #[arg(long, required_unless_present = "list")]
    pub(crate) acts: Option<PathBuf>,
    /// Readout W_U ([V, d] .npy/.safetensors, a HuggingFace checkpoint directory, or a hub
    /// model id org/name); needed by pga and pc_readout_share.
    #[arg(long)]
    pub(crate) readout: Option<PathBuf>,
    /// Hub revision (branch such as step3000, tag or commit) when --readout is a hub id.
    #[arg(long, requires = "readout")]
    pub(crate) revision: Option<String>,
    /// A metric to compute: NAME, or NAME:JSON for options, e.g. 'pga:{"ccr":[1,5,10]}'.
    /// Repeat for several.
    #[arg(long = "metric", conflicts_with_all = ["all", "config"])]
    pub(crate) metrics: Vec<String>,
    /// Compute every registered metric with default options (readout metrics need --readout).
    #[arg(long, conflicts_with = "config")]
    pub(crate) all: bool,
    /// An analysis file (.toml or .json): k, null and the configured metrics.
    #[arg(long, conflicts_with_all = ["k", "n_null", "seed"])]
    pub(crate) config: Option<PathBuf>,
    /// Readout subspace dimension.
    #[arg(short = 'k', long)]
    pub(crate) k: Option<usize>,
    /// Number of random subspaces in the null (for pga).
    #[arg(long)]
    pub(crate) n_null: Option<usize>,
    /// Seed of the null draws.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Layers to analyse, e.g. 0,5,10-12 (default: all).
    #[arg(long)]
    pub(crate) layers: Option<String>,
    /// Keep only the first N rows of W_U (drop padding rows past the real vocabulary).
    #[arg(long)]
    pub(crate) vocab_rows: Option<usize>,
    /// Name of the readout tensor, overriding the architecture's default.
    #[arg(long)]
    pub(crate) readout_tensor: Option<String>,
    /// Model label in the `model` column (default: the activation file's stem).
    #[arg(long)]
    pub(crate) model: Option<String>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

pub(crate) fn run(args: &MetricsArgs, ctx: &Context) -> anyhow::Result<()> {
    if args.list {
        return list(&args.output);
    }
    let acts_path = args
        .acts
        .as_deref()
        .expect("clap requires --acts without --list");
    let analysis = analysis_from(args, ctx)?;
    analysis.check()?;
    anyhow::ensure!(
        !analysis.metrics.is_empty(),
        "no metrics chosen: pass --metric NAME (see `repgeom metrics --list`), --all or --config FILE"
    );
    let needs_readout = analysis.metrics.iter().any(|m| m.info().needs_readout);
    let needs_null = analysis.metrics.iter().any(|m| m.info().needs_null);
    if needs_readout && args.readout.is_none() {
        let names: Vec<&str> = analysis
            .metrics
            .iter()
            .filter(|m| m.info().needs_readout)
            .map(|m| m.info().name)
            .collect();
        let verb = if names.len() == 1 { "needs" } else { "need" };
        anyhow::bail!(
            "{} {verb} the readout: pass --readout W_U",
            names.join(", ")
        );
    }

    let layers = args
        .layers
        .as_deref()
        .map(super::parse_layers)
        .transpose()?;
    let acts = repgeom_io::read_activations(acts_path, layers.as_deref())?;
    anyhow::ensure!(
        !acts.layers.is_empty(),
        "{}: no layers to analyse",
        acts_path.display()
    );
    let d = acts.layers[0].acts.cols;
    let model = args.model.clone().unwrap_or_else(|| model_label(acts_path));
    let basis = match &args.readout {
        Some(path) if needs_readout => Some(readout_basis(
            path,
            &ReadoutChoice {
                prep: repgeom_io::ReadoutPrep {
                    options: repgeom_io::ReadoutOptions {
                        vocab_rows: args.vocab_rows,
                        tensor: args.readout_tensor.clone(),
                    },
                    ..Default::default()
                },
                revision: args.revision.clone(),
            },
            analysis.k,
            d,
            acts_path,
            ctx,
        )?),
        _ => None,
    };
    let null =
        if needs_null {
            let params = analysis.null.clone().check()?;
            Some(NullBases::draw(d, analysis.k, &params).map_err(|e| {
                anyhow::anyhow!("{e} (hidden size d = {d} of {})", acts_path.display())
            })?)
        } else {
            None
        };

    let bar = ctx.progress(
        (acts.layers.len() * analysis.metrics.len()) as u64,
        "metrics",
    );
    let mut rows = Vec::new();
    for layer in &acts.layers {
        let m = &layer.acts;
        let what = format!(
            "{}: {} [{}, {}]",
            acts_path.display(),
            layer.tensor,
            m.rows,
            m.cols
        );
        let view = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
        let mut input = LayerInput::new(view, what, ctx.par())?;
        if let Some(b) = &basis {
            input = input.with_readout(b.as_ref())?;
        }
        if let Some(n) = &null {
            input = input.with_null(n)?;
        }
        for metric in &analysis.metrics {
            bar.set_message(format!("layer {} {}", layer.layer, metric.info().name));
            let values = metric.compute(&input)?;
            rows.extend(values.into_iter().map(|v| {
                (
                    vec![Cell::Text(model.clone()), Cell::Int(layer.layer as i64)],
                    v,
                )
            }));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    args.output.emit(&metric_table(&["model", "layer"], rows))
}

/// The analysis to run: from --config, or from --metric/--all and the flags.
fn analysis_from(args: &MetricsArgs, ctx: &Context) -> anyhow::Result<AnalysisParams> {
    if let Some(path) = &args.config {
        return read_analysis(path);
    }
    let defaults = AnalysisParams::default();
    let metrics: Vec<Box<dyn Metric>> = if args.all {
        let all = repgeom_metrics::all_metrics();
        if args.readout.is_some() {
            all
        } else {
            let (keep, skip): (Vec<_>, Vec<_>) =
                all.into_iter().partition(|m| !m.info().needs_readout);
            let skipped: Vec<&str> = skip.iter().map(|m| m.info().name).collect();
            ctx.note(format!(
                "--all without --readout skips {}",
                skipped.join(", ")
            ));
            keep
        }
    } else {
        args.metrics
            .iter()
            .map(|spec| parse_metric_spec(spec))
            .collect::<anyhow::Result<_>>()?
    };
    Ok(AnalysisParams {
        k: args.k.unwrap_or(defaults.k),
        null: NullParams {
            n_null: args.n_null.unwrap_or(defaults.null.n_null),
            seed: args.seed.unwrap_or(defaults.null.seed),
        },
        metrics,
        pair_metrics: Vec::new(),
    })
}

fn parse_metric_spec(spec: &str) -> anyhow::Result<Box<dyn Metric>> {
    parse_spec(spec, repgeom_metrics::metric_from_config)
}

/// `--list`: every registered metric and pair metric.
fn list(output: &OutputArgs) -> anyhow::Result<()> {
    let mut entries: Vec<(&str, MetricInfo, String)> = Vec::new();
    for m in repgeom_metrics::all_metrics() {
        entries.push((
            "layer",
            m.info(),
            describe_options(m.info(), &options_of(&m)),
        ));
    }
    for m in repgeom_metrics::all_pair_metrics() {
        entries.push((
            "pair",
            m.info(),
            describe_options(m.info(), &options_of(&m)),
        ));
    }
    match output.format {
        None | Some(Format::Table) if output.out.is_none() => {
            let mut text = String::new();
            for (kind, info, options) in &entries {
                let needs = needs(info);
                text.push_str(&format!("{}  ({kind} metric{needs})\n", info.name));
                text.push_str(&format!("    {}\n", info.summary));
                text.push_str(&format!("    options: {options}\n"));
                text.push_str(&format!("    source:  {}\n", info.source));
            }
            #[allow(clippy::print_stdout)] // the CLI's output channel
            {
                print!("{text}");
            }
            Ok(())
        }
        _ => {
            let table = Table {
                columns: crate::output::names(&[
                    "name",
                    "kind",
                    "summary",
                    "options",
                    "needs",
                    "rotation_invariant",
                    "source",
                ]),
                rows: entries
                    .iter()
                    .map(|(kind, info, options)| {
                        vec![
                            Cell::Text(info.name.into()),
                            Cell::Text((*kind).into()),
                            Cell::Text(info.summary.into()),
                            Cell::Text(options.clone()),
                            Cell::Text(needs(info).trim_start_matches(", needs ").into()),
                            Cell::Text(info.rotation_invariant.to_string()),
                            Cell::Text(info.source.into()),
                        ]
                    })
                    .collect(),
            };
            output.emit(&table)
        }
    }
}

fn needs(info: &MetricInfo) -> String {
    let mut parts = Vec::new();
    if info.needs_readout {
        parts.push("readout");
    }
    if info.needs_null {
        parts.push("null");
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", needs {}", parts.join(" + "))
    }
}

/// `name = default (help); …` from the serialised default configuration.
fn describe_options(
    info: MetricInfo,
    defaults: &std::collections::BTreeMap<String, serde_json::Value>,
) -> String {
    let parts: Vec<String> = info
        .options
        .iter()
        .map(|o| {
            let default = defaults
                .get(o.name)
                .map_or_else(|| "null".to_owned(), |v| v.to_string());
            format!("{} = {default} ({})", o.name, o.help)
        })
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join("; ")
    }
}

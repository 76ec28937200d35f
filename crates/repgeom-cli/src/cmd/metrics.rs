//! `repgeom metrics`: registered per-layer metrics of one activation file, as a tidy long table
//! (one row per layer × metric × variant), or `--list` to describe the registry.

use std::path::PathBuf;

use repgeom_linalg::MatRef;
use repgeom_metrics::analysis::{ModelContext, NullSource, Readout, k_values};
use repgeom_metrics::{AnalysisParams, Metric, MetricInfo, options_of};

use crate::args::{ActsArgs, NullArgs, ReadoutArgs};
use crate::context::{Context, flag_error};
use crate::load::{model_label, parse_spec, read_analysis, read_readout};
use crate::output::{Cell, CellTable, Format, OutputArgs, metric_row, tidy_cells};

/// Arguments of `repgeom metrics`.
#[derive(clap::Args, Debug)]
// `--acts` is required, except by `--list`.
#[command(mut_arg("acts", |a| a.required(false).required_unless_present("list")))]
pub(crate) struct MetricsArgs {
    /// List every registered metric (name, meaning, options with defaults, source) and exit.
    #[arg(long)]
    pub(crate) list: bool,
    #[command(flatten)]
    pub(crate) input: Option<ActsArgs>,
    /// Readout W_U ([V, d] .npy/.safetensors, a HuggingFace checkpoint directory, or a hub
    /// model id org/name); needed by pga and pc_readout_share.
    #[arg(long)]
    pub(crate) readout: Option<PathBuf>,
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
    /// Readout subspace dimension as a fraction of the hidden size: k = round(f·d) (instead
    /// of -k), so that z is comparable across widths.
    #[arg(long, conflicts_with_all = ["k", "config"])]
    pub(crate) k_frac: Option<f64>,
    /// Memory budget of the PGA engine for metrics whose options set none, e.g. 4GiB
    /// (default: half the machine's RAM, as in `repgeom pga`).
    #[arg(long, value_parser = crate::context::parse_bytes)]
    pub(crate) max_memory: Option<u64>,
    /// Model label in the `model` column (default: the activation file's stem).
    #[arg(long)]
    pub(crate) model: Option<String>,
    #[command(flatten)]
    pub(crate) readout_args: ReadoutArgs,
    #[command(flatten)]
    pub(crate) null_args: NullArgs,
    #[command(flatten)]
    pub(crate) device: crate::args::DeviceArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

pub(crate) fn run(args: &MetricsArgs, ctx: &Context) -> anyhow::Result<()> {
    if args.list {
        return list(&args.output);
    }
    let input = args.input.as_ref().ok_or_else(|| {
        anyhow::anyhow!("pass --acts FILE (or --list to describe the registered metrics)")
    })?;
    let acts_path = input.acts.as_path();
    let analysis = analysis_from(args, ctx)?;
    analysis.check()?;
    anyhow::ensure!(
        !analysis.metrics.is_empty(),
        "no metrics chosen: pass --metric NAME (see `repgeom metrics --list`), --all or --config FILE"
    );
    let (needs_readout, needs_null) = repgeom_metrics::analysis::needs(
        &analysis.metrics,
        args.readout.is_some(),
        "--readout W_U",
    )?;

    let device = args.device.open()?;
    let acts = input.read()?;
    let d = acts.layers[0].acts.cols;
    let model = args.model.clone().unwrap_or_else(|| model_label(acts_path));
    let k = match args.k_frac {
        Some(f) => k_values(&[], Some(f), d).map_err(flag_error)?[0],
        None => analysis.k,
    };
    let w_u = match &args.readout {
        Some(path) if needs_readout => Some(read_readout(
            path,
            &args.readout_args.choice(),
            k,
            d,
            acts_path,
            ctx,
        )?),
        _ => None,
    };
    let model_ctx = ModelContext::new(
        d,
        k,
        w_u.as_ref()
            .map(|w| Readout::Unembedding(MatRef::from_row_major_slice(&w.data, w.rows, w.cols))),
        needs_null.then_some(NullSource::Draw(analysis.null.clone())),
        &acts_path.display().to_string(),
        ctx.par(),
    )?
    .with_memory_budget(Some(
        args.max_memory
            .unwrap_or_else(repgeom_io::default_memory_budget),
    ))
    .with_device(device);

    let bar = ctx.progress(
        (acts.layers.len() * analysis.metrics.len()) as u64,
        "metrics",
    );
    let n_layers = crate::output::layer_bound(&acts);
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
        let input = model_ctx.layer(MatRef::from_row_major_slice(&m.data, m.rows, m.cols), what)?;
        for metric in &analysis.metrics {
            bar.set_message(format!("layer {} {}", layer.layer, metric.info().name));
            let values = metric.compute(&input)?;
            rows.extend(
                values
                    .into_iter()
                    .map(|v| metric_row(&model, d, (layer.layer, n_layers), v)),
            );
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    args.output.emit(&tidy_cells(&rows, &["model", "layer"]))
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
        null: args.null_args.over(defaults.null),
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
            let table = CellTable::new(
                crate::output::names(&[
                    "name",
                    "kind",
                    "summary",
                    "options",
                    "needs",
                    "rotation_invariant",
                    "source",
                ]),
                entries
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
            );
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

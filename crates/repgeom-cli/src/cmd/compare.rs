//! `repgeom compare`: cross-model pair metrics (distance agreement, linear CKA) between the
//! layers of two activation files over the same inputs, as a layer × layer table or along the
//! matched-depth diagonal.

use std::path::PathBuf;

use anyhow::Context as _;

use repgeom_extract::PointsRecord;
use repgeom_linalg::MatRef;
use repgeom_metrics::analysis::{ModelContext, ModelPair, PairModel, Readout, pair_needs};
use repgeom_metrics::calibrate::{Aggregate, CompareSettings};
use repgeom_metrics::{LayerInput, PairMetric, layer_pairs};
use repgeom_report::Cell;

use crate::args::{NullArgs, ReadoutPrepArgs};
use crate::context::Context;
use crate::load::{ReadoutChoice, model_label, parse_spec, read_analysis, read_readout};
use crate::output::{OutputArgs, metric_row, tidy_cells};

/// Arguments of `repgeom compare`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// Activations of model A.
    #[arg(long)]
    pub(crate) a: PathBuf,
    /// Readout W_U of model A (needed by distance_spearman's readout and random variants).
    #[arg(long)]
    pub(crate) readout_a: Option<PathBuf>,
    /// Activations of model B, over the same inputs (same N, same order).
    #[arg(long)]
    pub(crate) b: PathBuf,
    /// Readout W_U of model B.
    #[arg(long)]
    pub(crate) readout_b: Option<PathBuf>,
    /// A pair metric: NAME or NAME:JSON (default: every registered pair metric). Repeatable.
    #[arg(long = "metric", conflicts_with = "config")]
    pub(crate) metrics: Vec<String>,
    /// An analysis file (.toml or .json): k, null and pair_metrics.
    #[arg(long, conflicts_with_all = ["k", "n_null", "seed"])]
    pub(crate) config: Option<PathBuf>,
    /// Only matched-depth pairs: layer i of A against the layer of B at the same relative depth.
    #[arg(long)]
    pub(crate) diagonal: bool,
    /// Layers of A, e.g. 0,5,10-12 (default: all).
    #[arg(long)]
    pub(crate) layers_a: Option<String>,
    /// Layers of B (default: all).
    #[arg(long)]
    pub(crate) layers_b: Option<String>,
    /// Readout subspace dimension (both models).
    #[arg(short = 'k', long)]
    pub(crate) k: Option<usize>,
    /// Keep only the first N rows of A's W_U.
    #[arg(long)]
    pub(crate) vocab_rows_a: Option<usize>,
    /// Keep only the first N rows of B's W_U.
    #[arg(long)]
    pub(crate) vocab_rows_b: Option<usize>,
    /// Label of model A (default: file stem).
    #[arg(long)]
    pub(crate) model_a: Option<String>,
    /// Label of model B (default: file stem).
    #[arg(long)]
    pub(crate) model_b: Option<String>,
    /// Permutations of B's points for every metric's null (the same draws for every layer
    /// pair; 0 = none) [default: each metric's own n_perm: 100 for mutual_knn and cknna, 0 for
    /// the others].
    #[arg(long)]
    pub(crate) n_perm: Option<usize>,
    /// Report an aggregate over the layer × layer table with its permutation null: max (the
    /// best-matching pair), row_max_mean, hungarian (best one-to-one matching) or diagonal
    /// (matched depth). Repeatable; needs --n-perm.
    #[arg(long = "aggregate", value_parser = parse_aggregate)]
    pub(crate) aggregates: Vec<Aggregate>,
    /// Level of each aggregate's critical value tau (the null's 1 − alpha order statistic).
    #[arg(long, default_value_t = CompareSettings::default().alpha)]
    pub(crate) alpha: f64,
    /// Also draw the layer × layer heat map of every metric (figure 10 of the report: cells
    /// with a permutation p <= 0.05 dotted) to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) readout_prep: ReadoutPrepArgs,
    #[command(flatten)]
    pub(crate) null_args: NullArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    #[command(flatten)]
    pub(crate) device: crate::args::DeviceArgs,
}

/// One side of the comparison, loaded.
struct Side {
    label: String,
    acts: repgeom_io::Activations,
    /// The highest layer read + 1 (bounds the rows' layer).
    n_layers: usize,
    /// Its `W_U`, prepared, when a metric uses the readout and one was given.
    w_u: Option<repgeom_io::Matrix>,
}

impl Side {
    /// Every layer read, as views.
    fn views(&self) -> Vec<MatRef<'_, f32>> {
        (self.acts.layers.iter())
            .map(|l| MatRef::from_row_major_slice(&l.acts.data, l.acts.rows, l.acts.cols))
            .collect()
    }

    /// The side as one model of the pair.
    fn model<'a>(
        &'a self,
        layers: &'a [MatRef<'a, f32>],
        k: usize,
        what: &'a str,
    ) -> PairModel<'a> {
        PairModel {
            layers,
            k,
            readout: (self.w_u.as_ref()).map(|w| {
                Readout::Unembedding(MatRef::from_row_major_slice(&w.data, w.rows, w.cols))
            }),
            what,
        }
    }
}

pub(crate) fn run(args: &CompareArgs, ctx: &Context) -> anyhow::Result<()> {
    // The device first: a missing one fails before any input is read.
    let device = args.device.open()?;
    let mut analysis = match &args.config {
        Some(path) => read_analysis(path)?,
        None => repgeom_metrics::AnalysisParams::default(),
    };
    if args.config.is_none() {
        analysis.k = args.k.unwrap_or(analysis.k);
        analysis.null = args.null_args.over(analysis.null);
        analysis.pair_metrics = if args.metrics.is_empty() {
            repgeom_metrics::all_pair_metrics()
        } else {
            args.metrics
                .iter()
                .map(|s| parse_spec(s, repgeom_metrics::pair_metric_from_config))
                .collect::<anyhow::Result<_>>()?
        };
    }
    if let Some(n_perm) = args.n_perm {
        repgeom_metrics::calibrate::set_n_perm(&mut analysis.pair_metrics, n_perm);
    }
    analysis.check()?;
    let settings = CompareSettings {
        aggregates: args.aggregates.clone(),
        alpha: args.alpha,
    };
    settings.check()?;
    if let Some(path) = &args.plot {
        plot_format(path)?;
    }
    let metrics: &[Box<dyn PairMetric>] = &analysis.pair_metrics;
    anyhow::ensure!(!metrics.is_empty(), "no pair metrics chosen");
    let (needs_readout, _) = pair_needs(metrics);

    let load = |path: &PathBuf,
                layers: &Option<String>,
                readout: &Option<PathBuf>,
                vocab_rows: Option<usize>,
                label: &Option<String>|
     -> anyhow::Result<Side> {
        let layers = layers
            .as_deref()
            .map(crate::context::parse_layers)
            .transpose()?;
        let acts = repgeom_io::read_activations(path, layers.as_deref())?;
        anyhow::ensure!(
            !acts.layers.is_empty(),
            "{}: no layers to compare",
            path.display()
        );
        let d = acts.layers[0].acts.cols;
        // W_U only where a metric uses it; a missing one is the pair's error (ModelPair::new).
        let w_u = match readout.as_deref().filter(|_| needs_readout) {
            None => None,
            Some(r) => Some(read_readout(
                r,
                &ReadoutChoice {
                    prep: repgeom_io::ReadoutPrep {
                        options: repgeom_io::ReadoutOptions {
                            vocab_rows,
                            tensor: None,
                        },
                        fold_norm: args.readout_prep.readout_fold_norm,
                        center: args.readout_prep.readout_center,
                    },
                    revision: None,
                },
                analysis.k,
                d,
                path,
                ctx,
            )?),
        };
        Ok(Side {
            label: label.clone().unwrap_or_else(|| model_label(path)),
            n_layers: crate::output::layer_bound(&acts),
            acts,
            w_u,
        })
    };
    let a = load(
        &args.a,
        &args.layers_a,
        &args.readout_a,
        args.vocab_rows_a,
        &args.model_a,
    )?;
    let b = load(
        &args.b,
        &args.layers_b,
        &args.readout_b,
        args.vocab_rows_b,
        &args.model_b,
    )?;

    same_points(&a, &args.a, &b, &args.b)?;

    // Both models' readout subspaces and null bases (B's from seed + 1), and the points that
    // are the same input twice, judged on every layer read of both files.
    let (views_a, views_b) = (a.views(), b.views());
    let (what_a, what_b) = (args.a.display().to_string(), args.b.display().to_string());
    let pair = ModelPair::new(
        metrics,
        a.model(&views_a, analysis.k, &what_a),
        b.model(&views_b, analysis.k, &what_b),
        analysis.null.clone(),
        ctx.par(),
    )?
    .with_memory_budget(Some(repgeom_io::default_memory_budget()))
    .with_device(device);

    let pairs = layer_pairs(a.acts.layers.len(), b.acts.layers.len(), args.diagonal);
    // One input per layer read, paired or not: its cached work (centring, CCR, singular
    // values) serves every pair and every metric it is part of.
    let inputs_a = (a.acts.layers.iter())
        .map(|l| side_input(pair.a(), &args.a, l))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let inputs_b = (b.acts.layers.iter())
        .map(|l| side_input(pair.b(), &args.b, l))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (refs_a, refs_b): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
        (inputs_a.iter().collect(), inputs_b.iter().collect());
    let bar = ctx.progress(metrics.len() as u64, "compare");
    let out = pair.compare(metrics, &refs_a, &refs_b, &pairs, &settings, &mut |name| {
        bar.set_message(name.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    let mut rows: Vec<_> = (out.pairs.into_iter())
        .map(|r| {
            let (la, lb) = (&a.acts.layers[r.a], &b.acts.layers[r.b]);
            metric_row(&a.label, la.acts.cols, (la.layer, a.n_layers), r.value)
                .with_other_model(&b.label)
                .with_extra("other_layer", lb.layer as f64)
        })
        .collect();
    let n_pair_rows = rows.len();
    if let Some(path) = &args.plot {
        plot(&rows, path)?;
    }
    let mut names = Vec::new();
    for r in out.aggregates {
        names.push(r.aggregate.name());
        rows.push(
            metric_row(
                &a.label,
                a.acts.layers[0].acts.cols,
                (0, a.n_layers),
                r.value,
            )
            .with_other_model(&b.label),
        );
    }
    let leading = ["model", "layer", "other_model", "other_layer"];
    let mut table = tidy_cells(&rows, &leading);
    if !names.is_empty() {
        // An `aggregate` column after the leading ones: blank for a layer pair's row, the
        // aggregate's name (and blank layers) for an aggregate's.
        let at = leading.len();
        table.columns.insert(at, "aggregate".into());
        for (r, cells) in table.rows.iter_mut().enumerate() {
            let name = r.checked_sub(n_pair_rows).map_or("", |k| names[k]);
            if !name.is_empty() {
                cells[1] = Cell::float(f64::NAN, 0);
                cells[3] = Cell::float(f64::NAN, 0);
            }
            cells.insert(at, Cell::Text(name.into()));
        }
    }
    args.output.emit(&table)
}

/// Figure 10 of the layer × layer rows, written atomically as SVG or PNG by `path`'s extension.
fn plot(rows: &[repgeom_report::Row], path: &std::path::Path) -> anyhow::Result<()> {
    let ext = plot_format(path)?;
    let table = repgeom_report::ResultsTable::new(rows.to_vec())?;
    let fig =
        repgeom_report::fig10_layer_heatmaps(&table, &repgeom_report::FigureOptions::default())?;
    let bytes = match ext {
        "png" => fig.png()?,
        _ => fig.svg.into_bytes(),
    };
    repgeom_io::atomic_write(path, |w| w.write_all(&bytes))
        .with_context(|| format!("writing {}", path.display()))
}

/// `svg` or `png`, from `--plot`'s extension (anything else is an error).
fn plot_format(path: &std::path::Path) -> anyhow::Result<&'static str> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok("svg"),
        Some("png") => Ok("png"),
        _ => anyhow::bail!(
            "--plot {}: the file must end in .svg or .png",
            path.display()
        ),
    }
}

fn parse_aggregate(s: &str) -> Result<Aggregate, String> {
    s.parse().map_err(|e: repgeom_metrics::Error| e.to_string())
}

/// The two files hold the same points in the same order, by the library's one rule
/// ([`repgeom_extract::same_points`]: one design, the same count, positions, tokens and word
/// windows, where both files record them; `.npy` files record only their count).
fn same_points(
    a: &Side,
    path_a: &std::path::Path,
    b: &Side,
    path_b: &std::path::Path,
) -> anyhow::Result<()> {
    let record = |side: &Side, p: &std::path::Path| -> anyhow::Result<PointsRecord> {
        PointsRecord::of_file(p, side.acts.layers[0].acts.rows)
            .with_context(|| p.display().to_string())
    };
    let (ra, rb) = (record(a, path_a)?, record(b, path_b)?);
    repgeom_extract::same_points(&ra, &rb)
        .map_err(|e| anyhow::anyhow!("{} against {}: {e}", path_a.display(), path_b.display()))
}

/// One layer of one side as a metric input, with that side's readout basis and null bases.
fn side_input<'a>(
    model: &'a ModelContext,
    path: &std::path::Path,
    layer: &'a repgeom_io::LayerActs,
) -> anyhow::Result<LayerInput<'a>> {
    let m = &layer.acts;
    let what = format!(
        "{}: {} [{}, {}]",
        path.display(),
        layer.tensor,
        m.rows,
        m.cols
    );
    let view = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
    Ok(model.layer(view, what)?)
}

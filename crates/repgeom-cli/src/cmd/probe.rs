//! `repgeom probe`: per-layer linear-probe accuracy, printed as tidy rows
//! (model, layer, metric, value) that join with PGA results by layer.

use std::path::PathBuf;

use anyhow::{Context, bail};
use repgeom_metrics::MetricValue;
use repgeom_probe::{Features, Labels, ProbeParams, Solver, Split, StopReason};

use crate::output::{Cell, OutputArgs, Row, metric_row, tidy_cells};

/// Arguments of `repgeom probe`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProbeArgs {
    /// Per-layer features, one row per labelled example (.npy, .npz or .safetensors; already pooled).
    #[arg(long, value_name = "F")]
    pub(crate) features: PathBuf,
    /// Labels: .npy of integers, a CSV column, or the AG News CSV (no header; class 1-4, title, description).
    #[arg(long, value_name = "L")]
    pub(crate) labels: PathBuf,
    /// Label column of a CSV with a header.
    #[arg(long, value_name = "NAME")]
    pub(crate) label_column: Option<String>,
    /// Share of each class used for training when no split file is given.
    #[arg(long, default_value_t = 0.8, conflicts_with = "split_file")]
    pub(crate) train_frac: f64,
    /// Given split: one line per example, `train`/`test` (or 1/0).
    #[arg(long, value_name = "S")]
    pub(crate) split_file: Option<PathBuf>,
    /// Cross-validation folds for choosing the L2 strength.
    #[arg(long, default_value_t = 3)]
    pub(crate) folds: usize,
    /// L2 strengths to cross-validate (comma-separated; objective mean cross-entropy + λ/2 ‖W‖²).
    #[arg(long, value_delimiter = ',', default_values_t = repgeom_probe::DEFAULT_GRID.to_vec())]
    pub(crate) grid: Vec<f64>,
    /// Seed of the split and folds.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// L-BFGS iteration cap per fit.
    #[arg(long, default_value_t = 100)]
    pub(crate) max_iter: usize,
    /// Solver of every fit: lbfgs (the in-house L-BFGS, the default) or linfa
    /// (linfa-logistic: same objective and accuracy, much slower; see docs/probes.md).
    #[arg(long, default_value = "lbfgs")]
    pub(crate) solver: Solver,
    /// Skip the random-label control task (no probe_control_accuracy / probe_selectivity rows;
    /// halves the fitting time).
    #[arg(long)]
    pub(crate) no_control: bool,
    /// Layers to probe, e.g. 0,5,10-12 (default: all in the file).
    #[arg(long)]
    pub(crate) layers: Option<String>,
    /// Model name in the output rows (default: the features file stem).
    #[arg(long)]
    pub(crate) model: Option<String>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// Run `repgeom probe`.
pub(crate) fn run(args: &ProbeArgs, ctx: &crate::context::Context) -> anyhow::Result<()> {
    let params = ProbeParams {
        train_frac: args.train_frac,
        folds: args.folds,
        grid: args.grid.clone(),
        seed: args.seed,
        max_iter: args.max_iter,
        control: !args.no_control,
        solver: args.solver,
        ..ProbeParams::default()
    }
    .check()?;
    let raw = repgeom_io::read_labels(&args.labels, args.label_column.as_deref())
        .with_context(|| format!("reading labels {}", args.labels.display()))?;
    let labels = Labels::new(raw.values, raw.class_names)
        .with_context(|| format!("labels {}", args.labels.display()))?;
    let split = match &args.split_file {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading split file {}", p.display()))?;
            Split::parse(&text).with_context(|| format!("split file {}", p.display()))?
        }
        None => Split::Stratified,
    };
    let plan = params.plan(labels, &split)?;
    let layers = args
        .layers
        .as_deref()
        .map(crate::context::parse_layers)
        .transpose()?;
    let acts = repgeom_io::read_activations(&args.features, layers.as_deref())
        .with_context(|| format!("reading features {}", args.features.display()))?;
    if acts.layers.is_empty() {
        bail!("{}: no layers to probe", args.features.display());
    }
    let model = args.model.clone().unwrap_or_else(|| {
        args.features
            .file_stem()
            .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    let mut layers = Vec::with_capacity(acts.layers.len());
    for l in &acts.layers {
        let f = Features::new(l.layer, l.acts.rows, l.acts.cols, &l.acts.data)
            .with_context(|| format!("{} tensor {}", args.features.display(), l.tensor))?;
        let r = plan
            .probe_layer(l.layer, f)
            .with_context(|| format!("{} tensor {}", args.features.display(), l.tensor))?;
        let fits = std::iter::once(("probe", r.stop))
            .chain(r.control.as_ref().map(|c| ("control probe", c.stop)));
        for (which, stop) in fits {
            let why = match stop {
                StopReason::GradientTolerance => continue,
                StopReason::MaxIter => format!("L-BFGS stopped at --max-iter {}", args.max_iter),
                StopReason::LineSearchFailed => "L-BFGS stopped on a failed line search".to_owned(),
                StopReason::Stalled => "L-BFGS stopped when the loss stalled".to_owned(),
                StopReason::LinfaStopped => format!(
                    "linfa-logistic stopped (at --max-iter {} or on its cost tolerance)",
                    args.max_iter
                ),
            };
            ctx.note(format!(
                "layer {}: {which} final fit not converged: {why} before the gradient \
                 tolerance (column converged = 0)",
                r.layer
            ));
        }
        let edge = r
            .cv_accuracy
            .first()
            .zip(r.cv_accuracy.last())
            .is_some_and(|(a, b)| r.chosen_l2 == a.0 || r.chosen_l2 == b.0);
        if edge {
            ctx.note(format!(
                "layer {}: chosen l2 {:e} is at the edge of --grid; consider widening it",
                r.layer, r.chosen_l2
            ));
        }
        layers.push(r);
    }
    let report = repgeom_probe::ProbeReport {
        class_names: plan.labels().class_names().to_vec(),
        layers,
    };
    // Same long format as `repgeom metrics`: model, layer, metric, variant, value, null
    // columns (empty here), then n_test / n_train, so reports join probes with PGA by layer;
    // then, appended, the 95% Wilson interval (accuracies) and whether the fit converged.
    let n_of: std::collections::BTreeMap<usize, (usize, usize)> = report
        .layers
        .iter()
        .map(|l| (l.layer, (l.n_train, l.n_test)))
        .collect();
    let tidy = report.tidy(&model);
    let appended: Vec<[Cell; 3]> = tidy
        .iter()
        .map(|r| {
            let (lo, hi) = r.ci.unwrap_or((f64::NAN, f64::NAN));
            let converged = r
                .converged
                .map_or(Cell::float(f64::NAN, 6), |c| Cell::Int(i64::from(c)));
            [Cell::float(lo, 6), Cell::float(hi, 6), converged]
        })
        .collect();
    let d = acts.layers[0].acts.cols;
    let n_layers = crate::output::layer_bound(&acts);
    let rows: Vec<Row> = tidy
        .into_iter()
        .map(|r| {
            let (n_train, n_test) = n_of[&r.layer];
            metric_row(
                &r.model,
                d,
                (r.layer, n_layers),
                MetricValue::new(&r.metric, "", r.value),
            )
            .with_extra("n_train", n_train as f64)
            .with_extra("n_test", n_test as f64)
        })
        .collect();
    let mut table = tidy_cells(&rows, &["model", "layer"]);
    table
        .columns
        .extend(crate::output::names(&["ci_lo", "ci_hi", "converged"]));
    for (row, extra) in table.rows.iter_mut().zip(appended) {
        row.extend(extra);
    }
    args.output.emit(&table)
}

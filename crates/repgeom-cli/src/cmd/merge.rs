//! `repgeom merge`: accumulator files of shards of a corpus (`repgeom extract
//! --save-accumulators`, one per shard of a SLURM array) merged exactly into one, and the
//! metrics of every token of all shards: linear CKA for a pair, the spectral metrics for a
//! hidden state's covariance.
#![allow(clippy::print_stdout)] // the command's report

use std::path::PathBuf;

use repgeom_metrics::{CkaAccumulator, CovarianceAccumulator};

use crate::accumulators::{AccFile, Origin, read, spectral_metrics, write};
use crate::context::Context;

/// Arguments of `repgeom merge`.
#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// Accumulator files of the same model, hidden states and settings (shards of a corpus).
    #[arg(required = true, num_args = 1..)]
    inputs: Vec<PathBuf>,
    /// The metrics of every token of all shards: a table (.csv, .json or .txt).
    #[arg(long)]
    out: PathBuf,
    /// Also write the merged accumulator (to merge further, or to keep).
    #[arg(long)]
    save: Option<PathBuf>,
}

pub(crate) fn run(args: &MergeArgs, _ctx: &Context) -> anyhow::Result<()> {
    let files = (args.inputs.iter())
        .map(|p| read(p))
        .collect::<anyhow::Result<Vec<AccFile>>>()?;
    let first = &files[0];
    for f in &files[1..] {
        check_same(first, f)?;
    }
    let origin: &Origin = &first.origin;
    let what = |f: &AccFile| f.path.display().to_string();
    let (layer, other) = parse_layers(&origin.layers)?;
    let (state, rows) = match first.state.kind.as_str() {
        "covariance" => {
            let mut acc = CovarianceAccumulator::from_state(&first.state, &what(first))?;
            for f in &files[1..] {
                acc.merge(&CovarianceAccumulator::from_state(&f.state, &what(f))?)?;
            }
            let spectrum = acc.spectrum()?;
            let mut rows = Vec::new();
            for m in spectral_metrics() {
                for v in m.compute_spectrum(&spectrum)? {
                    rows.push(crate::output::metric_row(
                        &origin.model,
                        origin.d,
                        (layer, origin.n_hidden),
                        v.with_extra("n_tokens", acc.n() as f64),
                    ));
                }
            }
            (acc.state(), rows)
        }
        "cka" => {
            let mut acc = CkaAccumulator::from_state(&first.state, &what(first))?;
            for f in &files[1..] {
                acc.merge(&CkaAccumulator::from_state(&f.state, &what(f))?)?;
            }
            let cka = acc.finish(&format!("hidden states {}", origin.layers))?;
            let rows = (cka.values().into_iter())
                .map(|v| {
                    crate::output::metric_row(&origin.model, origin.d, (layer, origin.n_hidden), v)
                        .with_extra("other_layer", other.unwrap_or(layer) as f64)
                })
                .collect();
            (acc.state(), rows)
        }
        kind => anyhow::bail!(
            "{}: accumulator kind {kind:?}, expected covariance or cka",
            what(first)
        ),
    };
    let keys: &[&str] = if first.state.kind == "cka" {
        &["model", "layer", "other_layer"]
    } else {
        &["model", "layer"]
    };
    let table = crate::output::tidy_cells(&rows, keys);
    crate::output::emit(&table, None, Some(&args.out))?;
    if let Some(path) = &args.save {
        write(path, &state, origin)?;
    }
    println!(
        "merged {} accumulator files ({} of hidden states {} of {}, {} tokens) into {}",
        files.len(),
        first.state.kind,
        origin.layers,
        origin.model,
        state.n,
        args.out.display()
    );
    Ok(())
}

/// Shards merge only when they measure the same thing: kind, model, width, hidden states and
/// extraction settings.
fn check_same(a: &AccFile, b: &AccFile) -> anyhow::Result<()> {
    let fields = [
        ("kind", a.state.kind.clone(), b.state.kind.clone()),
        ("model", a.origin.model.clone(), b.origin.model.clone()),
        ("d", a.origin.d.to_string(), b.origin.d.to_string()),
        (
            "hidden states",
            a.origin.layers.clone(),
            b.origin.layers.clone(),
        ),
        (
            "settings",
            a.origin.settings.clone(),
            b.origin.settings.clone(),
        ),
    ];
    for (field, x, y) in fields {
        anyhow::ensure!(
            x == y,
            "cannot merge {} and {}: {field} differ ({x} vs {y}); shards of one corpus through one model and hidden state, with the same settings, merge",
            a.path.display(),
            b.path.display()
        );
    }
    Ok(())
}

/// `3` or `0:6` (a pair).
fn parse_layers(s: &str) -> anyhow::Result<(usize, Option<usize>)> {
    let bad = || anyhow::anyhow!("accumulator metadata layers = {s:?}: expected 3 or 0:6");
    match s.split_once(':') {
        Some((a, b)) => Ok((
            a.parse().map_err(|_| bad())?,
            Some(b.parse().map_err(|_| bad())?),
        )),
        None => Ok((s.parse().map_err(|_| bad())?, None)),
    }
}

//! `repgeom merge`: accumulator files of shards of a corpus (`repgeom extract
//! --save-accumulators`, one folder per shard of a SLURM array) merged exactly, and the metrics
//! of every token of all shards: linear CKA for a pair, the spectral metrics for a hidden
//! state's covariance. The files of one accumulator (kind and hidden states) are merged
//! together; a run may give several accumulators at once (the shards' folders), each shard
//! holding each of them.
#![allow(clippy::print_stdout)] // the command's report

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use repgeom_metrics::{AccumulatorState, CkaAccumulator, CovarianceAccumulator};

use crate::accumulators::{AccFile, Origin, file_stem, read, spectral_metrics, write};
use crate::context::Context;
use crate::output::Row;

/// Arguments of `repgeom merge`.
#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// Accumulator files, or folders of them (each shard's `--save-accumulators` folder), of the
    /// same model and settings: the files of each accumulator (kind and hidden states) are
    /// merged, and every shard must hold every accumulator.
    #[arg(required = true, num_args = 1..)]
    inputs: Vec<PathBuf>,
    /// The metrics of every token of all shards, every accumulator's rows: a table (.csv,
    /// .json or .txt).
    #[arg(long)]
    out: PathBuf,
    /// Also write the merged accumulators (to merge further, or to keep): a file when the
    /// inputs hold one accumulator, else a folder of files named as `extract
    /// --save-accumulators` names them.
    #[arg(long)]
    save: Option<PathBuf>,
}

/// What identifies one accumulator among a shard's files: its kind and hidden states (a layer,
/// or a pair), ordered by hidden state.
type Accumulator = (String, (usize, Option<usize>));

/// One accumulator merged over its shards.
struct Merged {
    origin: Origin,
    state: AccumulatorState,
    rows: Vec<Row>,
    files: usize,
}

pub(crate) fn run(args: &MergeArgs, _ctx: &Context) -> anyhow::Result<()> {
    let mut paths = Vec::new();
    for p in &args.inputs {
        paths.extend(expand(p)?);
    }
    let mut seen = BTreeMap::new();
    for p in &paths {
        let real = p.canonicalize().unwrap_or_else(|_| p.clone());
        if let Some(before) = seen.insert(real, p) {
            anyhow::bail!(
                "{} and {} are the same file: a shard given twice would be counted twice",
                before.display(),
                p.display()
            );
        }
    }
    let files = (paths.iter())
        .map(|p| read(p))
        .collect::<anyhow::Result<Vec<AccFile>>>()?;
    let first = &files[0];
    // One accumulator = one (kind, hidden states); ordered by hidden state.
    let mut groups: BTreeMap<Accumulator, Vec<&AccFile>> = BTreeMap::new();
    for f in &files {
        check_same(first, f)?;
        let layers = parse_layers(&f.origin.layers)?;
        groups
            .entry((f.state.kind.clone(), layers))
            .or_default()
            .push(f);
    }
    let shards = groups.values().map(Vec::len).max().unwrap_or(0);
    for g in groups.values() {
        anyhow::ensure!(
            g.len() == shards,
            "{} of hidden states {} is in {} of the files but another accumulator is in {shards}: every shard must hold every accumulator (a shard's folder is missing a file, or a file is given twice)",
            g[0].state.kind,
            g[0].origin.layers,
            g.len(),
        );
    }
    for g in groups.values() {
        for (i, a) in g.iter().enumerate() {
            if let Some(b) = g[..i].iter().find(|b| b.state == a.state) {
                anyhow::bail!(
                    "{} and {} hold the same sums: a shard given twice would be counted twice",
                    b.path.display(),
                    a.path.display()
                );
            }
        }
    }
    let merged = (groups.values())
        .map(|g| merge_one(g))
        .collect::<anyhow::Result<Vec<Merged>>>()?;
    let rows: Vec<Row> = merged.iter().flat_map(|m| m.rows.iter().cloned()).collect();
    let keys: &[&str] = if merged.iter().any(|m| m.origin.other.is_some()) {
        &["model", "layer", "other_model", "other_layer"]
    } else if merged.iter().any(|m| m.state.kind == "cka") {
        &["model", "layer", "other_layer"]
    } else {
        &["model", "layer"]
    };
    let table = crate::output::tidy_cells(&rows, keys);
    crate::output::emit(&table, None, Some(&args.out))?;
    if let Some(path) = &args.save {
        if let [one] = merged.as_slice() {
            write(path, &one.state, &one.origin)?;
        } else {
            std::fs::create_dir_all(path)
                .with_context(|| format!("creating {}", path.display()))?;
            for m in &merged {
                let stem = file_stem(&m.state.kind, &m.origin.layers);
                write(
                    &path.join(format!("{stem}.safetensors")),
                    &m.state,
                    &m.origin,
                )?;
            }
        }
    }
    let total: usize = merged.iter().map(|m| m.files).sum();
    if let [m] = merged.as_slice() {
        println!(
            "merged {total} accumulator files ({} of hidden states {} of {}, {} tokens) into {}",
            m.state.kind,
            m.origin.layers,
            m.origin.model,
            m.state.n,
            args.out.display()
        );
    } else {
        println!(
            "merged {total} accumulator files ({} accumulators of {}) into {}:",
            merged.len(),
            first.origin.model,
            args.out.display()
        );
        for m in &merged {
            println!(
                "  {} of hidden states {}: {} files, {} tokens",
                m.state.kind, m.origin.layers, m.files, m.state.n
            );
        }
    }
    Ok(())
}

/// A file, or a folder's `.safetensors` files in name order.
fn expand(p: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !p.is_dir() {
        return Ok(vec![p.to_owned()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(p).with_context(|| format!("reading {}", p.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", p.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            out.push(path);
        }
    }
    out.sort();
    anyhow::ensure!(
        !out.is_empty(),
        "{}: a folder with no .safetensors accumulator files (write them with `repgeom extract --save-accumulators`)",
        p.display()
    );
    Ok(out)
}

/// The files of one accumulator merged, and its metrics.
fn merge_one(files: &[&AccFile]) -> anyhow::Result<Merged> {
    let first = files[0];
    let origin = first.origin.clone();
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
                    let row = crate::output::metric_row(
                        &origin.model,
                        origin.d,
                        (layer, origin.n_hidden),
                        v,
                    )
                    .with_extra("other_layer", other.unwrap_or(layer) as f64);
                    match &origin.other {
                        Some((model, _)) => row.with_other_model(model.clone()),
                        None => row,
                    }
                })
                .collect();
            (acc.state(), rows)
        }
        kind => anyhow::bail!(
            "{}: accumulator kind {kind:?}, expected covariance or cka",
            what(first)
        ),
    };
    Ok(Merged {
        origin,
        state,
        rows,
        files: files.len(),
    })
}

/// Shards merge only when they come from the same model (label, width) and extraction
/// settings; the files of each accumulator (kind and hidden states) are merged together.
fn check_same(a: &AccFile, b: &AccFile) -> anyhow::Result<()> {
    let fields = [
        ("model", a.origin.model.clone(), b.origin.model.clone()),
        ("d", a.origin.d.to_string(), b.origin.d.to_string()),
        (
            "settings",
            a.origin.settings.clone(),
            b.origin.settings.clone(),
        ),
        (
            "other model",
            format!("{:?}", a.origin.other),
            format!("{:?}", b.origin.other),
        ),
    ];
    for (field, x, y) in fields {
        anyhow::ensure!(
            x == y,
            "cannot merge {} and {}: {field} differ ({x} vs {y}); shards of one corpus through one model, with the same settings, merge",
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

//! `repgeom pga`: Subspace PGA per layer of one activation file.

use std::path::PathBuf;

use anyhow::Context as _;
use repgeom_linalg::{Mat, MatRef};
use repgeom_metrics::analysis::{
    BASIS_TOL, Hooks, ModelInput, ModelLayer, NullSource, PgaRow, Readout, basis_from_array,
    k_values,
};
use repgeom_metrics::pga::{BootstrapOptions, BootstrapUnit, Distance, EngineOptions, PgaResult};
use repgeom_metrics::{Metric as _, Pga};
use repgeom_null::{NullBases, NullKind, NullParams};

use crate::args::{ActsArgs, NullArgs, ReadoutArgs};
use crate::context::{Context, flag_error};
use crate::output::{Cell, CellTable, OutputArgs};

/// Arguments of `repgeom pga`.
#[derive(clap::Args, Debug)]
pub(crate) struct PgaArgs {
    #[command(flatten)]
    pub(crate) input: ActsArgs,
    /// Readout W_U: a [V, d] .npy/.safetensors matrix, a HuggingFace checkpoint directory, or
    /// a hub model id org/name (only the shard holding the readout is downloaded).
    #[arg(
        long,
        visible_alias = "model",
        required_unless_present = "readout_basis"
    )]
    pub(crate) readout: Option<PathBuf>,
    /// A d×k orthonormal basis to use instead of the top-k right singular vectors of W_U.
    #[arg(long, conflicts_with = "readout")]
    pub(crate) readout_basis: Option<PathBuf>,
    /// Write the readout basis used (d × k .npy, f64; the largest k of a -k list) so that
    /// later runs on the same model can pass it to --readout-basis instead of recomputing it.
    #[arg(long, conflicts_with = "readout_basis")]
    pub(crate) save_readout_basis: Option<PathBuf>,
    /// Readout subspace dimension; a list runs one row per k: -k 25,50,100,200.
    #[arg(short = 'k', long, default_values_t = [repgeom_metrics::DEFAULT_K], value_delimiter = ',')]
    pub(crate) k: Vec<usize>,
    /// Readout subspace dimension as a fraction of the hidden size: k = round(f·d) (instead
    /// of -k), so that z is comparable across widths.
    #[arg(long, conflicts_with = "k")]
    pub(crate) k_frac: Option<f64>,
    /// Pairwise distance compared: cosine (default) or euclidean.
    #[arg(long, default_value = "cosine")]
    pub(crate) distance: Distance,
    /// Percentile bootstrap over sequences with this many replicates (null bases held fixed):
    /// adds z_lo, z_hi, rho_lo, rho_hi (95%).
    #[arg(long)]
    pub(crate) bootstrap: Option<usize>,
    /// Seed of the bootstrap resampling.
    #[arg(long, default_value_t = 0)]
    pub(crate) bootstrap_seed: u64,
    /// Write every null draw's rho (CSV: layer,k,ccr,draw,rho).
    #[arg(long)]
    pub(crate) save_null_rhos: Option<PathBuf>,
    /// Principal directions removed before measuring (CCR-c); a list runs a sweep: 1,5,10.
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub(crate) ccr: Vec<usize>,
    /// The null: haar (uniformly random subspaces, the default) or spectrum (the Haar draws
    /// tilted until each captures the readout's share of the layer's variance after CCR).
    #[arg(long, default_value = "haar")]
    pub(crate) null: NullKind,
    /// Relative tolerance of --null spectrum on each draw's captured variance, in (0, 1).
    #[arg(long, default_value_t = repgeom_null::DEFAULT_SPECTRUM_TOL)]
    pub(crate) spectrum_tol: f64,
    /// Read the null bases (n_null × d × k .npy) instead of drawing them (with --null
    /// spectrum: the Haar draws that are matched per layer).
    #[arg(long, conflicts_with_all = ["n_null", "seed"])]
    pub(crate) null_bases: Option<PathBuf>,
    /// Write the null bases used (n_null × d × k .npy), to reproduce or cross-check the run
    /// (with --null spectrum: the Haar draws before matching).
    #[arg(long)]
    pub(crate) save_null_bases: Option<PathBuf>,
    /// Memory budget of the exact engine, e.g. 4GiB or 512MiB (default: half the machine's RAM).
    /// Null draws run on as many workers as fit; work beyond one worker is never allocated.
    #[arg(long, value_parser = crate::context::parse_bytes)]
    pub(crate) max_memory: Option<u64>,
    /// Estimate every Spearman on one seeded sample of this many pairs (shared by the readout
    /// and all null draws) instead of all N(N-1)/2; adds n_pairs and rho_se columns.
    #[arg(long)]
    pub(crate) max_pairs: Option<usize>,
    #[command(flatten)]
    pub(crate) readout_args: ReadoutArgs,
    #[command(flatten)]
    pub(crate) null_args: NullArgs,
    #[command(flatten)]
    pub(crate) device: crate::args::DeviceArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// The columns of `repgeom pga`'s output, in order.
pub(crate) const COLUMNS: [&str; 10] = [
    "layer",
    "n_points",
    "d",
    "k",
    "ccr",
    "rho_readout",
    "null_mean",
    "null_std",
    "z",
    "p_value",
];

/// Columns appended after [`COLUMNS`] (and after `n_pairs`, `rho_se` with `--max-pairs`).
pub(crate) const STAT_COLUMNS: [&str; 9] = [
    "p_lower",
    "p_two_sided",
    "delta_rho",
    "z_se",
    "q_value",
    "k_policy",
    "distance",
    "readout_fold_norm",
    "readout_center",
];

/// Columns added with `--bootstrap`.
pub(crate) const BOOTSTRAP_COLUMNS: [&str; 5] =
    ["z_lo", "z_hi", "rho_lo", "rho_hi", "bootstrap_unit"];

/// Columns appended last to every table: the null, and the share of the layer's variance
/// (after CCR) captured by the readout subspace and by the null draws (mean, sd).
pub(crate) const NULL_COLUMNS: [&str; 4] = [
    "null",
    "captured_variance_readout",
    "captured_variance_null_mean",
    "captured_variance_null_sd",
];

impl PgaArgs {
    /// The PGA options these flags ask for: the library's one option struct.
    fn options(&self) -> Pga {
        Pga {
            ccr: self.ccr.clone(),
            engine: EngineOptions {
                distance: self.distance,
                max_pairs: self.max_pairs,
                // One seed for the null draws and the pair sample, as documented on --seed.
                pair_seed: self.null_args.over(NullParams::default()).seed,
                max_memory: self.max_memory,
                null: self.null,
                spectrum_tol: self.spectrum_tol,
                device: self.device.device,
            },
            bootstrap: self.bootstrap.map(|replicates| BootstrapOptions {
                replicates,
                seed: self.bootstrap_seed,
                ..BootstrapOptions::default()
            }),
        }
    }
}

pub(crate) fn run(args: &PgaArgs, ctx: &Context) -> anyhow::Result<()> {
    let done = run_on(args, ctx);
    crate::args::print_profile(args.device.device);
    done
}

fn run_on(args: &PgaArgs, ctx: &Context) -> anyhow::Result<()> {
    let pga = args.options();
    pga.check().map_err(flag_error)?;
    let device = args.device.open()?;
    let acts = args.input.read()?;
    let d = acts.layers[0].acts.cols;
    let given_basis = match &args.readout_basis {
        Some(path) => {
            anyhow::ensure!(
                !args.readout_args.prep.any(),
                "--readout-fold-norm and --readout-center prepare W_U; a --readout-basis is used as given"
            );
            Some(read_given_basis(path, d)?)
        }
        None => None,
    };
    let ks = match &given_basis {
        Some(basis) => vec![basis.ncols()],
        None => k_values(&args.k, args.k_frac, d)
            .map_err(flag_error)
            .with_context(|| format!("choosing k for {}", args.input.acts.display()))?,
    };
    if ks.len() > 1 {
        anyhow::ensure!(
            args.null_bases.is_none() && args.save_null_bases.is_none(),
            "--null-bases and --save-null-bases hold one k; give a single -k with them (got {ks:?})"
        );
    }
    let sequences = match args.bootstrap {
        Some(_) => sequence_ids(&args.input.acts, acts.layers[0].acts.rows, ctx)?,
        None => None,
    };
    let kmax = *ks.iter().max().expect("at least one k");
    // W_U is read (and checked) now; the library decomposes it beside the first layer.
    let w_u = match (&given_basis, &args.readout) {
        (None, Some(path)) => Some(crate::load::read_readout(
            path,
            &args.readout_args.choice(),
            kmax,
            d,
            &args.input.acts,
            ctx,
        )?),
        _ => None,
    };
    let readout = match (&given_basis, &w_u) {
        (Some(b), _) => Readout::Basis(b.as_ref()),
        (None, Some(w)) => {
            Readout::Unembedding(MatRef::from_row_major_slice(&w.data, w.rows, w.cols))
        }
        (None, None) => unreachable!("--readout or --readout-basis is required"),
    };
    let null_params = args.null_args.over(NullParams::default());
    let given_null = match &args.null_bases {
        Some(path) => {
            let arr = repgeom_io::read_array_f64(path)?;
            Some(
                NullBases::from_array(&arr.shape, &arr.data, d, ks[0], BASIS_TOL)
                    .with_context(|| format!("reading null bases from {}", path.display()))?,
            )
        }
        None => None,
    };
    let input = ModelInput {
        layers: acts
            .layers
            .iter()
            .map(|layer| {
                let m = &layer.acts;
                ModelLayer {
                    layer: layer.layer,
                    acts: MatRef::from_row_major_slice(&m.data, m.rows, m.cols),
                    what: format!(
                        "{}: {} [{}, {}]",
                        args.input.acts.display(),
                        layer.tensor,
                        m.rows,
                        m.cols
                    ),
                }
            })
            .collect(),
        readout,
        ks: ks.clone(),
        null: match &given_null {
            Some(n) => NullSource::Given(n),
            None => NullSource::Draw(null_params.clone()),
        },
        sequences: sequences.as_deref(),
        memory_budget: Some(repgeom_io::default_memory_budget()),
        device,
    };
    let bar = ctx.progress(pga.draws(&input), "pga");
    let run = pga.run_model(
        &input,
        ctx.par(),
        &Hooks {
            on_draw: Some(&|| bar.inc(1)),
            on_layer: Some(&|layer, k| bar.set_message(format!("layer {layer} k {k}"))),
        },
    )?;
    bar.finish_and_clear();
    if let Some(path) = &args.save_null_bases {
        let (shape, data) = run.null_bases[0].to_array();
        repgeom_io::write_npy_f64(path, &shape, &data)?;
    }
    if let Some(path) = &args.save_readout_basis {
        save_basis(path, run.readout_basis.as_ref())?;
    }
    if let Some(path) = &args.save_null_rhos {
        write_null_rhos(path, &run.rows)?;
    }
    let k_policy = match (args.k_frac, &args.readout_basis) {
        (_, Some(_)) => "basis".to_owned(),
        (Some(f), None) => format!("frac={f}"),
        (None, None) => "fixed".to_owned(),
    };
    let mut columns = COLUMNS.to_vec();
    if args.max_pairs.is_some() {
        columns.extend(["n_pairs", "rho_se"]);
    }
    columns.extend(STAT_COLUMNS);
    if args.bootstrap.is_some() {
        columns.extend(BOOTSTRAP_COLUMNS);
    }
    columns.extend(NULL_COLUMNS);
    let mut table = CellTable::new(crate::output::names(&columns), Vec::new());
    for c in &run.rows {
        let r = &c.result;
        let mut cells = row(c.layer, r);
        if args.max_pairs.is_some() {
            cells.push(Cell::Int(r.n_pairs as i64));
            cells.push(Cell::float(r.rho_se.unwrap_or(0.0), 6));
        }
        cells.extend([
            Cell::float(r.p_lower, 4),
            Cell::float(r.p_two_sided, 4),
            Cell::float(r.delta_rho, 6),
            Cell::float(r.z_se, 3),
            Cell::float(r.q_value.unwrap_or(f64::NAN), 4),
            Cell::Text(k_policy.clone()),
            Cell::Text(r.distance.name().to_owned()),
            Cell::Int(i64::from(args.readout_args.prep.readout_fold_norm)),
            Cell::Int(i64::from(args.readout_args.prep.readout_center)),
        ]);
        if let Some(ci) = &r.bootstrap {
            cells.extend([
                Cell::float(ci.z_lo, 3),
                Cell::float(ci.z_hi, 3),
                Cell::float(ci.rho_lo, 6),
                Cell::float(ci.rho_hi, 6),
                Cell::Text(
                    match ci.unit {
                        BootstrapUnit::Sequences => "sequences",
                        BootstrapUnit::Points => "points",
                    }
                    .to_owned(),
                ),
            ]);
        }
        cells.extend([
            Cell::Text(r.null.name().to_owned()),
            Cell::float(r.captured_variance_readout, 6),
            Cell::float(r.captured_variance_null_mean, 6),
            Cell::float(r.captured_variance_null_sd, 6),
        ]);
        table.rows.push(cells);
    }
    args.output.emit(&table)
}

/// The sequence of every point, from the `positions` metadata that `repgeom extract` writes
/// (`[sequence, position]` per point). `None`, with a warning, when the file has none: the
/// bootstrap then resamples points.
fn sequence_ids(
    path: &std::path::Path,
    n: usize,
    ctx: &Context,
) -> anyhow::Result<Option<Vec<usize>>> {
    let ids = repgeom_io::read_sequence_ids(path, n)?;
    if ids.is_none() {
        // A warning, not a note: it qualifies the result, so --quiet does not hide it.
        ctx.warn(format!(
            "{} records no sequence per point (no `positions` metadata); the bootstrap resamples single points, which understates the spread when points of one sequence are correlated",
            path.display()
        ));
    }
    Ok(ids)
}

/// `--save-null-rhos`: one CSV line per null draw.
fn write_null_rhos(path: &std::path::Path, computed: &[PgaRow]) -> anyhow::Result<()> {
    let mut text = String::from("layer,k,ccr,draw,rho\n");
    for c in computed {
        for (i, rho) in c.result.null_rhos.iter().enumerate() {
            text.push_str(&format!(
                "{},{},{},{i},{rho}\n",
                c.layer, c.result.k, c.result.ccr
            ));
        }
    }
    repgeom_io::atomic_write(path, |w| w.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}

/// One output row.
pub(crate) fn row(layer: usize, r: &PgaResult) -> Vec<Cell> {
    vec![
        Cell::Int(layer as i64),
        Cell::Int(r.n_points as i64),
        Cell::Int(r.d as i64),
        Cell::Int(r.k as i64),
        Cell::Int(r.ccr as i64),
        Cell::float(r.rho_readout, 6),
        Cell::float(r.summary.null_mean, 6),
        Cell::float(r.summary.null_std, 6),
        Cell::float(r.summary.z, 3),
        Cell::float(r.summary.p_value, 4),
    ]
}

/// `--save-readout-basis`: the `d × k` basis as a row-major `f64` `.npy`.
fn save_basis(path: &std::path::Path, basis: MatRef<'_, f64>) -> anyhow::Result<()> {
    let (rows, cols) = (basis.nrows(), basis.ncols());
    let data: Vec<f64> = (0..rows * cols)
        .map(|x| basis[(x / cols, x % cols)])
        .collect();
    repgeom_io::write_npy_f64(path, &[rows, cols], &data)
        .with_context(|| format!("writing the readout basis to {}", path.display()))
}

/// `--readout-basis`: a `d × k` basis from a file (checked against the activations by the
/// library's [`repgeom_metrics::analysis::basis_from_array`], naming this file).
fn read_given_basis(path: &std::path::Path, d: usize) -> anyhow::Result<Mat<f64>> {
    let arr = repgeom_io::read_array_f64(path)?;
    let basis = basis_from_array(&arr.shape, &arr.data, d, &path.display().to_string())?;
    Ok(basis)
}

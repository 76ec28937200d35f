//! `repgeom pga`: Subspace PGA per layer of one activation file.

use std::path::PathBuf;

use anyhow::Context as _;
use repgeom_linalg::{Mat, MatRef};
use repgeom_metrics::pga::{EngineOptions, PgaResult, pga_ccr_sweep_with};
use repgeom_null::{NullBases, NullParams};

use super::Context;
use crate::output::{Cell, Format, Table, emit};

/// Arguments of `repgeom pga`.
#[derive(clap::Args, Debug)]
pub(crate) struct PgaArgs {
    /// Activations: .npy [L, N, d] or [N, d], .npz (one array per layer) or .safetensors.
    #[arg(long)]
    pub(crate) acts: PathBuf,
    /// Readout W_U: a [V, d] .npy/.safetensors matrix, or a HuggingFace checkpoint directory.
    #[arg(long, required_unless_present = "readout_basis")]
    pub(crate) readout: Option<PathBuf>,
    /// A d×k orthonormal basis to use instead of the top-k right singular vectors of W_U.
    #[arg(long, conflicts_with = "readout")]
    pub(crate) readout_basis: Option<PathBuf>,
    /// Readout subspace dimension.
    #[arg(short = 'k', long, default_value_t = 100)]
    pub(crate) k: usize,
    /// Number of random subspaces in the null.
    #[arg(long, default_value_t = 100)]
    pub(crate) n_null: usize,
    /// Principal directions removed before measuring (CCR-c); a list runs a sweep: 1,5,10.
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub(crate) ccr: Vec<usize>,
    /// Seed of the null draws.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Layers to analyse, e.g. 0,5,10-12 (default: all).
    #[arg(long)]
    pub(crate) layers: Option<String>,
    /// Keep only the first N rows of W_U (drop padding rows past the real vocabulary).
    #[arg(long)]
    pub(crate) vocab_rows: Option<usize>,
    /// Name of the readout tensor, overriding the architecture's default.
    #[arg(long)]
    pub(crate) readout_tensor: Option<String>,
    /// Read the null bases (n_null × d × k .npy) instead of drawing them.
    #[arg(long, conflicts_with_all = ["n_null", "seed"])]
    pub(crate) null_bases: Option<PathBuf>,
    /// Write the null bases used (n_null × d × k .npy), to reproduce or cross-check the run.
    #[arg(long)]
    pub(crate) save_null_bases: Option<PathBuf>,
    /// Memory budget of the exact engine, e.g. 4GiB or 512MiB (default: half the machine's RAM).
    /// Null draws run on as many workers as fit; work beyond one worker is never allocated.
    #[arg(long, value_parser = super::parse_bytes)]
    pub(crate) max_memory: Option<u64>,
    /// Estimate every Spearman on one seeded sample of this many pairs (shared by the readout
    /// and all null draws) instead of all N(N-1)/2; adds n_pairs and rho_se columns.
    #[arg(long)]
    pub(crate) max_pairs: Option<usize>,
    /// Output format (default: table on stdout; with --out, from the file's extension).
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// Write the results to this file (atomically) instead of stdout.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
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

pub(crate) fn run(args: &PgaArgs, ctx: &Context) -> anyhow::Result<()> {
    let layers = args
        .layers
        .as_deref()
        .map(super::parse_layers)
        .transpose()?;
    let acts = repgeom_io::read_activations(&args.acts, layers.as_deref())?;
    anyhow::ensure!(
        !acts.layers.is_empty(),
        "{}: no layers to analyse",
        args.acts.display()
    );
    let d = acts.layers[0].acts.cols;
    let basis = load_basis(args, d, ctx)?;
    let k = basis.ncols();
    let null = match &args.null_bases {
        Some(path) => {
            let arr = repgeom_io::read_array_f64(path)?;
            NullBases::from_array(&arr.shape, &arr.data, d, k, 1e-6)
                .with_context(|| format!("reading null bases from {}", path.display()))?
        }
        None => {
            let params = NullParams {
                n_null: args.n_null,
                seed: args.seed,
            }
            .check()?;
            NullBases::draw(d, k, &params).map_err(|e| {
                anyhow::anyhow!("{e} (hidden size d = {d} of {})", args.acts.display())
            })?
        }
    };
    if let Some(path) = &args.save_null_bases {
        let (shape, data) = null.to_array();
        repgeom_io::write_npy_f64(path, &shape, &data)?;
    }
    let total = (acts.layers.len() * args.ccr.len() * null.len()) as u64;
    let bar = ctx.progress(total, "pga");
    let engine = EngineOptions {
        max_memory: Some(args.max_memory.unwrap_or_else(super::default_memory_budget)),
        max_pairs: args.max_pairs,
        pair_seed: args.seed,
    };
    let mut columns = COLUMNS.to_vec();
    if args.max_pairs.is_some() {
        columns.extend(["n_pairs", "rho_se"]);
    }
    let mut table = Table {
        columns,
        rows: Vec::new(),
    };
    for layer in &acts.layers {
        let m = &layer.acts;
        let what = format!(
            "{}: {} [{}, {}]",
            args.acts.display(),
            layer.tensor,
            m.rows,
            m.cols
        );
        bar.set_message(format!("layer {}", layer.layer));
        let view = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
        let results = pga_ccr_sweep_with(
            view,
            basis.as_ref(),
            &null,
            &args.ccr,
            &what,
            ctx.par(),
            &|| bar.inc(1),
            &engine,
        )?;
        for r in &results {
            let mut cells = row(layer.layer, r);
            if args.max_pairs.is_some() {
                cells.push(Cell::Int(r.n_pairs as i64));
                cells.push(Cell::float(r.rho_se.unwrap_or(0.0), 6));
            }
            table.rows.push(cells);
        }
    }
    bar.finish_and_clear();
    emit(&table, args.format, args.out.as_deref())
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
        Cell::float(r.null_mean, 6),
        Cell::float(r.null_std, 6),
        Cell::float(r.z, 3),
        Cell::float(r.p_value, 4),
    ]
}

/// The readout basis: supplied directly, or the top-k right singular vectors of W_U.
fn load_basis(args: &PgaArgs, d: usize, ctx: &Context) -> anyhow::Result<Mat<f64>> {
    if let Some(path) = &args.readout_basis {
        let arr = repgeom_io::read_array_f64(path)?;
        anyhow::ensure!(
            arr.shape.len() == 2 && arr.shape[0] == d,
            "{}: readout basis has shape {:?}, expected [{d}, k] to match the activations' d = {d}",
            path.display(),
            arr.shape
        );
        let (rows, cols) = (arr.shape[0], arr.shape[1]);
        let b = Mat::<f64>::from_fn(rows, cols, |i, j| arr.data[i * cols + j]);
        let dev = repgeom_linalg::orthonormal_basis_check(b.as_ref());
        anyhow::ensure!(
            dev <= 1e-6,
            "{}: readout basis columns are not orthonormal (max |BᵀB − I| = {dev:.2e})",
            path.display()
        );
        return Ok(b);
    }
    let path = args
        .readout
        .as_deref()
        .expect("clap requires --readout or --readout-basis");
    let choice = super::metrics::ReadoutChoice {
        vocab_rows: args.vocab_rows,
        tensor: args.readout_tensor.clone(),
    };
    super::metrics::load_readout_basis(path, &choice, args.k, d, &args.acts, ctx)
}

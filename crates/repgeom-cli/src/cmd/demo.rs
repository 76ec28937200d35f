//! `repgeom demo`: PGA on the built-in synthetic model zoo (clearly labelled synthetic).

use repgeom_metrics::Pga;
use repgeom_metrics::analysis::{Hooks, ModelInput, ModelLayer, NullSource, PgaRow, Readout};
use repgeom_null::NullParams;

use crate::context::Context;
use crate::output::{Cell, CellTable, Format, OutputArgs};

/// Arguments of `repgeom demo`.
#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Seed of the synthetic data and of the null draws.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Number of random subspaces in the null.
    #[arg(long, default_value_t = 100)]
    pub(crate) n_null: usize,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

pub(crate) fn run(args: &DemoArgs, ctx: &Context) -> anyhow::Result<()> {
    let params = repgeom_synth::ZooParams {
        seed: args.seed,
        ..Default::default()
    }
    .check()?;
    let dark = params.params().dark_dims;
    let ccrs = [1, dark];
    let zoo = repgeom_synth::generate_zoo(&params)?;
    let null_params = NullParams {
        n_null: args.n_null,
        seed: args.seed,
    };
    let total: usize = zoo
        .iter()
        .map(|m| m.layers.len() * ccrs.len() * args.n_null)
        .sum();
    let bar = ctx.progress(total as u64, "demo");
    let mut table = CellTable::new(
        crate::output::names(&[
            "model",
            "layer",
            "planted",
            "d",
            "k",
            "ccr",
            "rho_readout",
            "null_mean",
            "null_std",
            "z",
            "p_value",
        ]),
        Vec::new(),
    );
    let pga = Pga {
        ccr: ccrs.to_vec(),
        ..Pga::default()
    };
    for model in &zoo {
        // The same path as real data: the readout subspace is computed from W_U itself.
        let input = ModelInput {
            layers: model
                .layers
                .iter()
                .enumerate()
                .map(|(layer, acts)| ModelLayer {
                    layer,
                    acts: acts.as_ref(),
                    what: format!("{} layer {layer} (synthetic)", model.label),
                })
                .collect(),
            readout: Readout::Unembedding(model.readout.as_ref()),
            ks: vec![model.k],
            null: NullSource::Draw(null_params.clone()),
            sequences: None,
            memory_budget: Some(repgeom_io::default_memory_budget()),
            device: Default::default(),
        };
        let run = pga.run_model(
            &input,
            ctx.par(),
            &Hooks {
                on_draw: Some(&|| bar.inc(1)),
                on_layer: Some(&|layer, _| {
                    bar.set_message(format!("{} layer {layer}", model.label));
                }),
            },
        )?;
        for PgaRow { layer, result: r } in run.rows {
            table.rows.push(vec![
                Cell::Text(model.label.clone()),
                Cell::Int(layer as i64),
                Cell::Text(model.regimes[layer].name().to_string()),
                Cell::Int(r.d as i64),
                Cell::Int(r.k as i64),
                Cell::Int(r.ccr as i64),
                Cell::float(r.rho_readout, 6),
                Cell::float(r.summary.null_mean, 6),
                Cell::float(r.summary.null_std, 6),
                Cell::float(r.summary.z, 3),
                Cell::float(r.summary.p_value, 4),
            ]);
        }
    }
    bar.finish_and_clear();
    if args.output.out.is_none() && args.output.format.unwrap_or(Format::Table) == Format::Table {
        #[allow(clippy::print_stdout)] // the banner belongs to the table a person reads
        {
            println!(
                "SYNTHETIC DATA: seeded planted regimes from repgeom-synth (seed {}), not a real model.\n\
                 Expect z >> 0 for 'direct', z < 0 at CCR-1 and z > 0 at CCR-{dark} for 'detour', z < 0 at every CCR for 'rotation', |z| small for 'isotropic'.\n",
                args.seed
            );
        }
    }
    args.output.emit(&table)
}

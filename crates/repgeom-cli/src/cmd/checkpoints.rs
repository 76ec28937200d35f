//! `repgeom checkpoints`: audit a model's revisions: commit, weights hash, parameters, and
//! which revisions serve the same weights.

use repgeom_hub::Hub;

use crate::context::Context;
use crate::output::{Cell, CellTable, OutputArgs};

/// Arguments of `repgeom checkpoints`.
#[derive(clap::Args, Debug)]
pub(crate) struct CheckpointsArgs {
    /// Hub model id (org/name).
    #[arg(long)]
    model: String,
    /// Revisions to audit (branches, tags or commits), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    revisions: Vec<String>,
    /// Every branch and tag of the model (step branches in step order, then the rest by name).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn run(args: &CheckpointsArgs, ctx: &Context) -> anyhow::Result<()> {
    let hub = Hub::from_env();
    let revisions = if args.all {
        repgeom_hub::all_revisions(&hub, &args.model)?
    } else {
        args.revisions.clone()
    };
    let audit = repgeom_hub::audit_revisions(
        &hub,
        &args.model,
        &revisions,
        &mut crate::hub::download_bar(ctx),
    )?;
    let table = CellTable::new(
        crate::output::names(&[
            "model",
            "revision",
            "commit",
            "weights_sha256",
            "parameters",
            "duplicate_of",
        ]),
        audit
            .into_iter()
            .map(|a| {
                vec![
                    Cell::Text(args.model.clone()),
                    Cell::Text(a.revision),
                    Cell::Text(a.commit),
                    Cell::Text(a.weights_sha256),
                    Cell::Int(a.parameters as i64),
                    Cell::Text(a.duplicate_of.unwrap_or_default()),
                ]
            })
            .collect(),
    );
    args.output.emit(&table)
}

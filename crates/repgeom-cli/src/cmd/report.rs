//! `repgeom report`: every figure, the summary and `index.html` of a sweep directory, drawn by
//! the same library call as `cargo xtask paper`.

use std::path::PathBuf;

use crate::context::Context;

/// Draw a sweep directory's report: the merged table, every figure, the summary, index.html.
#[derive(clap::Args, Debug)]
pub(crate) struct ReportArgs {
    /// The sweep directory (`repgeom sweep --out DIR`); every planned unit must be done.
    #[arg(long)]
    work: PathBuf,
    /// Where the report goes (created if missing): results.{csv,parquet,json}, the figures
    /// (.svg and .png), summary.{md,csv}, index.html.
    #[arg(long)]
    out: PathBuf,
    /// Write nothing: draw into a temporary directory and fail (exit 1) naming each SVG,
    /// results.csv or summary.md in --out that differs.
    #[arg(long)]
    check: bool,
}

pub(crate) fn run(args: &ReportArgs, ctx: &Context) -> anyhow::Result<std::process::ExitCode> {
    #[allow(clippy::print_stdout)] // the command's report
    if args.check {
        let stale = repgeom_study::check_report(&args.work, &args.out)?;
        if stale.is_empty() {
            println!("report --check: {} is up to date", args.out.display());
            return Ok(std::process::ExitCode::SUCCESS);
        }
        println!(
            "report --check: {} files of {} differ from a fresh drawing: {}",
            stale.len(),
            args.out.display(),
            stale.join(", ")
        );
        return Ok(std::process::ExitCode::from(1));
    }
    let r = repgeom_study::report(&args.work, &args.out)?;
    for s in &r.files.skipped {
        ctx.note(s);
    }
    if !r.merge.extra.is_empty() {
        ctx.warn(format!(
            "ignored {} part files of units not in the plan",
            r.merge.extra.len()
        ));
    }
    #[allow(clippy::print_stdout)] // the command's report
    {
        println!(
            "wrote {} files ({} rows) into {}; open {}",
            r.files.files.len(),
            r.rows,
            args.out.display(),
            args.out.join("index.html").display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

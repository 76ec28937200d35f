//! `repgeom-cli` is the `repgeom` command-line tool as a library: wiring from files and
//! flags to the library crates, with no logic beyond parsing, loading, calling and printing.
//!
//! The main entry point is [`main`]. Key design decision: the binary is a one-line `main.rs`
//! over this library, so a crate that defines its own metric plugins can ship the complete
//! `repgeom` CLI with those plugins linked in (`use my_metrics as _; repgeom_cli::main()`),
//! and the plugins appear in `repgeom metrics --list` and `--metric` without any change here
//! (see `examples/custom-metric`).
//!
//! It is not a library API for analyses: call `repgeom-metrics` and friends directly for that.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod accumulators;
mod args;
mod cmd;
mod context;
mod hub;
mod load;
mod output;

/// Representation geometry of language models, organised for prediction.
#[derive(Parser, Debug)]
#[command(name = "repgeom", version, about, long_about = None)]
struct Cli {
    /// Worker threads (default: all cores). Results are identical at any thread count.
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Hide progress bars and notes (warnings that qualify a result still print).
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Subspace PGA per layer: readout alignment of the distance structure, as a z-score.
    Pga(cmd::pga::PgaArgs),
    /// Per-layer metrics from the registry (`--list` shows them), in long tidy format.
    Metrics(cmd::metrics::MetricsArgs),
    /// Cross-model metrics between two activation files over the same inputs.
    Compare(cmd::compare::CompareArgs),
    /// Run PGA on the built-in synthetic model zoo (synthetic data, for a first look).
    Demo(cmd::demo::DemoArgs),
    /// Linear probes per layer: test accuracy, macro-F1 and the chosen L2 strength.
    Probe(cmd::probe::ProbeArgs),
    /// Extract hidden states from a HuggingFace checkpoint (directory or hub id).
    #[command(about = extract_about())]
    Extract(cmd::extract::ExtractArgs),
    /// Audit a hub model's revisions: commit, weights hash, parameters, duplicates.
    Checkpoints(cmd::checkpoints::CheckpointsArgs),
    /// Run a study manifest as resumable, shardable units (`sweep merge DIR` collects the parts).
    Sweep(cmd::sweep::SweepArgs),
    /// Merge accumulator files of shards of a corpus (`extract --save-accumulators`) exactly,
    /// and report the metrics of every token of all shards.
    Merge(cmd::merge::MergeArgs),
    /// Draw a sweep directory's figures, summary and index.html (what `cargo xtask paper` draws).
    Report(cmd::report::ReportArgs),
    /// Check the metrics on built-in synthetic data (layer identification across seeds,
    /// specificity, planted PGA regimes under both nulls); exit code 1 if a check fails.
    Selftest(cmd::selftest::SelftestArgs),
}

/// `repgeom extract`'s one-line help, naming every architecture it runs (from the one list in
/// `repgeom-extract`, so the help cannot fall behind it).
fn extract_about() -> String {
    format!(
        "Extract hidden states from a HuggingFace checkpoint (directory or hub id; model_type {})",
        repgeom_extract::Family::MODEL_TYPES
    )
}

/// Parses the command line and runs `repgeom`; the process exit code (0, or 2 on error).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            #[allow(clippy::print_stderr)] // the binary's one error channel
            {
                eprintln!("error: {}", message(&err));
            }
            ExitCode::from(2)
        }
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose words the message
/// already ends with (library errors that name their file and include the OS's reason also
/// hand that reason on as their source, which `{:#}` would print twice).
fn message(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let threads = cli.threads.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let ctx = context::Context {
        quiet: cli.quiet,
        threads: pool.current_num_threads(),
    };
    let ok = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    pool.install(|| match &cli.command {
        Command::Pga(args) => ok(cmd::pga::run(args, &ctx)),
        Command::Metrics(args) => ok(cmd::metrics::run(args, &ctx)),
        Command::Compare(args) => ok(cmd::compare::run(args, &ctx)),
        Command::Demo(args) => ok(cmd::demo::run(args, &ctx)),
        Command::Probe(args) => ok(cmd::probe::run(args, &ctx)),
        Command::Extract(args) => ok(cmd::extract::run(args, &ctx)),
        Command::Sweep(args) => ok(cmd::sweep::run(args, &ctx)),
        Command::Merge(args) => ok(cmd::merge::run(args, &ctx)),
        Command::Report(args) => cmd::report::run(args, &ctx),
        Command::Checkpoints(args) => ok(cmd::checkpoints::run(args, &ctx)),
        Command::Selftest(args) => cmd::selftest::run(args),
    })
}

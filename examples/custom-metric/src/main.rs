//! `repgeom-custom`: the complete `repgeom` CLI with this crate's metrics linked in.
//! `repgeom-custom metrics --list` shows `participation_ratio` beside the built-in metrics,
//! and `--metric participation_ratio` computes it, with no change to repgeom itself.

use custom_metric as _;

fn main() -> std::process::ExitCode {
    repgeom_cli::main()
}

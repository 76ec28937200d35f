//! The `repgeom` binary: see the `repgeom-cli` library.

fn main() -> std::process::ExitCode {
    repgeom_cli::main()
}

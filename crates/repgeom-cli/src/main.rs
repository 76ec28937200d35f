//! The `repgeom` binary: see the `repgeom-cli` library.

// glibc's malloc hands each freed multi-megabyte tensor buffer back to the kernel and faults
// it in again on the next allocation; mimalloc reuses them (about +25 % tokens/s in
// extraction, docs/extraction.md *Speed*).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    repgeom_cli::main()
}

//! The streaming pass of `repgeom extract --spectra all` with nothing accumulated: every whole
//! sequence of a text run through a checkpoint (default settings: `seq_len` 256, batches of
//! 8, position 0 left out), each batch's views of every hidden state handed to a visitor that
//! only reads one number of each. `cargo xtask bench streaming` times it beside `--spectra
//! all` over the same tokens, so the ratio is the accumulators' cost alone.
//!
//! ```text
//! cargo run --release -p repgeom-extract --example stream_baseline -- MODEL TEXT MAX_TOKENS
//! ```
//!
//! Prints the report line of `repgeom extract`: tokens run, seconds, tokens/s, peak resident
//! memory (`VmHWM`).

#![allow(clippy::print_stdout)] // the report line is the output

// as in the `repgeom` binary: the allocator is part of what is measured
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

use repgeom_extract::{ExtractParams, Extractor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, text, max_tokens] = args.as_slice() else {
        return Err("usage: stream_baseline MODEL TEXT MAX_TOKENS".into());
    };
    let max_tokens: usize = max_tokens.parse()?;
    let text = std::fs::read_to_string(text)?;
    let ex = Extractor::load(model.as_ref())?;
    // As `repgeom extract` times its streamed runs: from after the load.
    let start = Instant::now();
    let layers: Vec<usize> = (0..=ex.model().config().n_layers).collect();
    let params = ExtractParams::default().check()?;
    let mut seen = 0.0f64;
    let streamed = ex.stream(
        &text,
        &params,
        Some(max_tokens),
        &layers,
        &mut |views| {
            for v in views {
                seen += f64::from(v[(v.nrows() - 1, v.ncols() - 1)]);
            }
            Ok::<(), repgeom_extract::Error>(())
        },
        &mut |_| {},
    )?;
    let secs = start.elapsed().as_secs_f64();
    let peak = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib / 1024.0)
        })
        .map_or_else(String::new, |mib| {
            format!(", peak resident memory {mib:.0} MiB")
        });
    println!(
        "ran {} tokens in {secs:.1} s ({:.0} tokens/s){peak} (kept {}, checksum {seen:.3})",
        streamed.tokens_run,
        streamed.tokens_run as f64 / secs,
        streamed.tokens_kept
    );
    Ok(())
}

//! One PGA layer on random structured data, reporting wall time and peak memory as one JSON
//! line. `cargo xtask bench scaling` runs it in a fresh process per size (so the peak resident
//! set is this size's own) and fits growth exponents.
//!
//! `cargo run --release -p repgeom-metrics --example pga_scaling -- N D [K] [N_NULL] [MAX_MEMORY_BYTES]`
#![allow(clippy::print_stdout)] // a measurement tool prints its measurement

mod common;

use std::time::Instant;

use common::{arg, peak_rss};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::pga::{EngineOptions, pga_ccr_sweep_with};
use repgeom_null::{NullBases, NullParams};

fn main() {
    let (n, d): (usize, usize) = (arg(1, 2048), arg(2, 2048));
    let k: usize = arg(3, 100);
    let n_null: usize = arg(4, 100);
    let max_memory = std::env::args().nth(5).and_then(|s| s.parse().ok());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let r = 32;
    let a = Mat::<f32>::from_fn(n, r, |_, _| StandardNormal.sample(&mut rng));
    let b = Mat::<f32>::from_fn(r, d, |_, _| StandardNormal.sample(&mut rng));
    let mut h = &a * &b;
    for j in 0..d {
        for i in 0..n {
            let e: f32 = StandardNormal.sample(&mut rng);
            h[(i, j)] += 2.0 * e;
        }
    }
    let basis = repgeom_null::haar_basis(d, k, 12345, 0);
    let null = NullBases::draw(d, k, &NullParams { n_null, seed: 0 }.check().unwrap()).unwrap();
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let opts = EngineOptions {
        max_memory,
        ..Default::default()
    };
    let start = Instant::now();
    let res = pga_ccr_sweep_with(
        h.as_ref(),
        basis.as_ref(),
        &null,
        &[1],
        "scaling",
        par,
        &|| {},
        &opts,
    )
    .unwrap();
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{{\"n\":{n},\"d\":{d},\"k\":{k},\"n_null\":{n_null},\"threads\":{threads},\"seconds\":{seconds:.4},\"peak_rss_bytes\":{},\"z\":{:.4}}}",
        peak_rss(),
        res[0].summary.z
    );
}

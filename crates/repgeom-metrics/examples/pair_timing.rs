//! Wall time and peak memory of the comparison pair metrics on one pair of random structured
//! layers, one JSON line per metric. `fixtures/pair/time_numpy.py` times the NumPy references
//! on the same shapes.
//!
//! `cargo run --release -p repgeom-metrics --example pair_timing -- N D_A D_B`
//!
//! A last line times the spectrum-matched null on the shape of the `pair` criterion bench and
//! of `fixtures/pga/time_spectrum_numpy.py` (N = 2000, d = 512, k = 50, 100 draws).
#![allow(clippy::print_stdout)] // a measurement tool prints its measurement

mod common;

use std::time::Instant;

use common::{arg, peak_rss};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::{LayerInput, PairInput, PairMetric};

fn main() {
    let (n, da, db) = (arg(1, 10_000), arg(2, 256), arg(3, 384));
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let latent = 16;
    let z = Mat::<f64>::from_fn(n, latent, |_, _| StandardNormal.sample(&mut rng));
    let mut layer = |d: usize| {
        let mix = Mat::<f64>::from_fn(latent, d, |_, _| StandardNormal.sample(&mut rng));
        Mat::<f32>::from_fn(n, d, |i, j| {
            let s: f64 = (0..latent).map(|t| z[(i, t)] * mix[(t, j)]).sum();
            let e: f64 = StandardNormal.sample(&mut rng);
            (s + 0.5 * e) as f32
        })
    };
    let (a, b) = (layer(da), layer(db));
    let configs = [
        r#"{"metric": "mutual_knn", "n_perm": 0}"#,
        r#"{"metric": "mutual_knn", "n_perm": 100}"#,
        r#"{"metric": "cknna", "n_perm": 0}"#,
        r#"{"metric": "svcca"}"#,
        r#"{"metric": "pwcca"}"#,
        r#"{"metric": "procrustes"}"#,
    ];
    for config in configs {
        let metric: Box<dyn PairMetric> = serde_json::from_str(config).unwrap();
        let (ia, ib) = (
            LayerInput::new(a.as_ref(), "A", Par::rayon(0)).unwrap(),
            LayerInput::new(b.as_ref(), "B", Par::rayon(0)).unwrap(),
        );
        let input = PairInput::new(&ia, &ib).unwrap();
        let t = Instant::now();
        let v = metric.compute(&input).unwrap();
        println!(
            "{{\"config\": {config}, \"n\": {n}, \"d_a\": {da}, \"d_b\": {db}, \"seconds\": {:.3}, \"value\": {:.6}, \"peak_rss_bytes\": {}}}",
            t.elapsed().as_secs_f64(),
            v[0].value,
            peak_rss()
        );
    }
    spectrum_null_timing();
}

/// The spectrum-matched null on the `pair` bench's shape (same data recipe).
fn spectrum_null_timing() {
    let (n, d, k, n_null) = (2000, 512, 50, 100);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut x = Mat::<f64>::from_fn(n, d, |_, j| {
        let g: f64 = StandardNormal.sample(&mut rng);
        g / (1.0 + j as f64).sqrt()
    });
    for j in 0..d {
        let m = x.col(j).iter().sum::<f64>() / n as f64;
        x.col_mut(j).iter_mut().for_each(|v| *v -= m);
    }
    let readout = Mat::<f64>::from_fn(d, k, |i, j| {
        if i == j {
            0.8
        } else if i == d - 1 - j {
            0.6
        } else {
            0.0
        }
    });
    let null = repgeom_null::NullBases::draw(
        d,
        k,
        &repgeom_null::NullParams { n_null, seed: 0 }
            .check()
            .unwrap(),
    )
    .unwrap();
    let t = Instant::now();
    let m = repgeom_null::spectrum_matched(&null, x.as_ref(), readout.as_ref(), 0.01, Par::Seq)
        .unwrap();
    println!(
        "{{\"config\": {{\"metric\": \"spectrum_null\"}}, \"n\": {n}, \"d\": {d}, \"k\": {k}, \"n_null\": {n_null}, \"seconds\": {:.3}, \"target\": {:.6}, \"peak_rss_bytes\": {}}}",
        t.elapsed().as_secs_f64(),
        m.target,
        peak_rss()
    );
}

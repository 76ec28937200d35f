//! Wall time and peak memory of the comparison pair metrics on one pair of random structured
//! layers, one JSON line per metric. `fixtures/pair/time_numpy.py` times the NumPy references
//! on the same shapes.
//!
//! `cargo run --release -p repgeom-metrics --example pair_timing -- N D_A D_B`
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
        let input = PairInput::new(
            LayerInput::new(a.as_ref(), "A", Par::rayon(0)).unwrap(),
            LayerInput::new(b.as_ref(), "B", Par::rayon(0)).unwrap(),
        )
        .unwrap();
        let t = Instant::now();
        let v = metric.compute(&input).unwrap();
        println!(
            "{{\"config\": {config}, \"n\": {n}, \"d_a\": {da}, \"d_b\": {db}, \"seconds\": {:.3}, \"value\": {:.6}, \"peak_rss_bytes\": {}}}",
            t.elapsed().as_secs_f64(),
            v[0].value,
            peak_rss()
        );
    }
}

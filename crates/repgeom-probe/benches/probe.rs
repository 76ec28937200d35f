//! One layer of the target workload: 7,600 examples × 4,096 features, 4 classes, default
//! protocol (80/20 stratified split, 3-fold CV over a 4-strength grid, final fit).
//! Seconds per layer × 33 is the sweep time for the largest study models.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use repgeom_probe::{Features, Labels, ProbeParams, Split};

fn gauss(r: &mut ChaCha8Rng) -> f32 {
    let u1 = ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Class means on a few random directions, isotropic noise, a handful of heavy "outlier"
/// dimensions (as in real hidden states); roughly 85-90 % linearly decodable.
fn workload(n: usize, d: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let means: Vec<Vec<f32>> = (0..k)
        .map(|_| (0..d).map(|_| gauss(&mut r) * 0.035).collect())
        .collect();
    let mut x = vec![0.0f32; n * d];
    let mut y = vec![0usize; n];
    for i in 0..n {
        y[i] = i % k;
        for j in 0..d {
            let scale = if j % 512 == 0 { 30.0 } else { 1.0 };
            x[i * d + j] = means[y[i]][j] + gauss(&mut r) * scale;
        }
    }
    (x, y)
}

/// Harder conditioning: a shared 64-dimensional latent factor (strongly correlated
/// columns, as in real hidden states) on top of [`workload`], with larger class means.
fn correlated(n: usize, d: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let (mut x, y) = workload(n, d, k, seed);
    let mut r = ChaCha8Rng::seed_from_u64(seed + 1);
    let m = 64;
    let loadings: Vec<f32> = (0..d * m).map(|_| gauss(&mut r)).collect();
    for i in 0..n {
        let z: Vec<f32> = (0..m).map(|_| gauss(&mut r) * 3.0).collect();
        for j in 0..d {
            let f: f32 = loadings[j * m..(j + 1) * m]
                .iter()
                .zip(&z)
                .map(|(a, b)| a * b)
                .sum();
            x[i * d + j] += f;
        }
    }
    (x, y)
}

fn bench(c: &mut Criterion) {
    let (n, d, k) = (7600, 4096, 4);
    let (x, y) = workload(n, d, k, 1);
    let plan = ProbeParams::default()
        .check()
        .unwrap()
        .plan(Labels::unnamed(y).unwrap(), &Split::Stratified)
        .unwrap();
    let f = Features::new(0, n, d, &x).unwrap();
    let mut g = c.benchmark_group("probe");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    g.bench_function("layer_7600x4096_k4", |b| {
        b.iter(|| plan.probe_layer(0, f).unwrap())
    });
    let (xc, _) = correlated(n, d, k, 1);
    let fc = Features::new(0, n, d, &xc).unwrap();
    g.bench_function("layer_7600x4096_k4_correlated", |b| {
        b.iter(|| plan.probe_layer(0, fc).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

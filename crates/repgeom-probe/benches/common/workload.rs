//! The probe benchmarks' synthetic layers, shared by `benches/probe.rs` and
//! `examples/solver_timing.rs` (a subfolder, so cargo does not take it for a bench).

use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

fn gauss(r: &mut ChaCha8Rng) -> f32 {
    let u1 = ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Class means on a few random directions, isotropic noise, a handful of heavy "outlier"
/// dimensions (as in real hidden states); roughly 85-90 % linearly decodable.
pub(crate) fn workload(n: usize, d: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
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
pub(crate) fn correlated(n: usize, d: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
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

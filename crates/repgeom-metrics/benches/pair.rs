//! The comparison pair metrics and the spectrum-matched null, on the shapes that
//! `fixtures/pair/time_numpy.py` and `fixtures/pga/time_spectrum_numpy.py` time for NumPy
//! (`cargo xtask bench pair` runs both and prints the ratios).
//!
//! Pair metrics: N = 2,000 points, d = 256 and 384, 16 latent dimensions mixed by Gaussian
//! maps plus noise 0.5 (the generator recipe of the NumPy script). Spectrum null: one layer of
//! N = 2,000 points in d = 512 with a decaying spectrum, k = 50, 100 Haar draws matched to the
//! readout's captured variance.

use criterion::{Criterion, criterion_group, criterion_main};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::{LayerInput, PairInput, PairMetric};
use repgeom_null::{NullBases, NullParams};

/// The pair shape: points, widths of the two sides.
pub const PAIR_SHAPE: (usize, usize, usize) = (2000, 256, 384);
/// The spectrum-null shape: points, width, readout dimension, draws.
pub const SPECTRUM_SHAPE: (usize, usize, usize, usize) = (2000, 512, 50, 100);

fn pair_layers() -> (Mat<f32>, Mat<f32>) {
    let (n, da, db) = PAIR_SHAPE;
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
    let a = layer(da);
    let b = layer(db);
    (a, b)
}

fn bench_pair(c: &mut Criterion) {
    let (a, b) = pair_layers();
    let mut group = c.benchmark_group("pair_n2000_d256_d384");
    group.sample_size(10);
    for (name, config) in [
        ("mutual_knn", r#"{"metric": "mutual_knn", "n_perm": 0}"#),
        ("cknna", r#"{"metric": "cknna", "n_perm": 0}"#),
        ("svcca", r#"{"metric": "svcca"}"#),
        ("pwcca", r#"{"metric": "pwcca"}"#),
        ("procrustes", r#"{"metric": "procrustes"}"#),
        ("rsa", r#"{"metric": "rsa"}"#),
        ("cka_linear", r#"{"metric": "cka_linear"}"#),
    ] {
        let metric: Box<dyn PairMetric> = serde_json::from_str(config).unwrap();
        group.bench_function(name, |bench| {
            bench.iter(|| {
                // A fresh input each time: the per-layer caches are part of the cost.
                let (ia, ib) = (
                    LayerInput::new(a.as_ref(), "A", Par::Seq).unwrap(),
                    LayerInput::new(b.as_ref(), "B", Par::Seq).unwrap(),
                );
                let input = PairInput::new(&ia, &ib).unwrap();
                metric.compute(&input).unwrap()
            })
        });
    }
    group.finish();
}

fn bench_spectrum_null(c: &mut Criterion) {
    let (n, d, k, n_null) = SPECTRUM_SHAPE;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    // Column j has standard deviation (1 + j)^(-1/2): a decaying spectrum.
    let mut x = Mat::<f64>::from_fn(n, d, |_, j| {
        let g: f64 = StandardNormal.sample(&mut rng);
        g / (1.0 + j as f64).sqrt()
    });
    for j in 0..d {
        let m = x.col(j).iter().sum::<f64>() / n as f64;
        x.col_mut(j).iter_mut().for_each(|v| *v -= m);
    }
    // A readout leaning on the high-variance coordinates: column j mixes coordinate j with
    // coordinate d - 1 - j (orthonormal, captured share well above k/d but reachable).
    let (cs, sn) = (0.8f64, 0.6f64);
    let readout = Mat::<f64>::from_fn(d, k, |i, j| {
        if i == j {
            cs
        } else if i == d - 1 - j {
            sn
        } else {
            0.0
        }
    });
    let null = NullBases::draw(d, k, &NullParams { n_null, seed: 0 }.check().unwrap()).unwrap();
    let mut group = c.benchmark_group("spectrum_null_n2000_d512_k50");
    group.sample_size(10);
    group.bench_function("match_100_draws", |bench| {
        bench.iter(|| {
            repgeom_null::spectrum_matched(&null, x.as_ref(), readout.as_ref(), 0.01, Par::Seq)
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_pair, bench_spectrum_null);
criterion_main!(benches);

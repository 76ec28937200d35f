//! Subspace PGA throughput on the reference workload: one layer of N = 2048 points,
//! d = 2048, k = 100, 100 null draws (the same shape as the NumPy/SciPy reference timing).
//!
//! Also times the engine's unavoidable parts on the same data, so the overhead is visible:
//! the full-space distance GEMM plus, per draw, the projection GEMM, the Gram GEMM and one
//! sort of the pairs.

use criterion::{Criterion, criterion_group, criterion_main};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};
use repgeom_metrics::pga::pga;
use repgeom_null::{NullBases, NullParams};

fn workload(n: usize, d: usize) -> Mat<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    // Low-rank structure plus noise, so distances are not all alike.
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
    h
}

fn bench_pga(c: &mut Criterion) {
    let (n, d, k, n_null) = (2048, 2048, 100, 100);
    let h = workload(n, d);
    let w_u = workload(4096, d);
    let basis = repgeom_linalg::readout_subspace(w_u.as_ref(), k, Par::Seq).unwrap();
    let params = NullParams { n_null, seed: 0 }.check().unwrap();
    let null = NullBases::draw(d, k, &params).unwrap();
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };

    let mut group = c.benchmark_group("pga_n2048_d2048_k100");
    group.sample_size(10);
    group.bench_function("pga_ccr1_100_draws", |bench| {
        bench.iter(|| pga(h.as_ref(), basis.as_ref(), &null, 1, "bench", par, &|| {}).unwrap())
    });

    // The unavoidable parts: full Gram once, then per draw: projection, Gram, one pair sort.
    let hc = repgeom_linalg::ccr(h.as_ref(), 1, par).unwrap();
    let h32 = repgeom_linalg::to_f32(hc.as_ref(), Par::Seq);
    let q32: Vec<Mat<f32>> = null
        .bases()
        .iter()
        .map(|q| repgeom_linalg::to_f32(q.as_ref(), Par::Seq))
        .collect();
    group.bench_function("floor_gemms_plus_one_sort_per_draw", |bench| {
        use rayon::prelude::*;
        bench.iter(|| {
            let full = repgeom_linalg::cosine_distances(hc.as_ref(), "full", par).unwrap();
            let sums: f32 = q32
                .par_iter()
                .map(|q| {
                    let p = repgeom_linalg::project_f32(h32.as_ref(), q.as_ref(), Par::Seq);
                    let mut g = Mat::<f32>::zeros(n, n);
                    faer_gram(&mut g, p.as_ref());
                    let mut v: Vec<f32> = (0..n)
                        .flat_map(|i| ((i + 1)..n).map(move |j| (i, j)))
                        .map(|(i, j)| g[(j, i)])
                        .collect();
                    v.sort_unstable_by(f32::total_cmp);
                    v[v.len() / 2]
                })
                .sum();
            (full.len(), sums)
        })
    });
    group.finish();
}

fn faer_gram(g: &mut Mat<f32>, p: repgeom_linalg::MatRef<'_, f32>) {
    let prod = p * p.transpose();
    *g = prod;
}

criterion_group!(benches, bench_pga);
criterion_main!(benches);

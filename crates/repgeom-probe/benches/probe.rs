//! One layer of the target workload: 7,600 examples × 4,096 features, 4 classes, default
//! protocol (80/20 stratified split, 3-fold CV over the 5-strength grid, final fit, and the
//! same again for the control task).
//! Seconds per layer × 33 is the sweep time for the largest study models.
//!
//! The `solver` group compares the two solvers (`ProbeParams::solver`) on a smaller layer,
//! 1,900 × 1,024 (a quarter of the rows and of the features), where linfa-logistic runs in
//! seconds: `cargo bench -p repgeom-probe --bench probe -- solver`. One run of each solver on
//! the full shape: `cargo run --release -p repgeom-probe --example solver_timing`.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use repgeom_probe::{Features, Labels, ProbeParams, Solver, Split};

#[path = "common/workload.rs"]
mod workload;
use workload::{correlated, workload};

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

fn solvers(c: &mut Criterion) {
    let (n, d, k) = (1900, 1024, 4);
    let (x, y) = workload(n, d, k, 1);
    let f = Features::new(0, n, d, &x).unwrap();
    let mut g = c.benchmark_group("solver");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    for solver in [Solver::Lbfgs, Solver::Linfa] {
        let plan = ProbeParams {
            solver,
            ..ProbeParams::default()
        }
        .check()
        .unwrap()
        .plan(Labels::unnamed(y.clone()).unwrap(), &Split::Stratified)
        .unwrap();
        g.bench_function(format!("layer_1900x1024_k4_{solver}"), |b| {
            b.iter(|| plan.probe_layer(0, f).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench, solvers);
criterion_main!(benches);

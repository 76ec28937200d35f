//! Extraction's linear layers (`y ← y + x Wᵀ`, 2,048 rows: 8 sequences of 256 tokens) on
//! Pythia-70M and 410M shapes, three ways: faer's product on one thread, faer's own parallel
//! product on every core, and `matmul_abt_add_f32` on every core (fixed 256 × 256 output
//! rectangles, each a sequential faer product on one worker). Prints GFLOP/s, best of 3 runs
//! of `REPS` products each, and whether the parallel results equal the one-thread result bit
//! for bit. `cargo run --release -p repgeom-linalg --example f32_product_tasks [-- REPS]`.
//! Single runs, not a benchmark.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef};
use repgeom_linalg::{Par, matmul_abt_add_f32};

/// (rows, in, out) of each layer product: QKV, attention output, MLP up and down.
const SHAPES: [(&str, usize, usize, usize); 8] = [
    ("70M qkv", 2048, 512, 1536),
    ("70M dense", 2048, 512, 512),
    ("70M up", 2048, 512, 2048),
    ("70M down", 2048, 2048, 512),
    ("410M qkv", 2048, 1024, 3072),
    ("410M dense", 2048, 1024, 1024),
    ("410M up", 2048, 1024, 4096),
    ("410M down", 2048, 4096, 1024),
];

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let threads = rayon::current_num_threads();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread");
    println!("{threads} threads, best of 3 runs of {reps} products, GFLOP/s");
    println!(
        "| product | rows × in × out | 1 thread | faer parallel | tasks | tasks / faer | bits |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, rows, inp, out) in SHAPES {
        // values in [-0.5, 0.5) from a fixed arithmetic sequence: no RNG, the same every run
        let x: Vec<f32> = (0..rows * inp)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let w: Vec<f32> = (0..out * inp)
            .map(|i| ((i * 104_729) % 997) as f32 / 997.0 - 0.5)
            .collect();
        let (xm, wm) = (
            MatRef::from_row_major_slice(&x, rows, inp),
            MatRef::from_row_major_slice(&w, out, inp),
        );
        let mut y = vec![0f32; rows * out];
        let mut time = |f: &dyn Fn(MatMut<'_, f32>)| -> (f64, Vec<f32>) {
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                for _ in 0..reps {
                    y.fill(0.0);
                    f(MatMut::from_row_major_slice_mut(&mut y, rows, out));
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            (
                2.0 * (rows * inp * out * reps) as f64 / best / 1e9,
                y.clone(),
            )
        };
        let faer_par = |par: Par| {
            move |d: MatMut<'_, f32>| matmul(d, Accum::Add, xm, wm.transpose(), 1.0f32, par)
        };
        let (seq, want) = one.install(|| time(&faer_par(Par::rayon(0))));
        let (faer, got_faer) = time(&faer_par(Par::rayon(0)));
        let (tasks, got_tasks) = time(&|d| matmul_abt_add_f32(d, xm, wm, Par::rayon(0)));
        let same = |v: &[f32]| v.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
        println!(
            "| {name} | {rows} × {inp} × {out} | {seq:.0} | {faer:.0} | {tasks:.0} | {:.2} | {} |",
            tasks / faer,
            if same(&got_faer) && same(&got_tasks) {
                "equal"
            } else {
                "DIFFER"
            }
        );
    }
}

//! Stage timings of PGA on the bench workload: `cargo run --release -p repgeom-metrics --example profile_pga`.
#![allow(clippy::print_stdout)] // a profiling tool prints its timings

use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, Par};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2048);
    let d: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2048);
    let k = 100;
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let h = Mat::<f32>::from_fn(n, d, |_, _| StandardNormal.sample(&mut rng));
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let t = Instant::now();
    let params = repgeom_null::NullParams {
        n_null: 100,
        seed: 0,
    }
    .check()
    .unwrap();
    let null = repgeom_null::NullBases::draw(d, k, &params).unwrap();
    println!(
        "null bases (100) {:>8.3} s ({} threads)",
        t.elapsed().as_secs_f64(),
        threads
    );
    drop(null);
    let t = Instant::now();
    let xc = repgeom_linalg::center_columns(h.as_ref());
    println!("centre           {:>8.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let pd = repgeom_linalg::top_principal_directions(xc.as_ref(), 1, par).unwrap();
    println!("principal dirs   {:>8.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let hc = repgeom_linalg::remove_directions(xc.as_ref(), pd.directions.as_ref(), par);
    println!("remove           {:>8.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let full = repgeom_linalg::cosine_distances(hc.as_ref(), "full", par).unwrap();
    println!("full distances   {:>8.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let reference = repgeom_linalg::RankedReference::new(&full, "full").unwrap();
    println!("rank full        {:>8.3} s", t.elapsed().as_secs_f64());
    let h32 = repgeom_linalg::to_f32(hc.as_ref());
    let q = repgeom_linalg::to_f32(repgeom_null::haar_basis(d, k, 0, 0).as_ref());
    // Per-draw stages: the mean and the best of `REPS` (default 5) repetitions, since the
    // best is what comparisons between builds on a noisy machine can rely on.
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let time = |label: &str, f: &mut dyn FnMut()| {
        let (mut total, mut best) = (0.0f64, f64::INFINITY);
        for _ in 0..reps {
            let t = Instant::now();
            f();
            let s = t.elapsed().as_secs_f64();
            total += s;
            best = best.min(s);
        }
        println!(
            "{label:<16} {:>8.4} s (best {best:.4} s)",
            total / reps as f64
        );
    };
    let mut p = Mat::<f32>::zeros(1, 1);
    time("project (1 draw)", &mut || {
        p = repgeom_linalg::project_f32(h32.as_ref(), q.as_ref(), Par::Seq);
    });
    let mut buf = vec![0.0f32; full.len()];
    time("proj distances", &mut || {
        repgeom_linalg::cosine_distances_into(p.as_ref(), &mut buf, "p", Par::Seq).unwrap();
    });
    let mut scratch = repgeom_linalg::RankScratch::default();
    time("spearman", &mut || {
        reference.spearman(&buf, &mut scratch, "p").unwrap();
    });
    time("fused dist+rho", &mut || {
        repgeom_linalg::spearman_of_cosine(&reference, p.as_ref(), &mut scratch, "p", Par::Seq)
            .unwrap();
    });
    time("std sort (floor)", &mut || {
        let mut v = buf.clone();
        v.sort_unstable_by(f32::total_cmp);
    });
}

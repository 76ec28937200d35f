//! Stage timings of PGA on the bench workload: `cargo run --release -p repgeom-metrics --example
//! profile_pga [-- N D]` on Gaussian activations, or with `PGA_FILES=dir` on `dir/acts.npy` and
//! `dir/wu.npy` (the files of `cargo xtask bench pga`), where it also times loading and the
//! readout subspace. It ends with the sum of the parts of one `repgeom pga` run (k = 100,
//! CCR-1, 100 null draws plus the readout's own draw): the work no schedule can avoid, which
//! `cargo xtask bench pga` divides by the core count for the run's floor. Run it with
//! `RAYON_NUM_THREADS=1` for single-thread parts. Each stage reports the best of `STAGE_REPS`
//! (default 1) runs, each per-draw stage the mean and the best of `REPS` (default 5): the best
//! is what comparisons on a noisy machine can rely on.
#![allow(clippy::print_stdout)] // a profiling tool prints its timings

use std::path::PathBuf;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, MatRef, Par};

/// A repetition count from the environment variable `name`, at least 1.
fn reps(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn main() {
    let k = 100;
    let files = std::env::var_os("PGA_FILES").map(PathBuf::from);
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let stage_reps = reps("STAGE_REPS", 1);
    println!("{threads} threads, stages best of {stage_reps}");
    // One stage: its result and the best of `stage_reps` wall times, printed under `label`.
    let stage = |label: &str| {
        let label = label.to_owned();
        move |f: &mut dyn FnMut()| {
            let mut best = f64::INFINITY;
            for _ in 0..stage_reps {
                let t = Instant::now();
                f();
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("{label:<16} {best:>8.3} s");
            best
        }
    };
    // Loading and the readout subspace: only with the bench's files (0 otherwise).
    let (h, load, readout) = match &files {
        Some(dir) => {
            let mut loaded = None;
            let load = stage("load")(&mut || {
                let acts = repgeom_io::read_activations(&dir.join("acts.npy"), None)
                    .expect("PGA_FILES/acts.npy: activations");
                let w_u = repgeom_io::read_readout(&dir.join("wu.npy"), &Default::default())
                    .expect("PGA_FILES/wu.npy: readout");
                loaded = Some((acts, w_u));
            });
            let (acts, w_u) = loaded.expect("loaded");
            let m = &acts.layers[0].acts;
            let h = MatRef::from_row_major_slice(&m.data, m.rows, m.cols).to_owned();
            let w = &w_u.matrix;
            let readout = stage("readout subspace")(&mut || {
                repgeom_linalg::readout_subspace(
                    MatRef::from_row_major_slice(&w.data, w.rows, w.cols),
                    k,
                    par,
                )
                .expect("readout subspace");
            });
            (h, load, readout)
        }
        None => {
            let n: usize = std::env::args()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(2048);
            let d: usize = std::env::args()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(2048);
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let h = Mat::<f32>::from_fn(n, d, |_, _| StandardNormal.sample(&mut rng));
            (h, 0.0, 0.0)
        }
    };
    let d = h.ncols();
    let params = repgeom_null::NullParams {
        n_null: 100,
        seed: 0,
    }
    .check()
    .unwrap();
    let null_s = stage("null bases (100)")(&mut || {
        repgeom_null::NullBases::draw(d, k, &params).unwrap();
    });
    let mut xc = Mat::<f64>::zeros(0, 0);
    let centre = stage("centre")(&mut || xc = repgeom_linalg::center_columns(h.as_ref(), par));
    let mut pd = None;
    let dirs = stage("principal dirs")(&mut || {
        pd = Some(repgeom_linalg::top_principal_directions(xc.as_ref(), 1, par).unwrap());
    });
    let pd = pd.expect("directions");
    let mut hc = Mat::<f64>::zeros(0, 0);
    let remove = stage("remove")(&mut || {
        hc = repgeom_linalg::remove_directions(xc.as_ref(), pd.directions.as_ref(), par);
    });
    let mut full = Vec::new();
    let dist = stage("full distances")(&mut || {
        full = repgeom_linalg::cosine_distances(hc.as_ref(), "full", par).unwrap();
    });
    let mut reference = None;
    let rank = stage("rank full")(&mut || {
        reference =
            Some(repgeom_linalg::RankedReference::new(&full, "full", Par::rayon(0)).unwrap());
    });
    let reference = reference.expect("ranked");
    let h32 = repgeom_linalg::to_f32(hc.as_ref(), Par::Seq);
    let q = repgeom_linalg::to_f32(repgeom_null::haar_basis(d, k, 0, 0).as_ref(), Par::Seq);
    let reps = reps("REPS", 5);
    let time = |label: &str, f: &mut dyn FnMut()| -> f64 {
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
        best
    };
    let mut p = Mat::<f32>::zeros(1, 1);
    let project = time("project (1 draw)", &mut || {
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
    let fused = time("fused dist+rho", &mut || {
        repgeom_linalg::spearman_of_cosine(&reference, p.as_ref(), &mut scratch, "p", Par::Seq)
            .unwrap();
    });
    time("std sort (floor)", &mut || {
        let mut v = buf.clone();
        v.sort_unstable_by(f32::total_cmp);
    });
    // One run's parts: 100 null draws and the readout's own, each a projection and the fused
    // distances-to-correlation pass at its best time.
    let draw = project + fused;
    let draws = 101.0 * draw;
    let ccr = centre + dirs + remove;
    let full_space = dist + rank;
    let sum = load + readout + null_s + ccr + full_space + draws;
    println!(
        "parts of one run: load {load:.3} s, readout subspace {readout:.3} s, null bases \
         {null_s:.3} s, CCR-1 {ccr:.3} s, full-space ranking {full_space:.3} s, 101 draws \
         {draws:.3} s ({:.1} ms each); sum {sum:.3} s",
        draw * 1e3
    );
    println!("sum_s={sum:.4}");
}

//! Stage timings of the readout subspace on issue 16's workload (W_U 4000 × 2048, k = 100):
//! the f64 Gram, then the top-k eigenpairs by the partial Krylov–Schur solver against the full
//! decomposition, and whether they agree (eigenvalues; the smallest cosine of the principal
//! angles between the two subspaces, 1 when equal). `cargo run --release -p repgeom-linalg
//! --example readout_timing [-- V D K]`, with `READOUT_NPY=w.npy` to read W_U from a float32
//! `.npy` (128-byte header) instead of the built-in generator. Single runs, not a benchmark.
//!
//! On a Gaussian W_U (NumPy `default_rng(0)`, 2000 × 1024, k = 100) the partial solver returned
//! a subspace at a 90° principal angle to the true one, and reported success: why its answer
//! is now accepted only with a certificate (`top_pairs_certified`), and the time of the
//! certified path is what "partial" reports.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use repgeom_linalg::{Mat, Par, symmetric_eigen_desc, to_f64, top_eigen_desc};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (v, d, k) = match args[..] {
        [v, d, k] => (v, d, k),
        _ => (4000, 2048, 100),
    };
    // READOUT_NPY=path: a row-major little-endian f32 .npy with a 128-byte header, V × D.
    let file: Option<Vec<f32>> = std::env::var("READOUT_NPY").ok().map(|p| {
        let bytes = std::fs::read(p).expect("readable npy");
        bytes[128..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    });
    let w = Mat::<f32>::from_fn(v, d, |i, j| {
        if let Some(data) = &file {
            return data[i * d + j];
        }
        let mut x = ((i as u64) << 32 | j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 29;
        ((x >> 40) as f32 / (1u32 << 24) as f32) - 0.5
    });
    let par = Par::rayon(2);
    let t = Instant::now();
    let w64 = to_f64(w.as_ref());
    let mut g = Mat::<f64>::zeros(d, d);
    faer::linalg::matmul::matmul(
        &mut g,
        faer::Accum::Replace,
        w64.transpose(),
        &w64,
        1.0,
        par,
    );
    let gram = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (pv, pvec) = top_eigen_desc(g.as_ref(), k, par).expect("partial");
    let partial = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (fv, fvec) = symmetric_eigen_desc(g.as_ref(), par).expect("full");
    let full = t.elapsed().as_secs_f64();
    // Agreement: eigenvalues, and the largest principal angle's sine between the subspaces.
    let dv = pv
        .iter()
        .zip(&fv)
        .map(|(a, b)| (a - b).abs() / fv[0])
        .fold(0.0f64, f64::max);
    let overlap = pvec.transpose() * fvec.subcols(0, k);
    let s = repgeom_linalg::singular_values(overlap.as_ref(), "overlap", Par::Seq).expect("svd");
    let min_cos = s.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "max |λ_partial − λ_full| / λ_1 = {dv:.1e}; smallest cosine of the principal angles = \
         {min_cos:.12}; gap λ_k/λ_(k+1) − 1 = {:.2e}",
        fv[k - 1] / fv[k] - 1.0
    );
    let t = Instant::now();
    let certified =
        repgeom_linalg::top_pairs_certified(g.as_ref(), &fv[..k], fvec.subcols(0, k), par);
    let check = t.elapsed().as_secs_f64();
    println!(
        "V = {v}, d = {d}, k = {k}: Gram (f64, 2 threads) {gram:.2} s; top-k eigenpairs: partial \
         (certified, else the full decomposition) {partial:.2} s, full decomposition {full:.2} s; \
         the certificate alone {check:.2} s (on the full decomposition's pairs: {certified})"
    );
    // What `repgeom pga` and the study run: the Gram's lower triangle, then only k eigenvectors
    // transformed back (the same subspace as the full decomposition's first k columns, bit for
    // bit), on one thread and on the pool: the same bits either way.
    let t = Instant::now();
    let used = repgeom_linalg::readout_subspace(w.as_ref(), k, par).expect("readout");
    let readout = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let seq = repgeom_linalg::readout_subspace(w.as_ref(), k, Par::Seq).expect("readout");
    let one = t.elapsed().as_secs_f64();
    println!(
        "readout_subspace (Gram lower triangle + top-k back-transform, as repgeom pga): \
         {readout:.2} s on 2 threads, {one:.2} s on one; equal to the full decomposition's \
         first k columns: {}; equal on one thread and on two: {}",
        used == fvec.subcols(0, k),
        used == seq
    );
}

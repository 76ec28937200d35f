//! A planted "detour" layer: dominant variance in dark directions orthogonal to the readout,
//! class structure inside the readout. PGA z is negative, yet the probe reads the classes.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use repgeom_probe::{ProbeParams, Split};

use crate::{check, gauss};

const N: usize = 160;
const D: usize = 48;
/// Readout subspace: the first `K` coordinates.
const K: usize = 6;

fn cosine_distances(h: &[Vec<f64>]) -> Vec<f64> {
    let norms: Vec<f64> = h
        .iter()
        .map(|r| r.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-300))
        .collect();
    let mut out = Vec::new();
    for i in 0..h.len() {
        for j in i + 1..h.len() {
            let dot: f64 = h[i].iter().zip(&h[j]).map(|(a, b)| a * b).sum();
            out.push(1.0 - dot / (norms[i] * norms[j]));
        }
    }
    out
}

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for t in i..=j {
            r[idx[t]] = (i + j) as f64 / 2.0;
        }
        i = j + 1;
    }
    r
}

fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let m = (ra.len() as f64 - 1.0) / 2.0;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - m) * (y - m);
        saa += (x - m) * (x - m);
        sbb += (y - m) * (y - m);
    }
    sab / (saa * sbb).sqrt()
}

fn project(h: &[Vec<f64>], basis: &[Vec<f64>]) -> Vec<Vec<f64>> {
    h.iter()
        .map(|r| {
            basis
                .iter()
                .map(|b| r.iter().zip(b).map(|(x, y)| x * y).sum())
                .collect()
        })
        .collect()
}

/// Simplified PGA z (mean-centring, CCR-1 by power iteration, 40 Haar-like null draws).
fn pga_z(h: &[Vec<f64>], seed: u64) -> f64 {
    let d = h[0].len();
    let mean: Vec<f64> = (0..d)
        .map(|j| h.iter().map(|r| r[j]).sum::<f64>() / h.len() as f64)
        .collect();
    let mut c: Vec<Vec<f64>> = h
        .iter()
        .map(|r| r.iter().zip(&mean).map(|(a, b)| a - b).collect())
        .collect();
    let mut u = vec![1.0; d];
    for _ in 0..200 {
        let s: Vec<f64> = c
            .iter()
            .map(|r| r.iter().zip(&u).map(|(a, b)| a * b).sum())
            .collect();
        let mut nu = vec![0.0; d];
        for (r, sv) in c.iter().zip(&s) {
            for (n, a) in nu.iter_mut().zip(r) {
                *n += a * sv;
            }
        }
        let norm = nu.iter().map(|v| v * v).sum::<f64>().sqrt();
        u = nu.iter().map(|v| v / norm).collect();
    }
    for r in c.iter_mut() {
        let p: f64 = r.iter().zip(&u).map(|(a, b)| a * b).sum();
        r.iter_mut().zip(&u).for_each(|(a, b)| *a -= p * b);
    }
    let full = cosine_distances(&c);
    let readout: Vec<Vec<f64>> = (0..K)
        .map(|q| (0..d).map(|j| f64::from(u8::from(j == q))).collect())
        .collect();
    let rho = spearman(&full, &cosine_distances(&project(h, &readout)));
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let null: Vec<f64> = (0..40)
        .map(|_| {
            let mut basis: Vec<Vec<f64>> = Vec::new();
            while basis.len() < K {
                let mut v: Vec<f64> = (0..d).map(|_| gauss(&mut r)).collect();
                for b in &basis {
                    let p: f64 = v.iter().zip(b).map(|(x, y)| x * y).sum();
                    v.iter_mut().zip(b).for_each(|(x, y)| *x -= p * y);
                }
                let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                basis.push(v.iter().map(|x| x / n).collect());
            }
            spearman(&full, &cosine_distances(&project(h, &basis)))
        })
        .collect();
    let m = null.iter().sum::<f64>() / null.len() as f64;
    let sd =
        (null.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (null.len() as f64 - 1.0)).sqrt();
    (rho - m) / sd
}

#[test]
fn detour_layer_probes_well_while_pga_z_is_negative() {
    let mut r = ChaCha8Rng::seed_from_u64(11);
    let y: Vec<usize> = (0..N).map(|i| i % 4).collect();
    let h: Vec<Vec<f64>> = y
        .iter()
        .map(|&c| {
            (0..D)
                .map(|j| {
                    let g = gauss(&mut r);
                    if j < K {
                        // class structure lives in the readout
                        let mean = if j == c { 3.0 } else { 0.0 };
                        mean + 0.3 * g
                    } else if j < K + 6 {
                        12.0 * g // dominant dark directions
                    } else {
                        0.3 * g
                    }
                })
                .collect()
        })
        .collect();
    let z = pga_z(&h, 5);
    let x: Vec<f32> = h.iter().flatten().map(|v| *v as f32).collect();
    let p = check(&x, &y, D, ProbeParams::default(), Split::Stratified).unwrap();
    assert!(z < -2.0, "z = {z}");
    assert!(p.accuracy > 0.9, "{p:?}");
}

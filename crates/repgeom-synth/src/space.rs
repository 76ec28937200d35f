//! One synthetic model's fixed geometry (readout, bases, latent points) and its layer regimes.

use std::fmt;

use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use repgeom_linalg::Mat;

use crate::error::{Error, Result, invalid};
use crate::params::ValidModelParams;

/// The planted geometry of one synthetic layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Regime {
    /// Latent class structure embedded mostly in the readout subspace: PGA `z ≫ 0`.
    Direct,
    /// The direct structure plus `dark_dims` high-variance directions orthogonal to the readout,
    /// with content independent of it: PGA `z < 0` at CCR-1, `z > 0` again at CCR-`dark_dims`.
    Detour {
        /// Number of dark directions `m` (at most `ModelParams::dark_pool`).
        dark_dims: usize,
        /// Standard deviation of the leading dark direction relative to the RMS norm of the
        /// direct part (direction `j` gets `strength * dark_decay^j`).
        strength: f64,
    },
    /// Standard Gaussian noise (plus the shared offset): PGA `|z|` small.
    Isotropic,
    /// The direct layer, then rotated by an orthogonal map of the hidden space that turns its
    /// `dims` dominant principal directions inside the readout subspace towards dark directions
    /// (by `angle` quarter turns, `angle` in [0, 1]; 1 moves them entirely into the dark).
    /// The whole layer (offset included) is rotated, so every rotation-invariant spectral
    /// quantity (singular values, centred or not) equals the direct layer's drawn from the same
    /// streams; only where the variance sits relative to the readout changes.
    Rotation {
        /// Number of dominant directions rotated out (at most `k` and `ModelParams::dark_pool`).
        dims: usize,
        /// Fraction of a quarter turn, in [0, 1].
        angle: f64,
    },
    /// Variance-only alignment: the readout subspace holds the layer's largest-variance
    /// directions with content independent of the labelled points, while the distance
    /// structure (the direct embedding) lives in the complement. PGA under the Haar null can
    /// read `z > 0` from variance alone; a variance-matched null removes it.
    VarianceOnly {
        /// Standard deviation of the leading readout-side direction relative to the RMS norm
        /// of the structured part (as `Detour::strength`); direction `j < k` gets
        /// `strength · (1 − j/(2k))`.
        strength: f64,
    },
}

impl Regime {
    /// Short stable name: `direct`, `detour` or `isotropic`.
    pub fn name(&self) -> &'static str {
        match self {
            Regime::Direct => "direct",
            Regime::Detour { .. } => "detour",
            Regime::Isotropic => "isotropic",
            Regime::Rotation { .. } => "rotation",
            Regime::VarianceOnly { .. } => "variance_only",
        }
    }

    fn check(&self, label: &str, pool: usize, k: usize) -> Result<()> {
        if let Regime::Rotation { dims, angle } = *self {
            if dims == 0 || dims > k {
                return Err(invalid(
                    "Regime",
                    "dims",
                    dims,
                    "must be in 1..=k (directions of the readout subspace)",
                ));
            }
            if dims > pool {
                return Err(Error::DarkDimsTooLarge {
                    model: label.to_string(),
                    requested: dims,
                    available: pool,
                });
            }
            if !(0.0..=1.0).contains(&angle) {
                return Err(invalid("Regime", "angle", angle, "must be in [0, 1]"));
            }
        }
        if let Regime::VarianceOnly { strength } = *self
            && !(strength.is_finite() && strength >= 0.0)
        {
            return Err(invalid(
                "Regime",
                "strength",
                strength,
                "must be finite and >= 0",
            ));
        }
        if let Regime::Detour {
            dark_dims,
            strength,
        } = *self
        {
            if dark_dims == 0 {
                return Err(invalid(
                    "Regime",
                    "dark_dims",
                    dark_dims,
                    "must be at least 1",
                ));
            }
            if dark_dims > pool {
                return Err(Error::DarkDimsTooLarge {
                    model: label.to_string(),
                    requested: dark_dims,
                    available: pool,
                });
            }
            if !(strength.is_finite() && strength >= 0.0) {
                return Err(invalid(
                    "Regime",
                    "strength",
                    strength,
                    "must be finite and >= 0",
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Regime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Regime::Detour {
                dark_dims,
                strength,
            } => {
                write!(f, "detour(m={dark_dims}, strength={strength:.3})")
            }
            Regime::Rotation { dims, angle } => {
                write!(f, "rotation(m={dims}, angle={angle:.3})")
            }
            Regime::VarianceOnly { strength } => {
                write!(f, "variance_only(strength={strength:.3})")
            }
            other => f.write_str(other.name()),
        }
    }
}

/// The fixed part of one synthetic model: readout `W_U` with a known top-`k` right singular
/// subspace, the reserved dark directions, and the latent labelled point cloud shared by all
/// of its layers. Layers are drawn from it with [`SyntheticSpace::layer`].
#[derive(Debug, Clone)]
pub struct SyntheticSpace {
    /// Always `true`: this is generated data, never a real model.
    pub synthetic: bool,
    /// `synthetic-d{d}`.
    pub label: String,
    /// Hidden width.
    pub d: usize,
    /// Readout dimension.
    pub k: usize,
    /// `W_U`, `V × d`, f32.
    pub readout: Mat<f32>,
    /// All `d` singular values of `W_U`, non-increasing (the first `k` dominate: 4 → 2, then 1 → 0.5).
    pub readout_singular_values: Vec<f64>,
    /// `d × k` orthonormal basis of the top-`k` right singular subspace of `W_U`.
    pub readout_basis: Mat<f64>,
    /// `d × dark_pool` orthonormal dark directions, orthogonal to `readout_basis`.
    pub dark_basis: Mat<f64>,
    /// Class of every point, balanced over `0..n_classes`.
    pub labels: Vec<usize>,
    /// Number of classes.
    pub n_classes: usize,
    /// Latent points `N × L` (class mean + unit Gaussian), before any layer's embedding.
    pub latent: Mat<f64>,
    /// `d × d` orthogonal frame, column-major: readout | dark pool | complement.
    frame: Vec<f64>,
    params: ValidModelParams,
}

pub(crate) fn gauss(rng: &mut impl Rng) -> f64 {
    rng.sample::<f64, _>(StandardNormal)
}

/// `rows × cols` Haar-distributed orthonormal columns, column-major: modified Gram-Schmidt
/// (two passes) of a standard Gaussian matrix, i.e. QR with `diag(R) > 0`.
pub(crate) fn haar_columns(rows: usize, cols: usize, rng: &mut impl Rng) -> Vec<f64> {
    assert!(cols <= rows, "haar_columns: cols must not exceed rows");
    let mut q: Vec<f64> = (0..rows * cols).map(|_| gauss(rng)).collect();
    for j in 0..cols {
        for _pass in 0..2 {
            for p in 0..j {
                let (done, rest) = q.split_at_mut(j * rows);
                let qp = &done[p * rows..(p + 1) * rows];
                let qj = &mut rest[..rows];
                let dot: f64 = qp.iter().zip(qj.iter()).map(|(a, b)| a * b).sum();
                qj.iter_mut().zip(qp).for_each(|(b, a)| *b -= dot * a);
            }
        }
        let qj = &mut q[j * rows..(j + 1) * rows];
        let norm = qj.iter().map(|v| v * v).sum::<f64>().sqrt();
        qj.iter_mut().for_each(|v| *v /= norm);
    }
    q
}

fn col_major_to_mat(data: &[f64], rows: usize, col0: usize, ncols: usize) -> Mat<f64> {
    Mat::from_fn(rows, ncols, |i, j| data[(col0 + j) * rows + i])
}

fn singular_values(d: usize, k: usize) -> Vec<f64> {
    (0..d)
        .map(|j| {
            if j < k {
                if k == 1 {
                    4.0
                } else {
                    4.0 - 2.0 * j as f64 / (k - 1) as f64
                }
            } else if d - k == 1 {
                1.0
            } else {
                1.0 - 0.5 * (j - k) as f64 / (d - k - 1) as f64
            }
        })
        .collect()
}

impl SyntheticSpace {
    /// Draws the readout, the orthogonal frame and the latent labelled point cloud.
    ///
    /// `W_U = A diag(s) Qᵀ` with `A` (`V × d`) and `Q` (`d × d`) Haar-orthonormal, so the right
    /// singular vectors are exactly the columns of `Q`; `readout_basis = Q[:, :k]`,
    /// `dark_basis = Q[:, k:k+dark_pool]`.
    pub fn generate(params: &ValidModelParams, rng: &mut impl Rng) -> Self {
        let p = &params.p;
        let (d, k, vocab, pool) = (p.d, params.k, params.vocab, p.dark_pool);
        let frame = haar_columns(d, d, rng);
        let a = haar_columns(vocab, d, rng);
        let s = singular_values(d, k);
        let mut w = vec![0.0f64; vocab * d];
        for j in 0..d {
            let qj = &frame[j * d..(j + 1) * d];
            for v in 0..vocab {
                let coef = a[j * vocab + v] * s[j];
                let row = &mut w[v * d..(v + 1) * d];
                row.iter_mut().zip(qj).for_each(|(x, q)| *x += coef * q);
            }
        }
        let readout = Mat::from_fn(vocab, d, |v, i| w[v * d + i] as f32);

        let n = p.n_points;
        let c = p.n_classes;
        let mut labels: Vec<usize> = (0..n).map(|i| i % c).collect();
        labels.shuffle(rng);
        let l = params.latent;
        let means: Vec<f64> = (0..c * l).map(|_| p.class_sep * gauss(rng)).collect();
        let mut z = vec![0.0f64; n * l];
        for i in 0..n {
            for t in 0..l {
                z[i * l + t] = means[labels[i] * l + t] + gauss(rng);
            }
        }
        let latent = Mat::from_fn(n, l, |i, t| z[i * l + t]);
        Self {
            synthetic: true,
            label: params.label(),
            d,
            k,
            readout,
            readout_singular_values: s,
            readout_basis: col_major_to_mat(&frame, d, 0, k),
            dark_basis: col_major_to_mat(&frame, d, k, pool),
            labels,
            n_classes: c,
            latent,
            frame,
            params: params.clone(),
        }
    }

    /// The parameters this space was generated from.
    pub fn params(&self) -> &ValidModelParams {
        &self.params
    }

    /// Number of points `N`.
    pub fn n_points(&self) -> usize {
        self.labels.len()
    }

    /// Draws one `N × d` layer of the given regime (embedding, jitter, offset and noise all from `rng`).
    pub fn layer(&self, regime: Regime, rng: &mut impl Rng) -> Result<Mat<f32>> {
        let mut embed = ChaCha8Rng::seed_from_u64(rng.next_u64());
        self.layer_with(regime, self.params.p.noise, &mut embed, rng)
    }

    /// Draws one layer with its layer-specific geometry (embedding, jitter, offset) from `embed`
    /// and its checkpoint-specific content (noise, dark content) from `content`, so that the
    /// same layer can be redrawn at several training checkpoints.
    pub(crate) fn layer_with(
        &self,
        regime: Regime,
        noise_sd: f64,
        embed: &mut impl RngCore,
        content: &mut impl RngCore,
    ) -> Result<Mat<f32>> {
        let p = &self.params.p;
        regime.check(&self.label, p.dark_pool, self.k)?;
        let (n, d, k, pool) = (self.n_points(), self.d, self.k, p.dark_pool);
        let l = self.params.latent;
        let nc = d - k - pool;
        let scale = (d as f64).sqrt();

        // Layer geometry (fixed across checkpoints).
        let g = haar_columns(k, l, embed);
        let gc = haar_columns(nc, l, embed);
        let jitter: Vec<f64> = (0..n * l).map(|_| p.jitter * gauss(embed)).collect();
        let mut u: Vec<f64> = (0..d).map(|_| gauss(embed)).collect();
        let un = u.iter().map(|v| v * v).sum::<f64>().sqrt();
        u.iter_mut().for_each(|v| *v *= p.offset * scale / un);

        let mut x = vec![0.0f64; n * d];
        match regime {
            Regime::Isotropic => {
                x.iter_mut().for_each(|v| *v = gauss(content));
            }
            Regime::Direct
            | Regime::Detour { .. }
            | Regime::Rotation { .. }
            | Regime::VarianceOnly { .. } => {
                // E = sqrt(1 - leak²) B G + leak C Gc, d × L column-major; variance-only puts
                // the whole embedding in the complement C.
                let a = if let Regime::VarianceOnly { .. } = regime {
                    0.0
                } else {
                    (1.0 - p.leak * p.leak).sqrt()
                };
                let leak = if let Regime::VarianceOnly { .. } = regime {
                    1.0
                } else {
                    p.leak
                };
                let mut e = vec![0.0f64; d * l];
                for t in 0..l {
                    let et = &mut e[t * d..(t + 1) * d];
                    for j in 0..k {
                        let coef = a * g[t * k + j];
                        let qj = &self.frame[j * d..(j + 1) * d];
                        et.iter_mut().zip(qj).for_each(|(x, q)| *x += coef * q);
                    }
                    for j in 0..nc {
                        let coef = leak * gc[t * nc + j];
                        let col = k + pool + j;
                        let qj = &self.frame[col * d..(col + 1) * d];
                        et.iter_mut().zip(qj).for_each(|(x, q)| *x += coef * q);
                    }
                }
                for i in 0..n {
                    let row = &mut x[i * d..(i + 1) * d];
                    for t in 0..l {
                        let zt = self.latent[(i, t)] + jitter[i * l + t];
                        let et = &e[t * d..(t + 1) * d];
                        row.iter_mut().zip(et).for_each(|(x, e)| *x += zt * e);
                    }
                }
                // Centre and scale the direct part to total variance d (unit per coordinate on average).
                let mut mean = vec![0.0f64; d];
                for i in 0..n {
                    mean.iter_mut()
                        .zip(&x[i * d..(i + 1) * d])
                        .for_each(|(m, v)| *m += v);
                }
                mean.iter_mut().for_each(|m| *m /= n as f64);
                let mut ss = 0.0;
                for i in 0..n {
                    let row = &mut x[i * d..(i + 1) * d];
                    row.iter_mut().zip(&mean).for_each(|(v, m)| {
                        *v -= m;
                        ss += *v * *v;
                    });
                }
                let f = if ss > 0.0 {
                    (d as f64 * n as f64 / ss).sqrt()
                } else {
                    0.0
                };
                x.iter_mut()
                    .for_each(|v| *v = *v * f + noise_sd * gauss(content));
                if let Regime::Detour {
                    dark_dims,
                    strength,
                } = regime
                {
                    for i in 0..n {
                        let row = &mut x[i * d..(i + 1) * d];
                        for j in 0..dark_dims {
                            let sd = strength * scale * p.dark_decay.powi(j as i32);
                            let y = sd * gauss(content);
                            let col = k + j;
                            let qj = &self.frame[col * d..(col + 1) * d];
                            row.iter_mut().zip(qj).for_each(|(x, q)| *x += y * q);
                        }
                    }
                }
                if let Regime::VarianceOnly { strength } = regime {
                    // Independent Gaussian content along every readout direction, with
                    // decreasing standard deviations so that they lead the spectrum.
                    for i in 0..n {
                        let row = &mut x[i * d..(i + 1) * d];
                        for j in 0..k {
                            let sd = strength * scale * (1.0 - 0.5 * j as f64 / k as f64);
                            let y = sd * gauss(content);
                            let qj = &self.frame[j * d..(j + 1) * d];
                            row.iter_mut().zip(qj).for_each(|(x, q)| *x += y * q);
                        }
                    }
                }
            }
        }
        for i in 0..n {
            x[i * d..(i + 1) * d]
                .iter_mut()
                .zip(&u)
                .for_each(|(v, o)| *v += o);
        }
        if let Regime::Rotation { dims, angle } = regime {
            self.rotate_out(&mut x, n, dims, angle)?;
        }
        Ok(Mat::from_fn(n, d, |i, j| x[i * d + j] as f32))
    }

    /// Rotates the rows of `x` (`n × d`, row-major) by `angle` quarter turns in the planes
    /// `(b_j, q_j)`, `j < dims`: `b_j` the dominant principal directions of `x` inside the
    /// readout subspace (eigenvectors of `Bᵀ Σ B`), `q_j` the first dark directions. The planes
    /// are mutually orthogonal, so the map is orthogonal and the spectrum is unchanged.
    fn rotate_out(&self, x: &mut [f64], n: usize, dims: usize, angle: f64) -> Result<()> {
        let (d, k) = (self.d, self.k);
        // Readout coordinates of the centred rows: Y = (X − mean) B, n × k.
        let mut mean = vec![0.0f64; d];
        for i in 0..n {
            mean.iter_mut()
                .zip(&x[i * d..(i + 1) * d])
                .for_each(|(m, v)| *m += v / n as f64);
        }
        let b = |j: usize| &self.frame[j * d..(j + 1) * d];
        let mut y = vec![0.0f64; n * k];
        for i in 0..n {
            let row = &x[i * d..(i + 1) * d];
            for j in 0..k {
                y[i * k + j] = row
                    .iter()
                    .zip(&mean)
                    .zip(b(j))
                    .map(|((v, m), q)| (v - m) * q)
                    .sum();
            }
        }
        let cov = Mat::from_fn(k, k, |a, c| {
            (0..n).map(|i| y[i * k + a] * y[i * k + c]).sum()
        });
        let (_, w) = repgeom_linalg::symmetric_eigen_desc(cov.as_ref(), repgeom_linalg::Par::Seq)
            .map_err(|source| Error::Numerical {
            model: self.label.clone(),
            source,
        })?;
        let theta = angle * std::f64::consts::FRAC_PI_2;
        let (c, s) = (theta.cos(), theta.sin());
        for j in 0..dims {
            let bj: Vec<f64> = (0..d)
                .map(|r| (0..k).map(|t| w[(t, j)] * b(t)[r]).sum())
                .collect();
            let qj = &self.frame[(k + j) * d..(k + j + 1) * d];
            for i in 0..n {
                let row = &mut x[i * d..(i + 1) * d];
                let pb: f64 = row.iter().zip(&bj).map(|(v, q)| v * q).sum();
                let pq: f64 = row.iter().zip(qj).map(|(v, q)| v * q).sum();
                // In the plane: (pb, pq) → (c pb − s pq, s pb + c pq).
                let (nb, nq) = (c * pb - s * pq, s * pb + c * pq);
                row.iter_mut()
                    .zip(bj.iter().zip(qj))
                    .for_each(|(v, (u1, u2))| *v += (nb - pb) * u1 + (nq - pq) * u2);
            }
        }
        Ok(())
    }
}

//! `repgeom-null` draws the seeded null distributions that give PGA its z-scores: uniformly
//! random (Haar) `k`-dimensional subspaces of $\mathbb{R}^d$, and the summary statistics of a
//! null sample.
//!
//! The main type is [`NullBases`]: `n_null` orthonormal `d × k` bases drawn for one
//! `(seed, d, k)` and reused across every layer of a model, so that all layers are compared
//! against the same random subspaces.
//!
//! Key design decision: draw `i` is generated from its own ChaCha8 stream (`seed`, stream `i`),
//! so draws can be made in parallel and are bit-identical at any thread count, and a single
//! draw can be regenerated without the others. A basis is the Q factor of a `d × k` standard
//! Gaussian matrix with the signs fixed so that `diag(R) > 0`, which makes its span uniform on
//! the Grassmannian (Mezzadri 2007); Q comes from a sequential blocked Householder QR
//! ([`repgeom_linalg::qr_positive`], LAPACK's and NumPy's factorisation up to rounding).
//!
//! [`spectrum_matched`] tilts those draws towards a layer's variance profile until each
//! captures the same share of variance as the readout subspace (the stricter `spectrum` null).
//!
//! This crate is not metric logic: it knows nothing of distances or activations.
#![deny(missing_docs)]

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::Mat;

mod spectrum;
#[cfg(test)]
mod tests;

pub use spectrum::{
    CapturedVariance, DEFAULT_SPECTRUM_TOL, NullKind, SpectrumMatched, captured_variance,
    spectrum_matched,
};

/// Errors of null sampling and null statistics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is out of range.
    #[error("invalid null parameter {name} = {value}: {reason}")]
    InvalidParam {
        /// Parameter name.
        name: &'static str,
        /// Its value, formatted.
        value: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A supplied array of bases has the wrong shape.
    #[error("null bases have shape {found:?}, expected [n_null, {d}, {k}]")]
    ShapeMismatch {
        /// The shape found.
        found: Vec<usize>,
        /// Expected ambient dimension.
        d: usize,
        /// Expected subspace dimension.
        k: usize,
    },
    /// A supplied basis is not orthonormal.
    #[error("null basis {index} is not orthonormal (max |QᵀQ − I| = {deviation:.3e})")]
    NotOrthonormal {
        /// Which basis.
        index: usize,
        /// Largest deviation from the identity.
        deviation: f64,
    },
    /// The null sample has no spread, so a z-score is undefined.
    #[error(
        "the null distribution has zero spread (all {n} draws equal {value}), so z is undefined"
    )]
    DegenerateNull {
        /// Number of draws.
        n: usize,
        /// Their common value.
        value: f64,
    },
    /// A spectrum-matched draw could not reach the readout's captured variance.
    #[error(
        "spectrum-matched null draw {index}: captured variance {reached:.6} cannot be brought within {tol} (relative) of the readout's {target:.6}"
    )]
    SpectrumUnmatched {
        /// Which draw.
        index: usize,
        /// The readout subspace's share of the layer's variance.
        target: f64,
        /// The closest share reached.
        reached: f64,
        /// The relative tolerance.
        tol: f64,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Unchecked parameters of a null distribution.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NullParams {
    /// Number of random subspaces (default 100).
    pub n_null: usize,
    /// Seed of the draws (default 0).
    pub seed: u64,
}

/// The null's size where a run does not choose one: every front end (`--n-null`, a manifest's
/// `n_null`, Python's `n_null`) reads it from here.
pub const DEFAULT_N_NULL: usize = 100;

impl Default for NullParams {
    fn default() -> Self {
        Self {
            n_null: DEFAULT_N_NULL,
            seed: 0,
        }
    }
}

/// Null parameters that passed [`NullParams::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct ValidNullParams(NullParams);

impl NullParams {
    /// Validates: at least 2 draws (a sample standard deviation needs two).
    pub fn check(self) -> Result<ValidNullParams> {
        if self.n_null < 2 {
            return Err(Error::InvalidParam {
                name: "n_null",
                value: self.n_null.to_string(),
                reason: "at least 2 draws are needed for a standard deviation",
            });
        }
        Ok(ValidNullParams(self))
    }
}

impl ValidNullParams {
    /// Number of draws.
    pub fn n_null(&self) -> usize {
        self.0.n_null
    }
    /// Seed.
    pub fn seed(&self) -> u64 {
        self.0.seed
    }
}

/// One Haar-random orthonormal `d × k` basis from draw `index` of `seed`.
#[track_caller]
pub fn haar_basis(d: usize, k: usize, seed: u64, index: u64) -> Mat<f64> {
    assert!(k <= d && k > 0, "haar_basis needs 0 < k <= d");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    // Row-major fill, like numpy's standard_normal((d, k)).
    let mut g = Mat::<f64>::zeros(d, k);
    for i in 0..d {
        for j in 0..k {
            g[(i, j)] = StandardNormal.sample(&mut rng);
        }
    }
    repgeom_linalg::qr_positive(g.as_ref()).0
}

/// `n_null` Haar-random `d × k` bases, drawn once per `(seed, d, k)`.
#[derive(Debug, Clone)]
pub struct NullBases {
    d: usize,
    k: usize,
    seed: Option<u64>,
    bases: Vec<Mat<f64>>,
    /// The bases rounded to `f32` (the null draws' projections), made on first use and kept,
    /// so a model's layers share one conversion.
    bases_f32: std::sync::OnceLock<Vec<Mat<f32>>>,
}

impl NullBases {
    /// Draws the bases (in parallel on the current rayon pool; identical at any thread count).
    pub fn draw(d: usize, k: usize, params: &ValidNullParams) -> Result<Self> {
        use rayon::prelude::*;
        if k == 0 || k >= d {
            return Err(Error::InvalidParam {
                name: "k",
                value: k.to_string(),
                reason: "the subspace dimension must satisfy 0 < k < d",
            });
        }
        let seed = params.seed();
        let bases = (0..params.n_null() as u64)
            .into_par_iter()
            .map(|i| haar_basis(d, k, seed, i))
            .collect();
        Ok(Self::from_parts(d, k, Some(seed), bases))
    }

    /// Bases supplied by the user as an `n_null × d × k` C-order array; each is checked to be
    /// orthonormal to `tol`.
    pub fn from_array(shape: &[usize], data: &[f64], d: usize, k: usize, tol: f64) -> Result<Self> {
        use rayon::prelude::*;
        if shape.len() != 3 || shape[1] != d || shape[2] != k || shape[0] < 2 {
            return Err(Error::ShapeMismatch {
                found: shape.to_vec(),
                d,
                k,
            });
        }
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>(),
            "data length must match shape"
        );
        // Each basis read and checked on its own, in parallel on the current rayon pool (as
        // `draw`); the first basis that fails is the one reported.
        let checked: Vec<(Mat<f64>, f64)> = data
            .par_chunks_exact(d * k)
            .map(|chunk| {
                let q = repgeom_linalg::mat_from_row_major(chunk, d, k, repgeom_linalg::Par::Seq);
                let deviation = repgeom_linalg::orthonormal_basis_check(q.as_ref());
                (q, deviation)
            })
            .collect();
        let mut bases = Vec::with_capacity(checked.len());
        for (index, (q, deviation)) in checked.into_iter().enumerate() {
            if deviation.is_nan() || deviation > tol {
                return Err(Error::NotOrthonormal { index, deviation });
            }
            bases.push(q);
        }
        Ok(Self::from_parts(d, k, None, bases))
    }

    /// The bases as an `n_null × d × k` C-order array (the layout of `--save-null-bases`).
    pub fn to_array(&self) -> (Vec<usize>, Vec<f64>) {
        let mut data = Vec::with_capacity(self.bases.len() * self.d * self.k);
        for q in &self.bases {
            for i in 0..self.d {
                for j in 0..self.k {
                    data.push(q[(i, j)]);
                }
            }
        }
        (vec![self.bases.len(), self.d, self.k], data)
    }

    /// Ambient dimension.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Subspace dimension.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The seed they were drawn from, or `None` when supplied from a file.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
    /// Number of bases.
    pub fn len(&self) -> usize {
        self.bases.len()
    }
    /// Whether there are no bases.
    pub fn is_empty(&self) -> bool {
        self.bases.is_empty()
    }
    /// The bases.
    pub fn bases(&self) -> &[Mat<f64>] {
        &self.bases
    }
    /// The bases rounded to `f32` (to nearest), as the null draws project onto them: converted
    /// once, in parallel on the current rayon pool, on the first call (two calls at once may
    /// both convert, with no wait: [`repgeom_linalg::get_or_make`]).
    pub fn bases_f32(&self) -> &[Mat<f32>] {
        use rayon::prelude::*;
        let bases: &Vec<Mat<f32>> = repgeom_linalg::get_or_make(&self.bases_f32, || {
            self.bases
                .par_iter()
                .map(|q| repgeom_linalg::to_f32(q.as_ref(), repgeom_linalg::Par::Seq))
                .collect()
        });
        bases
    }
    /// Bases from their parts (the constructors' one way in).
    pub(crate) fn from_parts(d: usize, k: usize, seed: Option<u64>, bases: Vec<Mat<f64>>) -> Self {
        Self {
            d,
            k,
            seed,
            bases,
            bases_f32: std::sync::OnceLock::new(),
        }
    }
}

/// Summary of an observed statistic against its null sample.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NullSummary {
    /// Mean of the null sample.
    pub null_mean: f64,
    /// Sample standard deviation (ddof = 1) of the null sample.
    pub null_std: f64,
    /// $z = (x - \bar{x}_{null}) / s_{null}$.
    pub z: f64,
    /// One-sided empirical p-value $(1 + \#\{null \ge x\}) / (n + 1)$.
    pub p_value: f64,
}

/// Compares `observed` with a null sample: mean, sample std (ddof 1), z and empirical p.
pub fn summarize(observed: f64, null: &[f64]) -> Result<NullSummary> {
    let n = null.len();
    if n < 2 {
        return Err(Error::InvalidParam {
            name: "n_null",
            value: n.to_string(),
            reason: "at least 2 draws are needed for a standard deviation",
        });
    }
    let mean = null.iter().sum::<f64>() / n as f64;
    let var = null.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
    let std = var.sqrt();
    if std.is_nan() || std <= 0.0 {
        return Err(Error::DegenerateNull { n, value: mean });
    }
    let exceed = null.iter().filter(|&&v| v >= observed).count();
    Ok(NullSummary {
        null_mean: mean,
        null_std: std,
        z: (observed - mean) / std,
        p_value: (1 + exceed) as f64 / (n + 1) as f64,
    })
}

/// Both tails of an observed statistic against its null sample, with the +1 correction.
///
/// With `n` draws, `p_upper = (1 + #{null ≥ x}) / (n + 1)`,
/// `p_lower = (1 + #{null ≤ x}) / (n + 1)` and `p_two_sided = min(1, 2 · min(p_upper, p_lower))`
/// (the doubled smaller tail). The smallest possible one-sided p (the floor) is `1 / (n + 1)`,
/// the smallest two-sided p `2 / (n + 1)`, whatever the observed value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NullTails {
    /// Upper-tail p (the `p_value` of [`NullSummary`]).
    pub p_upper: f64,
    /// Lower-tail p.
    pub p_lower: f64,
    /// Two-sided p: twice the smaller tail, capped at 1.
    pub p_two_sided: f64,
}

/// Both empirical tails of `observed` against `null` (see [`NullTails`]).
pub fn tails(observed: f64, null: &[f64]) -> NullTails {
    let n = null.len();
    let above = null.iter().filter(|&&v| v >= observed).count();
    let below = null.iter().filter(|&&v| v <= observed).count();
    let p_upper = (1 + above) as f64 / (n + 1) as f64;
    let p_lower = (1 + below) as f64 / (n + 1) as f64;
    NullTails {
        p_upper,
        p_lower,
        p_two_sided: (2.0 * p_upper.min(p_lower)).min(1.0),
    }
}

/// The null-sampling standard error of a z-score computed against `n_null` draws:
/// $\mathrm{SE}(z) \approx \sqrt{(1 + z^2/2) / n_{null}}$.
///
/// Delta method for $z = (x - \bar{x}) / s$ with a fixed observation `x` and a normal null:
/// the sample mean contributes $\mathrm{Var}(\bar{x})/\sigma^2 = 1/n$ and the sample standard
/// deviation $z^2\,\mathrm{Var}(s)/\sigma^2 \approx z^2/(2n)$; the two are independent for
/// normal samples. It describes how much z moves when only the null seed changes, not the
/// sampling of the data points (see the bootstrap for that).
///
/// ```
/// let se = repgeom_null::z_standard_error(-32.0, 100);
/// assert!((se - 2.265).abs() < 1e-3); // √(513/100)
/// ```
pub fn z_standard_error(z: f64, n_null: usize) -> f64 {
    ((1.0 + z * z / 2.0) / n_null as f64).sqrt()
}

/// Benjamini–Hochberg adjusted p-values (q-values) of one family of tests, in input order:
/// $q_{(i)} = \min_{j \ge i} \min(1, m\,p_{(j)}/j)$ over the p-values sorted ascending.
/// NaN p-values are left out of the family and get a NaN q.
///
/// ```
/// let q = repgeom_null::benjamini_hochberg(&[0.01, 0.04, 0.03, 0.5]);
/// assert_eq!(q, vec![0.04, 0.04 * 4.0 / 3.0, 0.04 * 4.0 / 3.0, 0.5]);
/// ```
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let m = order.len() as f64;
    let mut q = vec![f64::NAN; p.len()];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m / (rank + 1) as f64).min(1.0);
        q[i] = running;
    }
    q
}

/// The `q`-quantile (`0 ≤ q ≤ 1`) of `values` with linear interpolation between order
/// statistics (NumPy's default `method="linear"`). NaN when `values` is empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

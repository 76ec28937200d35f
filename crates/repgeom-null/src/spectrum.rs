//! The spectrum-matched null: random `k`-dimensional subspaces that capture the same share of
//! a layer's variance as the readout subspace.
//!
//! Construction (repgeom's; see `docs/pga.md`): with the layer's covariance
//! `Σ = U diag(λ) Uᵀ` (after CCR) and Haar draw `Q_i`, draw `i` of the spectrum null is
//! `span(Σ^{β_i/2} Q_i)`, the Haar draw tilted towards (β > 0) or away from (β < 0) the
//! high-variance directions, with `β_i` solved by bracketed root finding (Illinois false
//! position, bisection as the fallback) so that its captured variance
//! `tr(Q'ᵀ Σ Q') / tr(Σ)` equals the readout's within a relative tolerance. `β = 0` is the Haar
//! draw itself, so when the readout captures a typical share the two nulls coincide. The map
//! `Q ↦ Σ^{β/2} Q` commutes with rotations of the hidden space, so the null is as rotation
//! equivariant as the Haar null.

use repgeom_linalg::{Mat, MatRef, Par, project, symmetric_eigen_desc};

use crate::{Error, NullBases, Result};

/// Which random subspaces PGA compares the readout subspace with.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum NullKind {
    /// Uniformly random (Haar) `k`-dimensional subspaces (the default).
    #[default]
    Haar,
    /// The Haar draws tilted until each captures the readout's share of the layer's variance
    /// ([`spectrum_matched`]).
    Spectrum,
}

impl NullKind {
    /// The name used on the command line, in manifests and in output rows.
    pub fn name(self) -> &'static str {
        match self {
            NullKind::Haar => "haar",
            NullKind::Spectrum => "spectrum",
        }
    }
}

impl std::fmt::Display for NullKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for NullKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "haar" => Ok(NullKind::Haar),
            "spectrum" => Ok(NullKind::Spectrum),
            other => Err(format!("unknown null {other:?}: use haar or spectrum")),
        }
    }
}

/// Default relative tolerance of the spectrum-matched null on each draw's captured variance.
pub const DEFAULT_SPECTRUM_TOL: f64 = 0.01;

/// Shares of a layer's variance captured by the readout subspace and by each null draw.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedVariance {
    /// The readout subspace's share, `tr(V_kᵀ Σ V_k) / tr Σ`.
    pub readout: f64,
    /// Each null basis's share, in draw order.
    pub null: Vec<f64>,
}

impl CapturedVariance {
    /// Mean of the null draws' shares.
    pub fn null_mean(&self) -> f64 {
        self.null.iter().sum::<f64>() / self.null.len().max(1) as f64
    }

    /// Sample standard deviation (ddof 1) of the null draws' shares (0 with fewer than two).
    pub fn null_sd(&self) -> f64 {
        let n = self.null.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.null_mean();
        (self.null.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// Shares of the variance of `corrected` (`N × d`, centred, after CCR) captured by `readout`
/// (`d × k`, orthonormal) and by every basis of `null`: `tr(Qᵀ Σ Q) / tr Σ` with `Σ ∝ XᵀX`.
/// One `d × d` Gram product (`O(N d²)`), then `O(d² k)` per basis; sequential, so the shares
/// are bit-identical at any thread count.
pub fn captured_variance(
    corrected: MatRef<'_, f64>,
    readout: MatRef<'_, f64>,
    null: &NullBases,
) -> Result<CapturedVariance> {
    let d = corrected.ncols();
    assert_eq!(
        (readout.nrows(), null.d()),
        (d, d),
        "captured_variance: readout and null bases must match the layer width"
    );
    let cov = project(corrected.transpose(), corrected, Par::Seq);
    let trace: f64 = (0..d).map(|i| cov[(i, i)]).sum();
    if trace.is_nan() || trace <= 0.0 {
        return Err(Error::InvalidParam {
            name: "layer",
            value: format!("[{}, {d}]", corrected.nrows()),
            reason: "the layer has no variance after correction",
        });
    }
    let share = |q: MatRef<'_, f64>| -> f64 {
        let sq = project(cov.as_ref(), q, Par::Seq);
        let mut s = 0.0;
        for j in 0..q.ncols() {
            for i in 0..d {
                s += sq[(i, j)] * q[(i, j)];
            }
        }
        s / trace
    };
    Ok(CapturedVariance {
        readout: share(readout),
        null: null.bases().iter().map(|q| share(q.as_ref())).collect(),
    })
}

/// Largest |β| searched (with eigenvalues relative to the largest, `λ^{β/2}` spans far more
/// than `f64` can resolve well before this).
const BETA_MAX: f64 = 64.0;
/// Most root-finding steps (bisection alone would shrink the interval by 2⁻⁸⁰; false
/// position usually needs about ten).
const STEPS: usize = 80;
/// Relative precision to which each draw's captured variance is solved.
const SOLVE_TOL: f64 = 1e-10;
/// Eigenvalues below this fraction of the largest are floored for the tilt (they would vanish
/// or blow up under `λ^{β/2}`); captured variances use the exact eigenvalues.
const FLOOR: f64 = 1e-12;

/// The spectrum-matched null of one layer and what was matched.
#[derive(Debug, Clone)]
pub struct SpectrumMatched {
    /// The tilted bases (same count, `d` and `k` as the Haar bases they come from).
    pub bases: NullBases,
    /// Share of the layer's variance captured by the readout subspace (the target).
    pub target: f64,
    /// Share captured by each null basis (each within `tol · target` of the target).
    pub captured: Vec<f64>,
    /// The tilt exponent of each draw.
    pub beta: Vec<f64>,
}

/// Share of the variance of covariance `Σ` (eigenvectors `u`, eigenvalues `lambda`, total
/// `trace`) captured by orthonormal columns `q`: `Σ_i λ_i ‖u_iᵀ q‖² / tr Σ`.
fn captured_in_eigenbasis(coords: MatRef<'_, f64>, lambda: &[f64], trace: f64) -> f64 {
    let mut s = 0.0;
    for (i, l) in lambda.iter().enumerate() {
        let row: f64 = coords.row(i).iter().map(|v| v * v).sum();
        s += l * row;
    }
    s / trace
}

/// The orthonormal basis of the columns of `t` (Householder QR, `R` with a positive
/// diagonal); `None` when a column is numerically dependent on the previous ones.
fn orthonormalize(t: MatRef<'_, f64>) -> Option<Mat<f64>> {
    let (q, r_diag) = repgeom_linalg::qr_positive(t);
    let independent = r_diag
        .iter()
        .enumerate()
        .all(|(j, &r)| r.is_finite() && r > 1e-10 * t.col(j).norm_l2());
    independent.then_some(q)
}

/// Tilts the Haar draws `haar` towards the variance profile of `corrected` (`N × d`, centred,
/// after CCR) until each captures the same share of variance as `readout` (`d × k`,
/// orthonormal), within relative tolerance `tol`.
///
/// Errors when the readout's share cannot be reached by a draw (it lies beyond what the tilt
/// family spans for that draw, e.g. a readout that is exactly the top-`k` eigenspace); the
/// first such draw in order is named. Unless `par` is `Par::Seq`, the covariance, its
/// eigendecomposition and the draws (each matched sequentially) run on the current rayon
/// pool: the result is bit-identical at any thread count.
pub fn spectrum_matched(
    haar: &NullBases,
    corrected: MatRef<'_, f64>,
    readout: MatRef<'_, f64>,
    tol: f64,
    par: Par,
) -> Result<SpectrumMatched> {
    let (d, k) = (haar.d(), haar.k());
    assert_eq!(
        corrected.ncols(),
        d,
        "spectrum_matched: layer width must match the null"
    );
    assert_eq!(
        (readout.nrows(), readout.ncols()),
        (d, k),
        "spectrum_matched: readout shape must match the null"
    );
    if !(tol > 0.0 && tol < 1.0) {
        return Err(Error::InvalidParam {
            name: "spectrum_tol",
            value: tol.to_string(),
            reason: "the relative tolerance on captured variance must lie in (0, 1)",
        });
    }
    // Σ ∝ XᵀX (the 1/(N−1) cancels in every share).
    let cov = project(corrected.transpose(), corrected, par);
    let (lambda, u) = symmetric_eigen_desc(cov.as_ref(), par).map_err(|_| Error::InvalidParam {
        name: "layer",
        value: format!("[{}, {d}]", corrected.nrows()),
        reason: "the eigendecomposition of the layer covariance did not converge",
    })?;
    let lambda: Vec<f64> = lambda.iter().map(|l| l.max(0.0)).collect();
    let trace: f64 = lambda.iter().sum();
    if trace.is_nan() || trace <= 0.0 {
        return Err(Error::InvalidParam {
            name: "layer",
            value: format!("[{}, {d}]", corrected.nrows()),
            reason: "the layer has no variance after correction",
        });
    }
    let top = lambda[0];
    let log_rel: Vec<f64> = lambda
        .iter()
        .map(|l| (l.max(FLOOR * top) / top).ln())
        .collect();
    let to_eigen = |q: MatRef<'_, f64>| project(u.transpose(), q, Par::Seq);
    let target = captured_in_eigenbasis(to_eigen(readout).as_ref(), &lambda, trace);

    // One draw's tilt: its own root finding, sequential inside, so the draws run side by side
    // (in order with `Par::Seq`) and each gives the same bits on any pool.
    let match_draw = |(index, q): (usize, &Mat<f64>)| -> Result<(Mat<f64>, f64, f64)> {
        let p = to_eigen(q.as_ref());
        // Tilted, orthonormalised coordinates in the eigenbasis, and their captured share.
        let tilt = |beta: f64| -> Option<(Mat<f64>, f64)> {
            let t = Mat::from_fn(d, k, |i, j| (0.5 * beta * log_rel[i]).exp() * p[(i, j)]);
            let t = orthonormalize(t.as_ref())?;
            let c = captured_in_eigenbasis(t.as_ref(), &lambda, trace);
            Some((t, c))
        };
        let fail = |reached: f64| Error::SpectrumUnmatched {
            index,
            target,
            reached,
            tol,
        };
        // Bracketed root finding on β (the captured share grows with β): false position with
        // the Illinois modification where both ends of the bracket have a value, bisection
        // where one does not (at the start, and after a collapsed tilt).
        let (mut lo, mut hi) = (-BETA_MAX, BETA_MAX);
        let (mut f_lo, mut f_hi): (Option<f64>, Option<f64>) = (None, None);
        // Which end the last step moved: -1 lo, 1 hi (Illinois halves the other end's value
        // when the same end moves twice in a row).
        let mut side = 0i8;
        let (mut best, mut best_c) = tilt(0.0).ok_or_else(|| fail(f64::NAN))?;
        let mut beta = 0.0;
        'search: for _ in 0..STEPS {
            // Solve to rounding, not just to `tol`: the root then does not depend on where the
            // search happened to enter the tolerance band (rotation equivariance up to
            // rounding); `tol` is the acceptance test below.
            let f = best_c - target;
            if f.abs() <= SOLVE_TOL * target {
                break;
            }
            if f < 0.0 {
                lo = beta;
                f_lo = Some(f);
                if side == -1 {
                    f_hi = f_hi.map(|v| 0.5 * v);
                }
                side = -1;
            } else {
                hi = beta;
                f_hi = Some(f);
                if side == 1 {
                    f_lo = f_lo.map(|v| 0.5 * v);
                }
                side = 1;
            }
            let mut trial = match (f_lo, f_hi) {
                (Some(a), Some(b)) if b > a => {
                    let t = lo - a * (hi - lo) / (b - a);
                    if t > lo && t < hi { t } else { 0.5 * (lo + hi) }
                }
                _ => 0.5 * (lo + hi),
            };
            // A tilt so strong that the columns collapse onto fewer than k eigenvectors is
            // too far: shrink the bracket towards the last good exponent.
            loop {
                if let Some((t, c)) = tilt(trial) {
                    best = t;
                    best_c = c;
                    beta = trial;
                    break;
                }
                if trial > beta {
                    hi = trial;
                    f_hi = None;
                } else {
                    lo = trial;
                    f_lo = None;
                }
                if hi - lo < 1e-12 {
                    break 'search;
                }
                trial = 0.5 * (lo + hi);
            }
            if hi - lo < 1e-15 * BETA_MAX {
                break;
            }
        }
        if (best_c - target).abs() > tol * target {
            return Err(fail(best_c));
        }
        // Back to the hidden space: Q' = U T.
        Ok((project(u.as_ref(), best.as_ref(), Par::Seq), best_c, beta))
    };
    let bases = haar.bases();
    let matched = repgeom_linalg::map_in_order(bases.len(), par, |i| match_draw((i, &bases[i])));
    let mut bases = Vec::with_capacity(haar.len());
    let mut captured = Vec::with_capacity(haar.len());
    let mut betas = Vec::with_capacity(haar.len());
    // The first draw that fails, in draw order, names the error at any thread count.
    for m in matched {
        let (qd, c, beta) = m?;
        bases.push(qd);
        captured.push(c);
        betas.push(beta);
    }
    Ok(SpectrumMatched {
        bases: NullBases::from_parts(d, k, haar.seed(), bases),
        target,
        captured,
        beta: betas,
    })
}

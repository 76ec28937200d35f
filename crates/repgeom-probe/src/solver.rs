//! Multinomial logistic regression: a fused loss/gradient kernel over row blocks and L-BFGS.
//!
//! Objective (mean cross-entropy plus L2 on the weights, intercept unpenalised):
//! `f(W, b) = (1/n) Σ_i [logsumexp(z_i) − z_{i,y_i}] + (λ/2) ‖W‖²`, `z_i = W^T s(x_i) + b`,
//! where `s(x) = (x − μ) ⊙ σ⁻¹` is the subset's own standardisation. `s` is folded into the
//! weights (`v = W ⊙ σ⁻¹`, `c = b − μ·v`) so cross-validation folds standardise on their own
//! training rows without copying the matrix.

use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayView2, s};
use rayon::prelude::*;

/// Rows per kernel block. Fixed, so the reduction order (and every bit of the result) is
/// independent of the number of threads.
const BLOCK: usize = 256;
/// L-BFGS memory.
const MEMORY: usize = 10;
/// Armijo sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;

/// Rows of a matrix that one fit uses, with their standardisation.
pub(crate) struct Problem<'a> {
    x: ArrayView2<'a, f32>,
    y: &'a [usize],
    k: usize,
    blocks: Vec<Range<usize>>,
    n: usize,
    mu: Vec<f64>,
    inv_s: Vec<f64>,
    parallel: bool,
}

/// Per-column mean and inverse standard deviation (population, ddof = 0) over the given
/// row ranges; a constant column gets scale 1 (it is all zero once centred).
pub(crate) fn column_stats(
    x: ArrayView2<'_, f32>,
    ranges: &[Range<usize>],
) -> (Vec<f64>, Vec<f64>) {
    let d = x.ncols();
    let mut sum = vec![0.0f64; d];
    let mut n = 0usize;
    for r in ranges {
        for row in x.slice(s![r.clone(), ..]).rows() {
            for (acc, v) in sum.iter_mut().zip(row.iter()) {
                *acc += f64::from(*v);
            }
            n += 1;
        }
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / n.max(1) as f64).collect();
    let mut ss = vec![0.0f64; d];
    for r in ranges {
        for row in x.slice(s![r.clone(), ..]).rows() {
            for ((acc, v), m) in ss.iter_mut().zip(row.iter()).zip(&mean) {
                let c = f64::from(*v) - m;
                *acc += c * c;
            }
        }
    }
    let inv_s = ss
        .iter()
        .map(|q| {
            let sd = (q / n.max(1) as f64).sqrt();
            if sd > 1e-12 { 1.0 / sd } else { 1.0 }
        })
        .collect();
    (mean, inv_s)
}

fn blocks(ranges: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for r in ranges {
        let mut a = r.start;
        while a < r.end {
            let b = (a + BLOCK).min(r.end);
            out.push(a..b);
            a = b;
        }
    }
    out
}

/// Fitted parameters: `W` (d × k, row-major) then `b` (k), in the problem's standardised
/// coordinates.
pub(crate) type Theta = Vec<f64>;

/// Outcome of one L-BFGS run.
pub(crate) struct Fit {
    pub(crate) theta: Theta,
    pub(crate) iterations: usize,
    pub(crate) converged: bool,
}

impl<'a> Problem<'a> {
    /// A problem on `ranges` of `x` (labels `y`, one per row of `x`), standardised by
    /// `mu`/`inv_s` (pass zeros/ones when `x` is already standardised on these rows).
    pub(crate) fn new(
        x: ArrayView2<'a, f32>,
        y: &'a [usize],
        k: usize,
        ranges: &[Range<usize>],
        mu: Vec<f64>,
        inv_s: Vec<f64>,
        parallel: bool,
    ) -> Self {
        let n = ranges.iter().map(|r| r.len()).sum();
        Self {
            x,
            y,
            k,
            blocks: blocks(ranges),
            n,
            mu,
            inv_s,
            parallel,
        }
    }

    pub(crate) fn n_params(&self) -> usize {
        (self.x.ncols() + 1) * self.k
    }

    /// Effective f32 weights (d × k) and f64 intercepts on the raw rows.
    fn effective(&self, theta: &[f64]) -> (Array2<f32>, Vec<f64>) {
        let (d, k) = (self.x.ncols(), self.k);
        let mut v = Array2::<f32>::zeros((d, k));
        let mut c = theta[d * k..].to_vec();
        for j in 0..d {
            for q in 0..k {
                let e = theta[j * k + q] * self.inv_s[j];
                v[[j, q]] = e as f32;
                c[q] -= self.mu[j] * e;
            }
        }
        (v, c)
    }

    /// Objective and gradient at `theta`.
    pub(crate) fn eval(&self, theta: &[f64], l2: f64) -> (f64, Vec<f64>) {
        let (d, k) = (self.x.ncols(), self.k);
        let (v, c) = self.effective(theta);
        let block = |r: &Range<usize>| -> (f64, Array2<f32>, Vec<f64>) {
            let xb = self.x.slice(s![r.clone(), ..]);
            let nb = r.len();
            let mut z = Array2::<f32>::zeros((nb, k));
            general_mat_mul(1.0, &xb, &v, 0.0, &mut z);
            let mut dm = Array2::<f32>::zeros((nb, k));
            let mut loss = 0.0f64;
            let mut sd = vec![0.0f64; k];
            let mut zi = vec![0.0f64; k];
            for i in 0..nb {
                for q in 0..k {
                    zi[q] = f64::from(z[[i, q]]) + c[q];
                }
                let m = zi.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + zi.iter().map(|t| (t - m).exp()).sum::<f64>().ln();
                let yi = self.y[r.start + i];
                loss += lse - zi[yi];
                for q in 0..k {
                    let g = (zi[q] - lse).exp() - if q == yi { 1.0 } else { 0.0 };
                    dm[[i, q]] = g as f32;
                    sd[q] += g;
                }
            }
            let mut a = Array2::<f32>::zeros((d, k));
            general_mat_mul(1.0, &xb.t(), &dm, 0.0, &mut a);
            (loss, a, sd)
        };
        let parts: Vec<_> = if self.parallel {
            self.blocks.par_iter().map(block).collect()
        } else {
            self.blocks.iter().map(block).collect()
        };
        let mut loss = 0.0;
        let mut gsum = vec![0.0f64; d * k];
        let mut sd = vec![0.0f64; k];
        for (l, a, s) in &parts {
            loss += l;
            for (acc, v) in gsum.iter_mut().zip(a.iter()) {
                *acc += f64::from(*v);
            }
            for (acc, v) in sd.iter_mut().zip(s) {
                *acc += v;
            }
        }
        let n = self.n as f64;
        let mut grad = vec![0.0f64; d * k + k];
        let mut reg = 0.0;
        for j in 0..d {
            for q in 0..k {
                let w = theta[j * k + q];
                reg += w * w;
                grad[j * k + q] =
                    (gsum[j * k + q] - self.mu[j] * sd[q]) * self.inv_s[j] / n + l2 * w;
            }
        }
        for q in 0..k {
            grad[d * k + q] = sd[q] / n;
        }
        (loss / n + 0.5 * l2 * reg, grad)
    }

    /// Predicted class (argmax logit, lowest class on ties) of each row in `rows` of `x`,
    /// which must have the problem's column count.
    pub(crate) fn predict(
        &self,
        theta: &[f64],
        x: ArrayView2<'_, f32>,
        rows: Range<usize>,
    ) -> Vec<usize> {
        let k = self.k;
        let (v, c) = self.effective(theta);
        let xb = x.slice(s![rows, ..]);
        let mut z = Array2::<f32>::zeros((xb.nrows(), k));
        general_mat_mul(1.0, &xb, &v, 0.0, &mut z);
        z.rows()
            .into_iter()
            .map(|row| {
                let mut best = 0;
                let mut bv = f64::NEG_INFINITY;
                for q in 0..k {
                    let t = f64::from(row[q]) + c[q];
                    if t > bv {
                        bv = t;
                        best = q;
                    }
                }
                best
            })
            .collect()
    }

    /// Minimise the objective with L-BFGS (two-loop recursion, Armijo backtracking) from
    /// `theta0`. Returns `None` if the loss becomes non-finite.
    pub(crate) fn fit(&self, theta0: Theta, l2: f64, max_iter: usize, tol: f64) -> Option<Fit> {
        let mut x = theta0;
        let (mut f, mut g) = self.eval(&x, l2);
        if !f.is_finite() {
            return None;
        }
        let mut hist: std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)> =
            std::collections::VecDeque::with_capacity(MEMORY);
        let mut iterations = 0;
        let mut converged = false;
        while iterations < max_iter {
            if inf_norm(&g) <= tol {
                converged = true;
                break;
            }
            iterations += 1;
            let mut dir = two_loop(&g, &hist);
            let mut gd = dot(&g, &dir);
            if !(gd < 0.0) {
                hist.clear();
                dir = g.iter().map(|v| -v).collect();
                gd = -dot(&g, &g);
            }
            let mut step = if hist.is_empty() {
                (1.0 / dot(&g, &g).sqrt()).min(1.0)
            } else {
                1.0
            };
            let mut accepted = None;
            for _ in 0..40 {
                let xn: Vec<f64> = x.iter().zip(&dir).map(|(a, d)| a + step * d).collect();
                let (fn_, gn) = self.eval(&xn, l2);
                if fn_.is_finite() && fn_ <= f + ARMIJO * step * gd {
                    accepted = Some((xn, fn_, gn));
                    break;
                }
                step *= 0.5;
            }
            let Some((xn, fn_, gn)) = accepted else {
                // No decrease possible at working precision: we are at the optimum.
                converged = true;
                break;
            };
            let sv: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
            let yv: Vec<f64> = gn.iter().zip(&g).map(|(a, b)| a - b).collect();
            let sy = dot(&sv, &yv);
            if sy > 1e-12 * dot(&yv, &yv).max(f64::MIN_POSITIVE) {
                if hist.len() == MEMORY {
                    hist.pop_front();
                }
                hist.push_back((sv, yv, 1.0 / sy));
            }
            let stalled = (f - fn_) <= 1e-12 * f.abs().max(1.0);
            x = xn;
            f = fn_;
            g = gn;
            if stalled {
                converged = inf_norm(&g) <= tol;
                break;
            }
        }
        if !f.is_finite() {
            return None;
        }
        Some(Fit {
            theta: x,
            iterations,
            converged,
        })
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn inf_norm(a: &[f64]) -> f64 {
    a.iter().fold(0.0, |m, v| m.max(v.abs()))
}

/// L-BFGS two-loop recursion: returns `−H g`.
fn two_loop(g: &[f64], hist: &std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)>) -> Vec<f64> {
    let mut q = g.to_vec();
    let mut alpha = vec![0.0; hist.len()];
    for (i, (s, y, rho)) in hist.iter().enumerate().rev() {
        let a = rho * dot(s, &q);
        alpha[i] = a;
        for (qv, yv) in q.iter_mut().zip(y) {
            *qv -= a * yv;
        }
    }
    if let Some((s, y, _)) = hist.back() {
        let gamma = dot(s, y) / dot(y, y);
        for v in q.iter_mut() {
            *v *= gamma;
        }
    }
    for (i, (s, y, rho)) in hist.iter().enumerate() {
        let b = rho * dot(y, &q);
        for (qv, sv) in q.iter_mut().zip(s) {
            *qv += sv * (alpha[i] - b);
        }
    }
    q.iter_mut().for_each(|v| *v = -*v);
    q
}

//! Multinomial logistic regression: a fused loss/gradient kernel over row blocks and L-BFGS.
//!
//! Objective (mean cross-entropy plus L2 on the weights, intercept unpenalised):
//! `f(W, b) = (1/n) Σ_i [logsumexp(z_i) − z_{i,y_i}] + (λ/2) ‖W‖²`, `z_i = W^T s(x_i) + b`,
//! where `s(x) = (x − μ) ⊙ σ⁻¹` is the subset's own standardisation. `s` is folded into the
//! weights (`v = W ⊙ σ⁻¹`, `c = b − μ·v`) so cross-validation folds standardise on their own
//! training rows without copying the matrix.
//!
//! With [`Solver::Linfa`] the same problem (same rows, standardisation, objective, L2 strength
//! and iteration cap) is handed to linfa-logistic instead of the in-house L-BFGS.

use std::ops::Range;
use std::sync::OnceLock;

use linfa::DatasetBase;
use linfa::traits::Fit as _;
use linfa_logistic::MultiLogisticRegression;
use ndarray::{Array1, Array2, ArrayView2, s};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::Solver;

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
    /// The rows standardised into an f64 copy with their labels, made on the first
    /// linfa-logistic fit (it cannot fold the standardisation into the weights).
    linfa_rows: OnceLock<(Array2<f64>, Array1<usize>)>,
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
    pub(crate) stop: StopReason,
}

/// Why an L-BFGS run stopped. Only [`StopReason::GradientTolerance`] counts as converged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The largest gradient component fell to `tol` or below: converged.
    GradientTolerance,
    /// `max_iter` iterations ran out with the gradient above `tol`.
    MaxIter,
    /// Backtracking (40 halvings) found no step satisfying the Armijo condition while the
    /// gradient was above `tol`: not converged.
    LineSearchFailed,
    /// The loss stopped decreasing (relative change ≤ 1e-12) with the gradient above `tol`.
    Stalled,
    /// linfa-logistic ([`Solver::Linfa`]) returned a solution whose gradient is above `tol`:
    /// it stopped at `max_iter` or on its own cost-change test (it does not say which).
    LinfaStopped,
}

impl StopReason {
    /// Whether the fit met the gradient tolerance.
    pub fn converged(self) -> bool {
        self == StopReason::GradientTolerance
    }
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
            linfa_rows: OnceLock::new(),
        }
    }

    pub(crate) fn n_params(&self) -> usize {
        (self.x.ncols() + 1) * self.k
    }

    /// The model `theta` (in this problem's standardised coordinates) on the raw rows.
    fn effective(&self, theta: &[f64]) -> Linear {
        Linear::new(theta, self.x.ncols(), self.k, &self.mu, &self.inv_s)
    }

    /// Objective and gradient at `theta`.
    pub(crate) fn eval(&self, theta: &[f64], l2: f64) -> (f64, Vec<f64>) {
        let (d, k) = (self.x.ncols(), self.k);
        let Linear { v, c, .. } = self.effective(theta);
        let block = |r: &Range<usize>| -> (f64, Vec<f32>, Vec<f64>) {
            // One pass per row: logits, softmax, then the row's gradient contribution while
            // the row is still in L1.
            let mut gb = vec![0.0f32; k * d];
            let mut loss = 0.0f64;
            let mut sd = vec![0.0f64; k];
            let mut z = vec![0.0f32; k];
            let mut zi = vec![0.0f64; k];
            for i in r.clone() {
                let xi = row(self.x, i);
                logits(xi, &v, d, &mut z);
                for q in 0..k {
                    zi[q] = f64::from(z[q]) + c[q];
                }
                let m = zi.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + zi.iter().map(|t| (t - m).exp()).sum::<f64>().ln();
                let yi = self.y[i];
                loss += lse - zi[yi];
                for q in 0..k {
                    let g = (zi[q] - lse).exp() - if q == yi { 1.0 } else { 0.0 };
                    sd[q] += g;
                    let gf = g as f32;
                    for (acc, xv) in gb[q * d..(q + 1) * d].iter_mut().zip(xi) {
                        *acc += gf * xv;
                    }
                }
            }
            (loss, gb, sd)
        };
        let parts: Vec<_> = if self.parallel {
            self.blocks.par_iter().map(block).collect()
        } else {
            self.blocks.iter().map(block).collect()
        };
        let mut loss = 0.0;
        let mut gsum = vec![0.0f64; k * d];
        let mut sd = vec![0.0f64; k];
        for (l, a, s) in &parts {
            loss += l;
            for (acc, v) in gsum.iter_mut().zip(a) {
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
                    (gsum[q * d + j] - self.mu[j] * sd[q]) * self.inv_s[j] / n + l2 * w;
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
        self.effective(theta).predict(x, rows)
    }

    /// Minimise the objective with `solver` from `theta0`. `Ok(None)` if the loss becomes
    /// non-finite; `Err` if linfa-logistic fails.
    pub(crate) fn solve(
        &self,
        solver: Solver,
        theta0: Theta,
        l2: f64,
        max_iter: usize,
        tol: f64,
    ) -> Result<Option<Fit>, linfa_logistic::error::Error> {
        match solver {
            Solver::Lbfgs => Ok(self.fit(theta0, l2, max_iter, tol)),
            Solver::Linfa => self.fit_linfa(&theta0, l2, max_iter, tol),
        }
    }

    /// The same fit by linfa-logistic: `alpha = n λ` (its loss is a sum), `max_iter`,
    /// `gradient_tolerance = n · tol` on the L2 norm of its gradient (so the mean-loss
    /// gradient meets `tol` in the max norm too), warm-started at `theta0`. linfa only models
    /// the classes present in the rows: a class absent here gets zero weights and a `−∞`
    /// intercept (never predicted; the optimum's limit), and a warm-start column that is not
    /// finite (such a class) starts at zero. Converged when the in-house criterion holds at
    /// the solution (`‖∇f‖_∞ ≤ tol`, one pass of [`Problem::eval`]).
    fn fit_linfa(
        &self,
        theta0: &[f64],
        l2: f64,
        max_iter: usize,
        tol: f64,
    ) -> Result<Option<Fit>, linfa_logistic::error::Error> {
        let (d, k) = (self.x.ncols(), self.k);
        let (x, y) = self.linfa_rows.get_or_init(|| self.standardised_rows());
        let mut present = y.to_vec();
        present.sort_unstable();
        present.dedup();
        let mut init = Array2::<f64>::zeros((d + 1, present.len()));
        for (col, &q) in present.iter().enumerate() {
            if (0..=d).all(|j| theta0[j * k + q].is_finite()) {
                for j in 0..=d {
                    init[[j, col]] = theta0[j * k + q];
                }
            }
        }
        let n = self.n as f64;
        let model = MultiLogisticRegression::default()
            .alpha(n * l2)
            .max_iterations(max_iter as u64)
            .gradient_tolerance(n * tol)
            .initial_params(init)
            .fit(&DatasetBase::new(x.view(), y.view()))?;
        let mut theta = vec![0.0; self.n_params()];
        theta[d * k..].fill(f64::NEG_INFINITY);
        for (col, &q) in model.classes().iter().enumerate() {
            for j in 0..d {
                theta[j * k + q] = model.params()[[j, col]];
            }
            theta[d * k + q] = model.intercept()[col];
        }
        let (f, g) = self.eval(&theta, l2);
        if !f.is_finite() {
            return Ok(None);
        }
        let stop = if inf_norm(&g) <= tol {
            StopReason::GradientTolerance
        } else {
            StopReason::LinfaStopped
        };
        Ok(Some(Fit {
            theta,
            iterations: 0,
            stop,
        }))
    }

    /// The problem's rows standardised (`(x − μ) ⊙ σ⁻¹`, f64) and their labels, in row order.
    fn standardised_rows(&self) -> (Array2<f64>, Array1<usize>) {
        let d = self.x.ncols();
        let mut out = Array2::<f64>::zeros((self.n, d));
        let mut y = Array1::<usize>::zeros(self.n);
        let rows = self.blocks.iter().flat_map(|r| r.clone());
        for ((mut o, t), i) in out.rows_mut().into_iter().zip(y.iter_mut()).zip(rows) {
            for (j, (ov, xv)) in o.iter_mut().zip(row(self.x, i)).enumerate() {
                *ov = (f64::from(*xv) - self.mu[j]) * self.inv_s[j];
            }
            *t = self.y[i];
        }
        (out, y)
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
        let mut stop = StopReason::MaxIter;
        while iterations < max_iter {
            if inf_norm(&g) <= tol {
                stop = StopReason::GradientTolerance;
                break;
            }
            iterations += 1;
            let mut dir = two_loop(&g, &hist);
            let mut gd = dot(&g, &dir);
            if gd.is_nan() || gd >= 0.0 {
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
                // No decrease found along the search direction. The gradient is above `tol`
                // (checked at the top of this iteration), so this is not a certified optimum.
                stop = StopReason::LineSearchFailed;
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
                stop = if inf_norm(&g) <= tol {
                    StopReason::GradientTolerance
                } else {
                    StopReason::Stalled
                };
                break;
            }
        }
        // The last accepted step may have brought the gradient under `tol` on the final
        // iteration.
        if stop == StopReason::MaxIter && inf_norm(&g) <= tol {
            stop = StopReason::GradientTolerance;
        }
        if !f.is_finite() {
            return None;
        }
        Some(Fit {
            theta: x,
            iterations,
            stop,
        })
    }
}

/// A linear classifier on raw rows: f32 weights (k × d, class-major) and f64 intercepts.
/// Every prediction of the crate (cross-validation, test rows, [`crate::FittedProbe`]) goes
/// through [`Linear::predict`].
pub(crate) struct Linear {
    v: Vec<f32>,
    c: Vec<f64>,
    d: usize,
    k: usize,
}

impl Linear {
    /// The model `theta` (`W` d × k row-major, then `b`), fitted in coordinates standardised
    /// by `mu`/`inv_s`, folded onto raw rows: `v = W ⊙ σ⁻¹`, `c = b − μ·v`.
    pub(crate) fn new(theta: &[f64], d: usize, k: usize, mu: &[f64], inv_s: &[f64]) -> Self {
        let mut v = vec![0.0f32; k * d];
        let mut c = theta[d * k..].to_vec();
        for j in 0..d {
            for q in 0..k {
                let e = theta[j * k + q] * inv_s[j];
                v[q * d + j] = e as f32;
                c[q] -= mu[j] * e;
            }
        }
        Self { v, c, d, k }
    }

    /// Predicted class (argmax logit, lowest class on ties) of each row in `rows` of `x`
    /// (standard layout, `d` columns).
    pub(crate) fn predict(&self, x: ArrayView2<'_, f32>, rows: Range<usize>) -> Vec<usize> {
        let (d, k) = (self.d, self.k);
        let mut z = vec![0.0f32; k];
        rows.map(|i| {
            logits(row(x, i), &self.v, d, &mut z);
            let mut best = 0;
            let mut bv = f64::NEG_INFINITY;
            for q in 0..k {
                let t = f64::from(z[q]) + self.c[q];
                if t > bv {
                    bv = t;
                    best = q;
                }
            }
            best
        })
        .collect()
    }
}

/// Row `i` of a standard-layout matrix as a slice.
fn row<'b>(x: ArrayView2<'b, f32>, i: usize) -> &'b [f32] {
    let d = x.ncols();
    let all = x
        .to_slice()
        .expect("probe matrices are built in standard layout");
    &all[i * d..(i + 1) * d]
}

/// Lanes of the partial sums: wide enough for the compiler to vectorise, fixed so the
/// summation order (and the result) does not depend on the machine.
const LANES: usize = 8;

/// `z[q] = v_q · x` for every class `q` (`v` class-major, `k × d`), four classes per pass.
fn logits(x: &[f32], v: &[f32], d: usize, z: &mut [f32]) {
    let k = z.len();
    let mut q = 0;
    while q < k {
        match k - q {
            1 => z[q] = dots::<1>(x, v, d, q)[0],
            2 => z[q..q + 2].copy_from_slice(&dots::<2>(x, v, d, q)),
            3 => z[q..q + 3].copy_from_slice(&dots::<3>(x, v, d, q)),
            _ => z[q..q + 4].copy_from_slice(&dots::<4>(x, v, d, q)),
        }
        q += 4;
    }
}

/// Dot products of `x` with `G` consecutive class rows of `v` starting at class `q0`.
fn dots<const G: usize>(x: &[f32], v: &[f32], d: usize, q0: usize) -> [f32; G] {
    let w: [&[f32]; G] = std::array::from_fn(|g| &v[(q0 + g) * d..(q0 + g + 1) * d]);
    let mut acc = [[0.0f32; LANES]; G];
    let body = d - d % LANES;
    for o in (0..body).step_by(LANES) {
        let xc = &x[o..o + LANES];
        for g in 0..G {
            let wc = &w[g][o..o + LANES];
            for l in 0..LANES {
                acc[g][l] += xc[l] * wc[l];
            }
        }
    }
    std::array::from_fn(|g| {
        let mut s = acc[g].iter().sum::<f32>();
        for j in body..d {
            s += x[j] * w[g][j];
        }
        s
    })
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

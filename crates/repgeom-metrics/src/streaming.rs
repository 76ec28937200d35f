//! Exact streaming linear CKA: the biased and the debiased estimator of linear CKA over any
//! number of tokens, accumulated batch by batch in one pass, with no `N × N` Gram and no
//! dependence on how the tokens are split into batches.
//!
//! For linear kernels `K = XXᵀ`, `L = YYᵀ` every term of both HSIC estimators is a function of
//! a few sums over the rows `xᵢ`, `yᵢ`:
//!
//! - biased (Gretton et al. 2005): `HSIC₀ ∝ ‖X_cᵀY_c‖²_F` with `X_cᵀY_c = XᵀY − s_x s_yᵀ / n`
//!   (`s_x = Σ xᵢ`): needs `XᵀY`, `XᵀX`, `YᵀY`, `s_x`, `s_y`, `n`;
//! - debiased (Song et al. 2012, eq. 5, with `K̃` the Gram with its diagonal set to zero):
//!   `tr(K̃L̃) = ‖XᵀY‖²_F − Σ‖xᵢ‖²‖yᵢ‖²`, `1ᵀK̃1 = ‖s_x‖² − Σ‖xᵢ‖²`, and
//!   `1ᵀK̃L̃1 = s_xᵀ(XᵀY)s_y − s_yᵀ Σ‖xᵢ‖²yᵢ − s_xᵀ Σ‖yᵢ‖²xᵢ + Σ‖xᵢ‖²‖yᵢ‖²`, and the same with
//!   `Y = X` (and `Y = Y`) for the self-similarities.
//!
//! Sums are kept in `f64`, of rows shifted by the first batch's column means: CKA is invariant
//! to translating either representation, both estimators exactly so (the debiased one is an
//! inner product of U-centred Grams, which removes any additive row or column effect), and the
//! shift keeps the cancellations in `‖XᵀY‖² − Σ‖x‖²‖y‖²` and `XᵀY − s_x s_yᵀ/n` small. Memory is
//! `d_x·d_y + d_x² + d_y²` doubles, whatever the number of tokens.

use repgeom_linalg::{Mat, MatRef, Par, matmul_atb_add_f64};

use crate::error::{Error, Result};
use crate::state::AccumulatorState;
use crate::value::MetricValue;

/// Linear CKA of two representations of the same tokens, as [`CkaAccumulator::finish`] gives
/// it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamingCka {
    /// Tokens seen.
    pub n: u64,
    /// CKA with the biased (V-statistic) HSIC, in [0, 1]: what `cka_linear` reports by
    /// default on the same rows.
    pub biased: f64,
    /// CKA with the unbiased HSIC of Song et al. (2012) (`cka_linear`'s `debiased = true`);
    /// `None` below 4 tokens, where the estimator is undefined.
    pub debiased: Option<f64>,
}

impl StreamingCka {
    /// The values as `cka_linear` reports them: variant `biased`, then `debiased` (when
    /// defined), each with extra `n_tokens`.
    pub fn values(&self) -> Vec<MetricValue> {
        let row = |variant, value| {
            let mut v = MetricValue::new("cka_linear", variant, value);
            v.extra.insert("n_tokens".into(), self.n as f64);
            v
        };
        let mut out = vec![row("biased", self.biased)];
        out.extend(self.debiased.map(|d| row("debiased", d)));
        out
    }
}

/// One pass of linear CKA between representations `X` (`n × d_x`) and `Y` (`n × d_y`) of the
/// same tokens, fed in batches of rows: [`update`](Self::update) with each batch (row `i` of
/// both matrices is the same token), then [`finish`](Self::finish). The result equals the
/// full-batch value (to about 1e-12 relative on activations of a few hundred dimensions) for
/// any batch split and order.
///
/// ```
/// use repgeom_linalg::MatRef;
/// use repgeom_metrics::CkaAccumulator;
/// // Y is X rotated by 90 degrees and shifted: CKA 1 (both estimators).
/// let x = [0.0f32, 1.0, 2.0, 0.5, -1.0, 3.0, 4.0, -2.0, 1.5, 1.5, -0.5, 2.5];
/// let y: Vec<f32> = x.chunks(2).flat_map(|r| [-r[1] + 10.0, r[0]]).collect();
/// let mut acc = CkaAccumulator::new(2, 2);
/// for (a, b) in x.chunks(4).zip(y.chunks(4)) {
///     let (a, b) = (MatRef::from_row_major_slice(a, 2, 2), MatRef::from_row_major_slice(b, 2, 2));
///     acc.update(a, b, "layers 1 and 2").unwrap();
/// }
/// let cka = acc.finish("layers 1 and 2").unwrap();
/// assert_eq!(cka.n, 6);
/// assert!((cka.biased - 1.0).abs() < 1e-12);
/// assert!((cka.debiased.unwrap() - 1.0).abs() < 1e-12);
/// ```
#[derive(Debug, Clone)]
pub struct CkaAccumulator {
    n: u64,
    /// Column means of the first batch, subtracted from every row.
    shift: Option<(Vec<f64>, Vec<f64>)>,
    xty: Mat<f64>,
    xtx: Mat<f64>,
    yty: Mat<f64>,
    /// `Σ xᵢ`, `Σ yᵢ`.
    sx: Vec<f64>,
    sy: Vec<f64>,
    /// `Σ ‖xᵢ‖² xᵢ`, `Σ ‖yᵢ‖² xᵢ` (length `d_x`) and `Σ ‖yᵢ‖² yᵢ`, `Σ ‖xᵢ‖² yᵢ` (`d_y`).
    nx_x: Vec<f64>,
    ny_x: Vec<f64>,
    ny_y: Vec<f64>,
    nx_y: Vec<f64>,
    /// `Σ ‖xᵢ‖²`, `Σ ‖yᵢ‖²`, `Σ ‖xᵢ‖²‖yᵢ‖²`, `Σ ‖xᵢ‖⁴`, `Σ ‖yᵢ‖⁴`.
    nx: f64,
    ny: f64,
    nxny: f64,
    nx2: f64,
    ny2: f64,
}

impl CkaAccumulator {
    /// An empty accumulator for widths `dx` and `dy`.
    pub fn new(dx: usize, dy: usize) -> Self {
        Self {
            n: 0,
            shift: None,
            xty: Mat::zeros(dx, dy),
            xtx: Mat::zeros(dx, dx),
            yty: Mat::zeros(dy, dy),
            sx: vec![0.0; dx],
            sy: vec![0.0; dy],
            nx_x: vec![0.0; dx],
            ny_x: vec![0.0; dx],
            ny_y: vec![0.0; dy],
            nx_y: vec![0.0; dy],
            nx: 0.0,
            ny: 0.0,
            nxny: 0.0,
            nx2: 0.0,
            ny2: 0.0,
        }
    }

    /// Tokens seen so far.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Adds a batch: row `i` of `a` (`m × d_x`) and of `b` (`m × d_y`) is one token. `what`
    /// names the pair in errors (a shape that does not match, a non-finite value with its row
    /// and column); a rejected batch leaves the accumulator as it was.
    pub fn update(&mut self, a: MatRef<'_, f32>, b: MatRef<'_, f32>, what: &str) -> Result<()> {
        let (dx, dy) = (self.sx.len(), self.sy.len());
        if a.nrows() != b.nrows() || a.ncols() != dx || b.ncols() != dy {
            return Err(Error::ShapeMismatch {
                what: format!("streaming CKA on {what}"),
                left: format!("[{}, {}] (expected width {dx})", a.nrows(), a.ncols()),
                right: format!("[{}, {}] (expected width {dy})", b.nrows(), b.ncols()),
            });
        }
        for (m, side) in [(a, "first"), (b, "second")] {
            if let Some((row, col)) = repgeom_linalg::first_non_finite(m, repgeom_linalg::Par::Seq)
            {
                return Err(Error::NonFinite {
                    what: format!("streaming CKA on {what}, {side} representation of this batch"),
                    row,
                    col,
                });
            }
        }
        let m = a.nrows();
        if m == 0 {
            return Ok(());
        }
        let (shift_x, shift_y) = self.shift.get_or_insert_with(|| {
            let mean = |x: MatRef<'_, f32>| -> Vec<f64> {
                (0..x.ncols())
                    .map(|j| (0..m).map(|i| f64::from(x[(i, j)])).sum::<f64>() / m as f64)
                    .collect()
            };
            (mean(a), mean(b))
        });
        let x = Mat::from_fn(m, dx, |i, j| f64::from(a[(i, j)]) - shift_x[j]);
        let y = Mat::from_fn(m, dy, |i, j| f64::from(b[(i, j)]) - shift_y[j]);
        // One thread: the sums run in one order whatever the machine.
        matmul_atb_add_f64(self.xty.as_mut(), x.as_ref(), y.as_ref(), Par::Seq);
        matmul_atb_add_f64(self.xtx.as_mut(), x.as_ref(), x.as_ref(), Par::Seq);
        matmul_atb_add_f64(self.yty.as_mut(), y.as_ref(), y.as_ref(), Par::Seq);
        for i in 0..m {
            let nxi: f64 = (0..dx).map(|j| x[(i, j)] * x[(i, j)]).sum();
            let nyi: f64 = (0..dy).map(|j| y[(i, j)] * y[(i, j)]).sum();
            for j in 0..dx {
                let v = x[(i, j)];
                self.sx[j] += v;
                self.nx_x[j] += nxi * v;
                self.ny_x[j] += nyi * v;
            }
            for j in 0..dy {
                let v = y[(i, j)];
                self.sy[j] += v;
                self.ny_y[j] += nyi * v;
                self.nx_y[j] += nxi * v;
            }
            self.nx += nxi;
            self.ny += nyi;
            self.nxny += nxi * nyi;
            self.nx2 += nxi * nxi;
            self.ny2 += nyi * nyi;
        }
        self.n += m as u64;
        Ok(())
    }

    /// The sums as named arrays (`shift_x`, `shift_y` once a token is seen; `xty`, `xtx`,
    /// `yty`, `sx`, `sy`, `nx_x`, `ny_x`, `ny_y`, `nx_y`, and `scalars` = `Σ‖x‖²`, `Σ‖y‖²`,
    /// `Σ‖x‖²‖y‖²`, `Σ‖x‖⁴`, `Σ‖y‖⁴`), to be written and read back exactly
    /// ([`CkaAccumulator::from_state`]).
    pub fn state(&self) -> AccumulatorState {
        let (dx, dy) = (self.sx.len(), self.sy.len());
        let flat = |m: &Mat<f64>| -> Vec<f64> {
            let c = m.ncols();
            (0..m.nrows() * c).map(|x| m[(x / c, x % c)]).collect()
        };
        let mut s = AccumulatorState::new("cka", self.n);
        if let Some((a, b)) = &self.shift {
            s.put("shift_x", &[dx], a.clone());
            s.put("shift_y", &[dy], b.clone());
        }
        s.put("xty", &[dx, dy], flat(&self.xty));
        s.put("xtx", &[dx, dx], flat(&self.xtx));
        s.put("yty", &[dy, dy], flat(&self.yty));
        for (name, v) in [
            ("sx", &self.sx),
            ("sy", &self.sy),
            ("nx_x", &self.nx_x),
            ("ny_x", &self.ny_x),
            ("ny_y", &self.ny_y),
            ("nx_y", &self.nx_y),
        ] {
            s.put(name, &[v.len()], v.clone());
        }
        s.put(
            "scalars",
            &[5],
            vec![self.nx, self.ny, self.nxny, self.nx2, self.ny2],
        );
        s
    }

    /// The accumulator a [`CkaAccumulator::state`] describes; a state of another kind, with
    /// a missing or misshapen array or a non-finite value, is refused naming `what`.
    pub fn from_state(state: &AccumulatorState, what: &str) -> Result<Self> {
        state.expect_kind("cka", what)?;
        let (dx, dy) = (state.len_of("sx", what)?, state.len_of("sy", what)?);
        let mat = |name: &str, r: usize, c: usize| -> Result<Mat<f64>> {
            let v = state.take(name, &[r, c], what)?;
            Ok(repgeom_linalg::mat_from_row_major(v, r, c, Par::Seq))
        };
        let vec = |name: &str, len: usize| -> Result<Vec<f64>> {
            Ok(state.take(name, &[len], what)?.to_vec())
        };
        let shift = match (state.has("shift_x") && state.has("shift_y"), state.n) {
            (true, n) if n > 0 => Some((vec("shift_x", dx)?, vec("shift_y", dy)?)),
            (false, 0) => None,
            _ => {
                return Err(Error::InvalidOption {
                    name: "accumulator".into(),
                    value: what.into(),
                    reason: format!("{} tokens but the shifts do not say so", state.n),
                });
            }
        };
        let sc = vec("scalars", 5)?;
        Ok(Self {
            n: state.n,
            shift,
            xty: mat("xty", dx, dy)?,
            xtx: mat("xtx", dx, dx)?,
            yty: mat("yty", dy, dy)?,
            sx: vec("sx", dx)?,
            sy: vec("sy", dy)?,
            nx_x: vec("nx_x", dx)?,
            ny_x: vec("ny_x", dx)?,
            ny_y: vec("ny_y", dy)?,
            nx_y: vec("nx_y", dy)?,
            nx: sc[0],
            ny: sc[1],
            nxny: sc[2],
            nx2: sc[3],
            ny2: sc[4],
        })
    }

    /// Adds the tokens `other` gathered (a shard of the same corpus through the same pair of
    /// representations): the result is the accumulator of both token sets, whatever the
    /// split, to rounding. `other`'s sums are re-expressed about this accumulator's shift
    /// exactly: with `u = x − b` its stored rows and `δ = b − a` the difference of the shifts,
    /// every sum of `u + δ` (up to the fourth powers of the debiased estimator,
    /// `Σ‖u + δ‖⁴ = Σ‖u‖⁴ + 4δᵀΣ‖u‖²u + 2‖δ‖²Σ‖u‖² + 4δᵀ(ΣuuᵀΣ)δ + 4‖δ‖²δᵀΣu + n‖δ‖⁴`)
    /// follows from the sums it keeps.
    ///
    /// ```
    /// use repgeom_linalg::Mat;
    /// use repgeom_metrics::CkaAccumulator;
    /// let x = Mat::<f32>::from_fn(40, 3, |i, j| ((i * 7 + j * 5) % 11) as f32 + j as f32);
    /// let y = Mat::<f32>::from_fn(40, 2, |i, j| ((i * 3 + j) % 7) as f32 * 0.5 + 2.0);
    /// let (mut first, mut second, mut one) = (CkaAccumulator::new(3, 2), CkaAccumulator::new(3, 2), CkaAccumulator::new(3, 2));
    /// first.update(x.as_ref().subrows(0, 15), y.as_ref().subrows(0, 15), "toy")?;
    /// second.update(x.as_ref().subrows(15, 25), y.as_ref().subrows(15, 25), "toy")?;
    /// one.update(x.as_ref(), y.as_ref(), "toy")?;
    /// first.merge(&second)?;
    /// let (merged, whole) = (first.finish("toy")?, one.finish("toy")?);
    /// assert!((merged.biased - whole.biased).abs() < 1e-12);
    /// assert!((merged.debiased.unwrap() - whole.debiased.unwrap()).abs() < 1e-12);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn merge(&mut self, other: &Self) -> Result<()> {
        let (dx, dy) = (self.sx.len(), self.sy.len());
        if other.sx.len() != dx || other.sy.len() != dy {
            return Err(Error::ShapeMismatch {
                what: "merging streaming CKA accumulators".into(),
                left: format!("widths {dx} and {dy}"),
                right: format!("widths {} and {}", other.sx.len(), other.sy.len()),
            });
        }
        let Some((bx, by)) = &other.shift else {
            return Ok(());
        };
        let Some((ax, ay)) = &self.shift else {
            *self = other.clone();
            return Ok(());
        };
        let n = other.n as f64;
        let delta: Vec<f64> = bx.iter().zip(ax).map(|(b, a)| b - a).collect();
        let eps: Vec<f64> = by.iter().zip(ay).map(|(b, a)| b - a).collect();
        let dot = |u: &[f64], v: &[f64]| -> f64 { u.iter().zip(v).map(|(a, b)| a * b).sum() };
        // m · v for a matrix m and a vector v (and mᵀ · v).
        let mul = |m: &Mat<f64>, v: &[f64]| -> Vec<f64> {
            (0..m.nrows())
                .map(|i| (0..m.ncols()).map(|j| m[(i, j)] * v[j]).sum())
                .collect()
        };
        let mul_t = |m: &Mat<f64>, v: &[f64]| -> Vec<f64> {
            (0..m.ncols())
                .map(|j| (0..m.nrows()).map(|i| m[(i, j)] * v[i]).sum())
                .collect()
        };
        let o = other;
        let (cd, ce) = (dot(&delta, &delta), dot(&eps, &eps));
        let (dsx, esy) = (dot(&delta, &o.sx), dot(&eps, &o.sy));
        let (xtx_d, yty_e) = (mul(&o.xtx, &delta), mul(&o.yty, &eps));
        let (xty_e, xty_t_d) = (mul(&o.xty, &eps), mul_t(&o.xty, &delta));
        // Norms about the new shift.
        let nx = o.nx + 2.0 * dsx + n * cd;
        let ny = o.ny + 2.0 * esy + n * ce;
        let nxny = o.nxny
            + 2.0 * dot(&eps, &o.nx_y)
            + ce * o.nx
            + 2.0 * dot(&delta, &o.ny_x)
            + 4.0 * dot(&delta, &xty_e)
            + 2.0 * ce * dsx
            + cd * o.ny
            + 2.0 * cd * esy
            + n * cd * ce;
        let nx2 = o.nx2
            + 4.0 * dot(&delta, &o.nx_x)
            + 2.0 * cd * o.nx
            + 4.0 * dot(&delta, &xtx_d)
            + 4.0 * cd * dsx
            + n * cd * cd;
        let ny2 = o.ny2
            + 4.0 * dot(&eps, &o.ny_y)
            + 2.0 * ce * o.ny
            + 4.0 * dot(&eps, &yty_e)
            + 4.0 * ce * esy
            + n * ce * ce;
        for i in 0..dx {
            self.nx_x[i] += o.nx_x[i] + 2.0 * xtx_d[i] + cd * o.sx[i] + delta[i] * nx;
            self.ny_x[i] += o.ny_x[i] + 2.0 * xty_e[i] + ce * o.sx[i] + delta[i] * ny;
        }
        for j in 0..dy {
            self.ny_y[j] += o.ny_y[j] + 2.0 * yty_e[j] + ce * o.sy[j] + eps[j] * ny;
            self.nx_y[j] += o.nx_y[j] + 2.0 * xty_t_d[j] + cd * o.sy[j] + eps[j] * nx;
        }
        for i in 0..dx {
            for j in 0..dx {
                self.xtx[(i, j)] += o.xtx[(i, j)]
                    + o.sx[i] * delta[j]
                    + delta[i] * o.sx[j]
                    + n * delta[i] * delta[j];
            }
            for j in 0..dy {
                self.xty[(i, j)] +=
                    o.xty[(i, j)] + o.sx[i] * eps[j] + delta[i] * o.sy[j] + n * delta[i] * eps[j];
            }
        }
        for i in 0..dy {
            for j in 0..dy {
                self.yty[(i, j)] +=
                    o.yty[(i, j)] + o.sy[i] * eps[j] + eps[i] * o.sy[j] + n * eps[i] * eps[j];
            }
        }
        for (s, (v, d)) in self.sx.iter_mut().zip(o.sx.iter().zip(&delta)) {
            *s += v + n * d;
        }
        for (s, (v, e)) in self.sy.iter_mut().zip(o.sy.iter().zip(&eps)) {
            *s += v + n * e;
        }
        self.nx += nx;
        self.ny += ny;
        self.nxny += nxny;
        self.nx2 += nx2;
        self.ny2 += ny2;
        self.n += o.n;
        Ok(())
    }

    /// Linear CKA of everything seen: both estimators. Fewer than 2 tokens, or a
    /// representation that is constant over the tokens, is an error (CKA is undefined).
    pub fn finish(&self, what: &str) -> Result<StreamingCka> {
        let what = format!("streaming CKA on {what}");
        if self.n < 2 {
            return Err(Error::TooFewPoints {
                what,
                n: self.n as usize,
                min: 2,
            });
        }
        let n = self.n as f64;
        // Biased: ‖X_cᵀY_c‖²_F, X_cᵀY_c = XᵀY − s_x s_yᵀ / n.
        let centred_sq = |c: &Mat<f64>, s: &[f64], t: &[f64]| -> f64 {
            let mut sum = 0.0;
            for j in 0..c.ncols() {
                for i in 0..c.nrows() {
                    let v = c[(i, j)] - s[i] * t[j] / n;
                    sum += v * v;
                }
            }
            sum
        };
        let kl = centred_sq(&self.xty, &self.sx, &self.sy);
        let kk = centred_sq(&self.xtx, &self.sx, &self.sx);
        let ll = centred_sq(&self.yty, &self.sy, &self.sy);
        if !(kk > 0.0 && ll > 0.0) {
            return Err(Error::Degenerate {
                what,
                reason: format!(
                    "a representation is constant over the {} tokens (HSIC(X,X) = {kk:.3e}, HSIC(Y,Y) = {ll:.3e})",
                    self.n
                ),
            });
        }
        let biased = (kl / (kk.sqrt() * ll.sqrt())).min(1.0);
        let hsics = (self.n >= 4).then(|| {
            let frob_sq = |c: &Mat<f64>| -> f64 {
                let mut sum = 0.0;
                for j in 0..c.ncols() {
                    for i in 0..c.nrows() {
                        sum += c[(i, j)] * c[(i, j)];
                    }
                }
                sum
            };
            let quad = |s: &[f64], c: &Mat<f64>, t: &[f64]| -> f64 {
                let mut sum = 0.0;
                for j in 0..c.ncols() {
                    let mut col = 0.0;
                    for i in 0..c.nrows() {
                        col += s[i] * c[(i, j)];
                    }
                    sum += col * t[j];
                }
                sum
            };
            let dot = |u: &[f64], v: &[f64]| -> f64 { u.iter().zip(v).map(|(a, b)| a * b).sum() };
            // HSIC₁ from tr(K̃L̃), 1ᵀK̃1, 1ᵀL̃1 and 1ᵀK̃L̃1.
            let hsic = |trace: f64, sk: f64, sl: f64, cross: f64| -> f64 {
                (trace + sk * sl / ((n - 1.0) * (n - 2.0)) - 2.0 / (n - 2.0) * cross)
                    / (n * (n - 3.0))
            };
            let (sum_k, sum_l) = (
                dot(&self.sx, &self.sx) - self.nx,
                dot(&self.sy, &self.sy) - self.ny,
            );
            let xy = hsic(
                frob_sq(&self.xty) - self.nxny,
                sum_k,
                sum_l,
                quad(&self.sx, &self.xty, &self.sy)
                    - dot(&self.sy, &self.nx_y)
                    - dot(&self.sx, &self.ny_x)
                    + self.nxny,
            );
            let xx = hsic(
                frob_sq(&self.xtx) - self.nx2,
                sum_k,
                sum_k,
                quad(&self.sx, &self.xtx, &self.sx) - 2.0 * dot(&self.sx, &self.nx_x) + self.nx2,
            );
            let yy = hsic(
                frob_sq(&self.yty) - self.ny2,
                sum_l,
                sum_l,
                quad(&self.sy, &self.yty, &self.sy) - 2.0 * dot(&self.sy, &self.ny_y) + self.ny2,
            );
            (xy, xx, yy)
        });
        let debiased = match hsics {
            Some((_, xx, yy)) if !(xx > 0.0 && yy > 0.0) => {
                return Err(Error::Degenerate {
                    what,
                    reason: format!(
                        "a debiased self-similarity HSIC is not positive (HSIC(X,X) = {xx:.3e}, HSIC(Y,Y) = {yy:.3e})"
                    ),
                });
            }
            Some((xy, xx, yy)) => Some(xy / (xx.sqrt() * yy.sqrt())),
            None => None,
        };
        Ok(StreamingCka {
            n: self.n,
            biased,
            debiased,
        })
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, seq::SliceRandom};
    use rand_chacha::ChaCha8Rng;
    use repgeom_linalg::{Mat, MatRef, Par};

    use super::*;
    use crate::{CkaLinear, LayerInput, PairInput, PairMetric};

    /// Streaming and full batch agree to this (relative to 1).
    const STREAM_TOL: f64 = 1e-10;

    /// Two related representations of `n` tokens: `Y` a noisy linear map of `X`, both offset
    /// far from the origin (the shift must take care of it).
    fn pair(n: usize, dx: usize, dy: usize, seed: u64) -> (Mat<f32>, Mat<f32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut g = || rng.random::<f32>() * 2.0 - 1.0;
        let x = Mat::from_fn(n, dx, |_, _| g());
        let w = Mat::from_fn(dx, dy, |_, _| g());
        let y = Mat::from_fn(n, dy, |i, j| {
            (0..dx).map(|k| x[(i, k)] * w[(k, j)]).sum::<f32>() * 0.3 + 40.0
        });
        let noise = Mat::from_fn(n, dy, |_, _| g());
        let y = Mat::from_fn(n, dy, |i, j| y[(i, j)] + noise[(i, j)]);
        let x = Mat::from_fn(n, dx, |i, j| x[(i, j)] - 25.0);
        (x, y)
    }

    /// `cka_linear` on the whole of `x` and `y` (biased, debiased).
    fn full_batch(x: &Mat<f32>, y: &Mat<f32>) -> (f64, f64) {
        let ia = LayerInput::new(x.as_ref(), "X", Par::Seq).unwrap();
        let ib = LayerInput::new(y.as_ref(), "Y", Par::Seq).unwrap();
        let input = PairInput::new(&ia, &ib).unwrap();
        let v = |debiased| {
            CkaLinear {
                debiased,
                ..CkaLinear::default()
            }
            .compute(&input)
            .unwrap()[0]
                .value
        };
        (v(false), v(true))
    }

    /// Feeds the rows of `x` and `y` in `order`, cut into batches at `cuts`.
    fn stream(x: &Mat<f32>, y: &Mat<f32>, order: &[usize], cuts: &[usize]) -> StreamingCka {
        let mut acc = CkaAccumulator::new(x.ncols(), y.ncols());
        let mut start = 0;
        for &end in cuts.iter().chain([&order.len()]) {
            let rows = &order[start..end];
            let a = Mat::from_fn(rows.len(), x.ncols(), |i, j| x[(rows[i], j)]);
            let b = Mat::from_fn(rows.len(), y.ncols(), |i, j| y[(rows[i], j)]);
            acc.update(a.as_ref(), b.as_ref(), "test pair").unwrap();
            start = end;
        }
        acc.finish("test pair").unwrap()
    }

    fn check(n: usize, dx: usize, dy: usize, seed: u64) {
        let (x, y) = pair(n, dx, dy, seed);
        let (biased, debiased) = full_batch(&x, &y);
        let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
        let identity: Vec<usize> = (0..n).collect();
        let mut shuffled = identity.clone();
        shuffled.shuffle(&mut rng);
        let mut random_cuts: Vec<usize> = (0..5).map(|_| rng.random_range(1..n)).collect();
        random_cuts.sort_unstable();
        random_cuts.dedup();
        let every_row: Vec<usize> = (1..n).collect();
        for (order, cuts, how) in [
            (&identity, vec![], "one batch"),
            (&identity, every_row.clone(), "one row a batch"),
            (&identity, random_cuts.clone(), "random batches"),
            (&shuffled, random_cuts.clone(), "shuffled, random batches"),
            (&shuffled, vec![n / 2], "shuffled, two halves"),
        ] {
            let s = stream(&x, &y, order, &cuts);
            assert_eq!(s.n, n as u64);
            assert!(
                (s.biased - biased).abs() <= STREAM_TOL,
                "n={n} {how}: biased {} vs {biased}",
                s.biased
            );
            let d = s.debiased.expect("n >= 4");
            assert!(
                (d - debiased).abs() <= STREAM_TOL,
                "n={n} {how}: debiased {d} vs {debiased}"
            );
        }
    }

    #[test]
    fn streaming_equals_the_full_batch_for_any_split_and_order() {
        check(8, 3, 5, 1);
        check(64, 16, 24, 2);
        check(300, 48, 32, 3);
    }

    #[test]
    fn bad_batches_are_named_and_leave_the_accumulator_unchanged() {
        let mut acc = CkaAccumulator::new(2, 3);
        let good = ([1.0f32, 2.0, 3.0, 4.0], [1.0f32, 0.0, 2.0, 5.0, 1.0, 0.0]);
        let a = MatRef::from_row_major_slice(&good.0, 2, 2);
        let b = MatRef::from_row_major_slice(&good.1, 2, 3);
        let wide = MatRef::from_row_major_slice(&good.1, 3, 2);
        let e = acc
            .update(wide, b, "layers 3 and 4")
            .unwrap_err()
            .to_string();
        assert!(e.contains("layers 3 and 4") && e.contains("[3, 2]"), "{e}");
        let nan = [1.0f32, f32::NAN, 3.0, 4.0];
        let e = acc
            .update(
                MatRef::from_row_major_slice(&nan, 2, 2),
                b,
                "layers 3 and 4",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 0, column 1"), "{e}");
        assert_eq!(acc.n(), 0);
        acc.update(a, b, "layers 3 and 4").unwrap();
        assert_eq!(acc.n(), 2);
        let c = acc.finish("layers 3 and 4").unwrap();
        assert_eq!(c.debiased, None, "undefined below 4 tokens");
        let e = CkaAccumulator::new(2, 3)
            .finish("x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs at least 2 points, got 0"), "{e}");
    }

    /// A corpus split in shards, each accumulated on its own (its own shift), then merged in
    /// any order or as a tree, equals one pass: both estimators to 1e-12.
    #[test]
    fn merged_shards_equal_one_pass() {
        const MERGE_TOL: f64 = 1e-12;
        let (x, y) = pair(900, 12, 9, 11);
        let mut one = CkaAccumulator::new(12, 9);
        one.update(x.as_ref(), y.as_ref(), "pair").unwrap();
        let whole = one.finish("pair").unwrap();
        let bounds = [0, 130, 131, 600, 900];
        let shards: Vec<CkaAccumulator> = (0..4)
            .map(|s| {
                let (r, m) = (bounds[s], bounds[s + 1] - bounds[s]);
                let mut acc = CkaAccumulator::new(12, 9);
                // Shards far apart in what their first batch's mean is.
                for start in (0..m).step_by(97) {
                    let k = 97.min(m - start);
                    let (a, b) = (
                        x.as_ref().subrows(r + start, k),
                        y.as_ref().subrows(r + start, k),
                    );
                    acc.update(a, b, "pair").unwrap();
                }
                acc
            })
            .collect();
        let check = |acc: &CkaAccumulator, what: &str| {
            let got = acc.finish("pair").unwrap();
            assert_eq!(got.n, whole.n, "{what}");
            assert!(
                (got.biased - whole.biased).abs() <= MERGE_TOL,
                "{what}: {got:?} vs {whole:?}"
            );
            let (g, w) = (got.debiased.unwrap(), whole.debiased.unwrap());
            assert!((g - w).abs() <= MERGE_TOL, "{what}: debiased {g} vs {w}");
        };
        for order in [[0, 1, 2, 3], [2, 0, 3, 1]] {
            let mut acc = CkaAccumulator::new(12, 9);
            for &s in &order {
                acc.merge(&shards[s]).unwrap();
            }
            check(&acc, &format!("order {order:?}"));
        }
        let (mut left, mut right) = (shards[3].clone(), shards[1].clone());
        left.merge(&shards[2]).unwrap();
        right.merge(&shards[0]).unwrap();
        left.merge(&right).unwrap();
        check(&left, "tree");
        // Shifted far from each other: the merge re-expresses the sums, not approximates them.
        let (x2, y2) = (
            Mat::from_fn(300, 12, |i, j| x[(i, j)] + 500.0),
            Mat::from_fn(300, 9, |i, j| y[(i, j)] - 300.0),
        );
        let mut far = CkaAccumulator::new(12, 9);
        far.update(x2.as_ref(), y2.as_ref(), "far").unwrap();
        let mut both = shards[0].clone();
        both.merge(&far).unwrap();
        let mut direct = CkaAccumulator::new(12, 9);
        direct
            .update(x.as_ref().subrows(0, 130), y.as_ref().subrows(0, 130), "x")
            .unwrap();
        direct.update(x2.as_ref(), y2.as_ref(), "far").unwrap();
        let (a, b) = (both.finish("m").unwrap(), direct.finish("d").unwrap());
        assert!((a.biased - b.biased).abs() <= 1e-11, "{a:?} vs {b:?}");
        assert!(
            (a.debiased.unwrap() - b.debiased.unwrap()).abs() <= 1e-11,
            "{a:?} vs {b:?}"
        );
        assert!(CkaAccumulator::new(3, 9).merge(&shards[0]).is_err());
    }

    /// A state read back is the same accumulator (bit for bit); another kind is refused.
    #[test]
    fn a_state_reads_back_exactly() {
        let (x, y) = pair(300, 6, 5, 3);
        let mut acc = CkaAccumulator::new(6, 5);
        acc.update(x.as_ref(), y.as_ref(), "pair").unwrap();
        let back = CkaAccumulator::from_state(&acc.state(), "cka.safetensors").unwrap();
        assert_eq!(back.finish("p").unwrap(), acc.finish("p").unwrap());
        assert_eq!(back.state(), acc.state());
        let mut other = acc.state();
        other.kind = "covariance".into();
        let err = CkaAccumulator::from_state(&other, "cka.safetensors")
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds a `covariance` accumulator"), "{err}");
    }
}

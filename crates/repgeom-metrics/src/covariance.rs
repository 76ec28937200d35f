//! The spectrum of a layer over every token: an exact covariance accumulator.
//!
//! RankMe, α-ReQ, IsoScore and the condition number are functions of the singular values of
//! the points (centred or not), that is of the eigenvalues of `XᵀX` or `X_cᵀX_c`, a `d × d`
//! matrix. [`CovarianceAccumulator`] gathers it batch by batch in `f64` (the count, the column
//! sums and the scatter `Σ (x − a)(x − a)ᵀ` of rows shifted by the first batch's column means
//! `a`, which keeps the cancellation in `X_cᵀX_c = S − s sᵀ/n` small), in `d²` memory whatever
//! the number of tokens, and two accumulators over different tokens merge exactly (the second
//! re-expressed about the first's shift: `Σ(y + δ)(y + δ)ᵀ = S + s δᵀ + δ sᵀ + n δδᵀ`). Its
//! [`CovarianceAccumulator::spectrum`] is a [`CovarianceSpectrum`], which the spectral
//! metrics read through [`crate::Metric::compute_spectrum`]: the same code as on the points.
//!
//! Precision: the singular values come from the eigenvalues of a Gram matrix, as
//! [`crate::LayerInput`]'s do (`repgeom_linalg::singular_values`), so the two routes agree to
//! rounding (about 1e-12 relative on the leading values); values below about
//! `σ₁·sqrt(ε_f64)` are not resolved by either, and the numerical rank cuts them off
//! (`numerical_rank`). Metrics of the points themselves (mean cosine similarity, the
//! partition function, TwoNN) have no covariance form and are refused by name.
//!
//! [`SpectralConvergence`] records the spectrum as the tokens pass 2¹⁰, 2¹¹, … and at the
//! end, for a metric's value against the tokens seen and the count after which it stays
//! within a tolerance of its final value.

use repgeom_linalg::{Mat, MatRef, Par, syrk_add_f64};

use crate::error::{Error, Result};
use crate::input::Spectrum;
use crate::registry::Metric;
use crate::state::AccumulatorState;
use crate::value::MetricValue;

/// The exact second moments of a layer's rows, accumulated over batches of tokens.
///
/// ```
/// use repgeom_linalg::Mat;
/// use repgeom_metrics::{CovarianceAccumulator, LayerInput, Metric, RankMe};
///
/// let x = Mat::<f32>::from_fn(300, 8, |i, j| ((i * 7 + j * j * 3) % 13) as f32 + 0.1 * j as f32);
/// let mut acc = CovarianceAccumulator::new(8, "toy layer");
/// for start in (0..300).step_by(64) {
///     acc.update(x.as_ref().subrows(start, 64.min(300 - start)))?;
/// }
/// let streamed = RankMe::default().compute_spectrum(&acc.spectrum()?)?;
/// let on_points = RankMe::default().compute(&LayerInput::new(x.as_ref(), "toy", repgeom_linalg::Par::Seq)?)?;
/// assert!((streamed[0].value - on_points[0].value).abs() < 1e-10);
/// # Ok::<(), repgeom_metrics::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CovarianceAccumulator {
    what: String,
    n: u64,
    /// The first batch's column means (`None` before any row).
    shift: Option<Vec<f64>>,
    /// `Σ (x − shift)`.
    sum: Vec<f64>,
    /// `Σ (x − shift)(x − shift)ᵀ`, `d × d`.
    scatter: Mat<f64>,
}

impl CovarianceAccumulator {
    /// An empty accumulator of rows of width `d`; `what` names the layer in messages.
    pub fn new(d: usize, what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            n: 0,
            shift: None,
            sum: vec![0.0; d],
            scatter: Mat::zeros(d, d),
        }
    }

    /// Width `d`.
    pub fn d(&self) -> usize {
        self.sum.len()
    }

    /// Tokens seen.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Adds a batch of rows (`m × d`, any `m`). The sums run on one thread in one order, so
    /// the result does not depend on the machine; it depends on the batches only through
    /// rounding (about 1e-15 relative).
    pub fn update(&mut self, batch: MatRef<'_, f32>) -> Result<()> {
        let d = self.d();
        if batch.ncols() != d {
            return Err(Error::ShapeMismatch {
                what: format!("covariance accumulator of {}", self.what),
                left: format!("batch [{}, {}]", batch.nrows(), batch.ncols()),
                right: format!("width d = {d}"),
            });
        }
        if let Some((row, col)) = repgeom_linalg::first_non_finite(batch, repgeom_linalg::Par::Seq)
        {
            return Err(Error::NonFinite {
                what: format!("covariance accumulator of {}, this batch", self.what),
                row,
                col,
            });
        }
        let m = batch.nrows();
        if m == 0 {
            return Ok(());
        }
        let shift = self.shift.get_or_insert_with(|| {
            (0..d)
                .map(|j| (0..m).map(|i| f64::from(batch[(i, j)])).sum::<f64>() / m as f64)
                .collect()
        });
        let y = Mat::from_fn(m, d, |i, j| f64::from(batch[(i, j)]) - shift[j]);
        syrk_add_f64(self.scatter.as_mut(), y.as_ref(), Par::Seq);
        for i in 0..m {
            for (j, s) in self.sum.iter_mut().enumerate() {
                *s += y[(i, j)];
            }
        }
        self.n += m as u64;
        Ok(())
    }

    /// Adds the tokens `other` gathered (a shard of the same corpus through the same layer):
    /// the result is the accumulator of both token sets, whatever the split, to rounding.
    pub fn merge(&mut self, other: &Self) -> Result<()> {
        let d = self.d();
        if other.d() != d {
            return Err(Error::ShapeMismatch {
                what: format!(
                    "merging covariance accumulators of {} and {}",
                    self.what, other.what
                ),
                left: format!("d = {d}"),
                right: format!("d = {}", other.d()),
            });
        }
        let Some(other_shift) = &other.shift else {
            return Ok(());
        };
        let Some(shift) = &self.shift else {
            let what = std::mem::take(&mut self.what);
            *self = Self {
                what,
                ..other.clone()
            };
            return Ok(());
        };
        // The other's rows about this shift: y + δ with δ = other's shift − this shift.
        let delta: Vec<f64> = other_shift.iter().zip(shift).map(|(b, a)| b - a).collect();
        let n = other.n as f64;
        for i in 0..d {
            for j in 0..d {
                self.scatter[(i, j)] += other.scatter[(i, j)]
                    + other.sum[i] * delta[j]
                    + delta[i] * other.sum[j]
                    + n * delta[i] * delta[j];
            }
        }
        for (s, (o, dl)) in self.sum.iter_mut().zip(other.sum.iter().zip(&delta)) {
            *s += o + n * dl;
        }
        self.n += other.n;
        Ok(())
    }

    /// The sums as named arrays (`shift`, `sum`, `scatter`; `shift` absent before any token),
    /// to be written and read back exactly ([`CovarianceAccumulator::from_state`]).
    pub fn state(&self) -> AccumulatorState {
        let d = self.d();
        let mut s = AccumulatorState::new("covariance", self.n);
        if let Some(shift) = &self.shift {
            s.put("shift", &[d], shift.clone());
        }
        s.put("sum", &[d], self.sum.clone());
        let scatter = (0..d * d).map(|x| self.scatter[(x / d, x % d)]).collect();
        s.put("scatter", &[d, d], scatter);
        s
    }

    /// The accumulator a [`CovarianceAccumulator::state`] describes; a state of another kind,
    /// with a missing or misshapen array or a non-finite value, is refused naming it. `what`
    /// names the source (a file) in errors and the layer from then on.
    pub fn from_state(state: &AccumulatorState, what: &str) -> Result<Self> {
        state.expect_kind("covariance", what)?;
        let d = state.len_of("sum", what)?;
        let sum = state.take("sum", &[d], what)?.to_vec();
        let scatter = state.take("scatter", &[d, d], what)?;
        let shift = match (state.has("shift"), state.n) {
            (true, n) if n > 0 => Some(state.take("shift", &[d], what)?.to_vec()),
            (false, 0) => None,
            _ => {
                return Err(Error::InvalidOption {
                    name: "accumulator".into(),
                    value: what.into(),
                    reason: format!(
                        "{} tokens but {} shift",
                        state.n,
                        if state.has("shift") { "a" } else { "no" }
                    ),
                });
            }
        };
        Ok(Self {
            what: what.into(),
            n: state.n,
            shift,
            sum,
            scatter: repgeom_linalg::mat_from_row_major(scatter, d, d, Par::Seq),
        })
    }

    /// The spectrum of every token seen: the singular values of the centred and of the raw
    /// points, from `X_cᵀX_c = S − s sᵀ/n` and `XᵀX = S + s aᵀ + a sᵀ + n a aᵀ`. The two
    /// decompositions run side by side on the current rayon pool, each on one thread, so the
    /// values are the same at any thread count.
    pub fn spectrum(&self) -> Result<CovarianceSpectrum> {
        let (d, n) = (self.d(), self.n);
        if n < 2 {
            return Err(Error::TooFewPoints {
                what: format!("covariance spectrum of {}", self.what),
                n: n as usize,
                min: 2,
            });
        }
        let shift = self.shift.as_deref().unwrap_or(&[]);
        let nf = n as f64;
        let s = &self.sum;
        let keep = d.min(usize::try_from(n).unwrap_or(usize::MAX));
        let values = |g: Mat<f64>| -> Result<Vec<f64>> {
            let mut v = repgeom_linalg::gram_singular_values(g.as_ref(), &self.what)?;
            v.truncate(keep);
            Ok(v)
        };
        let (centred, raw) = rayon::join(
            || {
                values(Mat::from_fn(d, d, |i, j| {
                    self.scatter[(i, j)] - s[i] * s[j] / nf
                }))
            },
            || {
                values(Mat::from_fn(d, d, |i, j| {
                    self.scatter[(i, j)]
                        + s[i] * shift[j]
                        + shift[i] * s[j]
                        + nf * shift[i] * shift[j]
                }))
            },
        );
        Ok(CovarianceSpectrum {
            what: format!("{} ({n} tokens)", self.what),
            n: usize::try_from(n).unwrap_or(usize::MAX),
            d,
            centred: centred?,
            raw: raw?,
        })
    }
}

/// A layer's spectrum from its accumulated second moments ([`CovarianceAccumulator::spectrum`]),
/// read by the spectral metrics ([`crate::Metric::compute_spectrum`]). Serialisable (its token
/// count, width, and the singular values of the centred and raw points), so that a spectrum
/// kept on disk gives any spectral metric later without the tokens.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CovarianceSpectrum {
    what: String,
    n: usize,
    d: usize,
    centred: Vec<f64>,
    raw: Vec<f64>,
}

impl Spectrum for CovarianceSpectrum {
    fn n(&self) -> usize {
        self.n
    }
    fn d(&self) -> usize {
        self.d
    }
    fn what(&self) -> &str {
        &self.what
    }
    fn singular_values(&self, centred: bool) -> Result<&[f64]> {
        Ok(if centred { &self.centred } else { &self.raw })
    }
}

/// A layer's spectrum as the tokens pass each power of two from 2¹⁰ (1,024) and at the end:
/// feed batches with [`SpectralConvergence::update`] (a batch that crosses a checkpoint is
/// split there), then read a metric's value against the tokens seen with
/// [`SpectralConvergence::report`].
///
/// ```
/// use repgeom_linalg::Mat;
/// use repgeom_metrics::{RankMe, SpectralConvergence};
///
/// let x = Mat::<f32>::from_fn(5000, 6, |i, j| (((i * 31 + j * 17) % 101) as f32).sin() * (j + 1) as f32);
/// let mut conv = SpectralConvergence::new(6, "toy layer");
/// conv.update(x.as_ref())?;
/// let report = conv.report(&RankMe::default(), 0.01)?;
/// assert_eq!(report.tokens, [1024, 2048, 4096, 5000]);
/// assert_eq!(report.values.len(), 4);
/// # Ok::<(), repgeom_metrics::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SpectralConvergence {
    acc: CovarianceAccumulator,
    snapshots: Vec<CovarianceSpectrum>,
    next: u64,
}

/// The relative tolerance of a convergence report where none is chosen: a metric is
/// converged once every later value lies within 1 % of its value over every token.
pub const CONVERGENCE_TOL: f64 = 0.01;

/// The first checkpoint of [`SpectralConvergence`]: 2¹⁰ tokens.
pub const FIRST_CHECKPOINT: u64 = 1 << 10;

/// A metric's value against the tokens seen ([`SpectralConvergence::report`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvergenceReport {
    /// The metric and variant reported (its first row).
    pub metric: String,
    /// Its variant.
    pub variant: String,
    /// Tokens at each checkpoint: 2¹⁰, 2¹¹, … below the total, then the total.
    pub tokens: Vec<u64>,
    /// The value at each checkpoint; the last is the value over every token.
    pub values: Vec<f64>,
    /// The relative tolerance asked for.
    pub tolerance: f64,
    /// The first checkpoint from which every later value lies within `tolerance` of the final
    /// value, relatively (`|v − v_final| ≤ tolerance·|v_final|`); `None` when only the final
    /// value does.
    pub stable_from: Option<u64>,
}

impl ConvergenceReport {
    /// One tidy row per checkpoint, the metric and variant as reported, with extra
    /// `n_tokens`; the last row (every token) also carries `tolerance` and `stable_from` (NaN
    /// when only the final value is within the tolerance).
    pub fn values(&self) -> Vec<MetricValue> {
        let last = self.tokens.len().saturating_sub(1);
        (self.tokens.iter().zip(&self.values).enumerate())
            .map(|(i, (&t, &v))| {
                let mut row = MetricValue::new(&self.metric, &self.variant, v)
                    .with_extra("n_tokens", t as f64);
                if i == last {
                    row = row.with_extra("tolerance", self.tolerance).with_extra(
                        "stable_from",
                        self.stable_from.map_or(f64::NAN, |s| s as f64),
                    );
                }
                row
            })
            .collect()
    }
}

impl SpectralConvergence {
    /// An empty record of rows of width `d`; `what` names the layer.
    pub fn new(d: usize, what: impl Into<String>) -> Self {
        Self {
            acc: CovarianceAccumulator::new(d, what),
            snapshots: Vec::new(),
            next: FIRST_CHECKPOINT,
        }
    }

    /// The accumulator of every token so far.
    pub fn accumulator(&self) -> &CovarianceAccumulator {
        &self.acc
    }

    /// Adds a batch, taking the spectrum at each checkpoint it crosses.
    pub fn update(&mut self, batch: MatRef<'_, f32>) -> Result<()> {
        let mut start = 0;
        while start < batch.nrows() {
            let to_checkpoint = usize::try_from(self.next - self.acc.n()).unwrap_or(usize::MAX);
            let take = to_checkpoint.min(batch.nrows() - start);
            self.acc.update(batch.subrows(start, take))?;
            start += take;
            if self.acc.n() == self.next {
                self.snapshots.push(self.acc.spectrum()?);
                self.next *= 2;
            }
        }
        Ok(())
    }

    /// [`SpectralConvergence::update`] of each record with its view (`records[i]` takes
    /// `batch[i]`: one batch's hidden states), the records in parallel on the current rayon
    /// pool. Each record's sums are its own, so the result does not depend on the thread
    /// count; the first failing record (in order) is the error.
    pub fn update_each(records: &mut [Self], batch: &[MatRef<'_, f32>]) -> Result<()> {
        use rayon::prelude::*;
        if records.len() != batch.len() {
            return Err(Error::ShapeMismatch {
                what: "spectral convergence records and one batch's hidden states".into(),
                left: format!("{} records", records.len()),
                right: format!("{} views", batch.len()),
            });
        }
        let results: Vec<Result<()>> = (records.par_iter_mut().zip(batch.par_iter()))
            .map(|(r, v)| r.update(*v))
            .collect();
        results.into_iter().collect()
    }

    /// `metric`'s first row at each checkpoint and over every token, and the checkpoint from
    /// which it stays within `tolerance` (relative) of its final value.
    pub fn report(&self, metric: &dyn Metric, tolerance: f64) -> Result<ConvergenceReport> {
        let mut reports = self.reports(&[metric], tolerance)?;
        Ok(reports.remove(0))
    }

    /// [`SpectralConvergence::report`] for each of `metrics`, the spectrum over every token
    /// decomposed once for all of them.
    pub fn reports(
        &self,
        metrics: &[&dyn Metric],
        tolerance: f64,
    ) -> Result<Vec<ConvergenceReport>> {
        convergence_reports(&self.spectra()?, metrics, tolerance)
    }

    /// The spectrum at each checkpoint passed and over every token (the last), what
    /// [`SpectralConvergence::reports`] reads: keep them to report other metrics later.
    pub fn spectra(&self) -> Result<Vec<CovarianceSpectrum>> {
        let mut spectra = self.snapshots.clone();
        let last = self.acc.spectrum()?;
        if spectra.last().is_none_or(|s| s.n != last.n) {
            spectra.push(last);
        }
        Ok(spectra)
    }
}

/// [`SpectralConvergence::reports`] from spectra kept ([`SpectralConvergence::spectra`]: one
/// per checkpoint, the last over every token).
pub fn convergence_reports(
    spectra: &[CovarianceSpectrum],
    metrics: &[&dyn Metric],
    tolerance: f64,
) -> Result<Vec<ConvergenceReport>> {
    if !(tolerance.is_finite() && tolerance > 0.0) {
        return Err(Error::InvalidOption {
            name: "tolerance".into(),
            value: tolerance.to_string(),
            reason: "a relative tolerance must be positive".into(),
        });
    }
    if spectra.is_empty() {
        return Err(Error::Degenerate {
            what: "convergence report".into(),
            reason: "no spectrum".into(),
        });
    }
    let spectra: Vec<&CovarianceSpectrum> = spectra.iter().collect();
    metrics
        .iter()
        .map(|&m| convergence(m, &spectra, tolerance))
        .collect()
}

/// `metric`'s first row on each of `spectra` (the last over every token) and where it settles.
fn convergence(
    metric: &dyn Metric,
    spectra: &[&CovarianceSpectrum],
    tolerance: f64,
) -> Result<ConvergenceReport> {
    let mut tokens = Vec::with_capacity(spectra.len());
    let mut values = Vec::with_capacity(spectra.len());
    let (mut name, mut variant) = (String::new(), String::new());
    for s in spectra {
        let rows = metric.compute_spectrum(*s)?;
        let Some(first) = rows.into_iter().next() else {
            return Err(Error::Degenerate {
                what: format!("{} on {}", metric.info().name, s.what),
                reason: "the metric returned no value".into(),
            });
        };
        tokens.push(s.n as u64);
        values.push(first.value);
        (name, variant) = (first.metric, first.variant);
    }
    let fin = *values.last().expect("at least the final spectrum");
    let within = |v: f64| (v - fin).abs() <= tolerance * fin.abs();
    let stable = (0..values.len()).find(|&i| values[i..].iter().all(|&v| within(v)));
    let stable_from = stable.filter(|&i| i + 1 < values.len()).map(|i| tokens[i]);
    Ok(ConvergenceReport {
        metric: name,
        variant,
        tokens,
        values,
        tolerance,
        stable_from,
    })
}

#[cfg(test)]
#[path = "covariance_tests.rs"]
mod tests;

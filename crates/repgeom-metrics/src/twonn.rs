//! `intrinsic_dim_twonn`: the TwoNN intrinsic-dimension estimator (Facco, d'Errico, Rodriguez &
//! Laio 2017, *Scientific Reports* 7:12140).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::LayerInput;
use crate::knn::euclidean_neighbours;
use crate::registry::Metric;
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// TwoNN intrinsic dimension: with `μ_i = r₂/r₁` (second over first nearest-neighbour Euclidean
/// distance), sorted ascending, and the empirical CDF `F_i = i/N`, the slope through the origin
/// of `−log(1 − F_i)` against `log μ_i` over the smallest `⌊fraction·N⌋` ratios.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntrinsicDimTwoNn {
    /// Fraction of the points (smallest ratios) kept for the fit; the paper discards the 10%
    /// largest ratios (default 0.9). Must lie in (0, 1): the largest ratio has F = 1.
    pub fraction: f64,
}

impl Default for IntrinsicDimTwoNn {
    fn default() -> Self {
        Self { fraction: 0.9 }
    }
}

#[typetag::serde(name = "intrinsic_dim_twonn")]
impl Metric for IntrinsicDimTwoNn {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "intrinsic_dim_twonn",
            summary: "TwoNN intrinsic dimension from the ratio of second to first nearest-neighbour distances",
            source: "Facco, d'Errico, Rodriguez & Laio (2017), Scientific Reports 7:12140",
            options: &[OptionDoc {
                name: "fraction",
                help: "fraction of points (smallest distance ratios) kept for the fit, in (0, 1)",
            }],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            return Err(Error::InvalidOption {
                name: "fraction".into(),
                value: self.fraction.to_string(),
                reason: "the fraction of points kept must lie in (0, 1) (the largest ratio has an empirical CDF of 1)".into(),
            });
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let n = input.n();
        let nb = euclidean_neighbours(input.centred(), 2, input.par());
        let mut mu = Vec::with_capacity(n);
        for i in 0..n {
            let (r1, r2) = (nb.score[2 * i], nb.score[2 * i + 1]);
            if r1 <= 0.0 {
                return Err(Error::Degenerate {
                    what: format!("intrinsic_dim_twonn on {}", input.what()),
                    reason: format!(
                        "point {i} has a duplicate (nearest-neighbour distance 0), so r2/r1 is undefined; remove duplicate points"
                    ),
                });
            }
            mu.push(r2 / r1);
        }
        mu.sort_by(f64::total_cmp);
        let kept = (self.fraction * n as f64).floor() as usize;
        if kept < 2 {
            return Err(Error::Degenerate {
                what: format!("intrinsic_dim_twonn on {}", input.what()),
                reason: format!(
                    "fraction {} of {n} points keeps {kept} ratios; the fit needs at least 2",
                    self.fraction
                ),
            });
        }
        let (mut sxy, mut sxx) = (0.0f64, 0.0f64);
        for (i, &m) in mu.iter().take(kept).enumerate() {
            let x = m.ln();
            let y = -(1.0 - (i + 1) as f64 / n as f64).ln();
            sxy += x * y;
            sxx += x * x;
        }
        if sxx <= 0.0 {
            return Err(Error::Degenerate {
                what: format!("intrinsic_dim_twonn on {}", input.what()),
                reason: "every kept ratio r2/r1 is 1 (equidistant neighbours), so the slope is undefined".into(),
            });
        }
        Ok(vec![
            MetricValue::new("intrinsic_dim_twonn", "", sxy / sxx)
                .with_extra("fraction", self.fraction)
                .with_extra("n_fit", kept as f64),
        ])
    }
}

//! `custom-metric` is the worked example of `docs/adding-a-metric.md`: a metric defined outside
//! `repgeom-metrics` that joins its registry (and so any binary or analysis file that links it)
//! by being linked in.
//!
//! The main type is [`ParticipationRatio`], the participation ratio of the covariance spectrum
//! (Gao et al. 2017), $\mathrm{PR} = (\sum_i\lambda_i)^2/\sum_i\lambda_i^2$: the number of
//! dimensions the variance effectively spreads over (`r` for `r` equal eigenvalues).
//!
//! Key design decision: nothing here touches existing code. The struct is the metric's config
//! (serde, with defaults for every option), the `#[typetag::serde(name = "…")]` attribute
//! registers it under a stable name, and [`LayerInput`](repgeom_metrics::LayerInput) supplies
//! the cached spectrum it needs.
//!
//! This crate is not part of the default analysis: a binary sees the metric only if it links
//! this crate (`use custom_metric as _;`).
#![deny(missing_docs)]

use repgeom_metrics::{LayerInput, Metric, MetricInfo, MetricValue, OptionDoc, Result};
use serde::{Deserialize, Serialize};

/// Participation ratio of the covariance eigenvalues (Gao et al. 2017).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParticipationRatio {
    /// Divide by `d`, reporting the fraction of dimensions used (variant `normalized`).
    pub normalize: bool,
}

#[typetag::serde(name = "participation_ratio")]
impl Metric for ParticipationRatio {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "participation_ratio",
            summary: "participation ratio (sum of covariance eigenvalues)^2 / sum of their squares",
            source: "Gao, Trautmann, Yu, et al. (2017), A theory of multineuronal dimensionality, bioRxiv",
            options: &[OptionDoc {
                name: "normalize",
                help: "divide by d (variant normalized)",
            }],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        let lambdas = input.covariance_eigenvalues()?;
        let sum: f64 = lambdas.iter().sum();
        let sum_sq: f64 = lambdas.iter().map(|l| l * l).sum();
        // LayerInput rejects constant data, so the covariance is non-zero here.
        let pr = sum * sum / sum_sq;
        Ok(vec![if self.normalize {
            MetricValue::new("participation_ratio", "normalized", pr / input.d() as f64)
        } else {
            MetricValue::new("participation_ratio", "", pr)
        }])
    }
}

#[cfg(test)]
mod tests;

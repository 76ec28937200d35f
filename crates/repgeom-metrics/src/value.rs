//! What a metric reports and how it describes itself: [`MetricValue`] (one tidy value),
//! [`MetricInfo`] and [`OptionDoc`]. The bottom floor of the crate with [`crate::input`]: it
//! names no metric, no input and no run.

use std::collections::BTreeMap;

use repgeom_null::NullSummary;
use serde::{Deserialize, Serialize};

/// One documented option of a metric (its default comes from serialising the default config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDoc {
    /// Field name in the config.
    pub name: &'static str,
    /// One line of meaning.
    pub help: &'static str,
}

/// What a metric is, for `repgeom metrics --list`, the docs and the conformance suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// Registered name (equals the typetag name).
    pub name: &'static str,
    /// One-line meaning.
    pub summary: &'static str,
    /// The paper the definition follows.
    pub source: &'static str,
    /// The options.
    pub options: &'static [OptionDoc],
    /// Whether the metric needs the readout basis.
    pub needs_readout: bool,
    /// Whether the metric needs null bases.
    pub needs_null: bool,
    /// Whether the value is invariant to an orthogonal rotation of the hidden space (applied
    /// to the activations and the readout basis together).
    pub rotation_invariant: bool,
}

/// One tidy output value: maps onto a row of the report schema (model, layer, … are added by
/// the caller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    /// Metric column, e.g. `pga_z`, `rankme`.
    pub metric: String,
    /// Variant column, e.g. `ccr1`, `pc1`, `biased` (empty when there is only one).
    pub variant: String,
    /// The value.
    pub value: f64,
    /// Mean of the null sample, when the value has one.
    pub null_mean: Option<f64>,
    /// Sample standard deviation (ddof 1) of the null sample.
    pub null_std: Option<f64>,
    /// One-sided empirical p-value against the null.
    pub p_value: Option<f64>,
    /// Metric-specific columns (`r2`, `random_expectation`, `rho_readout`, …).
    pub extra: BTreeMap<String, f64>,
}

impl MetricValue {
    /// A value without null statistics or extras.
    pub fn new(metric: &str, variant: &str, value: f64) -> Self {
        Self {
            metric: metric.into(),
            variant: variant.into(),
            value,
            null_mean: None,
            null_std: None,
            p_value: None,
            extra: BTreeMap::new(),
        }
    }

    /// Adds the null statistics (mean, std, p; the z lives in `value` or `extra`).
    pub fn with_null(mut self, s: &NullSummary) -> Self {
        self.null_mean = Some(s.null_mean);
        self.null_std = Some(s.null_std);
        self.p_value = Some(s.p_value);
        self
    }

    /// Adds one extra column.
    pub fn with_extra(mut self, key: &str, value: f64) -> Self {
        self.extra.insert(key.into(), value);
        self
    }
}

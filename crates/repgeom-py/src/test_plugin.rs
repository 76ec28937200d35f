//! A metric registered from this crate, outside `repgeom-metrics`, to show (in the pytest
//! suite) that any Rust crate linked into the module extends `repgeom.list_metrics()`. Built
//! only with the `test-plugin` feature; `examples/custom-metric` is the documented example.

use repgeom_metrics::{LayerInput, Metric, MetricInfo, MetricValue, OptionDoc, Result};
use serde::{Deserialize, Serialize};

/// Mean Euclidean norm of the points (optionally of the centred points).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TestPluginMeanNorm {
    /// Centre over points first (variant `centred`).
    center: bool,
}

#[typetag::serde(name = "test_plugin_mean_norm")]
impl Metric for TestPluginMeanNorm {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "test_plugin_mean_norm",
            summary: "mean Euclidean norm of the points (a test plugin registered from repgeom-py)",
            source: "none: a test fixture of the Python package",
            options: &[OptionDoc {
                name: "center",
                help: "centre over points first (variant centred)",
            }],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        let n = input.n();
        let mean = if self.center {
            let c = input.centred();
            (0..n)
                .map(|i| {
                    (0..c.ncols())
                        .map(|j| c[(i, j)] * c[(i, j)])
                        .sum::<f64>()
                        .sqrt()
                })
                .sum::<f64>()
                / n as f64
        } else {
            let a = input.acts();
            (0..n)
                .map(|i| {
                    (0..a.ncols())
                        .map(|j| f64::from(a[(i, j)]).powi(2))
                        .sum::<f64>()
                        .sqrt()
                })
                .sum::<f64>()
                / n as f64
        };
        let variant = if self.center { "centred" } else { "" };
        Ok(vec![MetricValue::new(
            "test_plugin_mean_norm",
            variant,
            mean,
        )])
    }
}

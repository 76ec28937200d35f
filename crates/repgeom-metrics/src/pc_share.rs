//! The `pc_readout_share` registry metric: the share of the top principal directions that lies
//! in the readout subspace.

use repgeom_linalg::{principal_directions, project};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::LayerInput;
use crate::registry::Metric;
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// PC alignment: for each of the top-`m` principal directions $u_j$ of the centred layer, the
/// share $\lVert V_k^\top u_j\rVert^2$ lying in the readout subspace (random expectation `k/d`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PcReadoutShare {
    /// Number of top principal directions (variants `pc1` … `pcm`).
    pub m: usize,
}

impl Default for PcReadoutShare {
    fn default() -> Self {
        Self { m: 5 }
    }
}

#[typetag::serde(name = "pc_readout_share")]
impl Metric for PcReadoutShare {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "pc_readout_share",
            summary: "share of each top principal direction lying in the readout subspace (random: k/d)",
            source: "PC alignment as defined in repgeom's docs/pga.md (companion to Subspace PGA)",
            options: &[OptionDoc {
                name: "m",
                help: "number of top principal directions (variants pc1..pcm)",
            }],
            needs_readout: true,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if self.m == 0 {
            return Err(Error::InvalidOption {
                name: "m".into(),
                value: "0".into(),
                reason: "at least one principal direction".into(),
            });
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let basis = input.readout_basis("pc_readout_share")?;
        let (n, d, k) = (input.n(), input.d(), basis.ncols());
        let available = (n - 1).min(d);
        if self.m > available {
            return Err(Error::InvalidOption {
                name: "m".into(),
                value: self.m.to_string(),
                reason: format!(
                    "{} points in {d} dimensions have only {available} principal directions ({})",
                    n,
                    input.what()
                ),
            });
        }
        let pd = principal_directions(input.centred(), self.m, input.par())?;
        let total: f64 = pd.variances.iter().sum();
        // Coefficients of each direction in the readout basis: V_kᵀ U (k × m).
        let coef = project(basis.transpose(), pd.directions.as_ref(), input.par());
        let expectation = k as f64 / d as f64;
        Ok((0..self.m)
            .map(|j| {
                let share: f64 = coef.col(j).iter().map(|c| c * c).sum();
                MetricValue::new("pc_readout_share", &format!("pc{}", j + 1), share.min(1.0))
                    .with_extra("random_expectation", expectation)
                    .with_extra("explained_variance", pd.variances[j] / total)
            })
            .collect())
    }
}

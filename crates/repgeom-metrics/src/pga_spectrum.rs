//! `pga_spectrum`: Subspace PGA against the spectrum-matched null (`--null spectrum`).

use repgeom_linalg::ccr;
use serde::{Deserialize, Serialize};

use crate::pga::pga;
use crate::registry::{LayerInput, MetricInfo, MetricValue, OptionDoc};
use crate::{Error, Result};

/// Subspace PGA whose null subspaces capture the same share of the layer's variance (after
/// CCR) as the readout subspace: the Haar draws of the layer input, each tilted towards the
/// layer's variance profile until it matches within `spectrum_tol` (see
/// `repgeom_null::spectrum_matched`). A z that is due to the readout sitting in high-variance
/// directions vanishes; a z due to the readout's alignment with the distance structure stays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgaSpectrum {
    /// CCR levels (principal directions removed first); the null is matched per level.
    pub ccr: Vec<usize>,
    /// Relative tolerance on each null draw's captured variance (default 0.01).
    pub spectrum_tol: f64,
}

impl Default for PgaSpectrum {
    fn default() -> Self {
        Self {
            ccr: vec![1],
            spectrum_tol: 0.01,
        }
    }
}

// Not registered yet: on tiny random layers (the property tests' N < 30, d < 12) the matched
// exponent can be unreachable or sensitive at the 1e-4 level, below what the conformance
// suite demands of a registered metric. It is exposed as a plain API until that is settled.
impl PgaSpectrum {
    /// Static description, as [`Metric::info`](crate::Metric::info).
    pub fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "pga_spectrum",
            summary: "Subspace PGA against spectrum-matched random subspaces (rows pga_z and rho_readout, variant ccrC_spectrum)",
            source: "Subspace PGA (repgeom's docs/pga.md) with repgeom's spectrum-matched null (docs/pga.md)",
            options: &[
                OptionDoc {
                    name: "ccr",
                    help: "list of CCR levels (one variant ccrC_spectrum per level)",
                },
                OptionDoc {
                    name: "spectrum_tol",
                    help: "relative tolerance on each null draw's captured variance, in (0, 1)",
                },
            ],
            needs_readout: true,
            needs_null: true,
            rotation_invariant: true,
        }
    }

    /// Validates the options.
    pub fn check(&self) -> Result<()> {
        if self.ccr.is_empty() {
            return Err(Error::InvalidOption {
                name: "ccr".into(),
                value: "[]".into(),
                reason: "give at least one CCR level".into(),
            });
        }
        if !(self.spectrum_tol > 0.0 && self.spectrum_tol < 1.0) {
            return Err(Error::InvalidOption {
                name: "spectrum_tol".into(),
                value: self.spectrum_tol.to_string(),
                reason: "the relative tolerance must lie in (0, 1)".into(),
            });
        }
        Ok(())
    }

    /// Computes the rows on one layer (needs the readout basis and the Haar null bases).
    pub fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let basis = input.readout_basis("pga_spectrum")?;
        let haar = input.null("pga_spectrum")?;
        let mut out = Vec::with_capacity(2 * self.ccr.len());
        for &c in &self.ccr {
            crate::pga::validate_inputs(input.acts(), basis, input.what())?;
            let corrected = ccr(input.acts(), c, input.par())?;
            let matched =
                repgeom_null::spectrum_matched(haar, corrected.as_ref(), basis, self.spectrum_tol)?;
            let r = pga(
                input.acts(),
                basis,
                &matched.bases,
                c,
                input.what(),
                input.par(),
                &|| {},
            )?;
            let n = matched.captured.len() as f64;
            let cap_mean = matched.captured.iter().sum::<f64>() / n;
            let cap_sd = (matched
                .captured
                .iter()
                .map(|v| (v - cap_mean).powi(2))
                .sum::<f64>()
                / (n - 1.0))
                .sqrt();
            let beta_mean = matched.beta.iter().sum::<f64>() / n;
            let variant = format!("ccr{c}_spectrum");
            let summary = repgeom_null::NullSummary {
                null_mean: r.null_mean,
                null_std: r.null_std,
                z: r.z,
                p_value: r.p_value,
            };
            let extras = |v: MetricValue| {
                v.with_extra("captured_variance_readout", matched.target)
                    .with_extra("captured_variance_null_mean", cap_mean)
                    .with_extra("captured_variance_null_sd", cap_sd)
                    .with_extra("spectrum_beta_mean", beta_mean)
                    .with_extra("spectrum_tol", self.spectrum_tol)
            };
            out.push(extras(
                MetricValue::new("pga_z", &variant, r.z)
                    .with_null(&summary)
                    .with_extra("rho_readout", r.rho_readout)
                    .with_extra("k", r.k as f64)
                    .with_extra("n_null", r.null_rhos.len() as f64),
            ));
            out.push(extras(
                MetricValue::new("rho_readout", &variant, r.rho_readout)
                    .with_null(&summary)
                    .with_extra("z", r.z),
            ));
        }
        Ok(out)
    }
}

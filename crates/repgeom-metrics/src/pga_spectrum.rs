//! `pga_spectrum`: Subspace PGA against the spectrum-matched null (`--null spectrum`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::LayerInput;
use crate::pga::{Distance, EngineOptions, NullKind};
use crate::pga_metric::Pga;
use crate::registry::Metric;
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// Subspace PGA whose null subspaces capture the same share of the layer's variance (after
/// CCR) as the readout subspace: the Haar draws of the layer input, each tilted towards the
/// layer's variance profile until it matches within `spectrum_tol` (see
/// `repgeom_null::spectrum_matched`). A z that is due to the readout sitting in high-variance
/// directions vanishes; a z due to the readout's alignment with the distance structure stays.
///
/// The same computation as the `pga` metric with `null = "spectrum"` (one engine path); as a
/// registered metric of its own it turns a layer on which the null cannot be matched (or
/// whose matched draws have no spread, as on tiny layers with `k` close to `d`) into
/// [`Error::Degenerate`], the registry's "undefined on this input" error, naming the reason.
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
            spectrum_tol: repgeom_null::DEFAULT_SPECTRUM_TOL,
        }
    }
}

impl PgaSpectrum {
    fn as_pga(&self) -> Pga {
        Pga {
            ccr: self.ccr.clone(),
            engine: EngineOptions {
                distance: Distance::Cosine,
                null: NullKind::Spectrum,
                spectrum_tol: self.spectrum_tol,
                ..EngineOptions::default()
            },
            ..Pga::default()
        }
    }
}

#[typetag::serde(name = "pga_spectrum")]
impl Metric for PgaSpectrum {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "pga_spectrum",
            summary: "Subspace PGA against spectrum-matched random subspaces (rows pga_z, rho_readout, pga_p_two_sided, pga_p_lower, pga_z_se, pga_captured_variance; variant ccrC_spectrum)",
            source: "Subspace PGA as defined in repgeom's docs/pga.md, against repgeom's spectrum-matched null (same page)",
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

    fn check(&self) -> Result<()> {
        self.as_pga().check()
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        // Readout or null missing: the same message as every metric that needs them.
        input.readout_basis("pga_spectrum")?;
        input.null("pga_spectrum")?;
        self.as_pga().compute(input).map_err(|e| match e {
            Error::NullOnLayer { what, error } => Error::Degenerate {
                what: format!("pga_spectrum on {what}"),
                reason: error.to_string(),
            },
            Error::Null(source @ repgeom_null::Error::DegenerateNull { .. }) => Error::Degenerate {
                what: format!("pga_spectrum on {}", input.what()),
                reason: format!("the matched null draws have no spread: {source}"),
            },
            other => other,
        })
    }
}

//! repgeom-probe: per-layer linear probes, the study's downstream check beside PGA.
//!
//! For each layer, a multinomial logistic regression is trained on that layer's features
//! (one vector per labelled example, e.g. AG News headlines) and scored on held-out
//! examples: test accuracy, macro-F1, the L2 strength chosen by stratified cross-validation,
//! the majority-class baseline, a 95% Wilson interval for each accuracy, and a random-label
//! control task (selectivity = accuracy − control accuracy). The main types are
//! [`ProbeParams`] (checked into [`ValidProbeParams`]), [`ProbePlan`] (split and folds fixed
//! once for all layers), [`ProbeReport`] (with [`ProbeReport::tidy`] rows joinable with PGA
//! by layer) and [`FittedProbe`] (one fitted probe).
//!
//! Key design decision: the probe is a linfa model, but not linfa's solver by default.
//! [`ProbeParams`] implements `linfa::ParamGuard`, [`ValidProbeParams`] implements
//! `linfa::traits::Fit` on a `linfa::Dataset` (the protocol's own code path) and
//! [`FittedProbe`] implements `Predict`, so the probe composes with linfa's cross-validation
//! and metrics. Every fit runs on an in-house L-BFGS over a fused loss/gradient kernel (f32
//! GEMMs in fixed row blocks, f64 reduction in block order), because `linfa-logistic`
//! computes cost and gradient in separate passes with f64 GEMMs and is far too slow for the
//! target (33 layers of 7,600 × 4,096 with a cross-validated grid). linfa-logistic stays
//! selectable ([`Solver::Linfa`]: the same objective, `alpha = n λ`, and the same accuracy on
//! the fixtures, much slower) and is the tests' reference. Fixed blocks also make results
//! bit-identical at any thread count, and folding each fold's standardisation into the
//! weights lets cross-validation standardise on its own training rows without copying the
//! matrix.
//!
//! It is not a feature extractor (pooling happens upstream) and does no file I/O.

#![deny(missing_docs)]
// Fits take slices of row ranges (a fold's training rows are two ranges); a one-range
// slice is the intended "all rows" case, not a mistaken `Vec` of the range's items.
#![allow(clippy::single_range_in_vec_init)]

mod error;
mod model;
mod params;
mod probe;
mod solver;
mod split;

pub use error::{Error, Result};
pub use model::FittedProbe;
pub use params::{DEFAULT_GRID, ProbeParams, Solver, ValidProbeParams};
pub use probe::{
    ControlProbe, Features, LayerProbe, METRICS, ProbePlan, ProbeReport, TidyRow, accuracy,
    macro_f1, wilson_interval,
};
pub use solver::StopReason;
pub use split::{Labels, Role, Split};

#[cfg(test)]
mod tests;

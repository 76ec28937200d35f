//! `repgeom-metrics` is repgeom's metric registry: every per-layer and cross-model measurement
//! of representation geometry behind two plugin traits. Per layer: Subspace PGA (`pga`, and
//! `pga_spectrum` against the spectrum-matched null), RankMe, α-ReQ, isotropy, condition number,
//! TwoNN intrinsic dimension and the readout share of the principal directions; across models:
//! distance agreement, linear CKA, mutual k-NN, CKNNA, SVCCA, PWCCA, orthogonal Procrustes and
//! RSA (`repgeom metrics --list` prints each with its options and source).
//!
//! The main types are the [`Metric`] trait (one layer in, tidy [`MetricValue`]s out) and the
//! [`PairMetric`] trait (two representations of the same points), with [`LayerInput`] carrying a
//! layer plus the per-model precomputation (readout basis, null bases) and per-layer caches
//! (centring, singular values) that metrics share, and [`AnalysisParams`] writing a whole
//! analysis down.
//!
//! Key design decision: metrics are plain option structs registered with typetag under stable
//! names, so a configuration is data (JSON or TOML, `{"metric": "rankme", "center": true}`) and a
//! metric defined in another crate joins the registry, the CLI and the conformance suite by
//! being linked in, without touching this crate. The registry is enumerated through serde
//! itself (typetag reports its registered names for an unknown tag), so there is one registry,
//! not two that could drift apart; a test pins the exact set of names, because an empty
//! registry on an unsupported platform would otherwise fail silently. Every definition follows
//! one named paper, pinned with its conventions in `docs/metrics.md`.
//!
//! A model's analysis is prepared in one place, module [`analysis`]: [`analysis::ModelContext`]
//! computes a model's readout subspace and null bases once and hands out each layer's
//! [`LayerInput`], and [`analysis::ModelPair`] does the same for the two models of a comparison
//! (model B's null bases from `seed + 1`; duplicated points judged on every layer of both);
//! [`Pga::run_model`] is the whole Subspace PGA run over a model's layers, with
//! [`Pga`] the one struct of PGA options that the command line, the study manifest and Python
//! all fill. To run PGA on one in-memory matrix in one call, use [`PgaParams`] →
//! [`PgaParams::check`] → [`ValidPgaParams::run`] (module [`params`], a layer through the same
//! run); every other metric has the same shape: its options' `Default` → [`Metric::check`] →
//! [`Metric::run`] on a faer or ndarray view. Linear CKA over more tokens than fit in memory:
//! [`CkaAccumulator`] (module `streaming`), exact for both estimators in one pass over batches.
//!
//! This crate does no file I/O and never prints: it sees matrices and returns numbers.
#![deny(missing_docs)]

mod alignment;
pub mod analysis;
#[cfg(test)]
mod beyond_tests;
pub mod calibrate;
pub mod conformance;
mod covariance;
mod cross;
mod error;
mod input;
mod knn;
pub mod params;
mod pc_share;
mod permute;
pub mod pga;
mod pga_metric;
mod pga_spectrum;
mod registry;
mod spectral;
mod state;
mod streaming;
#[cfg(test)]
mod tests;
mod twonn;
mod value;

pub use alignment::{Procrustes, Pwcca, RdmKind, Rsa, Svcca};
pub use covariance::{
    CONVERGENCE_TOL, ConvergenceReport, CovarianceAccumulator, CovarianceSpectrum,
    FIRST_CHECKPOINT, SpectralConvergence, convergence_reports,
};
pub use cross::{CkaLinear, DistanceSpearman, tied_fraction};
pub use error::{Error, Result};
pub use input::{
    Acts, DEFAULT_K, LayerInput, MIN_POINTS, MemoKey, PairInput, Readout, Spectrum, check_k_frac,
    check_readout_for, k_fits, k_from_fraction, layer_pairs, numerical_rank,
};
pub use knn::{Cknna, MutualKnn};
pub use params::{PgaParams, ValidPgaParams};
pub use pc_share::PcReadoutShare;
pub use pga::parse_size;
pub use pga_metric::Pga;
pub use pga_spectrum::PgaSpectrum;
pub use registry::{
    AnalysisParams, Metric, PairMetric, PairSide, all_metrics, all_pair_metrics, covariance_form,
    covariance_forms, metric, metric_from_config, metric_names, options_of, pair_metric,
    pair_metric_from_config, pair_metric_names,
};
pub use spectral::{
    AlphaFit, AlphaReq, ConditionNumber, FitWeighting, Isotropy, PowerLawFit, RankMe,
    RankMeConvention, SpectrumKind, isoscore, power_law_fit, power_law_fit_weighted, rankme,
};
pub use state::AccumulatorState;
pub use streaming::{CkaAccumulator, StreamingCka};
pub use twonn::IntrinsicDimTwoNn;
pub use value::{MetricInfo, MetricValue, OptionDoc};

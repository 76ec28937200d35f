//! `repgeom-synth` generates seeded synthetic activations with planted PGA regimes, for the
//! demo, the tests and the default study of `cargo xtask paper`. Everything it returns is
//! labelled synthetic (`synthetic: true`, labels `synthetic-d{d}`) and is never presented as
//! real data.
//!
//! The main type is [`SyntheticSpace`]: one model's readout `W_U` (built as
//! `A diag(s) Qᵀ` so that its top-`k` right singular subspace is known exactly), its reserved
//! dark directions and a labelled latent point cloud; [`SyntheticSpace::layer`] draws an
//! `N × d` layer in a [`Regime`] (`Direct`, `Detour`, `Isotropic`, `Rotation`,
//! `VarianceOnly`). [`generate_zoo`] and
//! [`generate_study`] build several widths over training checkpoints from a [`ZooParams`].
//!
//! Key design decision: every random choice comes from an explicitly seeded ChaCha8 stream, and
//! the zoo derives one stream per (model, layer) for the layer's geometry and one per
//! (model, layer, step) for its content. The same layer therefore keeps its embedding across
//! checkpoints, adding a width or a checkpoint changes nothing else, and the demo zoo is
//! bit-identical to the study's last checkpoint. Generation is plain sequential `f64`
//! arithmetic (no threaded GEMM), so results are identical at any thread count.
//!
//! This crate is not a model of real transformers and computes no metrics: it plants
//! geometry whose PGA signs are known (see `docs/synthetic.md`), nothing more.
#![deny(missing_docs)]

mod error;
mod params;
mod space;
mod zoo;

#[cfg(test)]
mod tests;

pub use error::{Error, Result};
pub use params::{DetourKind, ModelParams, ValidModelParams, ValidZooParams, ZooParams};
pub use space::{Regime, SyntheticSpace};
pub use zoo::{
    SyntheticCheckpoint, SyntheticModel, SyntheticRun, SyntheticStudy, generate_study,
    generate_zoo, planned_regime, progress, validation_loss,
};

//! Integration tests of `repgeom-synth`: the planted PGA signs, checked with a minimal
//! Subspace PGA assembled from `repgeom-linalg` primitives (the full engine lives in
//! `repgeom-metrics`; this only guards the tuning of the generator).

mod rotation;
mod signs;

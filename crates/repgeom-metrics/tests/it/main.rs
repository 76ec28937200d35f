//! Integration tests of `repgeom-metrics`: the conformance suite every registered metric must
//! pass, the registry's exact contents, and the spectral variants against NumPy.

mod conformance;
mod golden;
mod layers;
mod proptests;
mod registry;

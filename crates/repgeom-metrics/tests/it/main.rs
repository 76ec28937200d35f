//! Integration tests of `repgeom-metrics`: the conformance suite every registered metric must
//! pass, and the registry's exact contents.

mod conformance;
mod proptests;
mod registry;

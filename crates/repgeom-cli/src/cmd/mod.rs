//! One module per subcommand, none importing another: what they share lives beside `cmd/`
//! (`context`, `args`, `load`, `output`, `hub`, `accumulators`).

pub(crate) mod checkpoints;
pub(crate) mod compare;
pub(crate) mod demo;
pub(crate) mod extract;
pub(crate) mod merge;
pub(crate) mod metrics;
pub(crate) mod pga;
pub(crate) mod probe;
pub(crate) mod report;
pub(crate) mod selftest;
pub(crate) mod sweep;

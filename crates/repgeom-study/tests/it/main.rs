//! Integration tests of repgeom-study: sweep, resume, shard, merge.

mod detour;
mod selftest;
mod sweep;

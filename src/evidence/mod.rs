//! Layer 2: the evidence formats and their verified readers.
//!
//! Shards and run records (what `rank` writes), `join` (verification and
//! matching by operation identity), replay traces, `inspect`, NCCL tuning
//! records and imported communication traces. One decoding entry point per
//! format, each under the limits of `core::limits` (docs/ARCHITECTURE.md §6, §11).
pub mod commtrace;
pub mod inspect;
pub mod join;
pub mod nccl_tests;
pub mod run;
pub mod schedule;
pub mod shard;
pub mod stalls;
pub mod synth_shards;
pub mod trace;
pub mod tuning;

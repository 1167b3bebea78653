//! CommCanary: rank NCCL/MPI collective configurations for real workloads,
//! with a chain of evidence. See `README.md` for use and
//! `docs/ARCHITECTURE.md` for the design.
//!
//! One folder per stage, in dependency order; a module imports only from its
//! own folder and the ones before it (checked by `tests/layering.rs`):
//!
//! Layers, in dependency order: core → evidence → backend → rank → analysis → campaign → report → canary → validate → cli
//!
//! 1. [`core`]: units, `key=value` parsing, clock model, workload vocabulary,
//!    identity, atomic files, descriptive statistics, limits, ranges, refusal codes.
//! 2. [`evidence`]: shard and run-record formats, `join`, replay traces,
//!    `inspect`, tuning records, imported communication traces.
//! 3. [`backend`]: the `Backend` trait, `cpu` (MPI) and `cuda` (NCCL, cuBLAS, CUPTI).
//! 4. [`rank`]: the per-rank program, its phases, `bench-overhead`, `doctor`.
//! 5. [`analysis`]: policy, inference, calibration, ranking,
//!    summary, overlap, queue, capacity, the report model (no I/O).
//! 6. [`campaign`]: spec, manifest, exec, attempts, select, verify, archive.
//! 7. [`report`]: the campaign report and its plots, exports.
//! 8. [`canary`]: compile a workload trace into a small replay, verify it
//!    against its source on real replays, baselines, reduction, redaction.
//! 9. `validate`: node acceptance against a recorded reference (when present).
//! 10. [`cli`]: clap definitions and the command layer the binary calls.
#![warn(missing_docs)]

pub mod analysis;
pub mod backend;
pub mod campaign;
pub mod canary;
pub mod cli;
pub mod core;
pub mod evidence;
pub mod rank;
pub mod report;
pub mod validate;

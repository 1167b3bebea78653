//! CommCanary: rank NCCL/MPI collective configurations for real workloads,
//! with a chain of evidence. See `README.md` and `SPEC.md` for the design.
//!
//! Stages, one module each, named after what they produce:
//! [`workload`] (what runs), [`phases`] (events), [`clock`] (calibration),
//! [`shard`] (per-rank evidence), [`run`] (the run record), [`join`]
//! (the joined trace), [`trace`] (replay sources), [`stats`] (I/O-free
//! statistics), [`identity`] (environment identity), [`backend`] (cpu/cuda),
//! [`commtrace`] (traces imported from PyTorch, exported to PARAM and Chakra).
#![warn(missing_docs)]

pub mod analysis;
pub mod backend;
pub mod bench;
pub mod bootstrap;
pub mod calibration;
pub mod capacity;
pub mod campaign;
pub mod cli;
pub mod cli_kv;
pub mod clock;
pub mod commtrace;
pub mod cupti;
pub mod doctor;
pub mod export;
pub mod fsutil;
pub mod identity;
pub mod inference;
pub mod inspect;
pub mod join;
pub mod limits;
pub mod nccl;
pub mod overlap;
pub mod plots;
pub mod queue;
pub mod phases;
pub mod rank;
pub mod ranges;
pub mod ranking;
pub mod refusal;
pub mod run;
pub mod shard;
pub mod schema;
pub mod stats;
pub mod summary;
pub mod trace;
pub mod tuning;
pub mod units;
pub mod workload;

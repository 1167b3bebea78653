//! CommCanary: rank NCCL/MPI collective configurations for real workloads,
//! with a chain of evidence. See `README.md` for use and
//! `docs/ARCHITECTURE.md` for the design.
//!
//! One folder per stage; a module imports only from its own folder and the
//! ones before it (checked by `tests/layering.rs`). What each folder holds,
//! consumes and produces: docs/ARCHITECTURE.md §2.
//!
//! Layers, in dependency order: core → evidence → backend → rank → analysis → campaign → report →
//! canary → validate → cli
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

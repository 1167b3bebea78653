//! The run record `run.json`, written by rank 0 after every rank's shard.
//!
//! Consumes the shard digests gathered over MPI; produces the record that
//! `join` checks shards against (a shard whose bytes differ from the digest
//! recorded here is stale or replaced).
use crate::shard::BackendKind;
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};

/// Current run record format version. 2 added the workload's model shape and
/// element types (absent fields read as the synthetic f32 workload of version 1,
/// which is still read).
pub const RUN_FORMAT_VERSION: u32 = 2;
/// File name of the run record inside a run directory.
pub const RUN_FILE: &str = "run.json";

/// One rank's shard as recorded by rank 0.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardRef {
    /// World rank.
    pub rank: u32,
    /// File name inside the run directory.
    pub file: String,
    /// SHA-256 of the whole file.
    pub sha256: String,
    /// File size.
    pub size_bytes: u64,
    /// Host the rank ran on.
    pub host: String,
}

/// The run record.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// Format version.
    pub format_version: u32,
    /// Run id.
    pub run_id: String,
    /// World size.
    pub world_size: u32,
    /// Backend used.
    pub backend: BackendKind,
    /// Workload as run.
    pub workload: WorkloadSpec,
    /// Command line of rank 0.
    pub argv: Vec<String>,
    /// Identity digest of rank 0's environment.
    pub rank0_identity_sha256: String,
    /// Every rank's shard.
    pub shards: Vec<ShardRef>,
    /// Wall-clock start (Unix ms).
    pub started_unix_ms: u64,
    /// Wall-clock end (Unix ms).
    pub finished_unix_ms: u64,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh run id: UTC date-time plus 8 random hex digits.
pub fn new_run_id() -> String {
    let secs = (unix_ms() / 1000) as i64;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: gmtime_r fills tm from t; both pointers are valid.
    unsafe { libc::gmtime_r(&t, &mut tm) };
    let r: u32 = rand::random();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z-{r:08x}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

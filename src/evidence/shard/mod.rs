//! Per-rank shards: the raw evidence of one rank in one run.
//!
//! Consumes the events a rank recorded; produces one file
//! `rank-NNNNN.shard` laid out as
//!
//! ```text
//! magic "CCSHARD\x01" | u32 LE format_version | u64 LE header_len | header (JSON)
//! | u64 LE body_len | body (bincode 2, standard config) | "CCSHA256" | 32-byte SHA-256
//! ```
//!
//! The SHA-256 covers every byte before the trailer. Refuses, with the file
//! name and the fault: a wrong magic, an unknown format version, a truncated
//! file, trailing bytes, a hash mismatch, an undecodable body. Shards are
//! written once ([`crate::core::fsutil::write_new_atomic`]) and only read after.
mod events;
mod fast;
mod header;
mod read;
mod write;

pub use crate::core::collective::TraceDtype;
pub use crate::core::workload::Dtype;
pub use events::{
    CollectiveEvent, CollectiveKind, ComputeEvent, ComputeKind, DeviceWait, FillRecord, KernelEvent, KernelKind,
    ReplayTiming, ShardBody, TokenEvent,
};
pub(crate) use fast::BLANK as BLANK_EVENT;
pub use header::{
    BackendKind, CheckRecord, ClockRecord, ColdStart, DeviceIdentity, GapTimeline, GraphRun, KernelAnchor,
    P2pPassRecord, PhaseRun, ProcessGroup, ShardHeader, SyntheticMark, TraceKindCount, TraceOrigin, TraceP2pCount,
    Unmeasured,
};
pub use read::decode_shard_body;
pub(crate) use read::{collectives_region, decode_collective_event, peek_header};
use serde::{Deserialize, Serialize};
pub use write::WrittenShard;

/// Current on-disk shard format version; versions 1 to 9 are still read, without the
/// records they lack (docs/ARCHITECTURE.md, "Shard format versions").
pub const SHARD_FORMAT_VERSION: u32 = 10;
const MAGIC: &[u8; 8] = b"CCSHARD\x01";
const TRAILER: &[u8; 8] = b"CCSHA256";

/// File name of a rank's shard inside a run directory.
pub fn shard_file_name(rank: u32) -> String {
    format!("rank-{rank:05}.shard")
}

/// A whole shard.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Shard {
    /// Header.
    pub header: ShardHeader,
    /// Body.
    pub body: ShardBody,
}

fn bincode_cfg() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A one-rank shard header of `backend` ("cpu" or "cuda") with these phase
/// records (JSON), for tests of what reads shards.
#[cfg(test)]
pub(crate) fn test_header(backend: &str, phases: serde_json::Value) -> ShardHeader {
    serde_json::from_value(serde_json::json!({
        "format_version": SHARD_FORMAT_VERSION, "run_id": "r", "rank": 0, "world_size": 1, "host": "h",
        "local_rank": 0, "local_size": 1, "backend": backend,
        "device": {"backend": backend, "name": "x", "facts": []},
        "identity": {"host": "h", "kernel": null, "cpu_model": null, "mpi_library": null, "mpi_standard": "3.1",
            "world_rank": 0, "world_size": 1, "local_rank": 0, "local_size": 1, "cpu_affinity": null,
            "numa_mems": null, "env": [],
            "tool": {"version": "0", "git_commit": "c", "git_tree": "clean", "binary_sha256": null}},
        "identity_sha256": "d", "groups": [{"id": 0, "members": [0]}],
        "workload": {"phases": ["blocking"], "tokens": 1, "warmup_tokens": 0, "layers": 1, "sizes_bytes": [4],
            "gemm": {"m": 1, "n": 1, "k": 1}, "iters": 1, "warmup_iters": 0, "check": 0,
            "fill_residual": "carry", "membound_bytes": 4},
        "clock": null, "clock_injections": [], "clock_anchor_true_ns": 0, "delay_injection": null,
        "cold_start": {"mpi_init_ns": null, "backend_init_ns": 1},
        "unmeasured": [], "phases": phases, "started_unix_ms": 0
    }))
    .expect("a valid test header")
}

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

/// Current on-disk shard format version. 2 added kernel records to the body,
/// 3 the compute stream's measured waits, 4 the workload's model shape,
/// all-reduce and GEMM element types (header) and bf16 collectives (body),
/// 5 phases that walk an imported trace (their origin, the compute they fill),
/// 6 every collective kind of an imported trace (the kinds appended to
/// [`CollectiveKind`], a collective's root and peer in the body, named
/// process groups and per-kind counts in the header), 7 two header records
/// (the body is format 6's): hierarchical clock calibration in the clock
/// record (the calibration's topology, the rank's path to rank 0, its leader
/// and the two legs composed, the wall time of each window) and the
/// [`SyntheticMark`] of generated shards (never measurements), 8 every
/// element type of an imported trace in a collective's `dtype` (f64, i32,
/// i64, …: [`crate::core::collective::TraceDtype`], whose first two variants
/// are f32 and bf16 as before, so older bodies decode unchanged), 9 two
/// header records (the body is format 8's): an MPI capture's point-to-point
/// program in a trace phase (per pass, [`P2pPassRecord`] in the phase record;
/// per-pass counts, [`TraceP2pCount`], in its imported trace origin), 10
/// the same layout as 9: the isolated sweep of another kind than the
/// all-reduce runs back to back on GPUs, so its records carry device
/// intervals and one check per size (before 10 they had none, and `--check
/// N` checked N iterations per size); versions 1 to 9 are still read (without those records; their collectives
/// are all-reduces, f32 before 4, f32 or bf16 before 8; their clocks flat,
/// the wall time unmeasured; none is synthetic; no point-to-point ran).
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

//! What `replay-trace` writes: each rank's `replay-trace.rank-N.json`
//! ([`ReplayFile`]: a header binding the records to the trace, rank and
//! settings) and rank 0's index `replay-trace.json` ([`ReplayIndex`]).
//! Formats only: the command that runs a replay under MPI is `rank::replay`.
use super::exec;
use serde::{Deserialize, Serialize};

/// Format version of `replay-trace.rank-N.json` (1: a bare array of records;
/// 2: a header that binds the records to the trace, rank and settings).
pub(crate) const REPLAY_FORMAT_VERSION: u32 = 2;
/// Rank 0's index of a replay's files with their digests.
pub(crate) const REPLAY_INDEX_FILE: &str = "replay-trace.json";

/// What a replay's records are of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ReplayHeader {
    /// The tool that wrote it (version, commit, dirty state).
    pub tool: String,
    /// The trace as named on the command line.
    pub trace_path: String,
    /// SHA-256 of the trace file's bytes.
    pub trace_sha256: String,
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// Host name.
    pub host: String,
    /// `cpu` (MPI) or `cuda` (NCCL).
    pub backend: String,
    /// How the replay was paced and checked (`--pace`, `--op`, `--check`, ...).
    pub settings: Vec<String>,
    /// Wall-clock start and end of this rank's replay (Unix ms).
    pub started_unix_ms: u64,
    /// See `started_unix_ms`.
    pub finished_unix_ms: u64,
}

/// `replay-trace.rank-N.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ReplayFile {
    /// [`REPLAY_FORMAT_VERSION`].
    pub format_version: u32,
    /// What the records are of.
    pub header: ReplayHeader,
    /// One record per collective of the timed pass.
    pub records: Vec<exec::ExecRecord>,
    #[doc = concat!(
        "The timed pass's point-to-point operations (an MPI capture's `mpi.p2p`, on the cpu backend); ",
        "absent where none ran."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<exec::P2pReport>,
    /// The timed pass's nonblocking collectives (an MPI capture's, on the cpu backend); absent where none ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonblocking: Option<exec::NonblockingReport>,
}

/// One rank's files in [`ReplayIndex`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ReplayIndexRank {
    /// Rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// File name and SHA-256 of every file the rank wrote.
    pub files: Vec<(String, String)>,
}

/// `replay-trace.json`: rank 0's index of every rank's files and digests, so
/// a replay directory is verified like a run (`commcanary inspect` reads it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ReplayIndex {
    /// Format version (1).
    pub format_version: u32,
    /// SHA-256 of the trace file replayed.
    pub trace_sha256: String,
    /// Ranks in the job.
    pub world_size: u32,
    /// Every rank.
    pub ranks: Vec<ReplayIndexRank>,
}

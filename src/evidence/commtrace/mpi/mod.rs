//! `import mpi`: an MPI application's calls as `commcanary capture` recorded them.
//!
//! Consumes a capture folder, one `rank-NNNNN.mpicap` per rank (layout: `capture/src/format.rs`);
//! produces a communication trace of every collective with its `mpi` section ([`MpiSummary`]).
//! One module per stage: `rank_capture` decodes a rank's file, `folder` checks that the ranks make
//! one run, `collective` and `point_to_point` map each call, `trace` assembles the trace (for the
//! phases without what they cannot run), `cut` cuts on every member alike what not every member
//! recorded or what members disagree on; `frame` frames records into a file for tests and fuzzing.
//! Each stage's doc says what it refuses. The types the stages share with the trace format are
//! here. What is read: docs/METHODS.md, "MPI capture import".
mod collective;
mod cut;
#[cfg(test)]
mod fixtures;
mod folder;
mod frame;
mod point_to_point;
mod rank_capture;
mod trace;

use crate::core::clock::ClockModel;
pub use folder::{read_dir, MpiCapture};
pub use frame::{capture_from_fuzz_input, frame_capture, frame_capture_version};
pub use rank_capture::{parse_rank, read_header, read_rank, CallRecord, CaptureHeader, DoneRecord, RankCapture};
pub use rank_capture::{CAPTURE_FORMAT_VERSION, MIN_CAPTURE_FORMAT_VERSION};
use std::collections::BTreeMap;
pub use trace::{to_trace, to_trace_with};

/// What `import mpi` adds to a trace (format version 2): every call as
/// captured, and what the trace leaves out.
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MpiSummary {
    /// Run id the ranks share.
    pub run_id: String,
    /// Per rank (in rank order): every call the application made, by MPI name without `MPI_`.
    pub calls: Vec<BTreeMap<String, u64>>,
    /// Per rank: calls the trace does not hold, by name.
    pub left_out: Vec<BTreeMap<String, u64>>,
    /// Why those kinds are left out.
    pub left_out_reasons: BTreeMap<String, String>,
    /// Why the capture is incomplete (per rank that is), where imported with `--allow-incomplete`.
    pub incomplete: Vec<String>,
    /// Per rank, its clock against rank 0's, fitted from the ping-pong
    /// windows the capture recorded at `MPI_Init` and `MPI_Finalize` (rank 0:
    /// the reference); absent where a window is missing (an incomplete rank).
    pub clock_models: Vec<Option<ClockModel>>,
    /// Why the times are not on rank 0's clock, where they are not.
    pub clock_unaligned: Option<String>,
    /// Per rank: the index among its captured calls of each record of
    /// `ranks[].collectives`, in order (orders them against `p2p`).
    pub collective_calls: Vec<Vec<u64>>,
    /// Per rank (format version 3): for each record of
    /// `ranks[].collectives`, the index among its captured calls of the wait
    /// or test that completed it where it was posted nonblocking
    /// (`MPI_Iallreduce`, ...); absent for a blocking one, and for a
    /// nonblocking one never seen complete (an incomplete capture). Empty in version 2.
    #[serde(default)]
    pub collective_completions: Vec<Vec<Option<u64>>>,
    /// Per rank (format version 3): for each record, whether it was posted nonblocking. Empty in version 2.
    #[serde(default)]
    pub collective_nonblocking: Vec<Vec<bool>>,
    /// Per rank: every point-to-point operation, in call order (a
    /// `Sendrecv` is a send and a receive of one call). `replay-trace` and
    /// the trace phases (cpu backend) run them between the collectives in
    /// call order.
    pub p2p: Vec<Vec<MpiP2p>>,
}

impl MpiSummary {
    /// The summary of run `r` with per rank these point-to-point operations, no calls and no
    /// collectives, for tests.
    #[cfg(test)]
    pub(crate) fn test(p2p: Vec<Vec<MpiP2p>>) -> Self {
        let n = p2p.len();
        MpiSummary {
            run_id: "r".into(),
            calls: vec![Default::default(); n],
            left_out: vec![Default::default(); n],
            clock_models: vec![None; n],
            collective_calls: vec![vec![]; n],
            collective_completions: vec![vec![]; n],
            collective_nonblocking: vec![vec![]; n],
            p2p,
            ..Default::default()
        }
    }
}

/// A test operation: (call, name, direction, peer, tag, elems, request, completed_by_call).
#[cfg(test)]
pub(crate) type TestOp = (u64, &'static str, &'static str, i32, i32, u64, Option<u64>, Option<u64>);

impl MpiP2p {
    /// `op` on group `w`, of bytes, posted and completed at `call` ns, for tests.
    #[cfg(test)]
    pub(crate) fn test((call, name, direction, peer, tag, elems, request, completed_by_call): TestOp) -> Self {
        MpiP2p {
            call,
            name: name.into(),
            direction: direction.into(),
            group: Some("w".into()),
            peer,
            tag,
            matched: None,
            elems,
            dtype: "MPI_BYTE".into(),
            dtype_bytes: 1,
            request,
            post_ns: call,
            complete_ns: Some(call),
            completed_by_call,
        }
    }
}

/// One point-to-point operation as captured (format version 2, `mpi.p2p`).
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct MpiP2p {
    /// Index among the rank's captured calls.
    pub call: u64,
    /// The MPI name without `MPI_` (`Isend`, `Recv`, `Sendrecv`, ...).
    pub name: String,
    /// `send` or `recv`.
    pub direction: String,
    /// The communicator, as a trace group name (see `groups`), where described.
    pub group: Option<String>,
    /// The peer as posted: a world rank, or MPI's negative value (-1 any source, -2 no process).
    pub peer: i32,
    /// The tag as posted (-1: any tag).
    pub tag: i32,
    /// A receive's matched source (world rank) and tag, where the status was read (C callers).
    pub matched: Option<(i32, i32)>,
    /// Elements, and the datatype's name and size in bytes.
    pub elems: u64,
    /// Datatype name.
    pub dtype: String,
    /// Datatype size in bytes, as the library reported it.
    pub dtype_bytes: i32,
    /// The request of a nonblocking operation.
    pub request: Option<u64>,
    /// The call's entry, ns (on rank 0's clock where `clock.aligned_across_ranks`).
    pub post_ns: u64,
    /// When it completed: the call's return (blocking) or the completing wait or test's, where seen.
    pub complete_ns: Option<u64>,
    /// Index of the call that completed a nonblocking operation, where seen.
    pub completed_by_call: Option<u64>,
}

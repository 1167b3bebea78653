//! Communication traces imported from a workload's own profiles.
//!
//! Consumes one file per rank: PyTorch's Kineto trace ([`kineto`]) or
//! execution trace ([`et`]), gzip-compressed or not, an MPI capture
//! ([`mpi`]) or a CommCanary run ([`from_run`]). Produces a [`CommTrace`]:
//! per rank the ordered collectives with kind, group, dtype, counts, root or
//! peer, stream, times where known and the compute between them; what a
//! source cannot know is absent and listed in [`CommTrace::unknown`]. Refuses,
//! naming the file and the cause, files that are not one run's ranks,
//! collectives whose members disagree, unknown names, undescribed groups and
//! what passes the explicit [`Limits`]. Export ([`export`]) writes PARAM and
//! Chakra JSON. Method: docs/METHODS.md, "Imported communication traces".
pub mod call_order;
mod check;
pub mod et;
pub mod exec;
pub mod export;
pub mod from_run;
pub(crate) mod json;
pub mod kineto;
mod load;
pub mod mpi;
pub mod p2p;
pub mod replay;
mod source;
pub(crate) mod summary;
pub mod workload_plan;

pub use crate::core::collective::{classify_name, CollectiveKind, TraceDtype, TraceReduceOp};
pub(crate) use check::global_rank;
pub use check::{number_sequences, MAX_COLLECTIVE_BYTES};
pub(crate) use load::import_files;
pub use load::{json_shape, JsonShape, SAME_RUN_SLACK_NS};
pub(crate) use replay::{ReplayFile, ReplayIndex};
use serde::{Deserialize, Serialize};
pub use source::{decompress, Limits};
pub(crate) use source::{read_source, CountedSeq};
pub(crate) use summary::render_counts;

/// On-disk version of the communication-trace format that every importer
/// but `import mpi` writes.
pub const COMM_TRACE_FORMAT_VERSION: u32 = 1;
/// The version `import mpi` writes: version 1 plus the source kind
/// `mpi-capture` and the `mpi` section ([`mpi::MpiSummary`]) (2); version 3
/// added the kinds gather, scatter, scan and exscan, the v-variants' splits,
/// a collective's recorded reduction (`op`) and `mpi.collective_completions`.
/// Readers read 1 to 3.
pub const COMM_TRACE_MPI_FORMAT_VERSION: u32 = 3;

/// Which tool wrote the source files.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// PyTorch profiler (Kineto) Chrome-trace JSON.
    Kineto,
    /// PyTorch execution trace (Chakra host ET JSON).
    ExecutionTrace,
    /// A verified CommCanary run (`import run`): its joined collectives.
    Run,
    /// `commcanary synth`: a deterministic synthetic trace for tests.
    Synthetic,
    /// A canary artifact expanded for replay (`canary verify`).
    Canary,
    /// An MPI application's calls as `commcanary capture` recorded them (`import mpi`, format version 2).
    MpiCapture,
}

/// One source file.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SourceFile {
    /// Path as given on the command line.
    pub path: String,
    /// SHA-256 of the file's bytes as read (compressed, if it was).
    pub sha256: String,
    /// World rank that recorded it.
    pub rank: u32,
}

/// Where the trace came from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceSource {
    /// Tool that wrote the files.
    pub kind: SourceKind,
    /// Format version the files declare (Kineto `schemaVersion`, ET `schema`).
    pub schema: Option<String>,
    /// NCCL version the files declare, where they do.
    pub nccl_version: Option<String>,
    /// The files, one per rank, in rank order.
    pub files: Vec<SourceFile>,
}

/// Clock contract of every `*_ns` time in the trace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceClock {
    /// Which clock the times are on.
    pub domain: ClockDomain,
    /// Whether a time on one rank can be compared with a time on another.
    pub aligned_across_ranks: bool,
    /// What the times mean, in words.
    pub note: String,
}

/// Clock domain of a trace's times.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ClockDomain {
    /// Each rank's own host clock as its profiler read it (device times
    /// converted onto it by the profiler), in ns.
    HostPerRank,
    /// The source records no times; every time field is absent.
    None,
}

/// A field the source cannot provide, and why.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct UnknownField {
    /// Field name as in [`TraceCollective`] or [`ComputeOp`].
    pub field: String,
    /// Why it is unknown.
    pub reason: String,
}

/// A process group as the trace describes it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TraceGroup {
    /// Name (PyTorch's `pg_name`).
    pub name: String,
    /// Description (PyTorch's `pg_desc`), where recorded.
    pub desc: Option<String>,
    /// Global ranks of the members, in group-rank order.
    pub members: Vec<u32>,
}

/// A device interval on the rank's clock.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceSpan {
    /// First kernel start, ns on the trace clock.
    pub start_ns: u64,
    /// Last kernel end, ns on the trace clock.
    pub end_ns: u64,
    /// Name of the (first) kernel.
    pub kernel: String,
}

/// One compute operation between collectives.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ComputeOp {
    /// Kernel name (Kineto) or operator name (ET).
    pub name: String,
    /// Device stream, where recorded.
    pub stream: Option<u64>,
    /// Device start on the trace clock, where recorded.
    pub device_start_ns: Option<u64>,
    /// Device duration, where recorded.
    pub duration_ns: Option<u64>,
}

/// One collective as one rank recorded it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceCollective {
    /// Kind.
    pub kind: CollectiveKind,
    /// The name the source recorded (`allreduce`, `_allgather_base`, ...).
    pub source_name: String,
    /// Process group name (see [`CommTrace::groups`]).
    pub group: String,
    /// Position among this rank's collectives on this group (point-to-point:
    /// among its operations with the same peer and direction on this group), from 0.
    pub seq: u64,
    /// Element type.
    pub dtype: TraceDtype,
    /// Elements in the input buffer on this rank.
    pub in_elems: u64,
    /// Elements in the output buffer on this rank.
    pub out_elems: u64,
    /// Elements of the input per member, in group-rank order: all-to-all
    /// (sent to each), reduce-scatter with per-member counts (each member's
    /// block, the same list on every member), scatter-v (on the root, each
    /// member's block); `None` where the source recorded none (an even split).
    pub in_split_elems: Option<Vec<u64>>,
    /// Elements of the output per member: all-to-all (received from each),
    /// all-gather-v (every member's block), gather-v (on the root); `None` as above.
    pub out_split_elems: Option<Vec<u64>>,
    /// Broadcast, reduce, gather and scatter: the root's global rank.
    pub root: Option<u32>,
    /// Send and receive: the peer's global rank.
    pub peer: Option<u32>,
    /// Device stream of its kernel, where recorded.
    pub stream: Option<u64>,
    /// Host time the operator started, ns on the trace clock, where recorded.
    pub host_start_ns: Option<u64>,
    /// Host duration of the operator, where recorded.
    pub host_duration_ns: Option<u64>,
    /// Device interval of its kernels, where recorded.
    pub device: Option<DeviceSpan>,
    /// Compute launched after the previous collective and before this one, in launch order.
    pub compute_before: Vec<ComputeOp>,
    /// The reduction of a reducing kind, where the source recorded it
    /// (`import mpi`, format version 3); absent: a sum (or not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<TraceReduceOp>,
}

impl TraceCollective {
    /// A record of its communication fields (`seq` 0 until [`number_sequences`]);
    /// stream, times, device and compute empty for the importer to fill from what its source has.
    pub fn new(
        kind: CollectiveKind,
        source_name: &str,
        group: &str,
        dtype: TraceDtype,
        (in_elems, out_elems): (u64, u64),
        (in_split_elems, out_split_elems): (Option<Vec<u64>>, Option<Vec<u64>>),
        (root, peer): (Option<u32>, Option<u32>),
    ) -> Self {
        TraceCollective {
            kind,
            source_name: source_name.to_string(),
            group: group.to_string(),
            seq: 0,
            dtype,
            in_elems,
            out_elems,
            in_split_elems,
            out_split_elems,
            root,
            peer,
            stream: None,
            host_start_ns: None,
            host_duration_ns: None,
            device: None,
            compute_before: Vec::new(),
            op: None,
        }
    }

    /// [`Self::new`] with `elems` in and out, no splits, root or peer, for tests.
    #[cfg(test)]
    pub(crate) fn plain(kind: CollectiveKind, source_name: &str, group: &str, dtype: TraceDtype, elems: u64) -> Self {
        Self::new(kind, source_name, group, dtype, (elems, elems), (None, None), (None, None))
    }

    /// Input bytes.
    pub fn in_bytes(&self) -> u64 {
        self.in_elems.saturating_mul(self.dtype.size_bytes())
    }
}

/// One rank's part of the trace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankTrace {
    /// World rank.
    pub rank: u32,
    /// Collectives in issue order.
    pub collectives: Vec<TraceCollective>,
    /// Compute after the last collective.
    pub trailing_compute: Vec<ComputeOp>,
}

/// An imported communication trace (`commcanary import`), one file for all ranks.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CommTrace {
    /// On-disk format version ([`COMM_TRACE_FORMAT_VERSION`]).
    pub format_version: u32,
    /// Provenance.
    pub source: TraceSource,
    /// Ranks in the recorded job.
    pub world_size: u32,
    /// Clock contract of the `*_ns` times.
    pub clock: TraceClock,
    /// Fields this source cannot provide (absent in every record), and why.
    pub unknown: Vec<UnknownField>,
    /// Every process group the sources describe (each one a collective references among them), in name order.
    pub groups: Vec<TraceGroup>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankTrace>,
    /// `import mpi` only (format version 2): every call as captured, what
    /// the trace leaves out, and whether the capture was incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<self::mpi::MpiSummary>,
}

impl CommTrace {
    /// The group of that name.
    pub fn group(&self, name: &str) -> Option<&TraceGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// A trace of these groups and ranks (one per rank of the world) from `kind`, on
    /// unaligned host clocks, for tests.
    #[cfg(test)]
    pub(crate) fn test(
        kind: SourceKind,
        groups: Vec<TraceGroup>,
        ranks: Vec<RankTrace>,
        mpi: Option<self::mpi::MpiSummary>,
    ) -> Self {
        CommTrace {
            format_version: COMM_TRACE_FORMAT_VERSION,
            source: TraceSource { kind, schema: None, nccl_version: None, files: vec![] },
            world_size: ranks.len() as u32,
            clock: TraceClock { domain: ClockDomain::HostPerRank, aligned_across_ranks: false, note: String::new() },
            unknown: vec![],
            groups,
            ranks,
            mpi,
        }
    }
}

/// What one source file contributes before the cross-rank checks.
#[derive(Clone, Debug)]
pub struct RankRecord {
    /// The file.
    pub file: SourceFile,
    /// Ranks in the job, as this file tells it.
    pub world_size: u32,
    /// Facts every file of one run must share (key, canonical value).
    pub run_facts: Vec<(String, String)>,
    /// Groups this file describes.
    pub groups: Vec<TraceGroup>,
    /// Its collectives in order (`seq` filled by [`number_sequences`]).
    pub collectives: Vec<TraceCollective>,
    /// Compute after the last collective.
    pub trailing_compute: Vec<ComputeOp>,
    /// Source schema string.
    pub schema: Option<String>,
    /// NCCL version, where declared.
    pub nccl_version: Option<String>,
    /// Wall-clock interval the file's recording covers, ns since the Unix
    /// epoch (Kineto: its first and last collective; an execution trace: its
    /// start time, to the second); `None` where the file records none.
    pub wall_span_ns: Option<(u64, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::{code_of, Code};

    #[test]
    fn unknown_names_are_refused_with_the_known_list() {
        let e = classify_name("allreduce_fancy").unwrap_err().to_string();
        assert!(e.contains("allreduce_fancy") && e.contains("_allgather_base") && e.contains("all_to_allv"), "{e}");
        assert_eq!(classify_name("wait").unwrap(), None);
        assert_eq!(classify_name("_reduce_scatter_base").unwrap(), Some(CollectiveKind::ReduceScatter));
    }

    /// `n` tiny elements, then `tail` (after the limit the decoder must not read on).
    fn doc(key: &str, elem: &str, n: usize, tail: &str) -> Vec<u8> {
        format!("{{\"{key}\":[{}{tail}", vec![elem; n].join(",")).into_bytes()
    }

    #[test]
    fn kineto_events_are_counted_while_decoded_and_refused_at_the_first_past_the_limit() {
        let limits = Limits { max_events: 100, ..Limits::default() };
        // 101 events, then garbage: refused at event 101, never reading the garbage
        let e =
            kineto::parse(&doc("traceEvents", "{}", 101, ",[[[ not json"), "k", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), Some(Code::OverLimit), "{e:#}");
        assert!(format!("{e:#}").contains("more than 100 events"), "{e:#}");
        // exactly the limit is read (and then refused for what it lacks, not for its size)
        let e = kineto::parse(&doc("traceEvents", "{}", 100, "]}"), "k", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), None, "{e:#}");
        assert!(format!("{e:#}").contains("distributedInfo"), "{e:#}");
    }

    #[test]
    fn et_nodes_are_counted_while_decoded_and_refused_at_the_first_past_the_limit() {
        let limits = Limits { max_nodes: 100, ..Limits::default() };
        let e = et::parse(&doc("nodes", r#"{"id":1,"name":"x"}"#, 101, ",[[[ not json"), "e", String::new(), &limits)
            .unwrap_err();
        assert_eq!(code_of(&e), Some(Code::OverLimit), "{e:#}");
        assert!(format!("{e:#}").contains("more than 100 nodes"), "{e:#}");
        let e = et::parse(&doc("nodes", r#"{"id":1,"name":"x"}"#, 100, "]}"), "e", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), None, "{e:#}");
    }
}

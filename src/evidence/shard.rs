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
use crate::core::clock::{ClockInjection, ClockModel, ClockPath, ClockSync, PingSample};
use crate::core::identity::EnvIdentity;
use crate::core::workload::{DelayInjection, Phase, WorkloadSpec};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

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
/// [`SyntheticMark`] of generated shards (never measurements); versions 1 to
/// 6 are still read (without those records; their collectives are
/// all-reduces, f32 before 4; their clocks flat, the wall time unmeasured;
/// none is synthetic).
pub const SHARD_FORMAT_VERSION: u32 = 7;
const MAGIC: &[u8; 8] = b"CCSHARD\x01";
const TRAILER: &[u8; 8] = b"CCSHA256";

/// File name of a rank's shard inside a run directory.
pub fn shard_file_name(rank: u32) -> String {
    format!("rank-{rank:05}.shard")
}

/// Which backend produced the events.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// MPI on host buffers, CPU matrix products, `CLOCK_MONOTONIC`.
    Cpu,
    /// NCCL on GPUs.
    Cuda,
}

/// Collective operation kind. Variants are only ever appended (the body is
/// bincode, which numbers them in order): a format-5 shard still decodes.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Sum all-reduce.
    AllReduce,
    /// All-gather (format 6; imported traces): `bytes` is one member's input.
    AllGather,
    /// Reduce-scatter (format 6): `bytes` is one member's whole input.
    ReduceScatter,
    /// Broadcast from `root` (format 6).
    Broadcast,
    /// Reduce to `root` (format 6).
    Reduce,
    /// All-to-all(v) (format 6): `bytes` is one member's whole input.
    AllToAll,
    /// Barrier (format 6): 0 bytes.
    Barrier,
    /// Point-to-point send to `peer` (format 6).
    Send,
    /// Point-to-point receive from `peer` (format 6).
    Recv,
}

impl CollectiveKind {
    /// Snake-case name as serialized (`all_reduce`, `send`, ...).
    pub fn name(self) -> &'static str {
        self.trace_kind().name()
    }
    /// Point-to-point: matched by `join` per (group, sender, receiver), not per group.
    pub fn is_p2p(self) -> bool {
        matches!(self, CollectiveKind::Send | CollectiveKind::Recv)
    }
    /// The imported-trace kind of the same name.
    pub fn trace_kind(self) -> crate::core::collective::TraceKind {
        use crate::core::collective::TraceKind as T;
        match self {
            CollectiveKind::AllReduce => T::AllReduce,
            CollectiveKind::AllGather => T::AllGather,
            CollectiveKind::ReduceScatter => T::ReduceScatter,
            CollectiveKind::Broadcast => T::Broadcast,
            CollectiveKind::Reduce => T::Reduce,
            CollectiveKind::AllToAll => T::AllToAll,
            CollectiveKind::Barrier => T::Barrier,
            CollectiveKind::Send => T::Send,
            CollectiveKind::Recv => T::Recv,
        }
    }
}

impl From<crate::core::collective::TraceKind> for CollectiveKind {
    fn from(k: crate::core::collective::TraceKind) -> Self {
        use crate::core::collective::TraceKind as T;
        match k {
            T::AllReduce => CollectiveKind::AllReduce,
            T::AllGather => CollectiveKind::AllGather,
            T::ReduceScatter => CollectiveKind::ReduceScatter,
            T::Broadcast => CollectiveKind::Broadcast,
            T::Reduce => CollectiveKind::Reduce,
            T::AllToAll => CollectiveKind::AllToAll,
            T::Barrier => CollectiveKind::Barrier,
            T::Send => CollectiveKind::Send,
            T::Recv => CollectiveKind::Recv,
        }
    }
}

pub use crate::core::workload::Dtype;

/// A process group: its id and ordered membership (world ranks).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ProcessGroup {
    /// Group id, unique within a run (0 = world).
    pub id: u32,
    /// Ordered world ranks of the members.
    pub members: Vec<u32>,
    /// The imported trace's name of the group (PyTorch's `pg_name`) whose
    /// collectives run on it; absent for group 0 and in older shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Replay timing of one event against its source trace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct ReplayTiming {
    /// Gap before this collective in the source trace.
    pub target_gap_ns: u64,
    /// Gap actually achieved: from when the host saw the previous collective
    /// complete to the end of its pacing (read there, before any injected
    /// delay and the issue). Shards written before commit 8b60c49 (same
    /// format) took it as the issue less the injected delay, which differs by
    /// the bookkeeping between the pacing and the issue (well under 1 µs).
    pub actual_gap_ns: u64,
}

/// Quantized compute fill placed for one gap.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct FillRecord {
    /// Time to fill from the source trace: the gap, or the compute the source
    /// recorded in it where it did (an imported trace).
    pub gap_ns: u64,
    /// Units of work (GEMMs or memory-bound kernels) placed.
    pub units: u32,
    /// Calibrated duration of one unit.
    pub quantum_ns: u64,
    /// `units * quantum - (gap + carried residual)`: signed quantization error.
    pub quantization_error_ns: i64,
}

/// One collective as one rank saw it. Times are this rank's local clock in ns.
/// `None` means "not measured on this backend", never zero.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CollectiveEvent {
    /// Phase that issued it.
    pub phase: Phase,
    /// Operation kind.
    pub kind: CollectiveKind,
    /// Process group id (see the header's `groups`).
    pub group: u32,
    /// Per-group sequence number (counts every collective on the group, warm-ups included).
    pub seq: u64,
    /// Logical tensor bytes (elements x dtype size).
    pub bytes: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Token index (workload phases).
    pub token: Option<u32>,
    /// Layer index (workload phases).
    pub layer: Option<u32>,
    /// Iteration index within its size (isolated phase).
    pub iter: Option<u32>,
    /// Warm-up events are kept but excluded from statistics.
    pub warmup: bool,
    /// Host clock just before the issue call (after any injected delay): the arrival.
    pub host_issue_ns: u64,
    /// Host clock when the issue call returned.
    pub host_return_ns: u64,
    /// Host clock when the wait began.
    pub wait_start_ns: u64,
    /// Host clock when the wait returned (completion known to the host).
    pub wait_end_ns: u64,
    /// Device interval start on the host timeline (GPU events); `None` on CPU.
    pub device_start_ns: Option<u64>,
    /// Device interval end on the host timeline; `None` on CPU.
    pub device_end_ns: Option<u64>,
    /// Injected arrival delay before this collective (negative control).
    pub injected_delay_ns: Option<u64>,
    /// Replay timing against the source trace.
    pub replay: Option<ReplayTiming>,
    /// Fill placed before (fill) or inside (overlap) this collective.
    pub fill: Option<FillRecord>,
    /// Whether the reduced result was validated.
    pub checked: bool,
    /// Broadcast and reduce: the root's world rank (format 6; absent before).
    pub root: Option<u32>,
    /// Send and receive: the peer's world rank (format 6; absent before).
    pub peer: Option<u32>,
}

/// A collective event as formats 1 to 5 encoded it (no root, no peer).
#[derive(Serialize, Deserialize)]
struct CollectiveEventV5 {
    phase: Phase,
    kind: CollectiveKind,
    group: u32,
    seq: u64,
    bytes: u64,
    dtype: Dtype,
    token: Option<u32>,
    layer: Option<u32>,
    iter: Option<u32>,
    warmup: bool,
    host_issue_ns: u64,
    host_return_ns: u64,
    wait_start_ns: u64,
    wait_end_ns: u64,
    device_start_ns: Option<u64>,
    device_end_ns: Option<u64>,
    injected_delay_ns: Option<u64>,
    replay: Option<ReplayTiming>,
    fill: Option<FillRecord>,
    checked: bool,
}

impl From<CollectiveEventV5> for CollectiveEvent {
    fn from(e: CollectiveEventV5) -> Self {
        CollectiveEvent {
            phase: e.phase,
            kind: e.kind,
            group: e.group,
            seq: e.seq,
            bytes: e.bytes,
            dtype: e.dtype,
            token: e.token,
            layer: e.layer,
            iter: e.iter,
            warmup: e.warmup,
            host_issue_ns: e.host_issue_ns,
            host_return_ns: e.host_return_ns,
            wait_start_ns: e.wait_start_ns,
            wait_end_ns: e.wait_end_ns,
            device_start_ns: e.device_start_ns,
            device_end_ns: e.device_end_ns,
            injected_delay_ns: e.injected_delay_ns,
            replay: e.replay,
            fill: e.fill,
            checked: e.checked,
            root: None,
            peer: None,
        }
    }
}

/// A validated collective and what the check found (nccl-tests' `#wrong`).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CheckRecord {
    /// Phase of the collective.
    pub phase: Phase,
    /// Process group id.
    pub group: u32,
    /// Sequence number in the group.
    pub seq: u64,
    /// Bytes reduced.
    pub bytes: u64,
    /// Elements that differ from the expected value.
    pub wrong_elements: u64,
    /// The first wrong element, described.
    pub first_wrong: Option<String>,
}

impl CollectiveEvent {
    /// When the collective was executing: its device interval where the
    /// backend measured one (`true`), else issue to wait return on the host
    /// (`false`), an upper bound on when the library could have been working.
    pub fn execution_interval_ns(&self) -> (u64, u64, bool) {
        match (self.device_start_ns, self.device_end_ns) {
            (Some(a), Some(b)) => (a, b, true),
            _ => (self.host_issue_ns, self.wait_end_ns, false),
        }
    }
}

/// What kind of work a compute interval is.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ComputeKind {
    /// Matrix product.
    Gemm,
    /// Memory-bandwidth-bound kernel (copy).
    Membound,
    /// Host-only busy work (no compute engine).
    HostDelay,
}

/// A compute interval (one or more units of the same kind back to back): host
/// clock on CPU; on GPU, device events on the compute stream mapped onto the
/// host timeline through the phase's anchor.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ComputeEvent {
    /// Phase.
    pub phase: Phase,
    /// Kind of work.
    pub kind: ComputeKind,
    /// Token index, where the phase has tokens.
    pub token: Option<u32>,
    /// Layer index.
    pub layer: Option<u32>,
    /// Units of work.
    pub units: u32,
    /// Local clock at start.
    pub start_ns: u64,
    /// Local clock at end.
    pub end_ns: u64,
}

/// Per-token latency for workload phases (device-ordered marks on GPU).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// Phase.
    pub phase: Phase,
    /// Token index.
    pub token: u32,
    /// Warm-up tokens are kept but excluded from statistics.
    pub warmup: bool,
    /// Local clock at token start.
    pub start_ns: u64,
    /// Local clock when the token's last collective completed.
    pub end_ns: u64,
}

/// Where a replay/fill/overlap phase got its gaps.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum TraceOrigin {
    /// This run's own `blocking` phase on this rank.
    ThisRunBlocking,
    /// A joined-trace file from an earlier run.
    File {
        /// Path as given.
        path: String,
        /// SHA-256 of the file.
        sha256: String,
        /// Rank of the source trace this rank replays.
        source_rank: u32,
    },
    /// A communication trace written by `commcanary import` (a workload's own
    /// PyTorch trace), walked once per token.
    Imported {
        /// Path as given.
        path: String,
        /// SHA-256 of the file.
        sha256: String,
        /// Rank of the trace this rank replays (its own).
        source_rank: u32,
        /// The trace's collectives this rank runs per pass (token).
        collectives_per_pass: u32,
        /// The trace's collectives of this rank left out, per pass (the kinds
        /// other than all-reduce, with `--trace-allreduce-only`); never hidden.
        left_out_per_pass: u32,
        /// Per kind: what this rank ran and left out per pass, with the
        /// element types and sizes of each (format 6; absent before).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kinds: Vec<TraceKindCount>,
    },
}

/// One collective kind of an imported trace on one rank, per pass.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceKindCount {
    /// Kind.
    pub kind: CollectiveKind,
    /// Collectives of this kind the phases ran per pass.
    pub run_per_pass: u32,
    /// Collectives of this kind left out per pass (`--trace-allreduce-only`).
    pub left_out_per_pass: u32,
    /// Element types recorded, distinct, sorted.
    pub dtypes: Vec<crate::core::collective::TraceDtype>,
    /// Input sizes recorded (elements x dtype size), distinct, ascending.
    pub sizes_bytes: Vec<u64>,
}

/// Which timeline a phase's source gaps were measured on.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum GapTimeline {
    /// Every collective's device interval (GPU events, or the kernels an
    /// imported profiler trace recorded): a gap is device time between
    /// collectives, compute and idle, not host time.
    Device,
    /// Host times only (the CPU backend; an imported trace without kernel
    /// times): issue to the previous collective's wait return.
    Host,
    /// Device intervals for some collectives, host times for the rest.
    Mixed,
}

impl GapTimeline {
    /// The timeline of gaps whose collectives had (`true`) or lacked a device interval.
    pub fn of(has_device: impl Iterator<Item = bool>) -> Self {
        let (mut dev, mut host) = (false, false);
        for d in has_device {
            if d {
                dev = true;
            } else {
                host = true;
            }
        }
        match (dev, host) {
            (true, false) => GapTimeline::Device,
            (true, true) => GapTimeline::Mixed,
            _ => GapTimeline::Host,
        }
    }
}

/// Per-phase record: boundaries, calibration, trace source.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PhaseRun {
    /// Phase.
    pub phase: Phase,
    /// Local clock at phase start (after the entry barrier).
    pub start_ns: u64,
    /// Local clock at phase end.
    pub end_ns: u64,
    /// Error bound of the device-to-host timeline anchor (GPU backends).
    pub device_anchor_error_ns: Option<u64>,
    /// Calibrated duration of one fill unit (fill, overlap and ablations).
    pub quantum_ns: Option<u64>,
    /// Source of gaps (replay, fill, overlap and ablations).
    pub trace: Option<TraceOrigin>,
    /// Collectives recorded (warm-ups included).
    pub collectives: u64,
    /// Graph mode (`--graph`): how the phase ran; absent when it ran eagerly.
    #[serde(default)]
    pub graph: Option<GraphRun>,
    /// Trace phases: the timeline the source's gaps were measured on. Absent
    /// in older records and in phases without a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_timeline: Option<GapTimeline>,
    /// GPU with `--cupti`: how the phase's kernel records were placed on the
    /// host clock, through `%globaltimer`. Absent where kernel records were
    /// not collected, in older records, and where the anchor could not run
    /// (the shard's `cupti_kernel_anchor` fact says why); the kernel times then
    /// rest on CUPTI's own conversion, whose error is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_anchor: Option<KernelAnchor>,
}

/// How CUPTI kernel timestamps were placed on the host clock: CUPTI's
/// kernel timer against the GPU's `%globaltimer` (stamping kernels), and
/// `%globaltimer` against the host clock (release-and-reply round
/// trips), in a window at the start and one at the end of the phase.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KernelAnchor {
    /// Error bound of a kernel time on the host clock, ns: the sum of the
    /// three terms below, rounded up.
    pub error_ns: u64,
    /// `%globaltimer` on the host clock: the larger window half-width, ns.
    pub globaltimer_bound_ns: f64,
    /// CUPTI's kernel timer against `%globaltimer`: the larger bracket half-width, ns.
    pub cupti_offset_bound_ns: f64,
    /// The step of `%globaltimer` seen in the windows, ns.
    pub globaltimer_resolution_ns: u64,
    /// Narrowest release-and-reply round trip, ns.
    pub best_round_trip_ns: u64,
    /// Round trips per window.
    pub round_trips: u32,
    /// Stamping kernels per window.
    pub stamp_kernels: u32,
    /// CUPTI's kernel timer minus `%globaltimer` (start window's bracket midpoint), ns.
    pub cupti_minus_globaltimer_ns: f64,
    /// CUPTI's own conversion (its timestamp against the host clock, read
    /// back to back at the phase start) minus this anchor's placement, for
    /// the start window's first stamping kernel, ns: how far the unbounded
    /// conversion sat from the bounded one.
    pub cupti_own_minus_anchored_ns: Option<f64>,
}

/// A phase run as CUDA-graph replays: one token's device work captured once
/// and launched per token, so the host issues one launch per token.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GraphRun {
    /// Collectives inside one token's graph (the phase records no per-collective events).
    pub collectives_per_token: u64,
    /// Compute units inside one token's graph (GEMMs; memory-bound copies
    /// for `membound-fill`).
    pub gemms_per_token: u64,
    /// Graph launches (warm-up tokens included).
    pub launches: u64,
    /// What is timed: token boundaries only.
    pub timing: String,
    /// Collectives whose result was validated after the last launch.
    pub checked: u32,
}

/// Clock calibration of this rank against rank 0.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClockRecord {
    /// Raw start-window samples (against rank 0, or against `leader` where
    /// `path` is `via_leader`: `t_ref_ns` is then the leader's clock).
    pub start_samples: Vec<PingSample>,
    /// Raw end-window samples (empty when not measured), against the same rank.
    pub end_samples: Vec<PingSample>,
    /// Fitted model.
    pub model: ClockModel,
    /// Which kernel clock this rank reads: boot id and time namespace
    /// (`identity::kernel_clock_id`). Absent where unreadable and in shards
    /// written before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_clock_id: Option<String>,
    /// Where `model` is rank 0's kernel clock: the ping-pong fit, kept as
    /// the evidence that every sample agreed with one clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pingpong_fit: Option<ClockModel>,
    /// Why a rank other than 0 does not read rank 0's kernel clock (another
    /// kernel or time namespace, an injection, `--clock pingpong-only`, a
    /// sample that one clock cannot give); absent where it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_kernel_clock_refused: Option<String>,
    /// Which ranks calibrated against which (format 7; absent before: flat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<ClockSync>,
    /// How `model` was obtained (format 7; absent before: rank 0 the
    /// reference, every other rank direct).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<ClockPath>,
    /// This rank's node leader under hierarchical calibration: the lowest
    /// rank recording this rank's host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<u32>,
    /// `via_leader`: this rank's model against its leader (the leader's
    /// kernel clock where they share it, else the ping-pong fit of the samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_fit: Option<ClockModel>,
    /// `via_leader`: the leader's model against rank 0, as the leader sent it;
    /// `model` is `leader_fit` composed with it (`clock::compose`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_model: Option<ClockModel>,
    /// Wall time of the start window on this rank, ns of `CLOCK_MONOTONIC`
    /// (never the injected clock): from the end of the barrier that opens it
    /// to the end of the barrier that closes it. Absent before format 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_window_wall_ns: Option<u64>,
    /// Wall time of the end window, ns, measured the same way; under
    /// hierarchical calibration it includes the leaders' hand-off of their
    /// models to their ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_window_wall_ns: Option<u64>,
}

/// A field this backend cannot measure, and why.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Unmeasured {
    /// Field name as in the events.
    pub field: String,
    /// Reason.
    pub reason: String,
}

/// Device description.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceIdentity {
    /// Kind (`cpu` or `cuda`).
    pub backend: BackendKind,
    /// Human name (CPU model or GPU name).
    pub name: String,
    /// Extra key/value facts (UUID, bus id, ...).
    pub facts: Vec<(String, String)>,
}

/// Cold-start figures, never mixed into steady-state numbers.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ColdStart {
    /// MPI initialisation, from process start to `MPI_Init` return, where known.
    pub mpi_init_ns: Option<u64>,
    /// Backend / communicator initialisation.
    pub backend_init_ns: u64,
}

/// Shard header: identifies the run, the rank, the conditions.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardHeader {
    /// On-disk format version.
    pub format_version: u32,
    /// Run id shared by every rank.
    pub run_id: String,
    /// World rank.
    pub rank: u32,
    /// World size.
    pub world_size: u32,
    /// Host name.
    pub host: String,
    /// Node-local rank.
    pub local_rank: u32,
    /// Ranks on this node.
    pub local_size: u32,
    /// Backend.
    pub backend: BackendKind,
    /// Device used by this rank.
    pub device: DeviceIdentity,
    /// Environment identity.
    pub identity: EnvIdentity,
    /// SHA-256 of the canonical JSON of `identity`.
    pub identity_sha256: String,
    /// Process groups used.
    pub groups: Vec<ProcessGroup>,
    /// Workload definition as run.
    pub workload: WorkloadSpec,
    /// Clock calibration (absent with `--clock none`).
    pub clock: Option<ClockRecord>,
    /// Clock injections in force in this run (truth for the estimator check).
    pub clock_injections: Vec<ClockInjection>,
    /// True monotonic time at which this rank's injected drift starts.
    pub clock_anchor_true_ns: u64,
    /// Arrival-delay injection in force (negative control).
    pub delay_injection: Option<DelayInjection>,
    /// Repeat injection in force (negative control, `--inject-repeat N`): every
    /// group-0 all-reduce ran N times inside its recorded span; absent when
    /// none (and in older shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_injection: Option<u32>,
    /// Cold-start figures.
    pub cold_start: ColdStart,
    /// Fields this backend does not measure.
    pub unmeasured: Vec<Unmeasured>,
    /// Per-phase records.
    pub phases: Vec<PhaseRun>,
    /// Wall-clock start (Unix ms), for humans only.
    pub started_unix_ms: u64,
    /// NCCL tuner choices, when captured (`--nccl-tuning`); absent in older shards.
    #[serde(default)]
    pub tuning: Option<crate::evidence::tuning::TuningCapture>,
    /// Every result check (`--check`) and the wrong elements it found; absent in older shards.
    #[serde(default)]
    pub checks: Vec<CheckRecord>,
    /// Present only in shards written by `commcanary synth-shards` (format
    /// 7): their events were generated, not measured. `join` reads them (to
    /// benchmark the join); every stage that takes measurements (campaign
    /// verify and analyze, summarize, canary verify) refuses them
    /// (`refused[SYNTHETIC]`). Absent in measured and older shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticMark>,
}

/// The mark of a generated (synthetic) shard: what generated it, from which seed.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SyntheticMark {
    /// The generator (`commcanary synth-shards` and its version).
    pub generator: String,
    /// Seed of its random timestamps.
    pub seed: u64,
    /// Always this sentence, for a person reading the header.
    pub note: String,
}

/// What a GPU kernel was, by CommCanary's classification of its name.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KernelKind {
    /// An NCCL kernel (name contains `nccl`).
    Nccl,
    /// Any other kernel: on CommCanary's compute stream, the GEMM.
    Compute,
}

/// A kernel execution from CUPTI, on this rank's host timeline.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KernelEvent {
    /// Phase during which it ran.
    pub phase: Phase,
    /// Classification.
    pub kind: KernelKind,
    /// Index into the body's `kernel_names`.
    pub name: u32,
    /// Start, host ns (through the phase's CUPTI anchor).
    pub start_ns: u64,
    /// End, host ns.
    pub end_ns: u64,
    /// CUPTI stream id.
    pub stream: u32,
    /// CUPTI correlation id.
    pub correlation: u32,
}

/// Shard body: the events.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ShardBody {
    /// Collective events in issue order.
    pub collectives: Vec<CollectiveEvent>,
    /// Compute intervals in order.
    pub compute: Vec<ComputeEvent>,
    /// Token latencies.
    pub tokens: Vec<TokenEvent>,
    /// CUPTI kernel records (format 2; empty when not collected).
    pub kernels: Vec<KernelEvent>,
    /// Distinct kernel names, indexed by `KernelEvent::name`.
    pub kernel_names: Vec<String>,
    /// How long the compute stream stalled on each collective (GPU; format 3).
    pub device_waits: Vec<DeviceWait>,
}

/// The compute stream's stall on one collective: events recorded on the
/// compute stream just before and just after its wait on the collective's
/// end event, on the host timeline. Zero when the collective had already
/// finished; the exposed communication time otherwise.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceWait {
    /// Group.
    pub group: u32,
    /// Per-group sequence number of the collective waited on.
    pub seq: u64,
    /// Before the wait, host ns.
    pub start_ns: u64,
    /// After the wait, host ns.
    pub end_ns: u64,
}

/// Format-3 to 5 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV5 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
    kernels: Vec<KernelEvent>,
    kernel_names: Vec<String>,
    device_waits: Vec<DeviceWait>,
}

/// Format-2 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV2 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
    kernels: Vec<KernelEvent>,
    kernel_names: Vec<String>,
}

/// Format-1 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV1 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
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

/// Decoding configuration with a limit of `N` claimed bytes: bincode checks
/// every length prefix (and the in-memory size of what it decodes) against it
/// before allocating.
fn bincode_decode_cfg<const N: usize>() -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint, bincode::config::Limit<N>> {
    bincode::config::standard().with_limit::<N>()
}

/// Decode a shard body of format `version` (`name` for messages). bincode's
/// decode limit is 16 times the body's size class (1 MiB, 16 MiB, then
/// [`crate::core::limits::MAX_SHARD_BODY_DECODE_BYTES`]), so no length prefix can
/// make it allocate more; a body over [`crate::core::limits::MAX_SHARD_BODY_BYTES`]
/// is refused. Trailing bytes are refused.
pub fn decode_shard_body(version: u32, body_bytes: &[u8], name: &str) -> Result<ShardBody> {
    if body_bytes.len() > crate::core::limits::MAX_SHARD_BODY_BYTES {
        return Err(crate::core::refusal::refuse(
            crate::core::refusal::Code::OverLimit,
            format!("{name}: body of {} bytes is over the limit of {} bytes", body_bytes.len(), crate::core::limits::MAX_SHARD_BODY_BYTES),
        ));
    }
    let (body, used) = match body_bytes.len() {
        n if n <= 1 << 20 => decode_body(version, body_bytes, bincode_decode_cfg::<{ 16 << 20 }>(), name)?,
        n if n <= 16 << 20 => decode_body(version, body_bytes, bincode_decode_cfg::<{ 256 << 20 }>(), name)?,
        _ => decode_body(version, body_bytes, bincode_decode_cfg::<{ crate::core::limits::MAX_SHARD_BODY_DECODE_BYTES }>(), name)?,
    };
    if used != body_bytes.len() {
        crate::refuse!(crate::core::refusal::Code::BadFormat, "{name}: body has {} undecoded trailing bytes", body_bytes.len() - used);
    }
    Ok(body)
}

/// Decode a body of `version` under `cfg` (whose limit bounds every allocation).
fn decode_body<C: bincode::config::Config>(version: u32, body_bytes: &[u8], cfg: C, name: &str) -> Result<(ShardBody, usize)> {
    Ok(match version {
        1 => {
            let (b, used): (ShardBodyV1, usize) = bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            (ShardBody { collectives: b.collectives.into_iter().map(Into::into).collect(), compute: b.compute, tokens: b.tokens, ..Default::default() }, used)
        }
        2 => {
            let (b, used): (ShardBodyV2, usize) = bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            let body = ShardBody {
                collectives: b.collectives.into_iter().map(Into::into).collect(),
                compute: b.compute,
                tokens: b.tokens,
                kernels: b.kernels,
                kernel_names: b.kernel_names,
                ..Default::default()
            };
            (body, used)
        }
        3..=5 => {
            let (b, used): (ShardBodyV5, usize) = bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            let body = ShardBody {
                collectives: b.collectives.into_iter().map(Into::into).collect(),
                compute: b.compute,
                tokens: b.tokens,
                kernels: b.kernels,
                kernel_names: b.kernel_names,
                device_waits: b.device_waits,
            };
            (body, used)
        }
        _ => bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?,
    })
}

/// One collective event of a format-`version` body, from the front of
/// `bytes` (the streaming join reads a shard's events one at a time, after
/// the whole shard verified): the event and the bytes it took.
pub fn decode_collective_event(version: u32, bytes: &[u8]) -> std::result::Result<(CollectiveEvent, usize), bincode::error::DecodeError> {
    if version >= 6 {
        bincode::serde::decode_from_slice(bytes, bincode_cfg())
    } else {
        bincode::serde::decode_from_slice::<CollectiveEventV5, _>(bytes, bincode_cfg()).map(|(e, n)| (e.into(), n))
    }
}

/// Where a verified shard's collective events start (a byte offset into the
/// file) and how many there are: every body version begins with them (a
/// varint count, then the events).
pub fn collectives_region(bytes: &[u8], name: &str) -> Result<(usize, u64)> {
    let bad = || crate::core::refusal::refuse(crate::core::refusal::Code::BadFormat, format!("{name}: body does not start with its collectives"));
    let hlen = bytes.get(12..20).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok_or_else(bad)?;
    let body = usize::try_from(hlen).ok().and_then(|h| h.checked_add(28)).filter(|&b| b <= bytes.len()).ok_or_else(bad)?;
    let (count, used): (u64, usize) = bincode::decode_from_slice(&bytes[body..], bincode_cfg()).map_err(|_| bad())?;
    Ok((body + used, count))
}

/// The header of the shard at `path`, read from the front of the file
/// without its body or any check of the trailer; `None` where it does not
/// parse. Only a hint (the streaming join learns the process groups from it
/// before the shards verify); nothing read this way is trusted.
pub fn peek_header(path: &Path) -> Option<ShardHeader> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut pre = [0u8; 20];
    f.read_exact(&mut pre).ok()?;
    if &pre[..8] != MAGIC {
        return None;
    }
    let hlen = usize::try_from(u64::from_le_bytes(pre[12..20].try_into().expect("8 bytes"))).ok()?;
    if hlen > crate::core::limits::MAX_SHARD_HEADER_BYTES {
        return None;
    }
    let mut h = vec![0u8; hlen];
    f.read_exact(&mut h).ok()?;
    serde_json::from_slice(&h).ok()
}

/// A body decode error: a length over the limit (or past the end of the body) is a named refusal.
fn body_fault(name: &str, e: bincode::error::DecodeError) -> anyhow::Error {
    match e {
        bincode::error::DecodeError::LimitExceeded => crate::core::refusal::refuse(
            crate::core::refusal::Code::OverLimit,
            format!(
                "{name}: body declares lengths over the decode limit (16 times its own size, at most {} bytes)",
                crate::core::limits::MAX_SHARD_BODY_DECODE_BYTES
            ),
        ),
        e => crate::core::refusal::refuse(crate::core::refusal::Code::BadFormat, format!("{name}: body does not decode: {e}")),
    }
}

/// Where [`Shard::write_new`] put a shard: its file name, size and SHA-256
/// (the digest `run.json` records).
pub struct WrittenShard {
    /// File name inside the run directory.
    pub file: String,
    /// File size.
    pub size_bytes: u64,
    /// SHA-256 (hex) of the whole file.
    pub sha256: String,
}

impl Shard {
    /// The shard writer: encode and write `dir/rank-NNNNN.shard` atomically,
    /// never replacing a file (the `rank` command and `synth-shards` both write through it).
    pub fn write_new(&self, dir: &Path) -> Result<WrittenShard> {
        let bytes = self.encode()?;
        let file = shard_file_name(self.header.rank);
        crate::core::fsutil::write_new_atomic(&dir.join(&file), &bytes)?;
        Ok(WrittenShard { file, size_bytes: bytes.len() as u64, sha256: crate::core::fsutil::sha256_hex(&bytes) })
    }

    /// Encode to bytes (header, body, trailer).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body = bincode::serde::encode_to_vec(&self.body, bincode_cfg()).context("encoding shard body")?;
        self.encode_with_body(&body)
    }

    fn encode_with_body(&self, body: &[u8]) -> Result<Vec<u8>> {
        let header = serde_json::to_vec(&self.header).context("encoding shard header")?;
        let mut out = Vec::with_capacity(header.len() + body.len() + 80);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.header.format_version.to_le_bytes());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(body);
        let digest = Sha256::digest(&out);
        out.extend_from_slice(TRAILER);
        out.extend_from_slice(&digest);
        Ok(out)
    }

    /// Decode and verify bytes; `name` is used in error messages.
    pub fn decode(bytes: &[u8], name: &str) -> Result<Self> {
        Self::decode_with_digest(bytes, name).map(|(s, _)| s)
    }

    /// [`decode`](Self::decode), and the SHA-256 (hex) of all of `bytes`,
    /// the digest `run.json` records: one pass of the hash gives both it and
    /// the trailer's digest of everything before the trailer.
    pub fn decode_with_digest(bytes: &[u8], name: &str) -> Result<(Self, String)> {
        use crate::core::refusal::Code;
        let fault = |code: Code, what: String| crate::core::refusal::refuse(code, format!("{name}: {what}"));
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(fault(Code::BadFormat, "not a CommCanary shard (bad magic)".into()));
        }
        let trailer_len = TRAILER.len() + 32;
        if bytes.len() < 8 + 4 + 8 + 8 + trailer_len {
            return Err(fault(Code::Truncated, format!("truncated: {} bytes is shorter than an empty shard", bytes.len())));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if !(1..=SHARD_FORMAT_VERSION).contains(&version) {
            return Err(fault(
                Code::UnsupportedVersion,
                format!("format version {version} is not supported (this build reads versions 1 to {SHARD_FORMAT_VERSION})"),
            ));
        }
        let mut pos = 12usize;
        let take_len = |pos: &mut usize| -> Result<usize> {
            let end = *pos + 8;
            let b = bytes.get(*pos..end).ok_or_else(|| fault(Code::Truncated, "truncated inside a length field".into()))?;
            *pos = end;
            usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_err(|_| fault(Code::BadFormat, "length field does not fit in memory".into()))
        };
        let hlen = take_len(&mut pos)?;
        let hend = pos
            .checked_add(hlen)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(|| fault(Code::Truncated, format!("truncated: header of {hlen} bytes runs past the end of the file")))?;
        let header_bytes = &bytes[pos..hend];
        if hlen > crate::core::limits::MAX_SHARD_HEADER_BYTES {
            return Err(crate::core::refusal::refuse(
                crate::core::refusal::Code::OverLimit,
                format!("{name}: header of {hlen} bytes is over the limit of {} bytes", crate::core::limits::MAX_SHARD_HEADER_BYTES),
            ));
        }
        pos = hend;
        let blen = take_len(&mut pos)?;
        let bend = pos
            .checked_add(blen)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(|| fault(Code::Truncated, format!("truncated: body of {blen} bytes runs past the end of the file")))?;
        let body_bytes = &bytes[pos..bend];
        if blen > crate::core::limits::MAX_SHARD_BODY_BYTES {
            return Err(crate::core::refusal::refuse(
                crate::core::refusal::Code::OverLimit,
                format!("{name}: body of {blen} bytes is over the limit of {} bytes", crate::core::limits::MAX_SHARD_BODY_BYTES),
            ));
        }
        pos = bend;
        let rest = &bytes[pos..];
        if rest.len() < trailer_len {
            return Err(fault(Code::Truncated, "truncated: the SHA-256 trailer is missing".into()));
        }
        if rest.len() > trailer_len {
            return Err(fault(Code::BadFormat, format!("{} unexpected bytes after the trailer", rest.len() - trailer_len)));
        }
        if &rest[..8] != TRAILER {
            return Err(fault(Code::BadFormat, "trailer marker is damaged".into()));
        }
        let stored = &rest[8..];
        let mut hasher = Sha256::new();
        hasher.update(&bytes[..pos]);
        let actual = hasher.clone().finalize();
        if stored != actual.as_slice() {
            return Err(fault(
                Code::DigestMismatch,
                format!(
                    "SHA-256 mismatch: trailer says {}, content hashes to {}; the shard was modified or corrupted",
                    hex::encode(stored),
                    hex::encode(actual)
                ),
            ));
        }
        let header: ShardHeader = serde_json::from_slice(header_bytes).map_err(|e| fault(Code::BadFormat, format!("header is not valid: {e}")))?;
        if header.format_version != version {
            return Err(fault(Code::BadFormat, "header format_version disagrees with the preamble".into()));
        }
        let body = decode_shard_body(version, body_bytes, name)?;
        hasher.update(rest);
        Ok((Shard { header, body }, hex::encode(hasher.finalize())))
    }

    /// Read and verify a shard file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes =
            crate::core::limits::read_bounded(path, crate::core::limits::MAX_SHARD_BYTES).with_context(|| format!("reading shard {}", path.display()))?;
        Self::decode(&bytes, &path.display().to_string())
    }

    /// True if the bytes start with the shard magic.
    pub fn sniff(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && &bytes[..8] == MAGIC
    }
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
            "numa_mems": null, "env": [], "tool": {"version": "0", "git_commit": "c", "git_tree": "clean", "binary_sha256": null}},
        "identity_sha256": "d", "groups": [{"id": 0, "members": [0]}],
        "workload": {"phases": ["blocking"], "tokens": 1, "warmup_tokens": 0, "layers": 1, "sizes_bytes": [4],
            "gemm": {"m": 1, "n": 1, "k": 1}, "iters": 1, "warmup_iters": 0, "check": 0, "fill_residual": "carry", "membound_bytes": 4},
        "clock": null, "clock_injections": [], "clock_anchor_true_ns": 0, "delay_injection": null,
        "cold_start": {"mpi_init_ns": null, "backend_init_ns": 1}, "unmeasured": [], "phases": phases, "started_unix_ms": 0
    }))
    .expect("a valid test header")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_timeline_is_device_only_when_every_collective_had_an_interval() {
        assert_eq!(GapTimeline::of([true, true].into_iter()), GapTimeline::Device);
        assert_eq!(GapTimeline::of([true, false].into_iter()), GapTimeline::Mixed);
        assert_eq!(GapTimeline::of([false, false].into_iter()), GapTimeline::Host);
        assert_eq!(GapTimeline::of(std::iter::empty()), GapTimeline::Host);
    }

    fn sample() -> Shard {
        let header = test_header("cpu", serde_json::json!([]));
        let tokens = vec![TokenEvent { phase: Phase::Blocking, token: 0, warmup: false, start_ns: 1, end_ns: 2 }];
        Shard { header, body: ShardBody { tokens, ..Default::default() } }
    }

    #[test]
    fn current_format_round_trips() {
        let mut s = sample();
        assert_eq!(Shard::decode(&s.encode().unwrap(), "t").unwrap(), s);
        // every kind, with its root or peer, survives the body
        for (i, kind) in [CollectiveKind::AllGather, CollectiveKind::Broadcast, CollectiveKind::Recv].into_iter().enumerate() {
            let (root, peer) = match kind {
                CollectiveKind::Broadcast => (Some(0), None),
                CollectiveKind::Recv => (None, Some(0)),
                _ => (None, None),
            };
            s.body.collectives.push(CollectiveEvent {
                phase: Phase::Replay,
                kind,
                group: 1,
                seq: i as u64,
                bytes: 8,
                dtype: Dtype::F32,
                token: Some(0),
                layer: Some(i as u32),
                iter: None,
                warmup: false,
                host_issue_ns: 1,
                host_return_ns: 2,
                wait_start_ns: 2,
                wait_end_ns: 2,
                device_start_ns: None,
                device_end_ns: None,
                injected_delay_ns: None,
                replay: None,
                fill: None,
                checked: false,
                root,
                peer,
            });
        }
        let d = Shard::decode(&s.encode().unwrap(), "t").unwrap();
        assert_eq!(d, s);
        assert_eq!(d.body.collectives[2].peer, Some(0));
    }

    #[test]
    fn the_synthetic_mark_round_trips_and_older_headers_have_none() {
        let mut s = sample();
        s.header.synthetic = Some(SyntheticMark { generator: "g".into(), seed: 3, note: "n".into() });
        assert_eq!(Shard::decode(&s.encode().unwrap(), "t").unwrap().header.synthetic, s.header.synthetic);
        // a format-6 header (no mark) reads as unmarked, and its JSON has no such field
        let mut s = sample();
        s.header.format_version = 6;
        let bytes = s.encode().unwrap();
        let d = Shard::decode(&bytes, "v6").unwrap();
        assert_eq!((d.header.format_version, d.header.synthetic.is_none()), (6, true));
        assert!(!String::from_utf8_lossy(&bytes).contains("synthetic"));
        // the events' region, as the streaming join reads it
        let (at, n) = collectives_region(&bytes, "v6").unwrap();
        assert_eq!(n, 0);
        assert!(at > 20 && at < bytes.len());
    }

    #[test]
    fn older_formats_still_decode_without_the_newer_records() {
        let mut s = sample();
        for (version, body) in [
            (1u32, bincode::serde::encode_to_vec(ShardBodyV1 { collectives: vec![], compute: vec![], tokens: s.body.tokens.clone() }, bincode_cfg()).unwrap()),
            (
                2u32,
                bincode::serde::encode_to_vec(
                    ShardBodyV2 { collectives: vec![], compute: vec![], tokens: s.body.tokens.clone(), kernels: vec![], kernel_names: vec![] },
                    bincode_cfg(),
                )
                .unwrap(),
            ),
        ] {
            s.header.format_version = version;
            let mut bytes = s.encode_with_body(&body).unwrap();
            bytes[8..12].copy_from_slice(&version.to_le_bytes());
            // re-seal: the preamble changed after hashing
            let n = bytes.len() - 40;
            let digest = Sha256::digest(&bytes[..n]);
            bytes[n + 8..].copy_from_slice(&digest);
            let d = Shard::decode(&bytes, "old").unwrap();
            assert_eq!(d.header.format_version, version);
            assert_eq!(d.body.tokens, s.body.tokens);
            assert!(d.body.kernels.is_empty() && d.body.device_waits.is_empty());
        }
        // a format-5 body with an all-reduce decodes into today's event, without root or peer
        let v5 = CollectiveEventV5 {
            phase: Phase::Replay,
            kind: CollectiveKind::AllReduce,
            group: 0,
            seq: 7,
            bytes: 64,
            dtype: Dtype::Bf16,
            token: Some(1),
            layer: Some(2),
            iter: None,
            warmup: false,
            host_issue_ns: 10,
            host_return_ns: 11,
            wait_start_ns: 12,
            wait_end_ns: 13,
            device_start_ns: None,
            device_end_ns: None,
            injected_delay_ns: None,
            replay: None,
            fill: None,
            checked: true,
        };
        let body =
            ShardBodyV5 { collectives: vec![v5], compute: vec![], tokens: s.body.tokens.clone(), kernels: vec![], kernel_names: vec![], device_waits: vec![] };
        s.header.format_version = 5;
        let mut bytes = s.encode_with_body(&bincode::serde::encode_to_vec(body, bincode_cfg()).unwrap()).unwrap();
        bytes[8..12].copy_from_slice(&5u32.to_le_bytes());
        let n = bytes.len() - 40;
        let digest = Sha256::digest(&bytes[..n]);
        bytes[n + 8..].copy_from_slice(&digest);
        let d = Shard::decode(&bytes, "v5").unwrap();
        let e = &d.body.collectives[0];
        assert_eq!((e.kind, e.seq, e.bytes, e.dtype, e.root, e.peer, e.checked), (CollectiveKind::AllReduce, 7, 64, Dtype::Bf16, None, None, true));
        s.header.format_version = 99;
        let mut bytes = s.encode().unwrap();
        bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
        let e = Shard::decode(&bytes, "future").unwrap_err().to_string();
        assert!(e.contains("format version 99 is not supported"), "{e}");
    }
}

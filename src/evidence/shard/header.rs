//! The shard header's records: who ran (run, rank, host, device, identity,
//! process groups), under which conditions (workload, clock calibration,
//! injections, cold start) and what each phase was (its boundaries, trace
//! origin, graph mode, kernel anchor), and the result checks. Plain serde
//! data, the header's JSON; it refuses nothing itself (the reader checks the
//! file). Build one for [`super::Shard::header`], or read it there.
use super::CollectiveKind;
use crate::core::clock::{ClockInjection, ClockModel, ClockPath, ClockSync, PingSample};
use crate::core::collective;
use crate::core::identity::EnvIdentity;
use crate::core::workload::{DelayInjection, Phase, WorkloadSpec};
use crate::evidence::tuning::TuningCapture;
use serde::{Deserialize, Serialize};

/// Which backend produced the events.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// MPI on host buffers, CPU matrix products, `CLOCK_MONOTONIC`.
    Cpu,
    /// NCCL on GPUs.
    Cuda,
}

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
        /// An MPI capture's point-to-point program on this rank, per pass
        /// (format 9; absent before and for traces without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p2p: Option<TraceP2pCount>,
    },
}

/// An imported MPI trace's point-to-point operations (`mpi.p2p`) on one
/// rank, per pass: what the phases run between the collectives, in recorded
/// call order, and what they leave out.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceP2pCount {
    /// Operations the phases run per pass (a `Sendrecv` is two: its send and its receive).
    pub operations_per_pass: u32,
    /// Operations left out per pass (all of them with `--trace-allreduce-only`).
    pub left_out_per_pass: u32,
    /// MPI calls per pass: posts, blocking sends and receives, `Sendrecv`s and completing waits.
    pub calls_per_pass: u32,
    /// Bytes sent per pass.
    pub bytes_sent_per_pass: u64,
}

/// One pass (token) of a trace phase's point-to-point program on this rank
/// (format 9): what ran and the host time inside its MPI calls. The pass's
/// token latency includes it; the collectives' own records do not.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct P2pPassRecord {
    /// Token (pass) index.
    pub token: u32,
    /// A warm-up pass.
    pub warmup: bool,
    /// Operations started (posted, sent or received) in the pass.
    pub operations: u32,
    /// MPI calls made in the pass (posts, blocking calls, `Sendrecv`s, waits).
    pub calls: u32,
    /// Host time inside those calls, summed, ns.
    pub host_ns: u64,
    /// Replay: the recorded gaps paced before the calls, summed, ns (absent
    /// in the phases that do not pace them).
    pub target_gap_ns: Option<u64>,
    /// Replay: the gaps achieved before the calls, summed, ns.
    pub actual_gap_ns: Option<u64>,
    /// Receives whose length and bytes were checked against their matching
    /// send after the pass (`--check`); absent where not checked.
    pub receives_checked: Option<u64>,
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
    pub dtypes: Vec<collective::TraceDtype>,
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
        let (dev, host) = has_device.fold((false, false), |(dev, host), d| (dev || d, host || !d));
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
    /// Trace phases of an MPI capture: the point-to-point program run per
    /// pass, in order (format 9; empty before and for traces without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p: Vec<P2pPassRecord>,
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
    /// `path` is `via_leader`: `t_ref_ns` is then the leader's clock). Empty
    /// where this rank took its leader's kernel clock without a ping-pong
    /// (hierarchical; `model.start.samples` is then 0).
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
    /// the evidence that every sample agreed with one clock (absent where no
    /// ping-pong ran on any leg).
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
    pub tuning: Option<TuningCapture>,
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
}

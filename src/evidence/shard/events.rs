//! The shard body's event records: collectives, compute intervals, tokens,
//! CUPTI kernels and the compute stream's waits, each on the rank's local
//! clock, gathered in [`ShardBody`]. Plain serde data, the body's bincode,
//! which numbers enum variants in order (kinds are only ever appended); it
//! refuses nothing itself. A rank pushes events as it records them; readers
//! take them from [`super::Shard::body`].
use crate::core::collective::TraceDtype;
use crate::core::workload::Phase;
use serde::{Deserialize, Serialize};

/// The collective kind of an event: the one kind vocabulary
/// ([`crate::core::collective::CollectiveKind`]), whose variants are only
/// ever appended, so that the body's bincode keeps decoding older shards.
pub use crate::core::collective::CollectiveKind;

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
    /// Element type (format 8: every type of an imported trace; before, f32 or bf16).
    pub dtype: TraceDtype,
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

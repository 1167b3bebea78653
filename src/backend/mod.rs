//! Execution backends behind one trait.
//!
//! A backend owns the communicator, the buffers and the compute resources of
//! one rank. The phase runner ([`crate::rank::phases`]) decides *when* to issue,
//! compute and wait; the backend decides *how*. Consumes: the workload spec
//! (buffer sizes, GEMM shape). Produces: device intervals where it can measure
//! them and a list of the fields it cannot. Refuses: a second outstanding
//! collective, a wait without an issue, sizes larger than its buffers.
pub mod call;
pub mod cpu;
pub mod cuda;
pub mod mpi_deadline;
pub mod own;
pub mod trace_share;

use crate::core::collective::CollectiveKind;
use crate::core::workload::{GemmShape, ReduceOp, WorkloadSpec};
use crate::evidence::commtrace::p2p::P2pPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use crate::evidence::schedule::Schedule;
use crate::evidence::shard::{BackendKind, DeviceIdentity, Dtype, KernelAnchor, KernelKind, Unmeasured};
use std::time::Duration;

/// Device-side interval of a collective, mapped onto the host timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceInterval {
    /// Start, host ns.
    pub start_ns: u64,
    /// End, host ns.
    pub end_ns: u64,
}

/// Device timings of one pass, resolved after [`Backend::synchronize`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassTimings {
    /// One entry per collective issued since the last call, in order.
    pub collectives: Vec<Option<DeviceInterval>>,
    /// Host-timeline time of each mark taken since the last call, by mark id.
    pub marks_ns: Vec<u64>,
    /// Error bound of the device-to-host anchor, where one was used.
    pub anchor_error_ns: Option<u64>,
    /// Kernels that ran during the pass (CUPTI), on the host timeline.
    pub kernels: Vec<PassKernel>,
    /// Per collective of the pass, in order: the compute stream's stall on it, where measured.
    pub waits: Vec<Option<DeviceInterval>>,
    /// How the kernels' times were placed on the host clock, where bounded.
    pub kernel_anchor: Option<KernelAnchor>,
}

/// A kernel of a pass, on the host timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct PassKernel {
    /// Classification.
    pub kind: KernelKind,
    /// Kernel name.
    pub name: String,
    /// Start, host ns.
    pub start_ns: u64,
    /// End, host ns.
    pub end_ns: u64,
    /// CUPTI stream id.
    pub stream: u32,
    /// CUPTI correlation id.
    pub correlation: u32,
}

/// What a backend prepares at start: buffers for the largest collective of
/// the run's element type, every GEMM shape (with its weight sets) and the
/// memory-bound copy.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendPlan {
    /// Largest all-reduce, bytes.
    pub max_bytes: u64,
    /// Element type of the all-reduces.
    pub dtype: Dtype,
    /// GEMM shapes, by index ([`crate::core::workload::WorkloadSpec::gemm_shapes`]).
    pub gemms: Vec<GemmShape>,
    /// Distinct weight (B) matrices per GEMM shape; layer `l` uses set `l % weight_sets`.
    pub weight_sets: u32,
    /// Bytes copied by one memory-bound unit.
    pub membound_bytes: u64,
}

impl BackendPlan {
    /// What `spec` needs.
    pub fn for_spec(spec: &WorkloadSpec) -> Self {
        Self {
            max_bytes: spec.max_bytes(),
            dtype: spec.dtype,
            gemms: spec.gemm_shapes(),
            weight_sets: spec.weight_sets(),
            membound_bytes: spec.membound_bytes,
        }
    }

    /// What `spec` needs when its traced phases walk `trace`, whose
    /// all-reduces may be larger than the workload's own (its other
    /// collectives have their own buffers, [`Backend::prepare`]).
    pub fn for_spec_and_trace(spec: &WorkloadSpec, trace: Option<&Schedule>) -> Self {
        let mut p = Self::for_spec(spec);
        p.max_bytes = p.max_bytes.max(trace.map_or(0, Schedule::world_max_bytes));
        p
    }

    /// Timing events one pass may record: the workload's own, or a trace
    /// file's whole walk (up to 6 per collective, 2 per token, and margin),
    /// whichever is more.
    pub fn device_events_per_pass(spec: &WorkloadSpec, trace: Option<&Schedule>) -> usize {
        spec.device_events_per_pass()
            .max(trace.map_or(0, |t| t.calls().count() * 6 + 2 * (spec.tokens + spec.warmup_tokens) as usize + 64))
    }

    /// Largest `m x k` (activations in) and `m x n` (activations out) over the GEMM shapes.
    pub fn activation_elems(&self) -> (usize, usize) {
        let ak = self.gemms.iter().map(|g| g.m as usize * g.k as usize).max().unwrap_or(0);
        let cn = self.gemms.iter().map(|g| g.m as usize * g.n as usize).max().unwrap_or(0);
        (ak, cn)
    }
}

/// What a backend runs: a collective of the kind table on the world (the
/// isolated sweep and the model workload), a prepared collective of an
/// imported trace on its group, or a step of a trace's point-to-point program.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// `kind` on the world of `bytes` in nccl-tests' size convention
    /// ([`own::OwnOp`]: an all-gather's `bytes` is the gathered buffer), a sum
    /// for the reducing kinds, rooted at rank 0, a point-to-point kind as a
    /// ring (send to the next rank, receive from the previous).
    World {
        /// Kind.
        kind: CollectiveKind,
        /// Size, bytes.
        bytes: u64,
        /// Element type.
        dtype: Dtype,
    },
    /// Prepared trace collective `index` ([`Backend::prepare`]), any kind on
    /// its group, reducing with `op`.
    Trace {
        /// Position among the prepared collectives.
        index: usize,
        /// The collective.
        c: &'a TraceCollective,
        /// Reduction.
        op: ReduceOp,
    },
    /// Empty prepared collective `index`'s result (a broadcast root's input is
    /// kept) before a checked call of it, outside that call's timing
    /// (docs/METHODS.md, "Phase runner"). [`Timing::HostWait`]: done on return;
    /// [`Timing::Async`] (before a post): ordered before the next call of it, waiting for no other.
    Clear(usize),
    /// Empty the result that a [`Call::World`] of these fields leaves on this
    /// rank before a checked call of it (or a checked back-to-back run), as
    /// [`Call::Clear`] does ([`Timing::Async`]: ordered before the next world
    /// call); refused while a world call is outstanding.
    ClearWorld {
        /// Kind.
        kind: CollectiveKind,
        /// Size, bytes.
        bytes: u64,
        /// Element type.
        dtype: Dtype,
    },
    /// Step `k` of the prepared point-to-point program (steps run in order).
    P2pStep(usize),
    /// Complete prepared collective `index`, started by a [`Call::Trace`] enqueued [`Timing::Async`].
    Complete(usize),
}

/// How an enqueued [`Call`] is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Started: the host continues and the call may still run;
    /// [`Backend::wait`] makes later work depend on it (a world call).
    Async,
    /// Right behind the previous call, with no dependency and no wait
    /// (nccl-tests' timed loop): its device interval runs from its start to
    /// the next one's start, or to the boundary [`Backend::end_back_to_back`]
    /// closes, and comes from [`Backend::finish_pass`] in issue order.
    BackToBack,
    /// Complete on the host when the call returns, so the caller's clock read
    /// right after is its end (trace collectives and point-to-point steps).
    HostWait,
    /// Complete when the call returns and outside the pass's timings: the
    /// negative control `--inject-repeat` (a recorded collective that does N
    /// times the work).
    Untimed,
}

/// Device work of a compute interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute {
    /// `units` matrix products of GEMM shape `shape` (an index into the
    /// plan's GEMMs) back to back, with the weights of `layer`.
    Gemm {
        /// Shape index.
        shape: usize,
        /// Layer (weight set `layer % weight_sets`).
        layer: u32,
        /// Products.
        units: u32,
    },
    /// `units` memory-bandwidth-bound copies back to back.
    Membound(u32),
}

/// What a result check reads.
#[derive(Clone, Copy, Debug)]
pub enum Checked<'a> {
    /// The last completed world call of `kind`, `bytes` and `dtype`
    /// (waiting for it first where it may still run), checked with
    /// [`own::OwnOp::verify`].
    Last {
        /// Kind.
        kind: CollectiveKind,
        /// Size, bytes.
        bytes: u64,
        /// Element type.
        dtype: Dtype,
    },
    /// Trace collective `index` that [`Call::Trace`] just ran with `check`:
    /// wrong elements counted (bytes for data movement).
    Trace {
        /// Position among the prepared collectives.
        index: usize,
        /// The collective.
        c: &'a TraceCollective,
        /// Reduction it ran with.
        op: ReduceOp,
    },
}

/// A step of graph mode (CUDA graphs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphStep {
    /// Capture the device work issued until [`GraphStep::End`] into one
    /// graph instead of running it: nothing is timed, nothing executes.
    Begin,
    /// End the capture and instantiate the graph.
    End,
    /// Launch the captured graph once, in order after the work issued so far.
    Launch,
    /// Capture `n` world calls of `kind` and `bytes` back to back, each behind
    /// a timestamp, into a graph and launch it once: no host work per
    /// collective. Device intervals come from [`Backend::finish_pass`] as for
    /// [`Timing::BackToBack`]; returns the host clock around the launch call.
    Calls {
        /// Kind.
        kind: CollectiveKind,
        /// Size, bytes.
        bytes: u64,
        /// Element type.
        dtype: Dtype,
        /// All-reduces in the graph.
        n: u32,
    },
}

/// What a backend says of itself for the shard header and the runner.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendInfo {
    /// Which backend.
    pub kind: BackendKind,
    /// This rank and the world's size.
    pub rank: u32,
    /// Ranks in the world.
    pub world_size: u32,
    /// Whether [`Timing::BackToBack`] runs world all-reduces with no host wait
    /// between them; a backend whose every call completes on the host says `false`.
    pub back_to_back: bool,
}

/// What a backend offers the phase runner: every collective, compute and
/// timing step of a pass, in 16 methods; a backend that cannot do a step
/// refuses it in its own implementation, naming what would.
pub trait Backend {
    /// Which backend, where and how it times.
    fn info(&self) -> BackendInfo;
    /// Device description for the shard header (read at the end of the run).
    fn device(&self) -> DeviceIdentity;
    /// Fields this backend does not measure, with reasons.
    fn unmeasured(&self) -> Vec<Unmeasured>;
    /// Make the communicators of every group of `trace` and the buffers of
    /// `colls` (this rank's collectives of an imported trace that are not
    /// world all-reduces, one pass), and then of `p2p` (this rank's
    /// point-to-point program of an MPI trace), so that [`Call::Trace`] and
    /// [`Call::P2pStep`] can run any of them. Collective over the world:
    /// every rank calls it at the same point.
    fn prepare(&mut self, trace: &CommTrace, colls: &[TraceCollective], p2p: Option<&P2pPlan>) -> BackendResult<()>;
    /// Run `call`, timed as `timing` says.
    fn enqueue(&mut self, call: Call<'_>, timing: Timing) -> BackendResult<()>;
    /// Make everything that follows wait for the outstanding [`Timing::Async`]
    /// call (a host wait on CPU; a stream dependency on GPU). Returns the
    /// device interval when the backend measures it here.
    fn wait(&mut self) -> BackendResult<Option<DeviceInterval>>;
    /// Close a run of [`Timing::BackToBack`] calls.
    fn end_back_to_back(&mut self) -> BackendResult<()>;
    /// Issue the collectives that follow on the compute stream itself
    /// (`true`) or on a stream of their own joined by events (`false`); see
    /// [`crate::core::workload::CommStream`]. A backend without streams ignores it.
    fn collectives_on_compute_stream(&mut self, on: bool) -> BackendResult<()>;
    /// Run device work.
    fn compute(&mut self, work: Compute) -> BackendResult<()>;
    /// Record a marker in device order on the compute stream; `None` when the
    /// host clock already is the execution timeline (CPU).
    fn mark(&mut self) -> BackendResult<Option<usize>>;
    /// Wait until all work issued so far has finished (end of a pass only).
    fn synchronize(&mut self) -> BackendResult<()>;
    /// After `synchronize`: device intervals and marks of the pass on the
    /// host timeline, for the world calls of the pass in issue order.
    fn finish_pass(&mut self) -> BackendResult<PassTimings>;
    /// Count the wrong elements of a result and name the first; with
    /// `corrupt`, the result is spoiled first (the negative control: the
    /// check must fail). `Err` when the result could not be read.
    fn check(&mut self, what: Checked<'_>, corrupt: bool) -> BackendResult<CheckOutcome>;
    /// After a pass's last point-to-point step: with `check`, check every
    /// matched receive's length and bytes against its send (returns how many
    /// were checked; with `corrupt`, the first byte of each is spoiled
    /// first); then clear the pass for the next.
    fn end_p2p_pass(&mut self, check: bool, corrupt: bool) -> BackendResult<Option<u64>>;
    /// Graph mode (CUDA graphs); see [`GraphStep`]. Returns the host clock
    /// around the launch for [`GraphStep::Calls`], else `None`.
    fn graph(&mut self, step: GraphStep) -> BackendResult<Option<(u64, u64)>>;
    /// A barrier of the world's ranks, bounded by `timeout` when set (a
    /// stopped peer then fails with `refused[COLLECTIVE_TIMEOUT]`, naming `what`).
    fn barrier(&mut self, what: &str, phase: &str, timeout: Option<Duration>) -> anyhow::Result<()>;
}

/// What a backend call can fail with: typed, so a caller can tell a hung
/// collective from a failed library call from a misuse. Each message names
/// the call and, where there is one, the library's own code and text.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot do this at all (CUDA graphs on the CPU backend).
    #[error("{0}")]
    Unsupported(String),
    /// Called out of order, or with a size or type the prepared buffers cannot
    /// serve: a bug in the caller, named.
    #[error("{0}")]
    Misuse(String),
    /// An MPI call returned an error code.
    #[error("{call} failed with MPI error code {code}")]
    Mpi {
        /// The call and what it was doing.
        call: String,
        /// MPI's error code.
        code: i32,
    },
    /// A collective did not complete within `--collective-timeout-s`: the
    /// whole `refused[COLLECTIVE_TIMEOUT]` text, naming the operation and phase.
    #[error("{0}")]
    Timeout(String),
    /// A device runtime, driver or library call failed (CUDA, cuBLAS, NCCL,
    /// CUPTI), with the call and its reason.
    #[error(transparent)]
    Device(#[from] anyhow::Error),
}

/// The result of a backend call.
pub(crate) type BackendResult<T> = std::result::Result<T, BackendError>;

/// Requested backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// MPI collectives on host buffers.
    Cpu,
    /// NCCL on GPUs.
    Cuda,
    /// CUDA when a GPU and NCCL are usable, else CPU (the choice is printed).
    Auto,
}

impl BackendChoice {
    /// The backend this choice runs on here, and for `auto` a note saying
    /// which it chose and why. `cuda` without a usable GPU is an error naming the cause.
    pub fn resolve(self) -> anyhow::Result<(BackendKind, Option<String>)> {
        let gpu = cuda::unavailable_reason();
        Ok(match (self, gpu) {
            (BackendChoice::Cpu, _) => (BackendKind::Cpu, None),
            (BackendChoice::Cuda, Some(why)) => anyhow::bail!("--backend cuda is unavailable: {why}"),
            (BackendChoice::Cuda, None) => (BackendKind::Cuda, None),
            (BackendChoice::Auto, Some(why)) => (BackendKind::Cpu, Some(format!("backend auto: chose cpu ({why})"))),
            (BackendChoice::Auto, None) => {
                (BackendKind::Cuda, Some("backend auto: chose cuda (a GPU is visible)".into()))
            }
        })
    }
}

/// `MxNxK` of each GEMM shape, comma-separated (device facts).
pub(crate) fn describe_gemms(gemms: &[GemmShape]) -> String {
    gemms.iter().map(|g| format!("{}x{}x{}", g.m, g.n, g.k)).collect::<Vec<_>>().join(",")
}

/// Largest world for which the bf16 check's sums are exact: every partial
/// sum is an integer of at most `2 x world`, and bf16's 8-bit significand
/// represents every integer up to 256 exactly.
pub const BF16_EXACT_MAX_WORLD: u32 = 128;

/// Contribution of `rank` at element `i`, as a value of `dtype` (widened to f32).
///
/// f32: `(rank + 1) + (i mod 3)`. bf16: 2 where `(rank + i) mod 3 == 0`, else
/// 1, so that every partial sum is a small integer (exact in bf16, whatever
/// order the library adds in) and a result from the wrong element or rank
/// is caught.
pub fn contribution(dtype: Dtype, rank: u32, i: usize) -> f32 {
    match dtype {
        Dtype::F32 => (rank + 1) as f32 + (i % 3) as f32,
        Dtype::Bf16 => 1.0 + ((rank as usize + i) % 3 == 0) as u32 as f32,
    }
}

/// Expected element `i` after a sum all-reduce of [`contribution`] over `world_size` ranks.
pub fn expected_sum(dtype: Dtype, world_size: u32, i: usize) -> f32 {
    match dtype {
        Dtype::F32 => {
            let n = world_size as f32;
            n * (n + 1.0) / 2.0 + n * (i % 3) as f32
        }
        Dtype::Bf16 => {
            let twos = (0..world_size).filter(|r| (*r as usize + i) % 3 == 0).count() as f32;
            world_size as f32 + twos
        }
    }
}

/// Preconditions of an issue of `kind`, shared by the backends: nothing
/// outstanding, `bytes` whole elements of `dtype`, and within the
/// `capacity_bytes` allocated for the run's element type `allocated` (which
/// bounds both buffers of every kind: neither exceeds nccl-tests' size).
/// Returns the element count.
pub(crate) fn issue_count(
    kind: CollectiveKind,
    outstanding: bool,
    bytes: u64,
    dtype: Dtype,
    allocated: Dtype,
    capacity_bytes: u64,
) -> BackendResult<usize> {
    let what = kind.label();
    if outstanding {
        return Err(BackendError::Misuse("internal: a collective is already outstanding".into()));
    }
    if dtype != allocated {
        return Err(BackendError::Misuse(format!(
            "{what} of {} asked of buffers prepared for {}",
            dtype.name(),
            allocated.name()
        )));
    }
    if bytes % dtype.size_bytes() != 0 {
        return Err(BackendError::Misuse(format!(
            "{what} of {bytes} bytes is not a whole number of {} elements",
            dtype.name()
        )));
    }
    if bytes > capacity_bytes {
        return Err(BackendError::Misuse(format!(
            "{what} of {bytes} bytes exceeds the {capacity_bytes} bytes allocated"
        )));
    }
    usize::try_from(bytes / dtype.size_bytes())
        .map_err(|_| BackendError::Misuse(format!("{what} of {bytes} bytes: the element count does not fit in memory")))
}

/// What a result check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOutcome {
    /// Elements that differ from the expected value (nccl-tests' `#wrong`).
    pub wrong_elements: u64,
    /// The first wrong element, described; `None` when all are right.
    pub first_wrong: Option<String>,
}

/// bf16 bit patterns of [`contribution`] for elements `0..count`.
pub(crate) fn bf16_contributions(rank: u32, count: usize) -> Vec<u16> {
    (0..count).map(|i| half::bf16::from_f32(contribution(Dtype::Bf16, rank, i)).to_bits()).collect()
}

/// Widen bf16 bit patterns to f32 (exact).
pub(crate) fn bf16_to_f32(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|b| half::bf16::from_bits(*b).to_f32()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every partial sum of the bf16 contributions is exact in bf16, so the
    /// check holds whatever order a library reduces in (here: rank order and
    /// reverse rank order, rounding to bf16 after every addition).
    #[test]
    fn bf16_sums_are_exact_in_any_order_up_to_the_limit() {
        for world in [1u32, 2, 3, 4, 8, 64, BF16_EXACT_MAX_WORLD] {
            for i in 0..6 {
                for order in [false, true] {
                    let mut acc = half::bf16::from_f32(0.0);
                    for k in 0..world {
                        let r = if order { world - 1 - k } else { k };
                        acc = half::bf16::from_f32(acc.to_f32() + contribution(Dtype::Bf16, r, i));
                    }
                    assert_eq!(acc.to_f32(), expected_sum(Dtype::Bf16, world, i), "world {world} element {i}");
                }
            }
        }
    }

    #[test]
    fn a_result_from_the_wrong_element_fails_the_check() {
        let world = 4;
        let good: Vec<f32> = (0..9).map(|i| expected_sum(Dtype::Bf16, world, i)).collect();
        let op = own::OwnOp::new(CollectiveKind::AllReduce, 9 * 2, Dtype::Bf16, world, 0).unwrap();
        assert_eq!(op.verify(&good, Dtype::Bf16).wrong_elements, 0);
        let mut shifted = good.clone();
        shifted.rotate_left(1);
        let out = op.verify(&shifted, Dtype::Bf16);
        assert!(out.wrong_elements > 0 && out.first_wrong.as_deref().unwrap_or("").contains("element 0"), "{out:?}");
        let bits = bf16_contributions(1, 4);
        assert_eq!(bf16_to_f32(&bits), vec![1.0, 1.0, 2.0, 1.0]);
    }

    #[test]
    fn gathered_blocks_are_checked_per_rank() {
        let count = 5;
        let good: Vec<f32> = (0..3 * count).map(|j| contribution(Dtype::F32, (j / count) as u32, j % count)).collect();
        let gather = |bytes: u64, n: u32| own::OwnOp::new(CollectiveKind::AllGather, bytes, Dtype::F32, n, 0);
        let op = gather(3 * count as u64 * 4, 3).unwrap();
        assert_eq!(op.verify(&good, Dtype::F32).wrong_elements, 0);
        let mut swapped = good.clone();
        swapped.swap(0, count);
        let out = op.verify(&swapped, Dtype::F32);
        assert_eq!(out.wrong_elements, 2, "{out:?}");
        assert_eq!(gather(64, 4).unwrap().block_elems, 4);
        assert!(gather(8, 4).is_err());
        assert!(gather(24, 4).is_err());
    }

    #[test]
    fn issue_preconditions() {
        assert_eq!(issue_count(CollectiveKind::AllReduce, false, 64, Dtype::Bf16, Dtype::Bf16, 64).unwrap(), 32);
        for bad in [
            issue_count(CollectiveKind::AllReduce, false, 66, Dtype::F32, Dtype::F32, 128),
            issue_count(CollectiveKind::AllReduce, false, 64, Dtype::F32, Dtype::Bf16, 128),
            issue_count(CollectiveKind::AllReduce, false, 256, Dtype::F32, Dtype::F32, 128),
            issue_count(CollectiveKind::AllReduce, true, 4, Dtype::F32, Dtype::F32, 128),
        ] {
            assert!(matches!(bad, Err(BackendError::Misuse(_))), "{bad:?}");
        }
    }

    #[test]
    fn errors_are_typed_and_keep_their_text() {
        let e = BackendError::Mpi { call: "MPI_Wait on an all-reduce of 64 bytes".into(), code: 15 };
        assert_eq!(e.to_string(), "MPI_Wait on an all-reduce of 64 bytes failed with MPI error code 15");
        let e = BackendError::Timeout(
            "refused[COLLECTIVE_TIMEOUT]: collective timeout: the all-reduce of 64 bytes …".into(),
        );
        assert!(e.to_string().starts_with("refused[COLLECTIVE_TIMEOUT]: "));
        // at the CLI edge a backend error is an anyhow error whose chain keeps the variant
        let a: anyhow::Error = BackendError::Unsupported("--graph needs the cuda backend (CUDA graphs)".into()).into();
        assert!(matches!(a.downcast_ref::<BackendError>(), Some(BackendError::Unsupported(_))));
    }
}

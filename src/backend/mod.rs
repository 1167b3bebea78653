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
pub mod replay;
pub mod trace_share;

use crate::core::collective::CollectiveKind;
use crate::core::workload::GemmShape;
use crate::evidence::shard::{BackendKind, DeviceIdentity, Dtype, Unmeasured};

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
    pub kernel_anchor: Option<crate::evidence::shard::KernelAnchor>,
}

/// A kernel of a pass, on the host timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct PassKernel {
    /// Classification.
    pub kind: crate::evidence::shard::KernelKind,
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
    pub fn for_spec(spec: &crate::core::workload::WorkloadSpec) -> Self {
        Self { max_bytes: spec.max_bytes(), dtype: spec.dtype, gemms: spec.gemm_shapes(), weight_sets: spec.weight_sets(), membound_bytes: spec.membound_bytes }
    }

    /// What `spec` needs when its traced phases walk `trace`, whose
    /// all-reduces may be larger than the workload's own (its other
    /// collectives have their own buffers, [`Backend::prepare_trace_ops`]).
    pub fn for_spec_and_trace(spec: &crate::core::workload::WorkloadSpec, trace: Option<&crate::evidence::trace::SourceTrace>) -> Self {
        let mut p = Self::for_spec(spec);
        p.max_bytes = p.max_bytes.max(trace.and_then(|t| t.entries.iter().filter(|e| e.op.is_none()).map(|e| e.bytes).max()).unwrap_or(0));
        p
    }

    /// Timing events one pass may record: the workload's own, or a trace
    /// file's whole walk (up to 6 per collective, 2 per token, and margin),
    /// whichever is more.
    pub fn device_events_per_pass(spec: &crate::core::workload::WorkloadSpec, trace: Option<&crate::evidence::trace::SourceTrace>) -> usize {
        spec.device_events_per_pass().max(trace.map_or(0, |t| t.entries.len() * 6 + 2 * (spec.tokens + spec.warmup_tokens) as usize + 64))
    }

    /// Largest `m x k` (activations in) and `m x n` (activations out) over the GEMM shapes.
    pub fn activation_elems(&self) -> (usize, usize) {
        let ak = self.gemms.iter().map(|g| g.m as usize * g.k as usize).max().unwrap_or(0);
        let cn = self.gemms.iter().map(|g| g.m as usize * g.n as usize).max().unwrap_or(0);
        (ak, cn)
    }
}

/// `replay-trace`'s executor of one backend (MPI's or NCCL's), as `rank`'s
/// phases drive it: run a prepared collective to completion, then count the
/// wrong elements of its result.
pub trait TraceExecutor {
    /// Run prepared collective `i` to completion on the host.
    fn run_op(&mut self, i: usize, c: &crate::evidence::commtrace::TraceCollective, op: crate::core::workload::ReduceOp, check: bool) -> anyhow::Result<()>;
    /// The wrong elements of its result and the first named (with `corrupt`,
    /// the result spoiled first: the negative control).
    fn wrong_after(
        &mut self,
        i: usize,
        c: &crate::evidence::commtrace::TraceCollective,
        op: crate::core::workload::ReduceOp,
        corrupt: bool,
    ) -> anyhow::Result<(u64, Option<String>)>;
}

/// [`TraceExecutor`] for an executor type with the inherent `run`,
/// `count_wrong` and `corrupt` of `replay-trace`'s executors (MPI's and NCCL's).
macro_rules! trace_executor_impl {
    ($t:ty) => {
        impl $crate::backend::TraceExecutor for $t {
            fn run_op(
                &mut self,
                i: usize,
                c: &$crate::evidence::commtrace::TraceCollective,
                op: $crate::core::workload::ReduceOp,
                check: bool,
            ) -> anyhow::Result<()> {
                self.run(i, c, op, check, &mut || {}).map(|_| ())
            }

            fn wrong_after(
                &mut self,
                i: usize,
                c: &$crate::evidence::commtrace::TraceCollective,
                op: $crate::core::workload::ReduceOp,
                corrupt: bool,
            ) -> anyhow::Result<(u64, Option<String>)> {
                self.corrupt = corrupt;
                let found = self.count_wrong(i, c, op);
                self.corrupt = false;
                found
            }
        }
    };
}
pub(crate) use trace_executor_impl;

/// What a backend offers the phase runner.
pub trait Backend {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Device description for the shard header.
    fn device(&self) -> DeviceIdentity;
    /// Fields this backend does not measure, with reasons.
    fn unmeasured(&self) -> Vec<Unmeasured>;
    /// Start a collective of `kind` on the world communicator, of `bytes` in
    /// nccl-tests' size convention ([`own::OwnOp`]: an all-gather's `bytes` is
    /// the gathered buffer), a sum for the reducing kinds, rooted at rank 0, a
    /// point-to-point kind as a ring (send to the next rank, receive from the
    /// previous). Returns when the host may continue; the collective may
    /// still be running. Every kind of the table: the size, the root and the
    /// check come from its row ([`own::OwnOp`]), the library call from one
    /// arm per kind in each backend. Other groups and reductions run through
    /// the trace executor ([`Backend::prepare_trace_ops`]).
    fn issue(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<()>;
    /// Make everything that follows wait for the outstanding collective
    /// (a host wait on CPU; a stream dependency on GPU). Returns the device
    /// interval when the backend can measure it.
    fn wait(&mut self) -> BackendResult<Option<DeviceInterval>>;
    /// Run the all-reduce [`Backend::issue`] would start once more,
    /// complete when this returns and outside the pass's timings: the negative
    /// control `--inject-repeat` (a recorded collective that does N times the
    /// work). A backend that times each call on device events has none.
    fn extra_allreduce(&mut self, _bytes: u64, _dtype: Dtype) -> BackendResult<()> {
        Err(BackendError::Misuse("--inject-repeat: this backend times one call per recorded collective".into()))
    }
    /// Issue the collectives that follow on the compute stream itself
    /// (`true`) or on a stream of their own joined by events (`false`, the
    /// default); see [`crate::core::workload::CommStream`]. A backend without
    /// streams ignores it.
    fn collectives_on_compute_stream(&mut self, _on: bool) -> BackendResult<()> {
        Ok(())
    }
    /// Whether the isolated phase can enqueue collectives back to back, with
    /// no host wait between them ([`Backend::allreduce_back_to_back`]); a
    /// backend whose every collective completes on the host says `false`.
    fn back_to_back(&self) -> bool {
        false
    }
    /// Enqueue an all-reduce of `bytes` right behind the previous one, with no
    /// dependency on other work and no wait (nccl-tests' timed loop). Its
    /// device interval runs from its start to the next one's start, or to the
    /// closing boundary of [`Backend::end_back_to_back`], and is reported by
    /// [`Backend::finish_pass`] in issue order like any other collective.
    fn allreduce_back_to_back(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        let _ = (bytes, dtype);
        Err(BackendError::Unsupported("internal: this backend cannot run collectives back to back".into()))
    }
    /// Capture `n` all-reduces of `bytes` back to back, each behind a
    /// timestamp, into a CUDA graph and launch it once: no host work per
    /// collective at all. Returns the host clock around the launch call.
    /// Device intervals come from [`Backend::finish_pass`] as for
    /// [`Backend::allreduce_back_to_back`].
    fn allreduce_graph(&mut self, bytes: u64, dtype: Dtype, n: u32) -> BackendResult<(u64, u64)> {
        let _ = (bytes, dtype, n);
        Err(BackendError::Unsupported("--graph needs the cuda backend (CUDA graphs)".into()))
    }
    /// Close a run of back-to-back collectives.
    fn end_back_to_back(&mut self) -> BackendResult<()> {
        Ok(())
    }
    /// Run `units` matrix products of shape `shape` (an index into the
    /// plan's GEMMs) back to back, with the weights of `layer`.
    fn gemm(&mut self, shape: usize, layer: u32, units: u32) -> BackendResult<()>;
    /// Run `units` memory-bandwidth-bound kernels back to back.
    fn membound(&mut self, units: u32) -> BackendResult<()>;
    /// Wait until all work issued so far has finished (end of a pass only).
    fn synchronize(&mut self) -> BackendResult<()>;
    /// Record a marker in device order on the compute stream; `None` when the
    /// host clock already is the execution timeline (CPU).
    fn mark(&mut self) -> BackendResult<Option<usize>>;
    /// After `synchronize`: device intervals and marks of the pass on the host timeline.
    fn finish_pass(&mut self) -> BackendResult<PassTimings>;
    /// Validate the last completed collective of `kind` and `bytes` of
    /// `dtype` (waiting for it first where it may still run) with
    /// [`own::OwnOp::verify`]; `Err` when the result could not be read.
    fn check_last(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<CheckOutcome>;
    /// Test-only negative control: corrupt the last result so that a check must fail.
    fn corrupt_last_result(&mut self);
    /// Make the communicators of every group of `trace` and prepare the
    /// buffers of `colls` (this rank's collectives of an imported trace that
    /// are not world all-reduces, one pass), so that [`Backend::run_trace_op`]
    /// can run any of them. Collective over the world: every rank calls it
    /// at the same point. A backend without a trace executor refuses.
    fn prepare_trace_ops(&mut self, trace: &crate::evidence::commtrace::CommTrace, colls: &[crate::evidence::commtrace::TraceCollective]) -> BackendResult<()> {
        let _ = (trace, colls);
        Err(BackendError::Unsupported(
            "this backend runs only the world all-reduces of an imported trace in rank's phases: pass --trace-allreduce-only (the other kinds are then left out and counted), or run every kind with replay-trace".into(),
        ))
    }
    /// The trace executor [`Backend::prepare_trace_ops`] made, if any.
    fn trace_executor(&mut self) -> Option<&mut dyn TraceExecutor> {
        None
    }
    /// Run prepared trace collective `i` (`c`, any kind, on its group) to
    /// completion on the host, reducing with `op`: the host returns when its
    /// result is in place, so the caller's clock read right after is its end.
    /// `check` says the result will be checked ([`Backend::check_trace_op`]),
    /// which is never inside the timed call.
    fn run_trace_op(
        &mut self,
        i: usize,
        c: &crate::evidence::commtrace::TraceCollective,
        op: crate::core::workload::ReduceOp,
        check: bool,
    ) -> BackendResult<()> {
        let exec = self.trace_executor().ok_or_else(|| BackendError::Misuse("internal: no trace collectives were prepared".into()))?;
        exec.run_op(i, c, op, check)?;
        Ok(())
    }
    /// Validate the result of trace collective `i` that [`Backend::run_trace_op`]
    /// just ran with `check`: counts the wrong elements (bytes for data
    /// movement) and names the first (with `corrupt`, the negative control
    /// spoils the result first, so the check must fail).
    fn check_trace_op(
        &mut self,
        i: usize,
        c: &crate::evidence::commtrace::TraceCollective,
        op: crate::core::workload::ReduceOp,
        corrupt: bool,
    ) -> BackendResult<CheckOutcome> {
        let exec = self.trace_executor().ok_or_else(|| BackendError::Misuse("internal: no trace collectives were prepared".into()))?;
        let (wrong_elements, first_wrong) = exec.wrong_after(i, c, op, corrupt)?;
        Ok(CheckOutcome { wrong_elements, first_wrong })
    }
    /// Prepare this rank's point-to-point program of an imported MPI trace
    /// (`plan`) on the communicators [`Backend::prepare_trace_ops`] made:
    /// every buffer made before the first step. A backend without a
    /// point-to-point executor refuses.
    fn prepare_trace_p2p(&mut self, plan: &crate::evidence::commtrace::p2p::P2pPlan) -> BackendResult<()> {
        let _ = plan;
        Err(BackendError::Unsupported(
            "this backend does not run an MPI trace's point-to-point operations (mpi.p2p): run the phases with --backend cpu, or pass --trace-allreduce-only (the point-to-point operations are then left out and counted)".into(),
        ))
    }
    /// Run step `k` of the prepared point-to-point program (steps run in
    /// order, each to completion on the host: a post returns once posted).
    fn run_p2p_step(&mut self, k: usize) -> BackendResult<()> {
        let _ = k;
        Err(BackendError::Misuse("internal: no point-to-point program was prepared".into()))
    }
    /// After a pass's last step: with `check`, check every matched receive's
    /// length and bytes against its send (returns how many were checked);
    /// then clear the pass for the next.
    fn end_p2p_pass(&mut self, check: bool) -> BackendResult<Option<u64>> {
        let _ = check;
        Err(BackendError::Misuse("internal: no point-to-point program was prepared".into()))
    }
    /// Graph mode: capture the device work issued until [`Backend::end_graph`]
    /// into one graph instead of running it. While capturing, no timing is
    /// recorded and nothing executes.
    fn begin_graph(&mut self) -> BackendResult<()> {
        Err(BackendError::Unsupported("--graph needs the cuda backend (CUDA graphs)".into()))
    }
    /// Graph mode: end the capture and instantiate the graph.
    fn end_graph(&mut self) -> BackendResult<()> {
        Err(BackendError::Misuse("internal: no graph capture in progress".into()))
    }
    /// Graph mode: launch the captured graph once, in order after the work issued so far.
    fn launch_graph(&mut self) -> BackendResult<()> {
        Err(BackendError::Misuse("internal: no graph was captured".into()))
    }
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
        let gpu = crate::backend::cuda::unavailable_reason();
        Ok(match (self, gpu) {
            (BackendChoice::Cpu, _) => (BackendKind::Cpu, None),
            (BackendChoice::Cuda, Some(why)) => anyhow::bail!("--backend cuda is unavailable: {why}"),
            (BackendChoice::Cuda, None) => (BackendKind::Cuda, None),
            (BackendChoice::Auto, Some(why)) => (BackendKind::Cpu, Some(format!("backend auto: chose cpu ({why})"))),
            (BackendChoice::Auto, None) => (BackendKind::Cuda, Some("backend auto: chose cuda (a GPU is visible)".into())),
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
pub(crate) fn issue_count(kind: CollectiveKind, outstanding: bool, bytes: u64, dtype: Dtype, allocated: Dtype, capacity_bytes: u64) -> BackendResult<usize> {
    let what = kind.label();
    if outstanding {
        return Err(BackendError::Misuse("internal: a collective is already outstanding".into()));
    }
    if dtype != allocated {
        return Err(BackendError::Misuse(format!("{what} of {} asked of buffers prepared for {}", dtype.name(), allocated.name())));
    }
    if bytes % dtype.size_bytes() != 0 {
        return Err(BackendError::Misuse(format!("{what} of {bytes} bytes is not a whole number of {} elements", dtype.name())));
    }
    if bytes > capacity_bytes {
        return Err(BackendError::Misuse(format!("{what} of {bytes} bytes exceeds the {capacity_bytes} bytes allocated")));
    }
    usize::try_from(bytes / dtype.size_bytes()).map_err(|_| BackendError::Misuse(format!("{what} of {bytes} bytes: the element count does not fit in memory")))
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
        let e = BackendError::Timeout("refused[COLLECTIVE_TIMEOUT]: collective timeout: the all-reduce of 64 bytes …".into());
        assert!(e.to_string().starts_with("refused[COLLECTIVE_TIMEOUT]: "));
        // at the CLI edge a backend error is an anyhow error whose chain keeps the variant
        let a: anyhow::Error = BackendError::Unsupported("--graph needs the cuda backend (CUDA graphs)".into()).into();
        assert!(matches!(a.downcast_ref::<BackendError>(), Some(BackendError::Unsupported(_))));
    }
}

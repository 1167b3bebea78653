//! Execution backends behind one trait.
//!
//! A backend owns the communicator, the buffers and the compute resources of
//! one rank. The phase runner ([`crate::phases`]) decides *when* to issue,
//! compute and wait; the backend decides *how*. Consumes: the workload spec
//! (buffer sizes, GEMM shape). Produces: device intervals where it can measure
//! them and a list of the fields it cannot. Refuses: a second outstanding
//! collective, a wait without an issue, sizes larger than its buffers.
pub mod cpu;
pub mod cuda;

use crate::shard::{BackendKind, DeviceIdentity, Unmeasured};
use anyhow::Result;

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
}

/// A kernel of a pass, on the host timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct PassKernel {
    /// Classification.
    pub kind: crate::shard::KernelKind,
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

/// What a backend offers the phase runner.
pub trait Backend {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Device description for the shard header.
    fn device(&self) -> DeviceIdentity;
    /// Fields this backend does not measure, with reasons.
    fn unmeasured(&self) -> Vec<Unmeasured>;
    /// Start an all-reduce (sum, f32) of `bytes` on the world communicator.
    /// Returns when the host may continue; the collective may still be running.
    fn issue_allreduce(&mut self, bytes: u64) -> Result<()>;
    /// Make everything that follows wait for the outstanding all-reduce
    /// (a host wait on CPU; a stream dependency on GPU). Returns the device
    /// interval when the backend can measure it.
    fn wait_allreduce(&mut self) -> Result<Option<DeviceInterval>>;
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
    fn allreduce_back_to_back(&mut self, bytes: u64) -> Result<()> {
        let _ = bytes;
        anyhow::bail!("internal: this backend cannot run collectives back to back")
    }
    /// Capture `n` all-reduces of `bytes` back to back, each behind a
    /// timestamp, into a CUDA graph and launch it once: no host work per
    /// collective at all. Returns the host clock around the launch call.
    /// Device intervals come from [`Backend::finish_pass`] as for
    /// [`Backend::allreduce_back_to_back`].
    fn allreduce_graph(&mut self, bytes: u64, n: u32) -> Result<(u64, u64)> {
        let _ = (bytes, n);
        anyhow::bail!("--graph needs the cuda backend (CUDA graphs)")
    }
    /// Close a run of back-to-back collectives.
    fn end_back_to_back(&mut self) -> Result<()> {
        Ok(())
    }
    /// Run `units` matrix products back to back.
    fn gemm(&mut self, units: u32) -> Result<()>;
    /// Run `units` memory-bandwidth-bound kernels back to back.
    fn membound(&mut self, units: u32) -> Result<()>;
    /// Wait until all work issued so far has finished (end of a pass only).
    fn synchronize(&mut self) -> Result<()>;
    /// Record a marker in device order on the compute stream; `None` when the
    /// host clock already is the execution timeline (CPU).
    fn mark(&mut self) -> Result<Option<usize>>;
    /// After `synchronize`: device intervals and marks of the pass on the host timeline.
    fn finish_pass(&mut self) -> Result<PassTimings>;
    /// Validate the last completed all-reduce of `bytes` (waiting for it
    /// first where it may still run); `Err` when the result could not be read.
    fn check_last_allreduce(&mut self, bytes: u64) -> Result<CheckOutcome>;
    /// Test-only negative control: corrupt the last result so that a check must fail.
    fn corrupt_last_result(&mut self);
}

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

/// Expected element value after a sum all-reduce of the pattern every rank
/// contributes: rank r sends `(r + 1) + (i mod 3)` at element i.
pub fn expected_sum(world_size: u32, i: usize) -> f32 {
    let n = world_size as f32;
    n * (n + 1.0) / 2.0 + n * (i % 3) as f32
}

/// Preconditions of an issue, shared by the backends: nothing outstanding,
/// and `bytes` fits the `capacity_elems` f32 allocated. Returns the element count.
pub fn issue_count(outstanding: bool, bytes: u64, capacity_elems: usize) -> Result<usize> {
    if outstanding {
        anyhow::bail!("internal: an all-reduce is already outstanding");
    }
    let count = usize::try_from(bytes / 4)?;
    if count > capacity_elems {
        anyhow::bail!("all-reduce of {bytes} bytes exceeds the {} bytes allocated", capacity_elems * 4);
    }
    Ok(count)
}

/// What a result check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOutcome {
    /// Elements that differ from the expected value (nccl-tests' `#wrong`).
    pub wrong_elements: u64,
    /// The first wrong element, described; `None` when all are right.
    pub first_wrong: Option<String>,
}

/// Compare a reduced buffer with [`expected_sum`]: how many elements are
/// wrong, and the first of them.
pub fn verify_sum(values: &[f32], world_size: u32) -> CheckOutcome {
    let mut out = CheckOutcome { wrong_elements: 0, first_wrong: None };
    for (i, &got) in values.iter().enumerate() {
        let want = expected_sum(world_size, i);
        if got != want {
            out.wrong_elements += 1;
            if out.first_wrong.is_none() {
                out.first_wrong = Some(format!("element {i} is {got}, expected {want}"));
            }
        }
    }
    out
}

/// Contribution of `rank` at element `i` (see [`expected_sum`]).
pub fn contribution(rank: u32, i: usize) -> f32 {
    (rank + 1) as f32 + (i % 3) as f32
}

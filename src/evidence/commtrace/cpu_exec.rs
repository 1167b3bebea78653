//! `replay-trace`: run an imported communication trace on the CPU backend.
//!
//! Consumes a [`CommTrace`] and this process's MPI world (the trace's world
//! size must match). Produces, per collective of this rank in trace order,
//! what ran: kind, group, dtype, elements, reduction, the target gap from the
//! trace and the gap achieved, the host time the blocking call took, and
//! whether its result was validated. Every process group becomes a
//! sub-communicator (`MPI_Comm_split`, key = group rank, so member order is
//! the trace's), created in name order on every rank. Kinds map onto MPI
//! (MPI-3.1 standard, chapter 5): all-reduce `MPI_Allreduce`, all-gather
//! `MPI_Allgather`, reduce-scatter `MPI_Reduce_scatter_block`, broadcast
//! `MPI_Bcast`, reduce `MPI_Reduce`, all-to-all(v) `MPI_Alltoallv`, barrier
//! `MPI_Barrier`, send/recv `MPI_Send`/`MPI_Recv`.
//!
//! Data movement (gather, broadcast, all-to-all, point-to-point) moves the
//! recorded bytes (`MPI_BYTE`, any dtype). Reductions of f32 use `MPI_FLOAT`;
//! bf16 and f16 have no MPI type, so they are reduced in f32 on the upcast
//! values (twice the bytes on the wire; recorded per collective as
//! `wire_bytes`) and rounded back. Other dtypes are refused for reductions.
//! The reduction is `--op`, else sum: the traces do not record it, and NCCL's
//! kernel names do not show it (every reduction kernel is named after its
//! `Sum` specialisation since NCCL 2.19); which one applied is recorded with
//! its source.
//!
//! `--check` validates every collective: each rank contributes a known
//! pattern (small integers, exact in bf16 and f16) and the result is compared
//! element by element with what the operation must produce. As on the cuda
//! backend, every buffer is allocated and filled before the replay, the
//! results of the warm-up pass are cleared before the timed one, and the
//! checks run after it, so that only the pacing wait lies between two
//! collectives ([`TraceRunner`] is what each backend provides). Pacing
//! (`--pace gaps`) waits, before each collective, the trace's gap from the
//! previous collective's completion (device interval where recorded, else
//! host operator) by spinning on the monotonic clock; an execution trace has
//! no times and is refused for pacing. Refuses: a world size other than the
//! trace's, a message past MPI's `int` count, an unsupported reduction dtype.
use super::{CommTrace, TraceCollective, TraceDtype, TraceKind};
use anyhow::{bail, Context, Result};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

pub use crate::core::workload::ReduceOp;

/// How collectives are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pace {
    /// Wait the trace's gap before each collective.
    Gaps,
    /// Back to back.
    None,
    /// Re-create the trace's compute kernels as device work of their
    /// recorded durations on their recorded streams, with the collectives
    /// between them (cuda: one gated asynchronous pass, docs/WORKLOADS.md;
    /// cpu: the compute is spun on the rank's one thread, in launch order,
    /// before each collective).
    Workload,
    /// The trace's gaps (recorded device gaps where the trace has device
    /// times) as device work before each collective, in the workload pace's
    /// gated asynchronous pass: the host's scheduling no longer moves a gap
    /// (cuda only).
    DeviceGaps,
}

/// What one collective did on this rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecRecord {
    /// Position in this rank's trace order.
    pub index: u32,
    /// Kind.
    pub kind: TraceKind,
    /// Group name.
    pub group: String,
    /// Sequence number from the trace.
    pub seq: u64,
    /// Dtype.
    pub dtype: TraceDtype,
    /// Input elements.
    pub in_elems: u64,
    /// Output elements.
    pub out_elems: u64,
    /// Bytes this rank handed to MPI as input (f32 for bf16/f16 reductions).
    pub wire_bytes: u64,
    /// Reduction, for reducing kinds.
    pub op: Option<ReduceOp>,
    /// Where the reduction came from (`--op`, or `default`: sum, the trace not recording it).
    pub op_source: Option<String>,
    /// Gap the trace asks for, where paced.
    pub target_gap_ns: Option<u64>,
    /// Gap achieved: this issue minus the previous collective's return.
    pub actual_gap_ns: u64,
    /// Host time of the blocking call.
    pub elapsed_ns: u64,
    /// Whether the result was validated (and passed: a failure stops the run).
    pub checked: bool,
    /// Kernels CUPTI recorded starting within this collective's timed call,
    /// in start order (cuda backend with `--cupti`; names as CUPTI gives
    /// them, mangled). Absent when not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<String>>,
    /// Workload pace: compute kernels of the trace re-created before this
    /// collective (after the previous one), and their recorded durations' sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_ops: Option<u32>,
    /// Workload pace: the recorded durations of those kernels, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_recorded_ns: Option<u64>,
    /// Workload pace on the cuda backend: the collective's device interval,
    /// ns after the pass's gate opened (CUDA events on its stream). With
    /// these, `elapsed_ns` is the device interval and `actual_gap_ns` the
    /// device gap after the previous collective, not host times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_start_ns: Option<u64>,
    /// Workload pace on the cuda backend: end of the device interval, as above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_end_ns: Option<u64>,
}

impl ExecRecord {
    /// Collective `i` of rank `rank` as run with reduction `op` (from
    /// `op_source`; recorded for reducing kinds only), `check` asked for and
    /// `wire_bytes` handed to the library; its timing left empty (0, absent)
    /// for the executor to fill. A check covers every kind's result where it
    /// lands: not a send's (its receiver checks), a barrier's, or a reduce's
    /// off the root.
    pub fn untimed(i: usize, c: &TraceCollective, rank: u32, (op, op_source): (ReduceOp, &str), check: bool, wire_bytes: u64) -> Self {
        let reducing = matches!(c.kind, TraceKind::AllReduce | TraceKind::Reduce | TraceKind::ReduceScatter);
        ExecRecord {
            index: i as u32,
            kind: c.kind,
            group: c.group.clone(),
            seq: c.seq,
            dtype: c.dtype,
            in_elems: c.in_elems,
            out_elems: c.out_elems,
            wire_bytes,
            op: reducing.then_some(op),
            op_source: reducing.then(|| op_source.to_string()),
            target_gap_ns: None,
            actual_gap_ns: 0,
            elapsed_ns: 0,
            checked: check && !(c.kind == TraceKind::Reduce && c.root != Some(rank)) && c.kind != TraceKind::Barrier && c.kind != TraceKind::Send,
            kernels: None,
            compute_ops: None,
            compute_recorded_ns: None,
            device_start_ns: None,
            device_end_ns: None,
        }
    }
}

/// Format version of [`WorkloadReport`] (2 added `compute_launches`, 3 `stands_for`, 4 `gap_transition`).
pub const WORKLOAD_REPORT_FORMAT_VERSION: u32 = 4;

/// What one rank's workload pass (`--pace workload`) did as a whole,
/// written beside its records as `replay-trace.rank-N.workload.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkloadReport {
    /// Format version of this record (4; 4 added `gap_transition`).
    pub format_version: u32,
    /// What the device work before each collective stands for: `compute`
    /// (`--pace workload`: the recorded kernels) or `gaps` (`--pace
    /// device-gaps`: the recorded gap between collectives). Format 1 and 2
    /// records are `compute`.
    #[serde(default = "stands_for_compute")]
    pub stands_for: String,
    /// World rank.
    pub rank: u32,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// What stands in for the trace's compute kernels, in words.
    pub compute_model: String,
    /// The trace's streams this rank used, in first-use order
    /// (`unrecorded` for operations the source gave none).
    pub streams: Vec<String>,
    /// Whether every cross-stream dependency came from the recorded device
    /// timeline (`false`: some came from launch order, times being missing).
    pub dependencies_from_timeline: bool,
    /// Cross-stream waits the plan inserted.
    pub cross_stream_waits: u32,
    /// Compute kernels re-created in the pass.
    pub compute_ops: u32,
    /// Their recorded durations, summed.
    pub compute_recorded_ns: u64,
    /// cuda: launches standing for them (consecutive kernels of a stream
    /// with nothing waiting between them are one launch of their summed
    /// duration; a launch cannot be shorter than the spin's floor). Absent
    /// on cpu and in format 1.
    #[serde(default)]
    pub compute_launches: Option<u32>,
    /// Collectives in the pass.
    pub collectives: u32,
    /// cuda: whether the pass was enqueued behind a gate the host opened
    /// after enqueuing `gate_lookahead_ops` operations, so that the device
    /// ran them back to back as the source's device did.
    pub gated: Option<bool>,
    /// cuda: operations enqueued before the gate opened (at most 192, of
    /// them at most 32 collectives; all of a shorter pass).
    pub gate_lookahead_ops: Option<u32>,
    /// cuda: calibration of the device work standing in for compute.
    pub spin: Option<SpinCalibration>,
    /// cuda: the collective-to-compute transition measured in the warm-up
    /// pass and taken off each gap of the timed pass. Absent on cpu, in
    /// formats 1 to 3, with `--no-warmup` (the gaps then carry it) and where
    /// no two consecutive collectives of a stream have compute between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_transition: Option<GapTransition>,
    /// cuda: device time from the gate opening to the end of the last
    /// stream's work (CUDA events). Absent on cpu.
    pub pass_device_ns: Option<u64>,
    /// Host time of the pass: cuda from the gate's opening to every stream's
    /// completion seen by the host; cpu from the first collective's pacing
    /// start to the last collective's return.
    pub pass_host_ns: u64,
    /// The same work on the source's device timeline: the first operation's
    /// recorded start to the last one's recorded end (this rank's trace
    /// clock). Absent where a time is missing.
    pub trace_span_ns: Option<u64>,
}

fn stands_for_compute() -> String {
    "compute".into()
}

/// What a device gap between two collectives costs beyond the compute in
/// it: the previous collective's end event, the compute's launch after a
/// collective kernel rather than after a spin (which the spin's own
/// calibration does not see), the next collective's start event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GapTransition {
    /// Median over the warm-up pass's gaps (consecutive collectives of one
    /// stream with compute between them and no cross-stream wait) of the
    /// device gap less what its spins take back to back (calibrated, each
    /// at least the launch floor), ns; negative where the gaps came out short.
    pub warmup_median_ns: f64,
    /// Gaps it is the median of.
    pub gaps: u32,
    /// Taken off the compute of every gap between consecutive collectives of
    /// one stream in the timed pass (the median where positive, else 0), no
    /// launch going below the floor: a gap too short to lose it all stays long.
    pub applied_ns: u64,
}

/// How a spinning kernel's duration was matched to recorded durations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpinCalibration {
    /// Thread blocks per launch (one per multiprocessor).
    pub blocks: u32,
    /// Threads per block.
    pub threads_per_block: u32,
    /// Device time per launch of a zero-length spin, back to back on one
    /// stream (the launch's own cost): the shortest kernel it can stand for.
    pub floor_ns: f64,
    /// Device time a spin of `d` ns takes beyond `d`, back to back (median
    /// over the calibration lengths); subtracted from every request.
    pub excess_ns: f64,
    /// Check after correction: recorded length, spin requested, device time
    /// per launch achieved (back to back, 32 launches).
    pub points: Vec<SpinPoint>,
}

/// One calibration check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpinPoint {
    /// Duration to stand for.
    pub recorded_ns: u64,
    /// Spin requested after the correction.
    pub requested_ns: u64,
    /// Device time per launch achieved.
    pub achieved_ns: f64,
}

/// What a replay produced on one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOutput {
    /// One record per collective of the timed pass.
    pub records: Vec<ExecRecord>,
    /// The workload pace's pass as a whole.
    pub workload: Option<WorkloadReport>,
}

/// Value rank `r` contributes at element `i` of a reducing collective.
pub fn contribution(r: u32, i: usize) -> f32 {
    (r + 1) as f32 + (i % 3) as f32
}

/// Byte rank `src` sends to rank `dst` at byte `i` of a data-movement collective.
pub fn payload(src: u32, dst: u32, i: usize) -> u8 {
    ((src as usize * 131 + dst as usize * 17 + i) % 251) as u8
}

/// Bytes of buffers the cpu backend prepares for one rank's replay at most (16 GiB).
pub const MAX_PREPARED_BYTES: u64 = 16 << 30;

/// One collective's buffers, made before the replay.
enum Bufs {
    /// Reductions: this rank's contributions (rounded to the dtype, sent as
    /// f32) and the f32 result.
    Reduce { send: Vec<f32>, out: Vec<f32> },
    /// Data movement: bytes sent and bytes received (a broadcast's one
    /// buffer is `out`, which the root fills before the replay).
    Bytes { send: Vec<u8>, out: Vec<u8> },
    /// All-to-all(v): bytes with MPI's counts and displacements.
    AllToAll { send: Vec<u8>, out: Vec<u8>, counts: [Vec<i32>; 4], layout: AllToAllLayout },
    /// Barrier.
    Nothing,
}

/// One collective, prepared.
struct CpuSlot {
    bufs: Bufs,
    /// Input bytes handed to MPI.
    wire: u64,
    /// Set when run: the reduction used and whether to check.
    ran: Option<(ReduceOp, bool)>,
}

/// Runs trace collectives on MPI sub-communicators.
pub struct CpuTraceExec {
    rank: u32,
    /// Negative control: corrupt every result on this rank before its check.
    pub corrupt: bool,
    comms: BTreeMap<String, (Vec<u32>, Option<SimpleCommunicator>)>,
    slots: Vec<CpuSlot>,
}

impl CpuTraceExec {
    /// Split `world` into every group of the trace (collective over `world`: every rank calls this).
    pub fn new(world: &SimpleCommunicator, trace: &CommTrace) -> Result<Self> {
        let rank = world.rank() as u32;
        trace.check_world_size(world.size() as u32)?;
        let mut comms = BTreeMap::new();
        for g in &trace.groups {
            let pos = g.members.iter().position(|&m| m == rank);
            let color = if pos.is_some() { Color::with_value(0) } else { Color::undefined() };
            let sub = world.split_by_color_with_key(color, pos.unwrap_or(0) as i32);
            comms.insert(g.name.clone(), (g.members.clone(), sub));
        }
        Ok(Self { rank, comms, corrupt: false, slots: Vec::new() })
    }

    fn group_of(&self, c: &TraceCollective) -> Result<(&[u32], &SimpleCommunicator)> {
        let (members, comm) = self.comms.get(&c.group).with_context(|| format!("group {:?} not in the trace", c.group))?;
        let comm = comm.as_ref().with_context(|| format!("rank {} is not a member of group {:?}", self.rank, c.group))?;
        Ok((members, comm))
    }

    /// Allocate and fill every collective's buffers (step 1), so that only
    /// the pacing wait and the MPI call lie between two collectives.
    pub fn prepare(&mut self, colls: &[TraceCollective]) -> Result<()> {
        // every buffer at once: refuse a trace whose buffers cannot fit before allocating any
        let mut total: u128 = 0;
        for c in colls {
            let e = c.dtype.size_bytes() as u128;
            let wide = if matches!(c.kind, TraceKind::AllReduce | TraceKind::Reduce | TraceKind::ReduceScatter) { 4 } else { e };
            total += (c.in_elems as u128 + c.out_elems as u128) * wide;
        }
        if total > MAX_PREPARED_BYTES as u128 {
            crate::refuse!(
                crate::core::refusal::Code::OverLimit,
                "rank {}: the trace's buffers need {total} bytes at once, over the cpu backend's {MAX_PREPARED_BYTES}-byte budget (every buffer is made before the replay, so that only the pacing wait lies between collectives); replay a shorter trace",
                self.rank
            );
        }
        self.slots =
            colls.iter().enumerate().map(|(i, c)| self.slot(c).with_context(|| format!("rank {}, collective {i}", self.rank))).collect::<Result<_>>()?;
        Ok(())
    }

    fn slot(&self, c: &TraceCollective) -> Result<CpuSlot> {
        let (members, _) = self.group_of(c)?;
        let n = members.len();
        let esize = c.dtype.size_bytes() as usize;
        let bytes = |elems: u64| -> Result<usize> {
            let b = usize::try_from(elems)?.checked_mul(esize).context("message size overflows")?;
            if i32::try_from(b).is_err() {
                bail!("{} of {b} bytes exceeds MPI's int count on the cpu backend", c.kind.name());
            }
            Ok(b)
        };
        Ok(match c.kind {
            TraceKind::AllReduce | TraceKind::Reduce | TraceKind::ReduceScatter => {
                let elems = usize::try_from(c.in_elems)?;
                bytes(c.in_elems)?;
                if !matches!(c.dtype, TraceDtype::F32 | TraceDtype::Bf16 | TraceDtype::F16) {
                    bail!("{} of {} is not supported on the cpu backend (f32, bf16, f16)", c.kind.name(), c.dtype);
                }
                // contributions rounded to the dtype, so the check is exact
                let send: Vec<f32> = (0..elems).map(|i| round_to(c.dtype, contribution(self.rank, i))).collect();
                let out = vec![0f32; usize::try_from(c.out_elems)?];
                CpuSlot { bufs: Bufs::Reduce { send, out }, wire: (elems * 4) as u64, ran: None }
            }
            TraceKind::AllGather => {
                let b = bytes(c.in_elems)?;
                let send: Vec<u8> = (0..b).map(|i| payload(self.rank, u32::MAX, i)).collect();
                CpuSlot { bufs: Bufs::Bytes { send, out: vec![0u8; b * n] }, wire: b as u64, ran: None }
            }
            TraceKind::Broadcast => {
                let b = bytes(c.in_elems)?;
                let root = c.root.context("broadcast without a root")?;
                members.iter().position(|&m| m == root).context("root not in the group")?;
                let out: Vec<u8> = if self.rank == root { (0..b).map(|i| payload(root, u32::MAX, i)).collect() } else { vec![0; b] };
                CpuSlot { bufs: Bufs::Bytes { send: Vec::new(), out }, wire: b as u64, ran: None }
            }
            TraceKind::AllToAll => {
                let layout = AllToAllLayout::of(c, n)?;
                let int = |v: &[usize], what: &str| -> Result<Vec<i32>> {
                    v.iter()
                        .map(|&x| i32::try_from(x))
                        .collect::<std::result::Result<_, _>>()
                        .with_context(|| format!("all_to_all: a {what} exceeds MPI's int count on the cpu backend"))
                };
                let counts = [
                    int(&layout.send_bytes, "send count")?,
                    int(&layout.send_at, "send displacement")?,
                    int(&layout.recv_bytes, "receive count")?,
                    int(&layout.recv_at, "receive displacement")?,
                ];
                let send = layout.send_buffer(self.rank, members);
                let out = vec![0u8; layout.recv_bytes.iter().sum()];
                let wire = send.len() as u64;
                CpuSlot { bufs: Bufs::AllToAll { send, out, counts, layout }, wire, ran: None }
            }
            TraceKind::Barrier => CpuSlot { bufs: Bufs::Nothing, wire: 0, ran: None },
            TraceKind::Send | TraceKind::Recv => {
                let b = bytes(c.in_elems.max(c.out_elems))?;
                let peer = c.peer.context("point-to-point without a peer")?;
                members.iter().position(|&m| m == peer).context("peer not in the group")?;
                if c.kind == TraceKind::Send {
                    CpuSlot { bufs: Bufs::Bytes { send: (0..b).map(|i| payload(self.rank, peer, i)).collect(), out: Vec::new() }, wire: b as u64, ran: None }
                } else {
                    CpuSlot { bufs: Bufs::Bytes { send: Vec::new(), out: vec![0u8; b] }, wire: 0, ran: None }
                }
            }
        })
    }

    /// Run prepared collective `i` (step 2, blocking): `before_issue` (the
    /// pacing wait), then the MPI call. Returns the call's host time, the
    /// input bytes handed to MPI and when the call returned.
    pub fn run(&mut self, i: usize, c: &TraceCollective, op: ReduceOp, check: bool, before_issue: &mut dyn FnMut()) -> Result<(u64, u64, Instant)> {
        let (members, comm) = {
            let (m, comm) = self.comms.get(&c.group).with_context(|| format!("group {:?} not in the trace", c.group))?;
            (m.clone(), comm.as_ref().with_context(|| format!("rank {} is not a member of group {:?}", self.rank, c.group))?)
        };
        let me = comm.rank() as usize;
        let slot = self.slots.get_mut(i).context("collective not prepared")?;
        let t0;
        match (&mut slot.bufs, c.kind) {
            (Bufs::Reduce { send, out }, kind) => {
                // avg has no MPI operation: it runs as a sum, divided by the group size when checked
                let mpi_op = match op {
                    ReduceOp::Max => SystemOperation::max(),
                    ReduceOp::Min => SystemOperation::min(),
                    ReduceOp::Prod => SystemOperation::product(),
                    ReduceOp::Sum | ReduceOp::Avg => SystemOperation::sum(),
                };
                let root_local = c.root.and_then(|r| members.iter().position(|&m| m == r));
                before_issue();
                t0 = Instant::now();
                match kind {
                    TraceKind::AllReduce => comm.all_reduce_into(&send[..], &mut out[..], mpi_op),
                    TraceKind::ReduceScatter => comm.reduce_scatter_block_into(&send[..], &mut out[..], mpi_op),
                    _ => {
                        let root = comm.process_at_rank(root_local.context("reduce without a root in the group")? as i32);
                        if Some(me) == root_local {
                            root.reduce_into_root(&send[..], &mut out[..], mpi_op);
                        } else {
                            root.reduce_into(&send[..], mpi_op);
                        }
                    }
                }
            }
            (Bufs::Bytes { send, out }, TraceKind::AllGather) => {
                before_issue();
                t0 = Instant::now();
                comm.all_gather_into(&send[..], &mut out[..]);
            }
            (Bufs::Bytes { out, .. }, TraceKind::Broadcast) => {
                let root = c.root.and_then(|r| members.iter().position(|&m| m == r)).context("root not in the group")?;
                before_issue();
                t0 = Instant::now();
                comm.process_at_rank(root as i32).broadcast_into(&mut out[..]);
            }
            (Bufs::Bytes { send, out }, TraceKind::Send | TraceKind::Recv) => {
                let peer = c.peer.and_then(|p| members.iter().position(|&m| m == p)).context("peer not in the group")? as i32;
                before_issue();
                t0 = Instant::now();
                if c.kind == TraceKind::Send {
                    comm.process_at_rank(peer).send(&send[..]);
                } else {
                    comm.process_at_rank(peer).receive_into(&mut out[..]);
                }
            }
            (Bufs::AllToAll { send, out, counts, .. }, _) => {
                let sp = Partition::new(&send[..], &counts[0][..], &counts[1][..]);
                let mut rp = PartitionMut::new(&mut out[..], &counts[2][..], &counts[3][..]);
                before_issue();
                t0 = Instant::now();
                comm.all_to_all_varcount_into(&sp, &mut rp);
            }
            (Bufs::Nothing, _) => {
                before_issue();
                t0 = Instant::now();
                comm.barrier();
            }
            (_, kind) => bail!("collective {i}: its buffers were prepared for another kind than {}", kind.name()),
        }
        let done = Instant::now();
        slot.ran = Some((op, check));
        Ok(((done - t0).as_nanos() as u64, slot.wire, done))
    }

    /// Clear every result a pass wrote (between the warm-up and the timed
    /// pass), so that a check can only pass on what the timed pass delivered.
    /// A broadcast root's buffer is its input and is kept.
    pub fn reset(&mut self, colls: &[TraceCollective]) {
        for (c, slot) in colls.iter().zip(&mut self.slots) {
            match &mut slot.bufs {
                Bufs::Reduce { out, .. } => out.iter_mut().for_each(|x| *x = 0.0),
                Bufs::Bytes { out, .. } if !(c.kind == TraceKind::Broadcast && c.root == Some(self.rank)) => out.iter_mut().for_each(|b| *b = 0),
                Bufs::AllToAll { out, .. } => out.iter_mut().for_each(|b| *b = 0),
                _ => {}
            }
        }
    }

    /// Check every result that was asked to be checked (step 3).
    pub fn verify(&self, colls: &[TraceCollective]) -> Result<()> {
        for (i, (c, slot)) in colls.iter().zip(&self.slots).enumerate() {
            if let Some((op, true)) = slot.ran {
                self.verify_one(c, slot, op).with_context(|| format!("rank {}, collective {i}", self.rank))?;
            }
        }
        Ok(())
    }

    /// Validate prepared collective `i` (`c`) right after it ran with `op`:
    /// `Err` names the first wrong element or byte. Used by `rank`'s trace
    /// phases, which check each collective as it completes (its buffers are
    /// reused by the next pass).
    pub fn check_one(&self, i: usize, c: &TraceCollective, op: ReduceOp) -> Result<()> {
        let slot = self.slots.get(i).context("collective not prepared")?;
        self.verify_one(c, slot, op)
    }

    /// Validate prepared collective `i` (`c`) right after it ran with `op`
    /// and count what is wrong, as nccl-tests' `#wrong` does: the elements
    /// (reductions) or bytes (data movement) that differ, and the first of
    /// them described; `(0, None)` where the result is right or lands
    /// elsewhere (a send's, a barrier's, a reduce's off the root).
    pub fn count_wrong(&self, i: usize, c: &TraceCollective, op: ReduceOp) -> Result<(u64, Option<String>)> {
        let slot = self.slots.get(i).context("collective not prepared")?;
        self.wrong_in(c, slot, op)
    }

    fn verify_one(&self, c: &TraceCollective, slot: &CpuSlot, op: ReduceOp) -> Result<()> {
        match self.wrong_in(c, slot, op)? {
            (0, _) => Ok(()),
            (_, first) => bail!("--check: {} #{} on group {:?} ({}): {}", c.kind.name(), c.seq, c.group, c.dtype, first.unwrap_or_default()),
        }
    }

    fn wrong_in(&self, c: &TraceCollective, slot: &CpuSlot, op: ReduceOp) -> Result<(u64, Option<String>)> {
        let (members, comm) = self.group_of(c)?;
        let (n, me) = (members.len(), comm.rank() as usize);
        let mut tally = Tally::default();
        let spoil = |mut v: Vec<u8>| {
            if self.corrupt {
                if let Some(b) = v.first_mut() {
                    *b = b.wrapping_add(1);
                }
            }
            v
        };
        match (&slot.bufs, c.kind) {
            (Bufs::Reduce { out, .. }, kind) => {
                let root_local = c.root.and_then(|r| members.iter().position(|&m| m == r));
                if kind == TraceKind::Reduce && root_local != Some(me) {
                    return Ok((0, None));
                }
                // what the library would hand back in the dtype: the mean for avg, rounded
                let mut got: Vec<f32> = out.iter().map(|&x| round_to(c.dtype, if op == ReduceOp::Avg { x / n as f32 } else { x })).collect();
                if self.corrupt {
                    got.iter_mut().take(1).for_each(|x| *x += 1.0);
                }
                let offset = if kind == TraceKind::ReduceScatter { me * out.len() } else { 0 };
                for (i, &g) in got.iter().enumerate() {
                    let want = expected_reduction(c.dtype, members, offset + i, op);
                    if g != want {
                        tally.add(|| format!("element {i} is {g}, expected {want}"));
                    }
                }
            }
            (Bufs::Bytes { out, .. }, TraceKind::AllGather) => {
                let out = spoil(out.clone());
                let b = out.len() / n.max(1);
                for (j, &src) in members.iter().enumerate() {
                    for i in (0..b).filter(|&i| out[j * b + i] != payload(src, u32::MAX, i)) {
                        tally.add(|| format!("byte {i} of rank {src}'s block is wrong"));
                    }
                }
            }
            (Bufs::Bytes { out, .. }, TraceKind::Broadcast) => {
                let root = c.root.context("broadcast without a root")?;
                let out = spoil(out.clone());
                for i in (0..out.len()).filter(|&i| out[i] != payload(root, u32::MAX, i)) {
                    tally.add(|| format!("byte {i} differs from root {root}'s"));
                }
            }
            (Bufs::Bytes { out, .. }, TraceKind::Recv) => {
                let peer = c.peer.context("point-to-point without a peer")?;
                let out = spoil(out.clone());
                for i in (0..out.len()).filter(|&i| out[i] != payload(peer, self.rank, i)) {
                    tally.add(|| format!("byte {i} from rank {peer} is wrong"));
                }
            }
            (Bufs::AllToAll { out, layout, .. }, _) => {
                let out = spoil(out.clone());
                for (i, src) in layout.wrong(&out, self.rank, members) {
                    tally.add(|| format!("byte {i} from rank {src} is wrong"));
                }
            }
            // a send's result is checked at its receiver; a barrier has none
            _ => {}
        }
        Ok((tally.wrong, tally.first))
    }
}

/// Wrong elements found by a check, and the first of them described.
#[derive(Default)]
pub struct Tally {
    /// How many.
    pub wrong: u64,
    /// The first, described.
    pub first: Option<String>,
}

impl Tally {
    /// Count one more; describe it if it is the first.
    pub fn add(&mut self, describe: impl FnOnce() -> String) {
        self.wrong += 1;
        if self.first.is_none() {
            self.first = Some(describe());
        }
    }
}

/// Byte counts and offsets of an all-to-all(v), per member of the group (in
/// group order), from the recorded split sizes, else an even split.
pub struct AllToAllLayout {
    /// Bytes sent to each member.
    pub send_bytes: Vec<usize>,
    /// Bytes received from each member.
    pub recv_bytes: Vec<usize>,
    /// Offset of each member's block in the send buffer.
    pub send_at: Vec<usize>,
    /// Offset of each member's block in the receive buffer.
    pub recv_at: Vec<usize>,
}

impl AllToAllLayout {
    /// The layout of `c` in a group of `n`.
    pub fn of(c: &TraceCollective, n: usize) -> Result<Self> {
        let esize = c.dtype.size_bytes() as usize;
        let ins = c.in_split_elems.clone().unwrap_or_else(|| vec![c.in_elems / n as u64; n]);
        let outs = c.out_split_elems.clone().unwrap_or_else(|| vec![c.out_elems / n as u64; n]);
        let to_bytes = |v: &[u64]| v.iter().map(|&e| usize::try_from(e)?.checked_mul(esize).context("message size overflows")).collect::<Result<Vec<usize>>>();
        let (send_bytes, recv_bytes) = (to_bytes(&ins)?, to_bytes(&outs)?);
        let offsets = |v: &[usize]| v.iter().scan(0usize, |acc, &x| Some(std::mem::replace(acc, *acc + x))).collect::<Vec<usize>>();
        Ok(Self { send_at: offsets(&send_bytes), recv_at: offsets(&recv_bytes), send_bytes, recv_bytes })
    }

    /// What `rank` sends: [`payload`]`(rank, member, i)` in each member's block.
    pub fn send_buffer(&self, rank: u32, members: &[u32]) -> Vec<u8> {
        let mut buf = vec![0u8; self.send_bytes.iter().sum()];
        for (j, &dst) in members.iter().enumerate() {
            for i in 0..self.send_bytes[j] {
                buf[self.send_at[j] + i] = payload(rank, dst, i);
            }
        }
        buf
    }

    /// The first byte `rank` received wrong: (byte within its block, source member).
    pub fn first_wrong(&self, out: &[u8], rank: u32, members: &[u32]) -> Option<(usize, u32)> {
        self.wrong(out, rank, members).next()
    }

    /// Every byte `rank` received wrong, in order: (byte within its block, source member).
    pub fn wrong<'a>(&'a self, out: &'a [u8], rank: u32, members: &'a [u32]) -> impl Iterator<Item = (usize, u32)> + 'a {
        members
            .iter()
            .enumerate()
            .flat_map(move |(j, &src)| (0..self.recv_bytes[j]).filter(move |&i| out[self.recv_at[j] + i] != payload(src, rank, i)).map(move |i| (i, src)))
    }
}

/// What element `i` of a reduction over `members`' contributions must be, in `dtype`.
pub fn expected_reduction(dtype: TraceDtype, members: &[u32], i: usize, op: ReduceOp) -> f32 {
    let vals = members.iter().map(|&r| round_to(dtype, contribution(r, i)));
    let want = match op {
        ReduceOp::Sum => vals.sum::<f32>(),
        ReduceOp::Avg => vals.sum::<f32>() / members.len() as f32,
        ReduceOp::Max => vals.fold(f32::MIN, f32::max),
        ReduceOp::Min => vals.fold(f32::MAX, f32::min),
        ReduceOp::Prod => vals.product::<f32>(),
    };
    round_to(dtype, want)
}

/// Round an f32 to the nearest value of `dtype` (identity for f32).
pub fn round_to(dtype: TraceDtype, x: f32) -> f32 {
    match dtype {
        TraceDtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        TraceDtype::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Target gap before each of this rank's collectives: from the previous
/// collective's end to this one's start (device interval where recorded, else
/// the host operator); the first is 0. `None` when the trace has no times.
pub fn gaps_ns(colls: &[TraceCollective]) -> Option<Vec<u64>> {
    let span = |c: &TraceCollective| -> Option<(u64, u64)> {
        match &c.device {
            Some(d) => Some((d.start_ns, d.end_ns)),
            None => Some((c.host_start_ns?, c.host_start_ns? + c.host_duration_ns?)),
        }
    };
    let spans: Option<Vec<(u64, u64)>> = colls.iter().map(span).collect();
    let spans = spans?;
    Some(spans.iter().enumerate().map(|(i, s)| if i == 0 { 0 } else { s.0.saturating_sub(spans[i - 1].1) }).collect())
}

/// [`gaps_ns`] for a replay paced by them, refused (naming the way out)
/// where the trace records no times.
pub fn paced_gaps_ns(colls: &[TraceCollective]) -> Result<Vec<u64>> {
    gaps_ns(colls).context("this trace records no times (an execution trace): pace with --pace none, or import the profiler (Kineto) trace")
}

/// Run this rank's collectives of `trace` in order.
pub fn replay(
    world: &SimpleCommunicator,
    trace: &CommTrace,
    op: Option<ReduceOp>,
    pace: Pace,
    check: bool,
    warmup: bool,
    corrupt_rank: Option<u32>,
) -> Result<ReplayOutput> {
    let mut exec = CpuTraceExec::new(world, trace)?;
    let rank = world.rank() as u32;
    exec.corrupt = corrupt_rank == Some(rank);
    let mine_all = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    let mine = &mine_all.collectives;
    // refused before any buffer is made
    let plan = match pace {
        Pace::Workload => Some(super::workload_plan::plan(mine_all)?),
        Pace::DeviceGaps => bail!("--pace device-gaps needs --backend cuda: it spins on the device (on cpu, --pace gaps waits the same gaps on the host)"),
        _ => None,
    };
    exec.prepare(mine)?;
    struct Cpu<'e> {
        exec: &'e mut CpuTraceExec,
        colls: &'e [TraceCollective],
    }
    impl TraceRunner for Cpu<'_> {
        fn run(&mut self, i: usize, c: &TraceCollective, op: ReduceOp, check: bool, before_issue: &mut dyn FnMut()) -> Result<(u64, u64, Instant)> {
            self.exec.run(i, c, op, check, before_issue)
        }
        fn between_passes(&mut self) -> Result<()> {
            self.exec.reset(self.colls);
            Ok(())
        }
    }
    let (records, pass_host_ns) = replay_with(world, trace, op, pace, check, warmup, plan.as_ref(), &mut Cpu { exec: &mut exec, colls: mine })?;
    exec.verify(mine)?;
    let workload = match plan {
        Some(plan) => {
            let (compute_ops, compute_recorded_ns) = plan.compute_total();
            Some(WorkloadReport {
                format_version: WORKLOAD_REPORT_FORMAT_VERSION,
                stands_for: "compute".into(),
                rank,
                backend: "cpu".into(),
                compute_model: "a busy wait of each kernel's recorded duration on the rank's one thread, in launch order before the collective it preceded (one stream: kernels the source ran concurrently run in sequence)".into(),
                streams: plan.stream_names(),
                dependencies_from_timeline: plan.timeline_complete,
                cross_stream_waits: plan.cross_stream_waits(),
                compute_ops,
                compute_recorded_ns,
                compute_launches: None,
                collectives: records.len() as u32,
                gated: None,
                gate_lookahead_ops: None,
                spin: None,
                gap_transition: None,
                pass_device_ns: None,
                pass_host_ns,
                trace_span_ns: plan.trace_span_ns(),
            })
        }
        None => None,
    };
    Ok(ReplayOutput { records, workload })
}

/// A backend's executor of prepared trace collectives.
pub trait TraceRunner {
    /// Run collective `i` (blocking): `before_issue` (the pacing wait) just
    /// before the call. Returns (host time, input bytes, completion).
    fn run(&mut self, i: usize, c: &TraceCollective, op: ReduceOp, check: bool, before_issue: &mut dyn FnMut()) -> Result<(u64, u64, Instant)>;
    /// Between the warm-up and the timed pass: clear the results, so that a
    /// check after the timed pass sees only what that pass delivered.
    fn between_passes(&mut self) -> Result<()>;
}

/// This rank's collectives of `trace` in order through `run` (a backend's
/// executor), with the pacing, reduction choice and records shared by every
/// backend (`plan`: the workload pace's, for it alone); also returns the
/// timed pass's host time. With `warmup`, one untimed pass of the whole trace, back to back
/// and unchecked, comes first: NCCL and MPI set up a connection or an
/// algorithm's resources on first use (the first GPU replay spent 150-200 ms
/// in the first all-gather and all-to-all), which is not what the trace
/// recorded in its steady state (nccl-tests' warm-up iterations, `-w`, serve
/// the same purpose).
#[allow(clippy::too_many_arguments)]
pub fn replay_with(
    world: &SimpleCommunicator,
    trace: &CommTrace,
    op: Option<ReduceOp>,
    pace: Pace,
    check: bool,
    warmup: bool,
    plan: Option<&super::workload_plan::WorkloadPlan>,
    runner: &mut dyn TraceRunner,
) -> Result<(Vec<ExecRecord>, u64)> {
    let rank = world.rank() as u32;
    let mine = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    if (pace == Pace::Workload) != plan.is_some() {
        bail!("internal: the workload pace, and only it, comes with its plan");
    }
    let compute: Option<Vec<(u32, u64)>> = plan.as_ref().map(|p| (0..mine.collectives.len()).map(|i| p.compute_before_ns(i)).collect());
    let gaps = match pace {
        Pace::None => None,
        Pace::Gaps => Some(paced_gaps_ns(&mine.collectives)?),
        // one thread: the compute before a collective is spun in full before it
        Pace::Workload => compute.as_ref().map(|v| v.iter().map(|&(_, ns)| ns).collect()),
        Pace::DeviceGaps => bail!("internal: the device-gaps pace runs as the cuda workload pass, not through replay_with"),
    };
    // The traces do not record the reduction, and NCCL's kernel names do not
    // show it: since NCCL 2.19 every reduction kernel is built as the `Sum`
    // specialisation and dispatches the operation inside (NCCL's
    // src/device/generate.py, `best_kernel`).
    let choose = |_c: &TraceCollective| match op {
        Some(o) => (o, "--op"),
        None => (ReduceOp::Sum, "default"),
    };
    if warmup {
        world.barrier();
        for (i, c) in mine.collectives.iter().enumerate() {
            runner.run(i, c, choose(c).0, false, &mut || {}).with_context(|| format!("rank {rank}, warm-up pass, collective {i}"))?;
        }
        runner.between_passes().with_context(|| format!("rank {rank}, clearing the warm-up pass's results"))?;
    }
    world.barrier();
    let mut out = Vec::with_capacity(mine.collectives.len());
    let pass_start = Instant::now();
    let mut prev_end = pass_start;
    for (i, c) in mine.collectives.iter().enumerate() {
        let (use_op, source) = choose(c);
        let target = gaps.as_ref().map(|g| g[i]);
        let mut actual_gap_ns = 0;
        let mut wait = || {
            if let Some(t) = target {
                while (prev_end.elapsed().as_nanos() as u64) < t {
                    std::hint::spin_loop();
                }
            }
            actual_gap_ns = prev_end.elapsed().as_nanos() as u64;
        };
        let (elapsed_ns, wire_bytes, done) = runner.run(i, c, use_op, check, &mut wait).with_context(|| format!("rank {rank}, collective {i}"))?;
        prev_end = done;
        out.push(ExecRecord {
            target_gap_ns: target,
            actual_gap_ns,
            elapsed_ns,
            compute_ops: compute.as_ref().map(|v| v[i].0),
            compute_recorded_ns: compute.as_ref().map(|v| v[i].1),
            ..ExecRecord::untimed(i, c, rank, (use_op, source), check, wire_bytes)
        });
    }
    let pass_ns = (prev_end - pass_start).as_nanos() as u64;
    world.barrier();
    Ok((out, pass_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_exact_in_half_types() {
        for r in 0..64 {
            for i in 0..3 {
                let v = contribution(r, i);
                assert_eq!(round_to(TraceDtype::Bf16, v), v);
                assert_eq!(round_to(TraceDtype::F16, v), v);
            }
        }
    }
}

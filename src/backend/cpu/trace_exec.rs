//! The cpu backend's executor of an imported trace (`replay-trace --backend
//! cpu`): consumes a [`CommTrace`] and this process's MPI world, runs each
//! collective as its MPI call on a sub-communicator ([`CpuTraceExec`]) and
//! produces this rank's [`ReplayOutput`] ([`replay`]). Refuses a world size
//! other than the trace's, buffers past [`MAX_PREPARED_BYTES`], a message past
//! MPI's `int` count, an unsupported reduction dtype, `--pace device-gaps`.
use crate::backend::replay::{replay_with, ReplayOptions, TraceRunner};
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::{
    contribution, expected_reduction, payload, round_to, AllToAllLayout, Pace, ReplayOutput, Tally, WorkloadReport, WORKLOAD_REPORT_FORMAT_VERSION,
};
use crate::evidence::commtrace::{CollectiveKind, CommTrace, TraceCollective, TraceDtype};
use anyhow::{bail, Context, Result};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use std::collections::BTreeMap;
use std::time::Instant;

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

/// Runs trace collectives on MPI sub-communicators. Every process group
/// becomes a sub-communicator (`MPI_Comm_split`, key = group rank, so member
/// order is the trace's), created in name order on every rank. Kinds map onto
/// MPI (MPI-3.1 standard, chapter 5): all-reduce `MPI_Allreduce`, all-gather
/// `MPI_Allgather`, reduce-scatter `MPI_Reduce_scatter_block`, broadcast
/// `MPI_Bcast`, reduce `MPI_Reduce`, all-to-all(v) `MPI_Alltoallv`, barrier
/// `MPI_Barrier`, send/recv `MPI_Send`/`MPI_Recv`.
///
/// Data movement (gather, broadcast, all-to-all, point-to-point) moves the
/// recorded bytes (`MPI_BYTE`, any dtype). Reductions of f32 use `MPI_FLOAT`;
/// bf16 and f16 have no MPI type, so they are reduced in f32 on the upcast
/// values (twice the bytes on the wire; recorded per collective as
/// `wire_bytes`) and rounded back. Other dtypes are refused for reductions.
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
            let wide = if matches!(c.kind, CollectiveKind::AllReduce | CollectiveKind::Reduce | CollectiveKind::ReduceScatter) { 4 } else { e };
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
            CollectiveKind::AllReduce | CollectiveKind::Reduce | CollectiveKind::ReduceScatter => {
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
            CollectiveKind::AllGather => {
                let b = bytes(c.in_elems)?;
                let send: Vec<u8> = (0..b).map(|i| payload(self.rank, u32::MAX, i)).collect();
                CpuSlot { bufs: Bufs::Bytes { send, out: vec![0u8; b * n] }, wire: b as u64, ran: None }
            }
            CollectiveKind::Broadcast => {
                let b = bytes(c.in_elems)?;
                let root = c.root.context("broadcast without a root")?;
                members.iter().position(|&m| m == root).context("root not in the group")?;
                let out: Vec<u8> = if self.rank == root { (0..b).map(|i| payload(root, u32::MAX, i)).collect() } else { vec![0; b] };
                CpuSlot { bufs: Bufs::Bytes { send: Vec::new(), out }, wire: b as u64, ran: None }
            }
            CollectiveKind::AllToAll => {
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
            CollectiveKind::Barrier => CpuSlot { bufs: Bufs::Nothing, wire: 0, ran: None },
            CollectiveKind::Send | CollectiveKind::Recv => {
                let b = bytes(c.in_elems.max(c.out_elems))?;
                let peer = c.peer.context("point-to-point without a peer")?;
                members.iter().position(|&m| m == peer).context("peer not in the group")?;
                if c.kind == CollectiveKind::Send {
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
                    CollectiveKind::AllReduce => comm.all_reduce_into(&send[..], &mut out[..], mpi_op),
                    CollectiveKind::ReduceScatter => comm.reduce_scatter_block_into(&send[..], &mut out[..], mpi_op),
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
            (Bufs::Bytes { send, out }, CollectiveKind::AllGather) => {
                before_issue();
                t0 = Instant::now();
                comm.all_gather_into(&send[..], &mut out[..]);
            }
            (Bufs::Bytes { out, .. }, CollectiveKind::Broadcast) => {
                let root = c.root.and_then(|r| members.iter().position(|&m| m == r)).context("root not in the group")?;
                before_issue();
                t0 = Instant::now();
                comm.process_at_rank(root as i32).broadcast_into(&mut out[..]);
            }
            (Bufs::Bytes { send, out }, CollectiveKind::Send | CollectiveKind::Recv) => {
                let peer = c.peer.and_then(|p| members.iter().position(|&m| m == p)).context("peer not in the group")? as i32;
                before_issue();
                t0 = Instant::now();
                if c.kind == CollectiveKind::Send {
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
                Bufs::Bytes { out, .. } if !(c.kind == CollectiveKind::Broadcast && c.root == Some(self.rank)) => out.iter_mut().for_each(|b| *b = 0),
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
                if kind == CollectiveKind::Reduce && root_local != Some(me) {
                    return Ok((0, None));
                }
                // what the library would hand back in the dtype: the mean for avg, rounded
                let mut got: Vec<f32> = out.iter().map(|&x| round_to(c.dtype, if op == ReduceOp::Avg { x / n as f32 } else { x })).collect();
                if self.corrupt {
                    got.iter_mut().take(1).for_each(|x| *x += 1.0);
                }
                let offset = if kind == CollectiveKind::ReduceScatter { me * out.len() } else { 0 };
                for (i, &g) in got.iter().enumerate() {
                    let want = expected_reduction(c.dtype, members, offset + i, op);
                    if g != want {
                        tally.add(|| format!("element {i} is {g}, expected {want}"));
                    }
                }
            }
            (Bufs::Bytes { out, .. }, CollectiveKind::AllGather) => {
                let out = spoil(out.clone());
                let b = out.len() / n.max(1);
                for (j, &src) in members.iter().enumerate() {
                    for i in (0..b).filter(|&i| out[j * b + i] != payload(src, u32::MAX, i)) {
                        tally.add(|| format!("byte {i} of rank {src}'s block is wrong"));
                    }
                }
            }
            (Bufs::Bytes { out, .. }, CollectiveKind::Broadcast) => {
                let root = c.root.context("broadcast without a root")?;
                let out = spoil(out.clone());
                for i in (0..out.len()).filter(|&i| out[i] != payload(root, u32::MAX, i)) {
                    tally.add(|| format!("byte {i} differs from root {root}'s"));
                }
            }
            (Bufs::Bytes { out, .. }, CollectiveKind::Recv) => {
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

/// Run this rank's collectives of `trace` in order.
pub fn replay(world: &SimpleCommunicator, trace: &CommTrace, o: &ReplayOptions) -> Result<ReplayOutput> {
    let mut exec = CpuTraceExec::new(world, trace)?;
    let rank = world.rank() as u32;
    exec.corrupt = o.corrupt_rank == Some(rank);
    let mine_all = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    let mine = &mine_all.collectives;
    // refused before any buffer is made
    let plan = match o.pace {
        Pace::Workload => Some(crate::evidence::commtrace::workload_plan::plan(mine_all)?),
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
    let (records, pass_host_ns) = replay_with(world, trace, o, plan.as_ref(), &mut Cpu { exec: &mut exec, colls: mine })?;
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

//! The cpu backend's executor of an imported trace's collectives (the trace
//! phases and `replay-trace --backend cpu`): consumes a [`CommTrace`] and this
//! process's MPI world, runs each prepared collective as its MPI call on a
//! sub-communicator ([`CpuTraceExec`]), blocking or posted with its `MPI_I…`
//! call and waited for by [`CpuTraceExec::complete`], and counts what is wrong
//! in a result. Refuses a world size other than the trace's, buffers past
//! [`MAX_PREPARED_BYTES`], a message past MPI's `int` count and a reduction
//! dtype other than f32, bf16, f16, f64, i32 and i64.
use crate::backend::cpu::mpi_call::{mpi_call, Mode, MpiArgs, MpiCounts};
use crate::backend::trace_share::{Input, Landed, TraceShare};
use crate::core::refusal::Code;
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::round_to;
use crate::evidence::commtrace::{CollectiveKind, CommTrace, TraceCollective, TraceDtype};
use anyhow::{bail, Context, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use std::collections::BTreeMap;

/// Bytes of buffers the cpu backend prepares for one rank's replay at most (16 GiB).
pub const MAX_PREPARED_BYTES: u64 = 16 << 30;

/// One collective's buffers, made before the replay.
enum Bufs {
    /// Reductions: this rank's contributions (rounded to the dtype, sent as
    /// f32) and the f32 result.
    Values { send: Vec<f32>, out: Vec<f32> },
    /// Reductions of f64, i32 and i64 (an MPI application's): the
    /// contributions in the dtype's own width, native-endian bytes, reduced
    /// by MPI in that type (`MPI_DOUBLE`, `MPI_INT32_T`, `MPI_INT64_T`).
    Native { send: Vec<u8>, out: Vec<u8> },
    /// Data movement: bytes sent and bytes received (a broadcast's one
    /// buffer is `out`, which the root fills before the replay; a barrier's
    /// are empty).
    Bytes { send: Vec<u8>, out: Vec<u8> },
}

impl Bufs {
    /// Whether the send buffer and the result buffer are empty.
    fn empty(&self) -> (bool, bool) {
        match self {
            Bufs::Values { send, out } => (send.is_empty(), out.is_empty()),
            Bufs::Native { send, out } | Bufs::Bytes { send, out } => (send.is_empty(), out.is_empty()),
        }
    }
    /// Zero the result, so that a check can only pass on what the next call delivers.
    fn clear_out(&mut self) {
        match self {
            Bufs::Values { out, .. } => out.fill(0.0),
            Bufs::Native { out, .. } | Bufs::Bytes { out, .. } => out.fill(0),
        }
    }
}

/// One collective, prepared.
struct CpuSlot {
    share: TraceShare,
    bufs: Bufs,
    /// Its MPI call's counts.
    counts: MpiCounts,
    /// The result buffer holds the input (a broadcast's root): never cleared.
    in_place: bool,
    /// The requests of its nonblocking post, until completed ([`CpuTraceExec::complete`]).
    reqs: [ffi::MPI_Request; 2],
    /// How many of `reqs` are outstanding.
    pending: usize,
}

impl CpuSlot {
    /// Collective `c`'s slot on `rank`, a member of `members`: its buffers made and its input filled.
    fn new(c: &TraceCollective, rank: u32, members: &[u32]) -> Result<Self> {
        let share = TraceShare::new(c, rank, members)?;
        let native = share.reduces() && matches!(c.dtype, TraceDtype::F64 | TraceDtype::I32 | TraceDtype::I64);
        if share.reduces() && !native && !matches!(c.dtype, TraceDtype::F32 | TraceDtype::Bf16 | TraceDtype::F16) {
            bail!(
                "{} of {} is not supported on the cpu backend (f32, bf16, f16, f64, i32, i64)",
                c.kind.name(),
                c.dtype
            );
        }
        let counts = MpiCounts::of(&share.call()).map_err(anyhow::Error::msg)?;
        let out_len = share.out_len();
        let input = share.input();
        let in_place = c.kind == CollectiveKind::Broadcast && matches!(input, Input::Bytes(_));
        let bufs = match input {
            Input::Values(send) if native => {
                let width = c.dtype.size_bytes() as usize;
                Bufs::Native {
                    send: send.iter().flat_map(|&v| encode(c.dtype, v)).collect(),
                    out: vec![0u8; out_len * width],
                }
            }
            Input::Values(send) => Bufs::Values { send, out: vec![0f32; out_len] },
            // MPI broadcasts in place: the root's data starts in the receive buffer
            Input::Bytes(b) if in_place => Bufs::Bytes { send: Vec::new(), out: b },
            Input::Bytes(send) => Bufs::Bytes { send, out: vec![0u8; out_len] },
            Input::Nothing => Bufs::Bytes { send: Vec::new(), out: vec![0u8; out_len] },
        };
        // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        Ok(CpuSlot { share, bufs, counts, in_place, reqs: [null; 2], pending: 0 })
    }

    /// Before a checked call: its result starts empty, so that an earlier
    /// call's (a warm-up's, a previous pass's) cannot pass for it.
    fn clear(&mut self) {
        if !self.in_place {
            self.bufs.clear_out();
        }
    }
}

/// Runs trace collectives on MPI sub-communicators, one per process group,
/// each kind as its MPI call (blocking, or posted where the capture posted
/// it); refuses reductions of dtypes MPI cannot reduce (docs/METHODS.md,
/// "CPU trace executor").
pub struct CpuTraceExec {
    rank: u32,
    comms: BTreeMap<String, (Vec<u32>, Option<SimpleCommunicator>)>,
    slots: Vec<CpuSlot>,
    /// Where an empty buffer points (see [`CpuTraceExec::issue`]); boxed, so a nonblocking post's pointer stays valid.
    scratch: Box<[u64; 2]>,
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
        Ok(Self { rank, comms, slots: Vec::new(), scratch: Box::new([0; 2]) })
    }

    /// The communicator of trace group `name` on this rank (for the point-to-point replay).
    pub(crate) fn raw_comm(&self, name: &str) -> Result<ffi::MPI_Comm> {
        let (_, comm) = self.comms.get(name).with_context(|| format!("group {name:?} not in the trace"))?;
        Ok(comm.as_ref().with_context(|| format!("rank {} is not a member of group {name:?}", self.rank))?.as_raw())
    }

    fn group_of(&self, c: &TraceCollective) -> Result<(&[u32], &SimpleCommunicator)> {
        let (members, comm) =
            self.comms.get(&c.group).with_context(|| format!("group {:?} not in the trace", c.group))?;
        let comm =
            comm.as_ref().with_context(|| format!("rank {} is not a member of group {:?}", self.rank, c.group))?;
        Ok((members, comm))
    }

    /// Allocate and fill every collective's buffers (step 1), so that only
    /// the pacing wait and the MPI call lie between two collectives.
    pub fn prepare(&mut self, colls: &[TraceCollective]) -> Result<()> {
        // every buffer at once: refuse a trace whose buffers cannot fit before allocating any
        let mut total: u128 = 0;
        for c in colls {
            let e = c.dtype.size_bytes() as u128;
            let wide = if c.kind.row().reduces { e.max(4) } else { e };
            total += (c.in_elems as u128 + c.out_elems as u128) * wide;
        }
        if total > MAX_PREPARED_BYTES as u128 {
            crate::refuse!(
                Code::OverLimit,
                "rank {}: the trace's buffers need {total} bytes at once, over the cpu backend's \
                    {MAX_PREPARED_BYTES}-byte budget (every buffer is made before the replay, so that only the pacing \
                        wait lies between collectives); replay a shorter trace",
                self.rank
            );
        }
        self.slots = colls
            .iter()
            .enumerate()
            .map(|(i, c)| self.slot(c).with_context(|| format!("rank {}, collective {i}", self.rank)))
            .collect::<Result<_>>()?;
        Ok(())
    }

    fn slot(&self, c: &TraceCollective) -> Result<CpuSlot> {
        CpuSlot::new(c, self.rank, self.group_of(c)?.0)
    }

    /// Wait for posted collective `i` (`MPI_Waitall` on its requests).
    pub fn complete(&mut self, i: usize) -> Result<()> {
        let slot = self.slots.get_mut(i).context("collective not prepared")?;
        if slot.pending == 0 {
            return Ok(());
        }
        // SAFETY: the requests were started by `post` on this slot's buffers, which stay untouched until this wait
        // returns.
        let rc = unsafe { ffi::MPI_Waitall(slot.pending as i32, slot.reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE) };
        slot.pending = 0;
        if rc != 0 {
            bail!("collective {i}: MPI_Waitall on its nonblocking post failed (MPI error {rc})");
        }
        Ok(())
    }

    /// Empty prepared collective `i`'s result before a checked call of it
    /// (never while a post of it is outstanding: MPI owns its buffers then).
    pub fn clear(&mut self, i: usize) -> Result<()> {
        let slot = self.slots.get_mut(i).context("collective not prepared")?;
        if slot.pending > 0 {
            bail!("collective {i}: cleared while its post is outstanding");
        }
        slot.clear();
        Ok(())
    }

    /// Run prepared collective `i` (step 2): its blocking MPI call, or with
    /// `nonblocking` its `MPI_I…` call ([`Self::complete`] waits for it).
    pub fn issue(&mut self, i: usize, c: &TraceCollective, op: ReduceOp, nonblocking: bool) -> Result<()> {
        let comm = self.group_of(c)?.1.as_raw();
        let slot = self.slots.get_mut(i).context("collective not prepared")?;
        // SAFETY: reading immutable handle constants that rsmpi's C shim initialises before MPI_Init returns.
        let (float, byte, native, mpi_op) = unsafe {
            (
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_UINT8_T,
                match c.dtype {
                    TraceDtype::F64 => ffi::RSMPI_DOUBLE,
                    TraceDtype::I32 => ffi::RSMPI_INT32_T,
                    _ => ffi::RSMPI_INT64_T,
                },
                // avg has no MPI operation: it runs as a sum, divided by the group size when checked
                match op {
                    ReduceOp::Max => ffi::RSMPI_MAX,
                    ReduceOp::Min => ffi::RSMPI_MIN,
                    ReduceOp::Prod => ffi::RSMPI_PROD,
                    ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
                },
            )
        };
        let (send, recv, dtype): (*const _, *mut _, _) = match &mut slot.bufs {
            Bufs::Values { send, out } => (send.as_ptr().cast(), out.as_mut_ptr().cast(), float),
            Bufs::Native { send, out } => (send.as_ptr().cast(), out.as_mut_ptr().cast(), native),
            Bufs::Bytes { send, out } => (send.as_ptr().cast(), out.as_mut_ptr().cast(), byte),
        };
        let mut args = MpiArgs { send, recv, dtype, op: mpi_op, comm };
        // An empty byte buffer's pointer is 1, which is Open MPI's MPI_IN_PLACE (a zero-byte broadcast of
        // hpcc's was refused as MPI_ERR_ARG): empty buffers point at the executor's scratch instead, which
        // MPI never reads or writes (their count here is 0).
        let (send_empty, out_empty) = slot.bufs.empty();
        if send_empty {
            args.send = self.scratch.as_ptr().cast();
        }
        if out_empty {
            args.recv = self.scratch.as_mut_ptr().cast();
        }
        if slot.pending > 0 {
            bail!("collective {i}: posted again before its previous post completed");
        }
        // SAFETY: the slot's buffers were made from the share its counts
        // come from (send and result lengths, splits); a blocking call is
        // done with them when it returns, a nonblocking one when `complete`
        // waits for its requests, and nothing touches them in between (the
        // slot lives until the pass ends, which completes every post).
        let (call, rc, started) = unsafe {
            if nonblocking {
                mpi_call(&slot.counts, &args, Mode::Nonblocking(&mut slot.reqs))
            } else {
                mpi_call(&slot.counts, &args, Mode::Blocking)
            }
        };
        slot.pending = started;
        if rc != 0 {
            bail!("collective {i}: {call} on group {:?} failed (MPI error {rc})", c.group);
        }
        Ok(())
    }

    /// Validate prepared collective `i` (`c`), last run with `op`, and count
    /// what is wrong ([`TraceShare::wrong`]).
    pub fn count_wrong(
        &self,
        i: usize,
        c: &TraceCollective,
        op: ReduceOp,
        corrupt: bool,
    ) -> Result<(u64, Option<String>)> {
        let slot = self.slots.get(i).context("collective not prepared")?;
        Ok(Self::wrong_in(c, slot, op, corrupt))
    }

    fn wrong_in(c: &TraceCollective, slot: &CpuSlot, op: ReduceOp, corrupt: bool) -> (u64, Option<String>) {
        if !slot.share.lands_here() {
            return (0, None);
        }
        match &slot.bufs {
            Bufs::Native { out, .. } => {
                let n = slot.share.group_size() as f32;
                let mut got: Vec<f32> =
                    decode(c.dtype, out).into_iter().map(|x| if op == ReduceOp::Avg { x / n } else { x }).collect();
                if corrupt {
                    got.iter_mut().take(1).for_each(|x| *x += 1.0);
                }
                slot.share.wrong(Landed::Values(&got), op)
            }
            Bufs::Values { out, .. } => {
                let n = slot.share.group_size() as f32;
                // what the library would hand back in the dtype: the mean for avg, rounded
                let mut got: Vec<f32> =
                    out.iter().map(|&x| round_to(c.dtype, if op == ReduceOp::Avg { x / n } else { x })).collect();
                if corrupt {
                    got.iter_mut().take(1).for_each(|x| *x += 1.0);
                }
                slot.share.wrong(Landed::Values(&got), op)
            }
            Bufs::Bytes { out, .. } => {
                let mut out = out.clone();
                if corrupt {
                    if let Some(b) = out.first_mut() {
                        *b = b.wrapping_add(1);
                    }
                }
                slot.share.wrong(Landed::Bytes(&out), op)
            }
        }
    }
}

/// A contribution (a small integer, exact in every dtype here) in the native width of `dtype`.
fn encode(dtype: TraceDtype, v: f32) -> Vec<u8> {
    match dtype {
        TraceDtype::F64 => f64::from(v).to_ne_bytes().to_vec(),
        TraceDtype::I32 => (v as i32).to_ne_bytes().to_vec(),
        _ => (v as i64).to_ne_bytes().to_vec(),
    }
}

/// A native result read back as f32 values for the check.
fn decode(dtype: TraceDtype, b: &[u8]) -> Vec<f32> {
    match dtype {
        TraceDtype::F64 => {
            b.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap_or_default()) as f32).collect()
        }
        TraceDtype::I32 => {
            b.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap_or_default()) as f32).collect()
        }
        _ => b.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().unwrap_or_default()) as f32).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checked_call_cannot_pass_on_an_earlier_call_s_result() {
        let coll = |kind, dtype, root| TraceCollective::new(kind, "x", "g", dtype, (4, 4), (None, None), (root, None));
        for c in [
            coll(CollectiveKind::AllReduce, TraceDtype::F32, None),
            coll(CollectiveKind::AllReduce, TraceDtype::F64, None),
            coll(CollectiveKind::AllGather, TraceDtype::Bf16, None),
        ] {
            // one member: its result is its own input, as an earlier call of it would have left it
            let mut slot = CpuSlot::new(&c, 0, &[0]).unwrap();
            match &mut slot.bufs {
                Bufs::Values { send, out } => out.copy_from_slice(send),
                Bufs::Native { send, out } | Bufs::Bytes { send, out } => out.copy_from_slice(send),
            }
            let wrong = |slot: &CpuSlot| CpuTraceExec::wrong_in(&c, slot, ReduceOp::Sum, false).0;
            assert_eq!(wrong(&slot), 0, "{:?}: the earlier result is right", c.kind);
            slot.clear();
            assert!(wrong(&slot) > 0, "{:?}: a checked call starts without it", c.kind);
        }
        // a broadcast root's result buffer is its input: kept
        let c = coll(CollectiveKind::Broadcast, TraceDtype::F32, Some(0));
        let mut slot = CpuSlot::new(&c, 0, &[0]).unwrap();
        let Bufs::Bytes { out, .. } = &slot.bufs else { panic!("a broadcast moves bytes") };
        let before = out.clone();
        slot.clear();
        assert!(matches!(&slot.bufs, Bufs::Bytes { out, .. } if *out == before && !before.iter().all(|&b| b == 0)));
    }
}

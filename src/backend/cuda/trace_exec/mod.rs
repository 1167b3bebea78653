//! The cuda backend's executor of an imported trace's collectives (the trace
//! phases, `replay-trace --backend cuda` and its workload pace), through NCCL.
//!
//! Consumes a [`CommTrace`], this process's MPI world (for NCCL's unique id
//! only) and an NCCL library. Runs each prepared collective on its group's
//! NCCL communicator, as the CPU executor ([`crate::backend::cpu::trace_exec`])
//! does on MPI, and counts what is wrong in a result. Refuses: a world size
//! other than the trace's, a reduction of another dtype, an NCCL without the
//! calls the trace needs (naming them), buffers that do not fit on the GPU
//! (saying how much was asked). Method: docs/METHODS.md, "Trace replay on NCCL".
pub mod workload;

use crate::backend::cuda::drv;
use crate::backend::cuda::nccl::{sys, DataType, NcclCall, NcclComm, NcclLibrary, RedOp};
use crate::backend::cuda::nccl_call::nccl_calls;
use crate::backend::trace_share::{Input, Landed, TraceShare};
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::{
    nccl_cannot_run, paced_gaps_ns, refuse_unsupported, Pace, ReplayOptions, ReplayOutput,
};
use crate::evidence::commtrace::{workload_plan, CollectiveKind, CommTrace, TraceCollective, TraceDtype};
use crate::evidence::shard::BackendKind;
use anyhow::{bail, Context, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::BTreeMap;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The NCCL dtype of a reduction over `d` (this executor checks reductions
/// of floats it can encode), or a refusal.
fn nccl_float(d: TraceDtype, kind: CollectiveKind) -> Result<DataType> {
    match d {
        TraceDtype::F32 | TraceDtype::Bf16 | TraceDtype::F16 => DataType::of_trace(d, true),
        other => bail!("{} of {other:?} is not supported on the cuda backend (f32, bf16, f16)", kind.name()),
    }
}

/// Encode f32 values in `d` (f32, bf16, f16), little-endian.
fn encode(d: TraceDtype, v: &[f32]) -> Vec<u8> {
    match d {
        TraceDtype::Bf16 => v.iter().flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes()).collect(),
        TraceDtype::F16 => v.iter().flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Decode little-endian values of `d` into f32.
fn decode(d: TraceDtype, b: &[u8]) -> Vec<f32> {
    match d {
        TraceDtype::Bf16 => {
            b.chunks_exact(2).map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        TraceDtype::F16 => {
            b.chunks_exact(2).map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        _ => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

/// One collective's device buffers and calls, made before the replay.
struct Slot {
    share: TraceShare,
    send: CudaSlice<u8>,
    recv: CudaSlice<u8>,
    /// Bytes of `recv` that hold the result.
    recv_bytes: usize,
    /// The NCCL calls (more than one: grouped), reductions still to be set.
    calls: Vec<NcclCall>,
    /// Input bytes handed to NCCL.
    wire: u64,
    /// Set when run: the reduction used and whether to check.
    ran: Option<(ReduceOp, bool)>,
}

/// The same call with reduction `op` (calls without one are unchanged).
fn with_op(call: NcclCall, op: RedOp) -> NcclCall {
    match call {
        NcclCall::AllReduce { send, recv, count, dtype, .. } => NcclCall::AllReduce { send, recv, count, dtype, op },
        NcclCall::ReduceScatter { send, recv, recv_count, dtype, .. } => {
            NcclCall::ReduceScatter { send, recv, recv_count, dtype, op }
        }
        NcclCall::Reduce { send, recv, count, dtype, root, .. } => {
            NcclCall::Reduce { send, recv, count, dtype, op, root }
        }
        other => other,
    }
}

/// Runs trace collectives on NCCL sub-communicators of one GPU.
pub struct CudaTraceExec {
    rank: u32,
    // dropped before the communicators, the stream and the context
    slots: Vec<Slot>,
    comms: BTreeMap<String, (Vec<u32>, Option<NcclComm>)>,
    world: NcclComm,
    stream: Arc<CudaStream>,
    _ctx: Arc<CudaContext>,
}

impl CudaTraceExec {
    /// Open GPU `local_rank % count`, create the world communicator from
    /// `nccl_path` and split it into every group of the trace (collective
    /// over `world`: every rank calls this).
    pub fn new(
        world: &SimpleCommunicator,
        local_rank: u32,
        nccl_path: &Path,
        trace: &CommTrace,
        timeout: Duration,
    ) -> Result<Self> {
        // what NCCL has no operation for is refused first, on every rank alike
        refuse_unsupported(trace, "cuda", &nccl_cannot_run)?;
        if let Some(why) = super::unavailable_reason() {
            bail!("{why}");
        }
        let rank = world.rank() as u32;
        trace.check_world_size(world.size() as u32)?;
        let count = drv(CudaContext::device_count(), "cuDeviceGetCount")? as u32;
        let ctx = drv(CudaContext::new((local_rank % count) as usize), "creating the CUDA context")?;
        // SAFETY: one stream; every operation is ordered on it.
        unsafe { ctx.disable_event_tracking() };
        let stream = drv(ctx.new_stream(), "creating the stream")?;
        let lib = Arc::new(NcclLibrary::load(nccl_path)?);
        drv(ctx.bind_to_thread(), "binding the CUDA context")?;
        let w = NcclComm::bootstrap(world, lib.clone(), timeout, "replay-trace initialisation")
            .with_context(|| format!("NCCL {}", lib.observation().version))?;
        let mut comms = BTreeMap::new();
        for g in &trace.groups {
            let pos = g.members.iter().position(|&m| m == rank);
            let color = if pos.is_some() { 0 } else { sys::NCCL_SPLIT_NOCOLOR };
            let sub =
                w.split(color, pos.unwrap_or(0) as c_int).with_context(|| format!("splitting group {:?}", g.name))?;
            comms.insert(g.name.clone(), (g.members.clone(), sub));
        }
        Ok(Self { rank, slots: Vec::new(), comms, world: w, stream, _ctx: ctx })
    }

    /// End every communicator without waiting for peers (after a failure).
    pub fn abort(&mut self) {
        self.slots.clear();
        for (_, c) in self.comms.values_mut() {
            if let Some(c) = c {
                let _ = c.abort();
            }
        }
        let _ = self.world.abort();
    }

    fn upload(&self, b: &[u8]) -> Result<CudaSlice<u8>> {
        // a zero-length allocation is refused by the driver: keep 4 bytes (a barrier's one f32)
        if b.is_empty() {
            return self.zeros(0);
        }
        drv(self.stream.clone_htod(b), "copying a send buffer to the device")
    }

    fn zeros(&self, n: usize) -> Result<CudaSlice<u8>> {
        drv(self.stream.alloc_zeros::<u8>(n.max(4)), "cuMemAlloc")
    }

    fn group_of(&self, c: &TraceCollective) -> Result<(&[u32], usize)> {
        let (members, comm) =
            self.comms.get(&c.group).with_context(|| format!("group {:?} not in the trace", c.group))?;
        comm.as_ref().with_context(|| format!("rank {} is not a member of group {:?}", self.rank, c.group))?;
        let me = members.iter().position(|&m| m == self.rank).context("rank not in its group")?;
        Ok((members, me))
    }

    /// Allocate and fill every collective's buffers (step 1).
    pub fn prepare(&mut self, colls: &[TraceCollective]) -> Result<()> {
        let mut total = 0usize;
        let mut slots = Vec::with_capacity(colls.len());
        for (i, c) in colls.iter().enumerate() {
            let slot = self.slot(c).with_context(|| {
                format!(
                    "collective {i}: preparing buffers ({total} bytes of the trace's buffers were allocated before it; \
                        the whole trace's must fit on the GPU)"
                )
            })?;
            total += slot.send.len() + slot.recv.len();
            slots.push(slot);
        }
        drv(self.stream.synchronize(), "cuStreamSynchronize (buffers ready)")?;
        self.slots = slots;
        Ok(())
    }

    fn slot(&self, c: &TraceCollective) -> Result<Slot> {
        let (members, _) = self.group_of(c)?;
        let share = TraceShare::new(c, self.rank, members)?;
        // reductions in the trace's own dtype; data movement as bytes
        let (dtype, width) =
            if share.reduces() { (nccl_float(c.dtype, c.kind)?, c.dtype.size_bytes()) } else { (DataType::Uint8, 1) };
        let send = match share.input() {
            Input::Values(v) => self.upload(&encode(c.dtype, &v))?,
            Input::Bytes(b) => self.upload(&b)?,
            Input::Nothing => self.zeros(0)?,
        };
        let recv_bytes = share.out_len() * width as usize;
        let mut recv = self.zeros(recv_bytes)?;
        let (sp, rp) = {
            let (sp, _s) = send.device_ptr(&self.stream);
            let (rp, _r) = recv.device_ptr_mut(&self.stream);
            (sp, rp)
        };
        let calls = nccl_calls(&share.call(), sp, rp, dtype, width, RedOp::Sum).map_err(anyhow::Error::msg)?;
        let wire = share.wire_bytes(BackendKind::Cuda);
        Ok(Slot { share, send, recv, recv_bytes, calls, wire, ran: None })
    }

    /// Prepared collective `i`'s communicator and its NCCL calls with reduction `op`.
    fn calls(&self, i: usize, c: &TraceCollective, op: ReduceOp) -> Result<(&NcclComm, Vec<NcclCall>)> {
        let comm = self
            .comms
            .get(&c.group)
            .and_then(|(_, c)| c.as_ref())
            .with_context(|| format!("rank {} is not a member of group {:?}", self.rank, c.group))?;
        let slot = self.slots.get(i).context("collective not prepared")?;
        Ok((comm, slot.calls.iter().map(|&k| with_op(k, op.into())).collect()))
    }

    /// Enqueue `calls` on `stream`, as one NCCL group where there are several.
    fn enqueue(comm: &NcclComm, calls: &[NcclCall], stream: &CudaStream) -> Result<()> {
        let s = stream.cu_stream() as *mut std::ffi::c_void;
        if calls.len() > 1 {
            comm.group(true)?;
        }
        for call in calls {
            // SAFETY: every pointer comes from a slot's allocations (alive in `self.slots`), sized for its count there.
            unsafe { comm.enqueue(call, s) }?;
        }
        if calls.len() > 1 {
            comm.group(false)?;
        }
        Ok(())
    }

    /// Run prepared collective `i` (step 2): the NCCL call(s), then a stream
    /// synchronization.
    pub fn run(&mut self, i: usize, c: &TraceCollective, op: ReduceOp) -> Result<()> {
        let (comm, calls) = self.calls(i, c, op)?;
        Self::enqueue(comm, &calls, &self.stream)?;
        drv(self.stream.synchronize(), "cuStreamSynchronize (collective done)")?;
        comm.async_error()?;
        self.slots[i].ran = Some((op, false));
        Ok(())
    }

    /// Enqueue prepared collective `i` on `stream` without waiting for it
    /// (the workload pace); the host returns once NCCL has enqueued it.
    pub fn enqueue_on(
        &mut self,
        i: usize,
        c: &TraceCollective,
        op: ReduceOp,
        check: bool,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let (comm, calls) = self.calls(i, c, op)?;
        Self::enqueue(comm, &calls, stream)?;
        self.slots[i].ran = Some((op, check));
        Ok(())
    }

    /// Input bytes of prepared collective `i`.
    pub fn wire_bytes(&self, i: usize) -> Option<u64> {
        self.slots.get(i).map(|s| s.wire)
    }

    /// NCCL's asynchronous error on any communicator of the trace.
    pub fn async_error(&self) -> Result<()> {
        for (_, c) in self.comms.values() {
            if let Some(c) = c {
                c.async_error()?;
            }
        }
        Ok(())
    }

    /// The CUDA context the buffers live in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self._ctx
    }

    /// The stream the buffers were prepared on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Zero prepared collective `i`'s result on `stream`, so that its check
    /// can only pass on what the next call delivers, not an earlier one.
    pub fn clear_result(&mut self, i: usize, stream: &Arc<CudaStream>) -> Result<()> {
        let slot = self.slots.get_mut(i).context("collective not prepared")?;
        drv(stream.memset_zeros(&mut slot.recv), "clearing a result buffer")
    }

    /// Zero every result buffer (between the warm-up and the timed pass), so
    /// that a check sees only what the timed pass delivered.
    pub fn reset(&mut self) -> Result<()> {
        let stream = self.stream.clone();
        for i in 0..self.slots.len() {
            self.clear_result(i, &stream)?;
        }
        drv(stream.synchronize(), "cuStreamSynchronize (results cleared)")
    }

    /// Read back and check every result that was asked to be checked (step 3;
    /// `corrupt`: the negative control spoils each first).
    pub fn verify(&self, colls: &[TraceCollective], corrupt: bool) -> Result<()> {
        for (i, (c, slot)) in colls.iter().zip(&self.slots).enumerate() {
            if let Some((op, true)) = slot.ran {
                self.verify_one(c, slot, op, corrupt).with_context(|| format!("rank {}, collective {i}", self.rank))?;
            }
        }
        Ok(())
    }

    fn download(&self, slot: &Slot, corrupt: bool) -> Result<Vec<u8>> {
        let mut host = vec![0u8; slot.recv_bytes];
        if !host.is_empty() {
            drv(
                self.stream.memcpy_dtoh(&slot.recv.slice(0..slot.recv_bytes), &mut host),
                "copying a result to the host",
            )?;
            drv(self.stream.synchronize(), "cuStreamSynchronize")?;
        }
        if corrupt {
            if let Some(b) = host.first_mut() {
                *b = b.wrapping_add(1);
            }
        }
        Ok(host)
    }

    /// Read back prepared collective `i` (`c`, run with `op`) and count what
    /// is wrong, as [`crate::backend::cpu::trace_exec::CpuTraceExec::count_wrong`] does.
    pub fn count_wrong(
        &self,
        i: usize,
        c: &TraceCollective,
        op: ReduceOp,
        corrupt: bool,
    ) -> Result<(u64, Option<String>)> {
        let slot = self.slots.get(i).context("collective not prepared")?;
        self.wrong_in(c, slot, op, corrupt)
    }

    fn verify_one(&self, c: &TraceCollective, slot: &Slot, op: ReduceOp, corrupt: bool) -> Result<()> {
        match self.wrong_in(c, slot, op, corrupt)? {
            (0, _) => Ok(()),
            (_, first) => bail!(
                "--check: {} #{} on group {:?} ({:?}): {}",
                c.kind.name(),
                c.seq,
                c.group,
                c.dtype,
                first.unwrap_or_default()
            ),
        }
    }

    fn wrong_in(&self, c: &TraceCollective, slot: &Slot, op: ReduceOp, corrupt: bool) -> Result<(u64, Option<String>)> {
        if !slot.share.lands_here() {
            return Ok((0, None));
        }
        let out = self.download(slot, corrupt)?;
        Ok(match slot.share.reduces() {
            true => slot.share.wrong(Landed::Values(&decode(c.dtype, &out)), op),
            false => slot.share.wrong(Landed::Bytes(&out), op),
        })
    }
}

/// `replay-trace --pace workload` or `device-gaps` on the GPU: every
/// collective prepared, then [`workload::run`]'s passes; the executor is
/// aborted on an error (peers may be inside a collective).
pub fn workload(
    world: &SimpleCommunicator,
    nccl_path: &Path,
    trace: &CommTrace,
    o: &ReplayOptions,
    timeout: Duration,
) -> Result<ReplayOutput> {
    let rank = world.rank() as u32;
    let mine = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    // refuse before any communicator exists
    let (plan, stands_for) = match o.pace {
        Pace::DeviceGaps => {
            let gaps = paced_gaps_ns(&mine.collectives)?;
            (workload_plan::plan_gaps(mine, &gaps)?, "gaps")
        }
        _ => (workload_plan::plan(mine)?, "compute"),
    };
    let local_rank = world.split_shared(world.rank()).rank() as u32;
    let mut exec = CudaTraceExec::new(world, local_rank, nccl_path, trace, timeout)?;
    let result = exec.prepare(&mine.collectives).and_then(|_| {
        let (records, report) = workload::run(world, &mut exec, trace, &plan, o, timeout, stands_for)?;
        exec.verify(&mine.collectives, o.corrupt_rank == Some(rank))?;
        Ok(ReplayOutput { records, workload: Some(report), p2p: None, nonblocking: None })
    });
    if result.is_err() {
        exec.abort();
    }
    result
}

//! CPU backend: MPI collectives of host buffers, CPU matrix products, `CLOCK_MONOTONIC` timings
//! (docs/ARCHITECTURE.md §3).
//!
//! Consumes the world (duplicated twice: one communicator for the collectives, one for the phase
//! barriers) and a [`BackendPlan`]. Produces host-completed collectives: a world [`Call`] is a
//! nonblocking MPI call through rsmpi's raw FFI (every kind of the table: sizes, root and ring from
//! [`OwnOp`]), completed by `MPI_Waitall`, so issue and wait placement in the phases is real; trace
//! collectives and point-to-point steps run as `replay-trace` runs them. No device timeline: every
//! device interval is unmeasured. Refuses graphs. MPI has no bf16: a bf16 all-reduce moves bf16's
//! bytes as `MPI_UINT16_T` and sums integers (the shard's `unmeasured` says so); docs/METHODS.md,
//! "CPU backend", says how OpenMPI's progress and `coll_tuned` algorithms enter the measurement.
pub(crate) mod mpi_call;
pub mod p2p;
pub mod trace_exec;

use super::own::OwnOp;
use super::{
    contribution, mpi_deadline, Backend, BackendError, BackendInfo, BackendPlan, BackendResult, Call, CheckOutcome,
    Checked, Compute,
};
use super::{DeviceInterval, GraphStep, PassTimings, Timing};
use crate::core::collective::CollectiveKind;
use crate::core::identity;
use crate::core::workload::GemmShape;
use crate::evidence::commtrace::p2p::P2pPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use crate::evidence::shard::{BackendKind, DeviceIdentity, Dtype, Unmeasured};
use anyhow::{bail, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi_call::{mpi_call, Mode, MpiArgs, MpiCounts};
use std::os::raw::{c_int, c_void};
use std::time::Duration;

/// CPU backend state of one rank.
pub struct CpuBackend {
    comm: SimpleCommunicator,
    /// A second duplicate of the world for the phase barriers, so that the
    /// measured communicator carries the collectives alone.
    control: SimpleCommunicator,
    world_size: u32,
    dtype: Dtype,
    /// f32 buffers (f32 runs).
    send: Vec<f32>,
    recv: Vec<f32>,
    /// 16-bit integer buffers standing in for bf16 (bf16 runs).
    send16: Vec<u16>,
    recv16: Vec<u16>,
    capacity_bytes: u64,
    rank: u32,
    /// The outstanding issue: its requests (two for a ring's receive and
    /// send) and what it is, for messages.
    pending: Option<Pending>,
    issued_in_pass: usize,
    gemms: Vec<GemmShape>,
    a: Vec<f32>,
    /// Weights per GEMM shape, one set per weight set.
    b: Vec<Vec<Vec<f32>>>,
    c: Vec<f32>,
    mem_src: Vec<u8>,
    mem_dst: Vec<u8>,
    /// A wait longer than this fails the job (a stopped or dead peer), if set.
    timeout: Option<std::time::Duration>,
    /// An imported trace's collectives other than world all-reduces, on
    /// sub-communicators of `comm` (`replay-trace`'s executor).
    trace_exec: Option<trace_exec::CpuTraceExec>,
    /// An imported MPI trace's point-to-point program (the phases').
    p2p: Option<p2p::CpuP2p>,
}

/// The requests of one issue, not yet completed.
struct Pending {
    reqs: [ffi::MPI_Request; 2],
    n: usize,
    /// "all-reduce of 1024 bytes".
    what: String,
}

impl Pending {
    /// `MPI_Testall` over the requests: whether all are complete.
    fn test(&mut self) -> Result<bool, c_int> {
        let mut done: c_int = 0;
        // SAFETY: the first n requests came from this issue's MPI calls and were never completed.
        let rc =
            unsafe { ffi::MPI_Testall(self.n as c_int, self.reqs.as_mut_ptr(), &mut done, ffi::RSMPI_STATUSES_IGNORE) };
        if rc != 0 {
            return Err(rc);
        }
        Ok(done != 0)
    }
}

impl Drop for CpuBackend {
    /// An early return between an issue and its wait leaves MPI free to
    /// write the receive buffers (and read the send buffers) later: if one
    /// last `MPI_Testall` does not complete the requests, the buffers are
    /// leaked rather than freed under MPI (the process is ending on an error
    /// anyway).
    fn drop(&mut self) {
        if let Some(mut p) = self.pending.take() {
            if !matches!(p.test(), Ok(true)) {
                std::mem::forget(std::mem::take(&mut self.send));
                std::mem::forget(std::mem::take(&mut self.recv));
                std::mem::forget(std::mem::take(&mut self.send16));
                std::mem::forget(std::mem::take(&mut self.recv16));
            }
        }
    }
}

impl CpuBackend {
    /// The executor of the prepared trace collectives.
    fn prepared_exec(&mut self) -> BackendResult<&mut trace_exec::CpuTraceExec> {
        self.trace_exec
            .as_mut()
            .ok_or_else(|| BackendError::Misuse("internal: no trace collectives were prepared".into()))
    }

    /// Create on a duplicate of `world` (isolating our traffic), with what `plan` asks for.
    pub fn new(world: &SimpleCommunicator, plan: &BackendPlan) -> Result<Self> {
        let comm = world.duplicate();
        let rank = comm.rank() as u32;
        let elems = usize::try_from(plan.max_bytes / plan.dtype.size_bytes())?;
        if i32::try_from(elems).is_err() {
            bail!("message of {} bytes exceeds MPI's int element count", plan.max_bytes);
        }
        let (f32_elems, u16_elems) = match plan.dtype {
            Dtype::F32 => (elems, 0),
            Dtype::Bf16 => (0, elems),
        };
        let send: Vec<f32> = (0..f32_elems).map(|i| contribution(Dtype::F32, rank, i)).collect();
        // the bf16 contributions are the integers 1 and 2: the same values as 16-bit integers
        let send16: Vec<u16> = (0..u16_elems).map(|i| contribution(Dtype::Bf16, rank, i) as u16).collect();
        let (ak, cn) = plan.activation_elems();
        let a: Vec<f32> = (0..ak).map(|i| ((i % 7) as f32) * 0.25).collect();
        let sets = plan.weight_sets.max(1) as usize;
        let b: Vec<Vec<Vec<f32>>> = plan
            .gemms
            .iter()
            .map(|g| {
                let kn = g.k as usize * g.n as usize;
                (0..sets).map(|s| (0..kn).map(|i| (((i + s) % 5) as f32) * 0.5).collect()).collect()
            })
            .collect();
        let mb = usize::try_from(plan.membound_bytes)?;
        Ok(Self {
            world_size: comm.size() as u32,
            comm,
            control: world.duplicate(),
            dtype: plan.dtype,
            send,
            recv: vec![0.0; f32_elems],
            send16,
            recv16: vec![0; u16_elems],
            capacity_bytes: plan.max_bytes,
            rank,
            pending: None,
            issued_in_pass: 0,
            gemms: plan.gemms.clone(),
            a,
            b,
            c: vec![0.0; cn],
            mem_src: vec![1u8; mb],
            mem_dst: vec![0u8; mb],
            timeout: None,
            trace_exec: None,
            p2p: None,
        })
    }

    /// Fail a wait that lasts longer than `t` (`--collective-timeout-s`): a
    /// stopped or vanished peer then ends the job with a message instead of
    /// leaving every other rank spinning.
    pub fn with_timeout(mut self, t: std::time::Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    fn gemm_once(&mut self, shape: usize, layer: u32) {
        let g = self.gemms[shape];
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let sets = &self.b[shape];
        let b = &sets[layer as usize % sets.len()];
        let c = &mut self.c[..m * n];
        c.iter_mut().for_each(|x| *x = 0.0);
        for i in 0..m {
            let crow = &mut c[i * n..(i + 1) * n];
            for p in 0..k {
                let aip = self.a[i * k + p];
                let brow = &b[p * n..(p + 1) * n];
                for (cj, bj) in crow.iter_mut().zip(brow) {
                    *cj += aip * bj;
                }
            }
        }
        std::hint::black_box(&self.c);
    }

    /// A world [`Call`]: the nonblocking MPI call of `kind` (its arm in
    /// [`mpi_call`]) on this backend's duplicate of the world, its size, root
    /// and ring from [`OwnOp`]. MPI has no bf16: a bf16 run moves 16-bit
    /// integers (and sums them as integers).
    fn start(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        super::issue_count(kind, self.pending.is_some(), bytes, dtype, self.dtype, self.capacity_bytes)?;
        let op = OwnOp::new(kind, bytes, dtype, self.world_size, self.rank)?;
        if kind == CollectiveKind::Broadcast && op.root == Some(self.rank) {
            // MPI broadcasts in place: the root's data goes into its receive
            // buffer first, as NCCL's out-of-place broadcast copies it there
            match dtype {
                Dtype::F32 => self.recv[..op.send_elems].copy_from_slice(&self.send[..op.send_elems]),
                Dtype::Bf16 => self.recv16[..op.send_elems].copy_from_slice(&self.send16[..op.send_elems]),
            }
        }
        // SAFETY: reading immutable handle constants that rsmpi's C shim initialises before MPI_Init returns.
        let (null, sum) = unsafe { (ffi::RSMPI_REQUEST_NULL, ffi::RSMPI_SUM) };
        // SAFETY: as above, immutable datatype handle constants.
        let (float, uint16) = unsafe { (ffi::RSMPI_FLOAT, ffi::RSMPI_UINT16_T) };
        let mut reqs = [null; 2];
        let (send, recv, mpi_type): (*const c_void, *mut c_void, _) = match dtype {
            Dtype::F32 => (self.send.as_ptr().cast(), self.recv.as_mut_ptr().cast(), float),
            Dtype::Bf16 => (self.send16.as_ptr().cast(), self.recv16.as_mut_ptr().cast(), uint16),
        };
        let counts = MpiCounts::of(&op.call()).map_err(BackendError::Misuse)?;
        let args = MpiArgs { send, recv, dtype: mpi_type, op: sum, comm: self.comm.as_raw() };
        // SAFETY: both buffers of `dtype` hold at least `bytes` (issue_count
        // checked the capacity), which bounds every count OwnOp gives; the
        // buffers stay alive and untouched until the wait completes the
        // requests (`pending` guards reuse, Drop leaks them if it cannot).
        let (call, rc, n) = unsafe { mpi_call(&counts, &args, Mode::Nonblocking(&mut reqs)) };
        let what = format!("{} of {bytes} bytes", kind.label());
        if rc != 0 {
            return Err(BackendError::Mpi { call: format!("{call}: {what}"), code: rc });
        }
        self.pending = Some(Pending { reqs, n, what });
        self.issued_in_pass += 1;
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo { kind: BackendKind::Cpu, rank: self.rank, world_size: self.world_size, back_to_back: false }
    }

    fn device(&self) -> DeviceIdentity {
        DeviceIdentity {
            backend: BackendKind::Cpu,
            name: identity::cpu_model().unwrap_or_else(|| "unknown CPU".into()),
            facts: vec![
                (
                    "gemm".into(),
                    format!("{} f32 in, out and accumulate (naive, single thread)", super::describe_gemms(&self.gemms)),
                ),
                (
                    "collective".into(),
                    match self.dtype {
                        Dtype::F32 => "MPI_Iallreduce + MPI_Wait, MPI_FLOAT, MPI_SUM".into(),
                        Dtype::Bf16 => "MPI_Iallreduce + MPI_Wait, MPI_UINT16_T, MPI_SUM (bf16 emulated: bf16's size, \
                            integer arithmetic)"
                            .into(),
                    },
                ),
            ],
        }
    }

    fn unmeasured(&self) -> Vec<Unmeasured> {
        let mut v: Vec<Unmeasured> = ["device_start_ns", "device_end_ns"]
            .into_iter()
            .map(|f| Unmeasured {
                field: f.into(),
                reason: "the cpu backend has no device timeline; completion is only known when MPI_Wait returns".into(),
            })
            .collect();
        if self.dtype == Dtype::Bf16 {
            v.push(Unmeasured {
                field: "dtype".into(),
                reason:
                    "MPI has no bf16 type: bf16 all-reduces move bf16's bytes as MPI_UINT16_T and sum as integers, \
                    so the cost of bf16 arithmetic in the reduction is not measured"
                        .into(),
            });
        }
        v
    }

    /// The groups become sub-communicators of this backend's duplicate of
    /// the world (`MPI_Comm_split`, members in the trace's order), the kinds
    /// `replay-trace`'s MPI calls (blocking: complete when [`Call::Trace`]
    /// returns; started [`Timing::Async`]: the `MPI_I…` call, completed by
    /// [`Call::Complete`]; no `--collective-timeout-s` applies to them). The
    /// point-to-point program runs on those communicators, as `replay-trace`
    /// runs it ([`p2p::CpuP2p`]).
    fn prepare(&mut self, trace: &CommTrace, colls: &[TraceCollective], plan: Option<&P2pPlan>) -> BackendResult<()> {
        let mut exec = trace_exec::CpuTraceExec::new(&self.comm, trace)?;
        exec.prepare(colls)?;
        if let Some(plan) = plan {
            let mut p = p2p::CpuP2p::new(self.rank, plan.clone(), &|g| exec.raw_comm(g))?;
            p.limit = self.timeout.unwrap_or(p.limit);
            self.p2p = Some(p);
        }
        self.trace_exec = Some(exec);
        Ok(())
    }

    /// Every call completes on the host except an [`Timing::Async`] world
    /// call, which [`Backend::wait`] completes; back to back is a host wait.
    fn enqueue(&mut self, call: Call<'_>, timing: Timing) -> BackendResult<()> {
        match call {
            Call::World { kind, bytes, dtype } => {
                self.start(kind, bytes, dtype)?;
                if timing != Timing::Async {
                    self.wait()?;
                }
                if timing == Timing::Untimed {
                    // not one of the pass's recorded collectives
                    self.issued_in_pass -= 1;
                }
                Ok(())
            }
            Call::Trace { index, c, op } => Ok(self.prepared_exec()?.issue(index, c, op, timing == Timing::Async)?),
            Call::Clear(index) => Ok(self.prepared_exec()?.clear(index)?),
            Call::ClearWorld { kind, bytes, dtype } => {
                if self.pending.is_some() {
                    return Err(BackendError::Misuse("internal: a result cleared under an outstanding call".into()));
                }
                let n = OwnOp::new(kind, bytes, dtype, self.world_size, self.rank)?.recv_elems;
                match dtype {
                    Dtype::F32 => self.recv.iter_mut().take(n).for_each(|x| *x = 0.0),
                    Dtype::Bf16 => self.recv16.iter_mut().take(n).for_each(|x| *x = 0),
                }
                Ok(())
            }
            Call::Complete(index) => Ok(self.prepared_exec()?.complete(index)?),
            Call::P2pStep(k) => {
                let p = self
                    .p2p
                    .as_mut()
                    .ok_or_else(|| BackendError::Misuse("internal: no point-to-point program was prepared".into()))?;
                Ok(p.run_step(k)?)
            }
        }
    }

    fn wait(&mut self) -> BackendResult<Option<DeviceInterval>> {
        let Some(mut p) = self.pending.take() else {
            return Err(BackendError::Misuse("internal: wait without an outstanding collective".into()));
        };
        let Some(limit) = self.timeout else {
            // SAFETY: the first n requests came from this issue and are waited on exactly once.
            let rc = unsafe { ffi::MPI_Waitall(p.n as c_int, p.reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE) };
            if rc != 0 {
                return Err(BackendError::Mpi { call: format!("MPI_Wait on the {}", p.what), code: rc });
            }
            return Ok(None);
        };
        // MPI_Testall drives progress like MPI_Wait's own loop; a test that
        // finds it not done yields the core (as Open MPI's MPI_Wait does when
        // oversubscribed), so the peer this rank waits for can run
        let t0 = std::time::Instant::now();
        loop {
            match p.test() {
                Err(rc) => return Err(BackendError::Mpi { call: format!("MPI_Test on the {}", p.what), code: rc }),
                Ok(true) => return Ok(None),
                Ok(false) => {}
            }
            std::thread::yield_now();
            if t0.elapsed() > limit {
                let what = p.what.clone();
                // keep the requests pending so Drop keeps their buffers away from MPI
                self.pending = Some(p);
                let op = mpi_deadline::Op { what: &what, phase: "a phase's collective", peer: None };
                return Err(BackendError::Timeout(mpi_deadline::timeout_error(&op, limit).to_string()));
            }
        }
    }

    fn end_back_to_back(&mut self) -> BackendResult<()> {
        Ok(())
    }

    fn collectives_on_compute_stream(&mut self, _on: bool) -> BackendResult<()> {
        Ok(())
    }

    fn compute(&mut self, work: Compute) -> BackendResult<()> {
        match work {
            Compute::Gemm { shape, layer, units } => {
                if shape >= self.gemms.len() {
                    return Err(BackendError::Misuse(format!("internal: GEMM shape {shape} was not prepared")));
                }
                for _ in 0..units {
                    self.gemm_once(shape, layer);
                }
            }
            Compute::Membound(units) => {
                for _ in 0..units {
                    self.mem_dst.copy_from_slice(&self.mem_src);
                    std::hint::black_box(&self.mem_dst);
                }
            }
        }
        Ok(())
    }

    fn mark(&mut self) -> BackendResult<Option<usize>> {
        Ok(None)
    }

    fn synchronize(&mut self) -> BackendResult<()> {
        if self.pending.is_some() {
            self.wait()?;
        }
        Ok(())
    }

    fn finish_pass(&mut self) -> BackendResult<PassTimings> {
        let n = std::mem::take(&mut self.issued_in_pass);
        Ok(PassTimings { collectives: vec![None; n], ..Default::default() })
    }

    fn check(&mut self, what: Checked<'_>, corrupt: bool) -> BackendResult<CheckOutcome> {
        match what {
            Checked::Last { kind, bytes, dtype } => {
                if corrupt {
                    if let Some(x) = self.recv.first_mut() {
                        *x += 1.0;
                    }
                    if let Some(x) = self.recv16.first_mut() {
                        *x += 1;
                    }
                }
                let op = OwnOp::new(kind, bytes, dtype, self.world_size, self.rank)?;
                let n = op.recv_elems;
                Ok(match dtype {
                    Dtype::F32 => op.verify(&self.recv[..n], dtype),
                    Dtype::Bf16 => {
                        op.verify(&self.recv16[..n].iter().map(|&x| f32::from(x)).collect::<Vec<f32>>(), dtype)
                    }
                })
            }
            Checked::Trace { index, c, op } => {
                let (wrong_elements, first_wrong) = self.prepared_exec()?.count_wrong(index, c, op, corrupt)?;
                Ok(CheckOutcome { wrong_elements, first_wrong })
            }
        }
    }

    fn end_p2p_pass(&mut self, check: bool, corrupt: bool) -> BackendResult<Option<u64>> {
        let p = self
            .p2p
            .as_mut()
            .ok_or_else(|| BackendError::Misuse("internal: no point-to-point program was prepared".into()))?;
        let checked = check.then(|| p.check(corrupt)).transpose()?;
        p.reset();
        Ok(checked)
    }

    fn graph(&mut self, _step: GraphStep) -> BackendResult<Option<(u64, u64)>> {
        Err(BackendError::Unsupported("--graph needs the cuda backend (CUDA graphs)".into()))
    }

    fn barrier(&mut self, what: &str, phase: &str, timeout: Option<Duration>) -> anyhow::Result<()> {
        mpi_deadline::barrier_within(&self.control, timeout, mpi_deadline::Op { what, phase, peer: None })
    }
}

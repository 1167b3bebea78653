//! `replay-trace --pace workload --backend cuda`: the trace's compute kernels
//! re-created as device work of their recorded durations on their recorded
//! streams, with the trace's collectives between them.
//!
//! Consumes a prepared [`CudaTraceExec`] (communicators and buffers) and the
//! rank's [`WorkloadPlan`](crate::evidence::commtrace::workload_plan).
//! Produces each collective's record, timed by events on its stream, and a
//! report of the launch correction and gap trims applied. Refuses: a trace
//! without recorded compute durations, a device without stream memory
//! operations or without the PTX module (reason given); `replay-trace` refuses
//! `--cupti` for this pace before MPI starts. Method: docs/METHODS.md, "Workload pace on GPUs".
use super::CudaTraceExec;
use crate::backend::cuda::{drv, host_release_word, load_ptx};
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::{reduction, ReplayOptions};
use crate::evidence::commtrace::exec::{
    ExecRecord, GapTransition, SpinCalibration, SpinPoint, WorkloadReport, WORKLOAD_REPORT_FORMAT_VERSION,
};
use crate::evidence::commtrace::workload_plan::{transition_ns, PlannedWork, StreamGap, WorkloadPlan};
use crate::evidence::commtrace::{CommTrace, RankTrace};
use anyhow::{bail, Context, Result};
use cudarc::driver::result::{event, launch_kernel};
use cudarc::driver::{sys as drv_sys, CudaContext, CudaEvent, CudaStream};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Operations enqueued behind the closed gate before it opens.
pub const GATE_LOOKAHEAD_OPS: usize = 192;
/// Collectives enqueued behind the closed gate before it opens: NCCL's host
/// side waits for room in its work queue, which only running kernels free
/// (NCCL_WORK_FIFO_BYTES, 1 MiB by default since NCCL 2.19), so it must not
/// fill behind a gate.
pub const GATE_LOOKAHEAD_COLLECTIVES: usize = 32;

/// Threads per block of the spinning kernel.
const SPIN_THREADS: u32 = 128;

/// The spinning kernel: every thread reads `%globaltimer` at entry and spins
/// until it has advanced by the parameter (ns). PTX ISA 7.0, sm_70 and later;
/// the driver compiles it for the device at load.
const SPIN_PTX: &str = "
.version 7.0
.target sm_70
.address_size 64

.visible .entry commcanary_spin_ns(
    .param .u64 commcanary_spin_ns_param_0
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [commcanary_spin_ns_param_0];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd3, %rd2, %rd1;
$L_spin:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p1, %rd4, %rd3;
    @%p1 bra $L_spin;
    ret;
}
";

/// The loaded spinning kernel and its calibration.
struct Spin {
    _module: drv_sys::CUmodule,
    func: drv_sys::CUfunction,
    blocks: u32,
    excess_ns: f64,
    floor_ns: f64,
}

impl Spin {
    fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let (module, funcs) = load_ptx(ctx, SPIN_PTX, "spinning kernel's PTX", &[c"commcanary_spin_ns"])?;
        let func = funcs[0];
        let sms = drv(
            ctx.attribute(drv_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "multiprocessor count",
        )?;
        Ok(Spin { _module: module, func, blocks: sms.max(1) as u32, excess_ns: 0.0, floor_ns: 0.0 })
    }

    fn launch_raw(&self, stream: &CudaStream, ns: u64) -> Result<()> {
        let mut arg = ns;
        let mut params = [&mut arg as *mut u64 as *mut std::ffi::c_void];
        // SAFETY: the function takes one u64 parameter, passed by pointer as cuLaunchKernel requires.
        drv(
            unsafe {
                launch_kernel(self.func, (self.blocks, 1, 1), (SPIN_THREADS, 1, 1), 0, stream.cu_stream(), &mut params)
            },
            "cuLaunchKernel (spinning kernel)",
        )
    }

    /// The spin to request for a kernel of `recorded_ns`.
    fn request(&self, recorded_ns: u64) -> u64 {
        (recorded_ns as f64 - self.excess_ns).max(0.0).round() as u64
    }

    /// Device time the spin for a kernel of `recorded_ns` takes back to back:
    /// the request plus the launch excess, never under the floor.
    fn takes_ns(&self, recorded_ns: u64) -> f64 {
        (self.request(recorded_ns) as f64 + self.excess_ns).max(self.floor_ns)
    }

    /// Device time per launch of `n` back-to-back spins of `ns` on `stream` (idle).
    fn per_launch_ns(&self, stream: &CudaStream, ctx: &Arc<CudaContext>, ns: u64, n: u32) -> Result<f64> {
        let a = drv(ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate")?;
        let b = drv(ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate")?;
        // one launch first, so that the first timed one does not start from an idle front end
        self.launch_raw(stream, ns)?;
        drv(a.record(stream), "cuEventRecord")?;
        for _ in 0..n {
            self.launch_raw(stream, ns)?;
        }
        drv(b.record(stream), "cuEventRecord")?;
        drv(stream.synchronize(), "cuStreamSynchronize (calibration)")?;
        Ok(drv(a.elapsed_ms(&b), "cuEventElapsedTime")? as f64 * 1e6 / n as f64)
    }

    /// Measure the floor and the excess, then check the correction.
    fn calibrate(&mut self, stream: &CudaStream, ctx: &Arc<CudaContext>) -> Result<SpinCalibration> {
        const N: u32 = 32;
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mut floors: Vec<f64> = (0..5).map(|_| self.per_launch_ns(stream, ctx, 0, N)).collect::<Result<_>>()?;
        let floor_ns = median(&mut floors);
        self.floor_ns = floor_ns;
        let mut excess = Vec::new();
        for len in [5_000u64, 20_000, 50_000] {
            let mut v: Vec<f64> = (0..3).map(|_| self.per_launch_ns(stream, ctx, len, N)).collect::<Result<_>>()?;
            excess.push(median(&mut v) - len as f64);
        }
        self.excess_ns = median(&mut excess).max(0.0);
        let mut points = Vec::new();
        for recorded in [2_000u64, 5_000, 20_000, 50_000] {
            let requested = self.request(recorded);
            points.push(SpinPoint {
                recorded_ns: recorded,
                requested_ns: requested,
                achieved_ns: self.per_launch_ns(stream, ctx, requested, N)?,
            });
        }
        Ok(SpinCalibration {
            blocks: self.blocks,
            threads_per_block: SPIN_THREADS,
            floor_ns,
            excess_ns: self.excess_ns,
            points,
        })
    }
}

/// The host-mapped gate word (host pointer, device pointer).
struct Gate {
    host: *mut u32,
    dev: drv_sys::CUdeviceptr,
    count: u32,
}

impl Gate {
    /// Make `stream` wait until the host opens the gate; returns the value that opens it.
    fn close(&mut self, stream: &CudaStream) -> Result<u32> {
        self.count = self.count.wrapping_add(1).max(1);
        let flags = drv_sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
        // SAFETY: `dev` maps a live 4-byte host word of this context; the stream is this context's.
        let r = unsafe { drv_sys::cuStreamWaitValue32_v2(stream.cu_stream(), self.dev, self.count, flags) };
        drv(r.result(), "cuStreamWaitValue32 (gate)")?;
        Ok(self.count)
    }

    fn open(&self, value: u32) {
        // SAFETY: a live, aligned host word only this thread writes.
        unsafe { std::ptr::write_volatile(self.host, value) };
    }
}

/// What every pass of one run shares: the rank's trace and plan, the
/// calibrated spinning kernel, the plan's streams and the gate's stream, the
/// reduction and the deadline. A pass changes only the gate, the trims and
/// whether results are checked; [`run_pass`] takes those apart.
#[derive(Clone, Copy)]
struct PassSetup<'a> {
    /// The world, whose barrier opens the ranks' gates together.
    world: &'a SimpleCommunicator,
    /// This rank's part of the trace.
    mine: &'a RankTrace,
    /// This rank's workload plan.
    plan: &'a WorkloadPlan,
    /// The calibrated spinning kernel.
    spin: &'a Spin,
    /// One CUDA stream per stream of the plan, in its order.
    streams: &'a [Arc<CudaStream>],
    /// The stream that waits on the gate word.
    gate_stream: &'a Arc<CudaStream>,
    /// `--op`, for the collectives whose reduction the trace did not record ([`reduction`]).
    op: Option<ReduceOp>,
    /// The pass fails when the device has not finished this long after the gate opened.
    timeout: Duration,
}

/// One pass's device times.
struct PassTimes {
    /// Per collective: (start, end), ns after the gate.
    intervals: Vec<(u64, u64)>,
    device_ns: u64,
    host_ns: u64,
    /// Operations enqueued before the gate opened.
    before_open: usize,
}

/// The workload pace on this GPU: calibrate, an optional warm-up pass, the
/// timed pass; returns its records and report (`exec` prepared).
pub fn run(
    world: &SimpleCommunicator,
    exec: &mut CudaTraceExec,
    trace: &CommTrace,
    plan: &WorkloadPlan,
    o: &ReplayOptions,
    timeout: Duration,
    stands_for: &str,
) -> Result<(Vec<ExecRecord>, WorkloadReport)> {
    let ReplayOptions { op, check, warmup, .. } = *o;
    let rank = world.rank() as u32;
    let mine = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    let ctx = exec.context().clone();
    let (host, dev) = host_release_word()
        .map_err(|e| anyhow::anyhow!("the workload pace needs stream memory operations for its gate: {e}"))?;
    let mut gate = Gate { host, dev, count: 0 };
    let mut spin = Spin::load(&ctx)?;
    let calibration = spin.calibrate(exec.stream(), &ctx).context("calibrating the spinning kernel")?;
    let streams: Vec<Arc<CudaStream>> =
        plan.streams.iter().map(|_| drv(ctx.new_stream(), "creating a stream")).collect::<Result<_>>()?;
    let gate_stream = drv(ctx.new_stream(), "creating the gate stream")?;
    for (i, c) in mine.collectives.iter().enumerate() {
        exec.run(i, c, reduction(c, op).0).with_context(|| format!("connection pass, collective {i}"))?;
    }
    exec.reset()?;
    // the device gap after a collective compares with the compute recorded
    // between it and the next collective where both ran on one stream
    let gaps = plan.same_stream_gaps();
    let mut target_of: Vec<Option<u64>> = vec![None; mine.collectives.len()];
    for g in &gaps {
        target_of[g.after] = Some(g.recorded_ns);
    }
    let mut transition = None;
    let mut trims = vec![0u64; plan.ops.len()];
    let setup = PassSetup { world, mine, plan, spin: &spin, streams: &streams, gate_stream: &gate_stream, op, timeout };
    if warmup {
        let w = run_pass(setup, exec, &mut gate, &trims, false).context("warm-up pass")?;
        exec.reset()?;
        // what the gap's spins take back to back: each at least the launch floor
        let expected = |g: &StreamGap| -> f64 {
            g.compute_ops
                .iter()
                .map(|&x| match plan.ops[x].work {
                    PlannedWork::Compute { duration_ns, .. } => spin.takes_ns(duration_ns),
                    PlannedWork::Collective { .. } => 0.0,
                })
                .sum()
        };
        if let Some((median_ns, n)) = transition_ns(&gaps, &w.intervals, expected) {
            let applied_ns = median_ns.max(0.0).round() as u64;
            // a launch cannot get shorter than the floor
            let room = |d: u64| (spin.takes_ns(d) - spin.floor_ns) as u64;
            trims = plan.gap_trims_ns(&gaps, applied_ns, room);
            transition = Some(GapTransition { warmup_median_ns: median_ns, gaps: n, applied_ns });
        }
    }
    let times = run_pass(setup, exec, &mut gate, &trims, check).context("timed pass")?;
    exec.async_error()?;
    let mut records = Vec::with_capacity(mine.collectives.len());
    for (i, c) in mine.collectives.iter().enumerate() {
        let (start, end) = times.intervals[i];
        let (n_compute, compute_ns) = plan.compute_before_ns(i);
        let target = target_of[i];
        let actual = match i.checked_sub(1) {
            Some(p) => start.saturating_sub(times.intervals[p].1),
            None => start,
        };
        records.push(ExecRecord {
            target_gap_ns: target,
            actual_gap_ns: actual,
            elapsed_ns: end.saturating_sub(start),
            compute_ops: Some(n_compute),
            compute_recorded_ns: Some(compute_ns),
            device_start_ns: Some(start),
            device_end_ns: Some(end),
            ..ExecRecord::untimed(i, c, rank, reduction(c, op), check, exec.wire_bytes(i).unwrap_or(0))
        });
    }
    let (compute_ops, compute_recorded_ns) = plan.compute_total();
    let (unit, length) = match stands_for {
        "gaps" => ("recorded gap between collectives", "the gap"),
        _ => {
            ("run of consecutive kernels of a stream (nothing waiting between them)", "their summed recorded duration")
        }
    };
    let report = WorkloadReport {
        format_version: WORKLOAD_REPORT_FORMAT_VERSION,
        stands_for: stands_for.into(),
        rank,
        backend: "cuda".into(),
        compute_model: format!(
            "one launch per {unit} of a kernel spinning on %globaltimer for {length} less the calibrated launch excess \
                ({:.0} ns), {} blocks of {} threads: it holds the device for the duration but reproduces neither the \
                    kernel's memory traffic nor its multiprocessor footprint",
            calibration.excess_ns,
            calibration.blocks,
            calibration.threads_per_block
        ),
        streams: plan.stream_names(),
        dependencies_from_timeline: plan.timeline_complete,
        cross_stream_waits: plan.cross_stream_waits(),
        compute_ops,
        compute_recorded_ns,
        compute_launches: Some(plan.compute_launches()),
        collectives: records.len() as u32,
        gated: Some(true),
        gate_lookahead_ops: Some(times.before_open as u32),
        spin: Some(calibration),
        gap_transition: transition,
        pass_device_ns: Some(times.device_ns),
        pass_host_ns: times.host_ns,
        trace_span_ns: plan.trace_span_ns(),
    };
    Ok((records, report))
}

/// One gated pass of the plan with `trims_ns` taken off its compute launches,
/// collectives checked if `check`; returns its device times.
fn run_pass(
    setup: PassSetup,
    exec: &mut CudaTraceExec,
    gate: &mut Gate,
    trims_ns: &[u64],
    check: bool,
) -> Result<PassTimes> {
    let PassSetup { world, mine, plan, spin, streams, gate_stream, op, timeout } = setup;
    let ctx = exec.context().clone();
    let event = || drv(ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
    // every event of the pass exists before the first enqueue
    let waited = plan.waited_on();
    let opened_ev = event()?;
    let after: Vec<Option<CudaEvent>> =
        waited.iter().map(|&w| if w { event().map(Some) } else { Ok(None) }).collect::<Result<_>>()?;
    let coll_ev: Vec<(CudaEvent, CudaEvent)> =
        (0..mine.collectives.len()).map(|_| Ok((event()?, event()?))).collect::<Result<_>>()?;
    let tails: Vec<CudaEvent> = streams.iter().map(|_| event()).collect::<Result<_>>()?;
    let stream_of =
        |s: u64| -> usize { plan.streams.iter().position(|&x| x == s).expect("the plan lists every stream it uses") };

    let value = gate.close(gate_stream)?;
    drv(opened_ev.record(gate_stream), "cuEventRecord (gate)")?;
    for s in streams {
        drv(s.wait(&opened_ev), "cuStreamWaitEvent (gate)")?;
    }
    let mut opened: Option<Instant> = None;
    let mut before_open = plan.ops.len();
    let mut collectives = 0usize;
    let open_gate = |gate: &Gate| -> Instant {
        // the ranks open their gates together
        world.barrier();
        gate.open(value);
        Instant::now()
    };
    for (x, o) in plan.ops.iter().enumerate() {
        let s = &streams[stream_of(o.stream)];
        for &y in &o.waits_for {
            let e = after[y].as_ref().expect("a waited-for operation records an event");
            drv(s.wait(e), "cuStreamWaitEvent (cross-stream dependency)")?;
        }
        match o.work {
            PlannedWork::Compute { duration_ns, .. } => {
                spin.launch_raw(s, spin.request(duration_ns).saturating_sub(trims_ns[x]))?
            }
            PlannedWork::Collective { index } => {
                let (a, b) = &coll_ev[index];
                drv(a.record(s), "cuEventRecord (collective start)")?;
                let c = &mine.collectives[index];
                exec.enqueue_on(index, c, reduction(c, op).0, check, s)
                    .with_context(|| format!("collective {index}"))?;
                drv(b.record(s), "cuEventRecord (collective end)")?;
            }
        }
        if let Some(e) = after[x].as_ref() {
            drv(e.record(s), "cuEventRecord (dependency)")?;
        }
        if matches!(o.work, PlannedWork::Collective { .. }) {
            collectives += 1;
        }
        if opened.is_none() && (x + 1 == GATE_LOOKAHEAD_OPS || collectives == GATE_LOOKAHEAD_COLLECTIVES) {
            opened = Some(open_gate(gate));
            before_open = x + 1;
        }
    }
    let opened = match opened {
        Some(t) => t,
        None => open_gate(gate),
    };
    for (s, t) in streams.iter().zip(&tails) {
        drv(t.record(s), "cuEventRecord (stream end)")?;
    }
    // wait with a deadline, polling NCCL's asynchronous error
    for t in &tails {
        loop {
            // SAFETY: a live event of this context.
            match unsafe { event::query(t.cu_event()) } {
                Ok(()) => break,
                Err(e) if e.0 == drv_sys::cudaError_enum::CUDA_ERROR_NOT_READY => {
                    if opened.elapsed() > timeout {
                        bail!(
                            "the workload pass did not finish within {} s (a peer stopped, or a collective hangs)",
                            timeout.as_secs()
                        );
                    }
                    exec.async_error()?;
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => bail!("cuEventQuery (workload pass): CUDA error {e:?}"),
            }
        }
    }
    let host_ns = opened.elapsed().as_nanos() as u64;
    let rel = |e: &CudaEvent| -> Result<u64> {
        Ok((drv(opened_ev.elapsed_ms(e), "cuEventElapsedTime")? as f64 * 1e6).max(0.0).round() as u64)
    };
    let intervals = coll_ev.iter().map(|(a, b)| Ok((rel(a)?, rel(b)?))).collect::<Result<Vec<_>>>()?;
    let device_ns = tails.iter().map(&rel).collect::<Result<Vec<_>>>()?.into_iter().max().unwrap_or(0);
    Ok(PassTimes { intervals, device_ns, host_ns, before_open })
}

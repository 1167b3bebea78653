//! CUDA/NCCL backend: GPUs through cudarc (driver, cuBLAS; loaded at run
//! time), NCCL through our own loader ([`crate::backend::cuda::nccl`]).
//!
//! Consumes the world communicator (to broadcast NCCL's unique id), the
//! node-local rank (GPU = `local_rank % device_count`), an NCCL library path
//! and the workload spec. Produces device intervals for every collective and
//! device-ordered marks (token and compute boundaries), mapped onto the host
//! timeline by [`crate::core::clock::DeviceTimeMap`]: a window of event round trips
//! on an idle stream at the start and at the end of every pass, whose
//! feasible intervals are intersected (the recorded anchor error is the
//! larger window's half-width plus the event timer's resolution and the
//! rounding of `cuEventElapsedTime`'s float milliseconds). With `--cupti`,
//! kernel records are placed through `%globaltimer` instead
//! ([`globaltimer`]: release-and-reply round trips and stamping kernels at
//! the same two points), with their own recorded error. Refuses, with a
//! one-line reason: no driver, no GPU, no cuBLAS, an NCCL library that is not
//! the one asked for.
//!
//! Hot path. Every timing event comes from a pool filled before the pass and
//! is resolved after it; a collective costs the host its NCCL call plus one
//! `cuEventRecord` (isolated phase, back to back) or a handful of event records
//! and stream waits (workload phases), and nothing else: no allocation, lock,
//! syscall, log line or synchronization. CUPTI kernel records are off unless
//! asked for (`--cupti`), since their cost would be mixed into every result.
//!
//! Stream semantics: `issue_allreduce` makes the communication stream wait
//! for the compute stream's work so far (the tensor was produced there, as in
//! PyTorch), records a start event, enqueues `ncclAllReduce`, and records an
//! end event; the host returns at once. `wait_allreduce` is a *stream
//! dependency*: the compute stream waits on the end event; the host does not
//! block. `allreduce_back_to_back` (isolated phase) enqueues on the
//! communication stream alone, one boundary event before each collective, as
//! nccl-tests' per-iteration timing does (`-I 1`: an event before each
//! iteration and one after the last, the interval between consecutive events
//! being one iteration), so the device queue stays full and the host's cost
//! is hidden as it is there. `synchronize` (device synchronization) happens
//! once per pass. cudarc's automatic cross-stream event tracking is disabled
//! so that no dependency exists that the phase did not ask for.
mod anchor;
pub mod buffers;
pub mod cupti;
pub mod globaltimer;
pub mod nccl;
mod probe;
pub mod trace_exec;
use super::{contribution, Backend, BackendError, BackendPlan, BackendResult, DeviceInterval, PassTimings};
use crate::backend::cuda::nccl::{NcclComm, NcclLibrary};
use crate::core::clock::RankClock;
use crate::core::workload::GemmShape;
use crate::evidence::shard::{BackendKind, DeviceIdentity, Dtype, Unmeasured};
use anchor::{Anchor, ANCHOR_ROUND_TRIPS, TIMER_ROUND_TRIPS, TIMER_STAMPS};
use anyhow::{bail, Context, Result};
use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{sys as drv_sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use mpi::topology::{Communicator, SimpleCommunicator};
pub use probe::{driver_report, probe_devices, unavailable_reason, DriverReport};
use probe::{nvml_facts, probe_cublas, topology};
use std::path::Path;
use std::sync::Arc;

/// Resolution of CUDA event timestamps as documented for `cuEventElapsedTime`
/// ("around 0.5 microseconds"); used where the measured granularity is inconclusive.
pub const EVENT_RESOLUTION_NS: f64 = 500.0;

/// `bytes` of zeroed host memory mapped into the device's address space
/// (host pointer, device pointer), with the context current. The caller
/// frees it with `cuMemFreeHost`, or keeps it for the process's life.
pub(crate) fn mapped_host_bytes(bytes: usize) -> std::result::Result<(*mut u8, drv_sys::CUdeviceptr), String> {
    let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; the context is current (callers bind it);
    // the memory is zeroed before its device pointer is handed out.
    unsafe {
        drv_sys::cuMemHostAlloc(&mut p, bytes, drv_sys::CU_MEMHOSTALLOC_DEVICEMAP | drv_sys::CU_MEMHOSTALLOC_PORTABLE)
            .result()
            .map_err(|e| format!("cuMemHostAlloc: {e:?}"))?;
        std::ptr::write_bytes(p as *mut u8, 0, bytes);
        let mut d: drv_sys::CUdeviceptr = 0;
        if let Err(e) = drv_sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0).result() {
            let _ = drv_sys::cuMemFreeHost(p);
            return Err(format!("cuMemHostGetDevicePointer: {e:?}"));
        }
        Ok((p as *mut u8, d))
    }
}

/// Two 4-byte host words mapped into the device's address space (host
/// pointer, device pointer): the release word at offset 0, which the host
/// writes and a `cuStreamWaitValue32` reads, and the acknowledgement at
/// offset 4, which a `cuStreamWriteValue32` writes and the host polls. Never
/// freed: one per process, released with the process.
pub(crate) fn host_release_word() -> std::result::Result<(*mut u32, drv_sys::CUdeviceptr), String> {
    let (p, d) = mapped_host_bytes(8)?;
    Ok((p as *mut u32, d))
}

/// Load a PTX image into `ctx` (the driver compiles it for the device) and
/// look up its entry points, in the order named. The module is never
/// unloaded: its functions stay valid for the process's life.
pub(crate) fn load_ptx(ctx: &Arc<CudaContext>, ptx: &str, what: &str, entries: &[&std::ffi::CStr]) -> Result<(drv_sys::CUmodule, Vec<drv_sys::CUfunction>)> {
    drv(ctx.bind_to_thread(), "binding the CUDA context")?;
    let src = std::ffi::CString::new(ptx).expect("no NUL in the PTX");
    // SAFETY: a NUL-terminated PTX image; the context is current.
    let module = drv(unsafe { cudarc::driver::result::module::load_data(src.as_ptr() as *const _) }, &format!("cuModuleLoadData ({what})"))?;
    let funcs = entries
        .iter()
        // SAFETY: the module was just loaded and is never unloaded.
        .map(|&name| drv(unsafe { cudarc::driver::result::module::get_function(module, name.into()) }, "cuModuleGetFunction"))
        .collect::<Result<Vec<_>>>()?;
    Ok((module, funcs))
}

/// Placeholder end of a back-to-back collective until the next boundary is recorded.
const OPEN_END: usize = usize::MAX;

/// CUDA backend state of one rank.
pub struct CudaBackend {
    // Fields drop in order: the trace executor (its own NCCL communicators,
    // buffers and stream) and the graph (whose nodes use NCCL's and cuBLAS's
    // resources) before NCCL (which keeps its library loaded) and cuBLAS,
    // and all of them before the context.
    /// `rank`'s collectives of other kinds (an isolated sweep of
    /// `--collective`): `replay-trace --backend cuda`'s executor, made by
    /// [`Backend::prepare_trace_ops`] on communicators of its own.
    trace_exec: Option<trace_exec::CudaTraceExec>,
    /// What the trace executor is made from: a duplicate of the world (for
    /// NCCL's unique id), the NCCL library asked for, and this rank's GPU.
    exec_world: SimpleCommunicator,
    exec_nccl_path: std::path::PathBuf,
    exec_ordinal: u32,
    /// Graph mode: the captured token, launched on the compute stream.
    graph: Option<cudarc::driver::CudaGraph>,
    comm: NcclComm,
    blas: CudaBlas,
    compute: Arc<CudaStream>,
    comm_stream: Arc<CudaStream>,
    /// Collective buffers, `max_bytes` each, holding elements of `dtype`.
    send: buffers::DeviceBytes,
    recv: buffers::DeviceBytes,
    dtype: Dtype,
    a: CudaSlice<u16>,
    /// bf16 weights per GEMM shape, one buffer per weight set.
    b: Vec<Vec<CudaSlice<u16>>>,
    c: CudaSlice<u16>,
    mem_src: CudaSlice<u8>,
    mem_dst: CudaSlice<u8>,
    gemms: Vec<GemmShape>,
    world_size: u32,
    clock: RankClock,
    /// Outstanding all-reduce: (bytes, start event, end event), indices into `pass_events`.
    pending: Option<(u64, usize, usize)>,
    /// Every timing event recorded in the current pass, in recording order.
    pass_events: Vec<CudaEvent>,
    /// Per collective of the pass: (start, end) indices into `pass_events`.
    intervals: Vec<(usize, usize)>,
    /// Per collective of the pass where the compute stream waited on it: (before, after).
    waits: Vec<(usize, usize)>,
    marks: Vec<usize>,
    /// A back-to-back run is open: the last interval ends at the next boundary.
    back_to_back_open: bool,
    /// CUDA graphs launched in this pass, dropped once it is finished.
    graphs: Vec<cudarc::driver::CudaGraph>,
    /// Whether any collective ran inside a graph (its host times are the launch's).
    graph_used: bool,
    /// Per stream (compute, comm): the pass event recorded last on it, where
    /// nothing was enqueued after it; a synchronization polls it instead of
    /// recording a fence (an API call, microseconds in a virtual machine).
    tail: [Option<usize>; 2],
    /// Timing events ready for reuse: creating one per operation made the host
    /// the bottleneck (seen on the H200), so they are pooled across passes.
    free_events: Vec<CudaEvent>,
    /// Reused "compute work so far" event for the comm stream's dependency
    /// (cuStreamWaitEvent captures the record current at the call, so re-recording is safe).
    produced: CudaEvent,
    anchor: Option<Anchor>,
    /// Graph mode: capturing the compute stream (and the streams it forks to).
    capturing: bool,
    /// Graph mode: cuBLAS workspace set before capture (cuBLAS must not allocate inside one).
    blas_workspace: Option<CudaSlice<u8>>,
    /// The start and end anchor windows of the last finished pass (for diagnostics and the benchmark).
    last_anchor_windows: Option<(crate::core::clock::DeviceAnchorEstimate, crate::core::clock::DeviceAnchorEstimate)>,
    corrupt_next_check: bool,
    cupti: Option<crate::backend::cuda::cupti::Cupti>,
    cupti_unavailable: Option<String>,
    /// Passes whose kernel times could not be anchored through `%globaltimer`, and why.
    kernel_anchor_failures: Vec<String>,
    /// With `--cupti`: the `%globaltimer` anchor of kernel records, or why it is unavailable.
    timer: std::result::Result<globaltimer::GlobalTimer, String>,
    fence: CudaEvent,
    /// Host-mapped word that releases the anchor's stream wait (host pointer,
    /// device pointer); `None` where stream memory operations are unavailable.
    release: Option<(*mut u32, drv_sys::CUdeviceptr)>,
    release_count: u32,
    /// Collectives run on the compute stream (blocking with `--comm-stream current`).
    on_compute: bool,
    /// Granularity of the event timer, measured at start, ns.
    timer_granularity_ns: f64,
    timeout: std::time::Duration,
    rank: u32,
    uuid: String,
    device: DeviceIdentity,
    ctx: Arc<CudaContext>,
}

/// bf16 bit patterns of small values (±0.0078 .. ±0.5) in a scrambled
/// deterministic order: GEMM operands that are neither zero nor a short
/// repeating pattern (a kernel's power, hence its clock, depends on its data).
fn weight_bits(i: usize) -> u16 {
    // SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014)
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let v = (1.0 + (z & 0x7F) as f32 / 128.0) * [0.0078125f32, 0.03125, 0.125, 0.25][(z >> 7) as usize & 3];
    let v = if z & (1 << 9) != 0 { -v } else { v };
    half::bf16::from_f32(v).to_bits()
}

pub(crate) fn drv<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{what}: CUDA error {e:?}"))
}

impl CudaBackend {
    /// Open GPU `gpu` or else `local_rank % device_count`, load NCCL from `nccl_path`, create
    /// the communicator, and prewarm `events_hint` timing events (cold start).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        world: &SimpleCommunicator,
        local_rank: u32,
        nccl_path: &Path,
        plan: &BackendPlan,
        clock: RankClock,
        events_hint: usize,
        timeout: std::time::Duration,
        gpu: Option<u32>,
        cupti: bool,
    ) -> Result<Self> {
        if let Some(why) = unavailable_reason() {
            bail!("{why}");
        }
        let cublas_name = probe_cublas()?;
        // CUPTI first, so that it sees every kernel; its absence is recorded, not fatal.
        let (cupti, cupti_unavailable) = if !cupti {
            (None, Some("off: kernel records were not asked for (--cupti); their cost stays out of the timings".to_string()))
        } else {
            match crate::backend::cuda::cupti::Cupti::start() {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            }
        };
        let count = drv(CudaContext::device_count(), "cuDeviceGetCount")? as u32;
        let ordinal = match gpu {
            Some(g) if g < count => g as usize,
            Some(g) => bail!("--gpu {g}: this node has {count} GPU(s)"),
            None => (local_rank % count) as usize,
        };
        let ctx = drv(CudaContext::new(ordinal), "creating the CUDA context")?;
        // SAFETY: every cross-stream dependency is placed explicitly below.
        unsafe { ctx.disable_event_tracking() };
        let compute = drv(ctx.new_stream(), "creating the compute stream")?;
        let comm_stream = drv(ctx.new_stream(), "creating the communication stream")?;
        let lib = Arc::new(NcclLibrary::load(nccl_path)?);
        let rank = world.rank() as u32;
        drv(ctx.bind_to_thread(), "binding the CUDA context")?;
        let comm = NcclComm::bootstrap(world, lib.clone(), timeout, "backend initialisation")
            .with_context(|| format!("NCCL {} on GPU {ordinal}", lib.observation().version))?;
        if plan.dtype == Dtype::Bf16 && lib.observation().version_code < 21000 {
            bail!("NCCL {} has no bf16 all-reduce (ncclBfloat16 needs NCCL 2.10 or later)", lib.observation().version);
        }
        let elems = usize::try_from(plan.max_bytes / plan.dtype.size_bytes())?;
        let host: Vec<u8> = match plan.dtype {
            Dtype::F32 => (0..elems).flat_map(|i| contribution(Dtype::F32, rank, i).to_le_bytes()).collect(),
            Dtype::Bf16 => super::bf16_contributions(rank, elems).into_iter().flat_map(u16::to_le_bytes).collect(),
        };
        // as nccl-tests and PyTorch hold theirs: cuMemAlloc, not the stream-ordered pool
        let send = buffers::DeviceBytes::from_host(&compute, &host).context("the send buffer")?.used_by(&comm_stream);
        let recv = buffers::DeviceBytes::zeros(&compute, host.len()).context("the receive buffer")?.used_by(&comm_stream);
        let (ak, cn) = plan.activation_elems();
        let a = drv(compute.clone_htod(&(0..ak).map(weight_bits).collect::<Vec<u16>>()), "copying A")?;
        let mut b = Vec::with_capacity(plan.gemms.len());
        for g in &plan.gemms {
            let kn = g.k as usize * g.n as usize;
            let first = drv(compute.clone_htod(&(0..kn).map(|i| weight_bits(i + 1)).collect::<Vec<u16>>()), "copying B")?;
            let mut sets = vec![first];
            for _ in 1..plan.weight_sets.max(1) {
                let mut next = compute.alloc_zeros::<u16>(kn).map_err(|e| {
                    anyhow::anyhow!("allocating {} weight sets of {}x{} bf16: CUDA error {e:?} (the model does not fit this GPU)", plan.weight_sets, g.k, g.n)
                })?;
                drv(compute.memcpy_dtod(&sets[0], &mut next), "copying B")?;
                sets.push(next);
            }
            b.push(sets);
        }
        let c = drv(compute.alloc_zeros::<u16>(cn), "allocating C")?;
        let mb = usize::try_from(plan.membound_bytes)?;
        let mem_src = drv(compute.alloc_zeros::<u8>(mb), "allocating the copy source")?;
        let mem_dst = drv(compute.alloc_zeros::<u8>(mb), "allocating the copy destination")?;
        let blas = CudaBlas::new(compute.clone()).map_err(|e| anyhow::anyhow!("cublasCreate: {e:?}"))?;
        drv(compute.synchronize(), "initial synchronize")?;
        let name = drv(ctx.name(), "cuDeviceGetName")?;
        let uuid = drv(ctx.uuid(), "cuDeviceGetUuid")?;
        let h: String = uuid.bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
        // NVML spells UUIDs GPU-8-4-4-4-12
        let uuid_str = format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]);
        let mut free_events = Vec::with_capacity(events_hint);
        for _ in 0..events_hint {
            free_events.push(drv(ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate")?);
        }
        let produced = drv(ctx.new_event(None), "cuEventCreate")?;
        let obs = lib.observation().clone();
        let device = DeviceIdentity {
            backend: BackendKind::Cuda,
            name,
            facts: vec![
                ("ordinal".into(), ordinal.to_string()),
                ("uuid".into(), uuid_str.clone()),
                ("topology".into(), topology()),
                ("nccl_requested_path".into(), obs.requested_path.clone()),
                ("nccl_mapped_path".into(), obs.canonical_path.clone()),
                ("nccl_mapped_files".into(), obs.mapped_paths.join(",")),
                ("nccl_version".into(), obs.version.clone()),
                ("nccl_version_code".into(), obs.version_code.to_string()),
                ("nccl_sha256".into(), obs.sha256.clone()),
                ("cublas".into(), cublas_name),
                (
                    "cupti".into(),
                    match (&cupti, &cupti_unavailable) {
                        (Some(c), _) => format!("kernel activity records from {}", c.path),
                        (None, Some(why)) if why.starts_with("off") => why.clone(),
                        (None, Some(why)) => format!("unavailable: {why}"),
                        _ => "unavailable".into(),
                    },
                ),
                (
                    "gemm".into(),
                    format!("{} bf16 in/out, fp32 accumulate (cublasGemmEx), {} weight set(s)", super::describe_gemms(&plan.gemms), plan.weight_sets.max(1)),
                ),
                ("collective".into(), format!("ncclAllReduce {} sum on a dedicated stream", plan.dtype.name())),
                ("collective_timeout_s".into(), format!("{}", timeout.as_secs_f64())),
            ]
            .into_iter()
            .chain(nvml_facts(&uuid_str, "_start"))
            .collect(),
        };
        let fence = drv(ctx.new_event(None), "cuEventCreate")?;
        let release = host_release_word();
        let mut device = device;
        device.facts.push((
            "device_anchor".into(),
            match &release {
                Ok(_) => format!("{ANCHOR_ROUND_TRIPS} round trips per window, each an event between a stream wait the host releases by a store to mapped memory (cuStreamWaitValue32) and an acknowledgement the device writes there (cuStreamWriteValue32); start and end of every pass"),
                Err(why) => format!("{ANCHOR_ROUND_TRIPS} record-and-poll round trips per window (stream memory operations unavailable: {why}); start and end of every pass"),
            },
        ));
        let release = release.ok();
        let timer = match &cupti {
            Some(_) => globaltimer::GlobalTimer::load(&ctx).map_err(|e| format!("{e:#}")),
            None => Err("off: no kernel records (--cupti)".to_string()),
        };
        device.facts.push((
            "cupti_kernel_anchor".into(),
            match &timer {
                Ok(_) => format!("{TIMER_ROUND_TRIPS} %globaltimer release-and-reply round trips and {TIMER_STAMPS} stamping kernels per window, start and end of every pass"),
                Err(why) if why.starts_with("off") => why.clone(),
                Err(why) => format!("unavailable: {why}; kernel times rest on CUPTI's own conversion"),
            },
        ));
        let mut b = Self {
            trace_exec: None,
            exec_world: world.duplicate(),
            // the file this process mapped, not the name asked for: a bare name is resolved once, here
            exec_nccl_path: std::path::PathBuf::from(&obs.canonical_path),
            exec_ordinal: ordinal as u32,
            comm,
            blas,
            compute,
            comm_stream,
            send,
            recv,
            dtype: plan.dtype,
            a,
            b,
            c,
            mem_src,
            mem_dst,
            gemms: plan.gemms.clone(),
            world_size: world.size() as u32,
            clock,
            pending: None,
            pass_events: Vec::with_capacity(events_hint),
            intervals: Vec::with_capacity(events_hint / 2),
            waits: Vec::with_capacity(events_hint / 2),
            marks: Vec::with_capacity(events_hint / 2),
            back_to_back_open: false,
            graphs: Vec::new(),
            graph_used: false,
            tail: [None, None],
            free_events,
            produced,
            anchor: None,
            capturing: false,
            graph: None,
            blas_workspace: None,
            last_anchor_windows: None,
            corrupt_next_check: false,
            cupti,
            cupti_unavailable,
            kernel_anchor_failures: Vec::new(),
            timer,
            fence,
            release,
            release_count: 0,
            timer_granularity_ns: EVENT_RESOLUTION_NS,
            on_compute: false,
            timeout,
            rank,
            uuid: uuid_str,
            device,
            ctx,
        };
        b.measure_timer_granularity()?;
        Ok(b)
    }

    fn pooled_event(&mut self) -> Result<CudaEvent> {
        match self.free_events.pop() {
            Some(e) => Ok(e),
            None => drv(self.ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate"),
        }
    }

    /// Record a pooled timing event on the compute (`false`) or communication
    /// (`true`) stream; returns its index among the pass's events.
    fn record(&mut self, comm_stream: bool, what: &'static str) -> Result<usize> {
        let e = self.pooled_event()?;
        let stream = if comm_stream { &self.comm_stream } else { &self.compute };
        drv(e.record(stream), what)?;
        self.pass_events.push(e);
        // an event recorded inside a capture is a graph node, never a stream's tail
        self.tail[comm_stream as usize] = (!self.capturing).then(|| self.pass_events.len() - 1);
        Ok(self.pass_events.len() - 1)
    }

    /// Wait for everything enqueued on `stream` so far, polling NCCL's
    /// asynchronous error; past the collective timeout, abort the
    /// communicator and fail with a message instead of hanging.
    fn wait_stream(&mut self, comm_stream: bool, what: &str) -> Result<()> {
        let polled = match self.tail[comm_stream as usize] {
            Some(i) => self.pass_events[i].cu_event(),
            None => {
                let stream = if comm_stream { &self.comm_stream } else { &self.compute };
                drv(self.fence.record(stream), "cuEventRecord (fence)")?;
                self.fence.cu_event()
            }
        };
        let t0 = std::time::Instant::now();
        loop {
            // SAFETY: a live event of this context (the stream's tail event or the fence).
            match unsafe { cudarc::driver::result::event::query(polled) } {
                Ok(()) => return Ok(()),
                Err(e) if e.0 == drv_sys::cudaError_enum::CUDA_ERROR_NOT_READY => {}
                Err(e) => bail!("{what}: CUDA error {e:?}"),
            }
            if let Err(e) = self.comm.async_error() {
                let _ = self.comm.abort();
                return Err(e.context(format!("{what} on rank {}: NCCL reported an asynchronous error; communicator aborted", self.rank)));
            }
            if t0.elapsed() > self.timeout {
                let _ = self.comm.abort();
                bail!(
                    "{what} on rank {}: no completion after {:.0} s (--collective-timeout); a peer is probably gone. The NCCL communicator was aborted",
                    self.rank,
                    self.timeout.as_secs_f64()
                );
            }
            // Spin for the first 200 us, then spin yielding up to 2 ms: a sleep
            // of 20 us lasts ~70 us under Linux timer slack, and a replay paced
            // from the host's observation of completion would carry that as
            // fake gap and skew. Long waits back off to sleeping.
            let waited = t0.elapsed();
            if waited < std::time::Duration::from_micros(200) {
                std::hint::spin_loop();
            } else if waited < std::time::Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }
}

impl CudaBackend {
    /// Raw device pointers of the all-reduce buffers (allocated with event
    /// tracking off, so taking them records nothing).
    fn buffers(&self) -> (drv_sys::CUdeviceptr, drv_sys::CUdeviceptr) {
        let (sp, _s) = self.send.device_ptr(&self.comm_stream);
        let (rp, _r) = self.recv.device_ptr(&self.comm_stream);
        (sp, rp)
    }

    /// Prologue of a collective on the comm stream: the pass's anchor, the
    /// collective consuming what the compute stream produced so far, and its
    /// start event (inside a capture the records are dependencies, never read).
    /// On the compute stream, stream order is the dependency: only the start event.
    fn begin_collective(&mut self) -> Result<usize> {
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        if self.on_compute {
            self.tail = [None, None];
            return self.record(false, "cuEventRecord (start)");
        }
        drv(self.produced.record(&self.compute), "cuEventRecord (produced)")?;
        drv(self.comm_stream.wait(&self.produced), "cuStreamWaitEvent (comm waits compute)")?;
        self.tail = [None, None];
        self.record(true, "cuEventRecord (start)")
    }

    /// Epilogue: the end event, and the collective becomes the outstanding one.
    fn end_collective(&mut self, bytes: u64, start: usize) -> Result<()> {
        let end = self.record(!self.on_compute, "cuEventRecord (end)")?;
        self.pending = Some((bytes, start, end));
        Ok(())
    }

    /// The first `bytes` of the result buffer, once the comm stream is done, widened to f32.
    fn read_result(&mut self, bytes: u64, dtype: Dtype, what: &str) -> Result<Vec<f32>> {
        let n = usize::try_from(bytes)?.min(self.recv.len());
        let mut host = vec![0u8; n];
        self.close_back_to_back()?;
        self.wait_stream(!self.on_compute, "waiting for the collective to check")?;
        // only the bytes checked come back, not the whole buffer
        let copy = self.comm_stream.memcpy_dtoh(&self.recv.slice(0..n), &mut host).and_then(|_| self.comm_stream.synchronize());
        copy.map_err(|e| anyhow::anyhow!("copying the {what} result back failed: {e:?}"))?;
        Ok(match dtype {
            Dtype::F32 => host.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::Bf16 => super::bf16_to_f32(&host.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<u16>>()),
        })
    }

    /// Reference for the overhead benchmark: `iters` back-to-back
    /// `ncclAllReduce` calls on the comm stream and nothing else, with the
    /// host clock read before each call and after the last, an event before
    /// the first and one after the last. Returns the host clock reads (ns)
    /// and the device ns per collective.
    pub fn reference_loop(&mut self, bytes: u64, iters: u32) -> Result<(Vec<u64>, f64)> {
        self.reference_loop_marked(bytes, iters, false)
    }

    /// [`Self::reference_loop`] with, where `events`, one pooled timing
    /// event recorded before each call and nothing else: what the
    /// instrument's timestamp costs in this loop, apart from its bookkeeping.
    pub fn reference_loop_marked(&mut self, bytes: u64, iters: u32, events: bool) -> Result<(Vec<u64>, f64)> {
        let count = super::issue_count(self.pending.is_some(), bytes, Dtype::F32, self.dtype, self.send.len() as u64)?;
        self.synchronize()?;
        drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        let start = self.pooled_event()?;
        let end = self.pooled_event()?;
        let (sp, rp) = self.buffers();
        let stream = self.comm_stream.cu_stream();
        let mut host = Vec::with_capacity(iters as usize + 1);
        // SAFETY: live events and stream of this context.
        drv(unsafe { cudarc::driver::result::event::record(start.cu_event(), stream) }, "cuEventRecord")?;
        let marks: Vec<CudaEvent> = if events { (0..iters).map(|_| self.pooled_event()).collect::<Result<_>>()? } else { Vec::new() };
        for i in 0..iters as usize {
            host.push(self.clock.now_ns());
            if let Some(e) = marks.get(i) {
                // SAFETY: a live event and stream of this context.
                drv(unsafe { cudarc::driver::result::event::record(e.cu_event(), stream) }, "cuEventRecord")?;
            }
            // SAFETY: as in allreduce_back_to_back.
            unsafe { self.comm.all_reduce_sum(sp, rp, count, Dtype::F32, stream as *mut _) }?;
        }
        host.push(self.clock.now_ns());
        // SAFETY: as above.
        drv(unsafe { cudarc::driver::result::event::record(end.cu_event(), stream) }, "cuEventRecord")?;
        self.synchronize()?;
        let ms = drv(start.elapsed_ms(&end), "cuEventElapsedTime")? as f64;
        self.free_events.push(start);
        self.free_events.push(end);
        self.free_events.extend(marks);
        Ok((host, ms * 1e6 / iters.max(1) as f64))
    }

    /// Event timer probe: `n` events recorded back to back on the idle
    /// compute stream; returns each one's device time after the first, ns
    /// (their spacing shows the timer's granularity).
    pub fn event_timer_probe(&mut self, n: usize) -> Result<Vec<f64>> {
        self.synchronize()?;
        let evs = (0..n.max(2)).map(|_| self.pooled_event()).collect::<Result<Vec<_>>>()?;
        for e in &evs {
            drv(e.record(&self.compute), "cuEventRecord (probe)")?;
        }
        self.synchronize()?;
        let out = evs[1..].iter().map(|e| Ok(drv(evs[0].elapsed_ms(e), "cuEventElapsedTime")? as f64 * 1e6)).collect::<Result<Vec<_>>>()?;
        self.free_events.extend(evs);
        Ok(out)
    }

    /// Turn CUPTI kernel records on or off for what follows (benchmark
    /// variants); an error where CUPTI was not started.
    pub fn set_cupti(&mut self, on: bool) -> Result<()> {
        match &self.cupti {
            Some(c) => c.set_enabled(on),
            None => bail!("CUPTI is not active: {}", self.cupti_unavailable.as_deref().unwrap_or("not started")),
        }
    }

    /// The stream a started collective is enqueued on.
    fn collective_stream(&self) -> drv_sys::CUstream {
        if self.on_compute {
            self.compute.cu_stream()
        } else {
            self.comm_stream.cu_stream()
        }
    }

    /// Close an open back-to-back run with its final boundary event.
    fn close_back_to_back(&mut self) -> Result<()> {
        if std::mem::take(&mut self.back_to_back_open) {
            let e = self.record(true, "cuEventRecord (final boundary)")?;
            if let Some(last) = self.intervals.last_mut() {
                last.1 = e;
            }
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn device(&self) -> DeviceIdentity {
        // start facts from initialisation, end facts read now (after the phases)
        let mut d = self.device.clone();
        d.facts.extend(nvml_facts(&self.uuid, "_end"));
        d
    }

    fn unmeasured(&self) -> Vec<Unmeasured> {
        [
            Unmeasured {
                field: "wait_start_ns/wait_end_ns".into(),
                reason: "on the cuda backend these are host enqueue times of the stream dependency; the compute stream's stall is in device_waits. In the isolated phase no wait is enqueued (collectives run back to back, as in nccl-tests), so both equal host_return_ns there".into(),
            },
        ]
        .into_iter()
        .chain(self.graph_used.then(|| Unmeasured {
            field: "host_issue_ns/host_return_ns (isolated, --graph)".into(),
            reason: "the host launched each size's timed iterations as one CUDA graph; every collective of it carries that launch call's host times".into(),
        }))
        .chain(self.cupti_unavailable.as_ref().map(|why| Unmeasured {
            field: "kernels".into(),
            reason: format!("no CUPTI kernel records: {why}"),
        }))
        .chain(self.kernel_anchor_failures.first().map(|why| Unmeasured {
            field: "phases[].kernel_anchor".into(),
            reason: format!(
                "in {} pass(es) the kernel times rest on CUPTI's own conversion (error unknown): the %globaltimer anchor did not fit, first because {why}",
                self.kernel_anchor_failures.len()
            ),
        }))
        .chain(match (&self.cupti, &self.timer) {
            (Some(_), Err(why)) => Some(Unmeasured {
                field: "phases[].kernel_anchor".into(),
                reason: format!("the %globaltimer anchor could not load ({why}): kernel times rest on CUPTI's own conversion, whose error is not known"),
            }),
            _ => None,
        })
        .collect()
    }

    fn issue_allreduce(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        let count = super::issue_count(self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        let start = self.begin_collective()?;
        let (sp, rp) = self.buffers();
        // SAFETY: buffers hold `count` elements of `dtype` on this context's device; the stream belongs to it.
        unsafe { self.comm.all_reduce_sum(sp, rp, count, dtype, self.collective_stream() as *mut _) }?;
        Ok(self.end_collective(bytes, start)?)
    }

    fn wait_allreduce(&mut self) -> BackendResult<Option<DeviceInterval>> {
        let Some((_bytes, start, end)) = self.pending.take() else {
            return Err(BackendError::Misuse("internal: wait without an outstanding all-reduce".into()));
        };
        if self.on_compute {
            // same stream: the next GEMM follows the collective in stream order; no wait to time
            if !self.capturing {
                self.intervals.push((start, end));
            }
            return Ok(None);
        }
        if self.capturing {
            // the compute stream joins the communication stream inside the graph; nothing is timed
            drv(self.compute.wait(&self.pass_events[end]), "cuStreamWaitEvent (compute waits collective, captured)")?;
            let _ = start;
            return Ok(None);
        }
        let before = self.record(false, "cuEventRecord (before wait)")?;
        drv(self.compute.wait(&self.pass_events[end]), "cuStreamWaitEvent (compute waits collective)")?;
        self.tail[0] = None;
        let after = self.record(false, "cuEventRecord (after wait)")?;
        self.intervals.push((start, end));
        self.waits.push((before, after));
        Ok(None)
    }

    fn back_to_back(&self) -> bool {
        true
    }

    fn collectives_on_compute_stream(&mut self, on: bool) -> BackendResult<()> {
        if self.pending.is_some() || self.capturing {
            return Err(BackendError::Misuse("internal: the collective stream changed with a collective outstanding or inside a capture".into()));
        }
        self.on_compute = on;
        Ok(())
    }

    fn allreduce_back_to_back(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        let count = super::issue_count(self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        if self.anchor.is_none() {
            self.ensure_anchor()?;
            drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        }
        // The hot path: one pooled event recorded as this collective's start
        // (and the previous one's end), then the NCCL call. No stream
        // dependency, no wait, no allocation.
        let e = self.pooled_event()?;
        // SAFETY: a live event and stream of this context, which is current on this thread.
        drv(unsafe { cudarc::driver::result::event::record(e.cu_event(), self.comm_stream.cu_stream()) }, "cuEventRecord (boundary)")?;
        self.pass_events.push(e);
        let b = self.pass_events.len() - 1;
        if self.back_to_back_open {
            if let Some(last) = self.intervals.last_mut() {
                last.1 = b;
            }
        }
        let (sp, rp) = self.buffers();
        // SAFETY: buffers hold `count` f32 on this context's device; the stream belongs to it.
        unsafe { self.comm.all_reduce_sum(sp, rp, count, dtype, self.comm_stream.cu_stream() as *mut _) }?;
        self.tail[1] = None;
        self.intervals.push((b, OPEN_END));
        self.back_to_back_open = true;
        Ok(())
    }

    fn end_back_to_back(&mut self) -> BackendResult<()> {
        Ok(self.close_back_to_back()?)
    }

    fn allreduce_graph(&mut self, bytes: u64, dtype: Dtype, n: u32) -> BackendResult<(u64, u64)> {
        self.graph_used = true;
        let count = super::issue_count(self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        // the graph's first node waits for the eager work before it (stream order)
        let (sp, rp) = self.buffers();
        let stream = self.comm_stream.cu_stream();
        drv(self.comm_stream.begin_capture(drv_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")?;
        let mut captured = || -> BackendResult<()> {
            let record = |b: &mut Self| -> BackendResult<usize> {
                let e = b.pooled_event()?;
                // SAFETY: a live event and the capturing stream of this context; EXTERNAL makes it a timestamp node.
                let recorded =
                    unsafe { drv_sys::cuEventRecordWithFlags(e.cu_event(), stream, drv_sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32).result() };
                drv(recorded, "cuEventRecordWithFlags (graph)")?;
                b.pass_events.push(e);
                Ok(b.pass_events.len() - 1)
            };
            let mut prev = record(self)?;
            for _ in 0..n {
                // SAFETY: buffers hold `count` f32 on this context's device; the stream belongs to it (capturing).
                unsafe { self.comm.all_reduce_sum(sp, rp, count, dtype, stream as *mut _) }?;
                let next = record(self)?;
                self.intervals.push((prev, next));
                prev = next;
            }
            Ok(())
        };
        let res = captured();
        let graph = drv(self.comm_stream.end_capture(drv_sys::CUgraphInstantiate_flags(0)), "cuStreamEndCapture / cuGraphInstantiate");
        res?;
        let graph = graph?.ok_or_else(|| anyhow::anyhow!("stream capture produced no graph"))?;
        drv(graph.upload(), "cuGraphUpload")?;
        let t0 = self.clock.now_ns();
        drv(graph.launch(), "cuGraphLaunch")?;
        self.tail[1] = None;
        let t1 = self.clock.now_ns();
        // kept until the pass is finished: the launch may still be running
        self.graphs.push(graph);
        Ok((t0, t1))
    }

    fn gemm(&mut self, shape: usize, layer: u32, units: u32) -> BackendResult<()> {
        self.ensure_anchor()?;
        self.tail[0] = None;
        let Some(g) = self.gemms.get(shape).copied() else {
            return Err(BackendError::Misuse(format!("internal: GEMM shape {shape} was not prepared")));
        };
        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        let sets = &self.b[shape];
        let weights = &sets[layer as usize % sets.len()];
        for _ in 0..units {
            let (ap, _a) = self.a.device_ptr(&self.compute);
            let (bp, _b) = weights.device_ptr(&self.compute);
            let (cp, _c) = self.c.device_ptr_mut(&self.compute);
            // SAFETY: A is m x k, B is k x n, C is m x n (column-major, leading dims m, k, m), bf16 on this device.
            unsafe {
                cudarc::cublas::result::gemm_ex(
                    *self.blas.handle(),
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    m,
                    n,
                    k,
                    (&alpha as *const f32).cast(),
                    ap as *const _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    m,
                    bp as *const _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    k,
                    (&beta as *const f32).cast(),
                    cp as *mut _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    m,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| anyhow::anyhow!("cublasGemmEx {m}x{n}x{k}: {e:?}"))?;
        }
        Ok(())
    }

    fn membound(&mut self, units: u32) -> BackendResult<()> {
        self.ensure_anchor()?;
        self.tail[0] = None;
        for _ in 0..units {
            drv(self.compute.memcpy_dtod(&self.mem_src, &mut self.mem_dst), "cuMemcpyDtoDAsync")?;
        }
        Ok(())
    }

    fn synchronize(&mut self) -> BackendResult<()> {
        self.close_back_to_back()?;
        self.wait_stream(true, "synchronizing the communication stream")?;
        self.wait_stream(false, "synchronizing the compute stream")?;
        Ok(self.comm.async_error()?)
    }

    fn mark(&mut self) -> BackendResult<Option<usize>> {
        if self.capturing {
            return Err(BackendError::Misuse("internal: a timing mark inside a graph capture".into()));
        }
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        let e = self.record(false, "cuEventRecord (mark)")?;
        self.marks.push(e);
        Ok(Some(self.marks.len() - 1))
    }

    fn finish_pass(&mut self) -> BackendResult<PassTimings> {
        self.close_back_to_back()?;
        // drained, not taken: the next pass pushes into the capacity this one
        // grew, with no reallocation on its hot path
        let intervals: Vec<(usize, usize)> = self.intervals.drain(..).collect();
        let waits_ev: Vec<(usize, usize)> = self.waits.drain(..).collect();
        let marks: Vec<usize> = self.marks.drain(..).collect();
        let Some(anchor) = self.anchor.take() else {
            self.tail = [None, None];
            self.free_events.append(&mut self.pass_events);
            return Ok(PassTimings { collectives: vec![None; intervals.len()], ..Default::default() });
        };
        // the end window: the caller synchronized, so the streams are idle
        let (end_event, end_est) = self.anchor_window()?;
        let first = &self.pass_events[anchor.event];
        let span_ms = drv(first.elapsed_ms(&self.pass_events[end_event]), "cuEventElapsedTime (end anchor)")? as f64;
        let map = crate::core::clock::DeviceTimeMap::fit(anchor.estimate, Some((end_est, span_ms * 1e6)));
        self.last_anchor_windows = Some((anchor.estimate, end_est));
        // host time of every event of the pass, each read once
        let mut host_ns = vec![0u64; self.pass_events.len()];
        let mut needed = vec![false; self.pass_events.len()];
        for &(a, b) in intervals.iter().chain(&waits_ev) {
            needed[a] = true;
            if b != OPEN_END {
                needed[b] = true;
            }
        }
        for &m in &marks {
            needed[m] = true;
        }
        for (i, e) in self.pass_events.iter().enumerate() {
            if needed[i] {
                let ms = drv(first.elapsed_ms(e), "cuEventElapsedTime")? as f64;
                host_ns[i] = map.to_host_ns(ms * 1e6);
            }
        }
        let end_timer = match anchor.timer {
            Some(_) => self.timer_window()?,
            None => None,
        };
        let mut kernels = Vec::new();
        let mut kernel_anchor = None;
        if let (Some(c), Some((ts0, host0, _err))) = (&self.cupti, anchor.cupti) {
            let (mut raw, _malformed, _dropped) = c.drain()?;
            let bounded = match (&anchor.timer, &end_timer) {
                (Some(s), Some(e)) => match Self::kernel_timer_map(s, e, &raw, anchor.cupti) {
                    Ok((m, a)) => {
                        kernel_anchor = Some(a);
                        Some(m)
                    }
                    Err(why) => {
                        self.kernel_anchor_failures.push(why);
                        None
                    }
                },
                _ => None,
            };
            // the anchor's own kernels are the instrument's, not the pass's
            raw.retain(|k| !k.name.starts_with(globaltimer::KERNEL_PREFIX));
            for k in raw {
                let tmap = |t: u64| match &bounded {
                    Some(m) => m.to_host_ns(t),
                    None => (host0 as i128 + t as i128 - ts0 as i128).max(0) as u64,
                };
                let kind = if k.name.to_ascii_lowercase().contains("nccl") {
                    crate::evidence::shard::KernelKind::Nccl
                } else {
                    crate::evidence::shard::KernelKind::Compute
                };
                kernels.push(super::PassKernel {
                    kind,
                    name: k.name,
                    start_ns: tmap(k.start),
                    end_ns: tmap(k.end),
                    stream: k.stream,
                    correlation: k.correlation,
                });
            }
        }
        let iv = |&(a, b): &(usize, usize)| (b != OPEN_END).then(|| DeviceInterval { start_ns: host_ns[a], end_ns: host_ns[b] });
        let collectives = intervals.iter().map(iv).collect();
        let waits = waits_ev.iter().map(iv).collect();
        let marks_ns = marks.iter().map(|&m| host_ns[m]).collect();
        // Error of a mapped time: the map's bound, the resolution of the event
        // timestamps (twice: the anchor's and the event's), and the rounding of
        // the float milliseconds that cuEventElapsedTime returns over the pass.
        let rounding_ns = (span_ms * 1e6).abs() * f64::from(f32::EPSILON) / 2.0;
        let mut error_ns = map.bound_ns + 2.0 * self.timer_granularity_ns + rounding_ns;
        // CUPTI's own conversion's error (unknown) is not the events'; where
        // the kernel times rest on it, the events' error is at least its
        // back-to-back read, as before the %globaltimer anchor existed
        if let (Some(c), None) = (anchor.cupti, &kernel_anchor) {
            error_ns = error_ns.max(c.2 as f64);
        }
        self.free_events.append(&mut self.pass_events);
        self.tail = [None, None];
        self.graphs.clear();
        Ok(PassTimings { collectives, marks_ns, anchor_error_ns: Some(error_ns.ceil() as u64), kernels, waits, kernel_anchor })
    }

    fn check_last_allreduce(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<super::CheckOutcome> {
        let mut values = self.read_result(bytes, dtype, "all-reduce")?;
        if std::mem::take(&mut self.corrupt_next_check) {
            if let Some(v) = values.first_mut() {
                *v += 1.0;
            }
        }
        Ok(super::verify_sum(&values, dtype, self.world_size))
    }

    fn corrupt_last_result(&mut self) {
        self.corrupt_next_check = true;
    }

    fn issue_allgather(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        super::issue_count(self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        let count = super::allgather_count(bytes, dtype, self.world_size)?;
        if self.capturing {
            return Err(BackendError::Misuse("internal: an all-gather inside a graph capture".into()));
        }
        let start = self.begin_collective()?;
        let (sp, rp) = self.buffers();
        // SAFETY: send holds `count` and recv `count x world` (= bytes, checked against
        // the buffer length) elements of `dtype` on this context's device; the stream belongs to it.
        unsafe { self.comm.all_gather(sp, rp, count, dtype, self.collective_stream() as *mut _) }?;
        Ok(self.end_collective(bytes, start)?)
    }

    fn check_last_allgather(&mut self, bytes: u64, dtype: Dtype) -> BackendResult<super::CheckOutcome> {
        let count = super::allgather_count(bytes, dtype, self.world_size)?;
        let values = self.read_result(bytes, dtype, "all-gather")?;
        Ok(super::verify_gather(&values, dtype, count))
    }

    /// `replay-trace --backend cuda`'s executor on this rank's GPU: its own
    /// NCCL world communicator (bootstrapped over a duplicate of the MPI
    /// world) split into every group of `trace`, and its own stream. Its
    /// collectives complete on the host ([`Backend::run_trace_op`]: the NCCL
    /// call, then a stream synchronization) and record no device interval.
    fn prepare_trace_ops(&mut self, trace: &crate::evidence::commtrace::CommTrace, colls: &[crate::evidence::commtrace::TraceCollective]) -> BackendResult<()> {
        // a second preparation replaces the first: end its communicators first
        if let Some(mut old) = self.trace_exec.take() {
            old.abort();
        }
        let mut exec = trace_exec::CudaTraceExec::new(&self.exec_world, self.exec_ordinal, &self.exec_nccl_path, trace, self.timeout)?;
        exec.prepare(colls)?;
        self.trace_exec = Some(exec);
        // the executor bound its context to this thread: it is the primary context of the same GPU, as ours is
        drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        Ok(())
    }

    fn trace_executor(&mut self) -> Option<&mut dyn super::TraceExecutor> {
        self.trace_exec.as_mut().map(|e| e as &mut dyn super::TraceExecutor)
    }

    fn begin_graph(&mut self) -> BackendResult<()> {
        if self.capturing || self.pending.is_some() {
            return Err(BackendError::Misuse("internal: graph capture begun with a capture or a collective outstanding".into()));
        }
        // the anchor synchronizes an event, which a capturing stream forbids: take it first
        self.ensure_anchor()?;
        if self.blas_workspace.is_none() {
            // cuBLAS would otherwise allocate its workspace inside the capture
            const WORKSPACE_BYTES: usize = 32 << 20;
            let ws = drv(self.compute.alloc_zeros::<u8>(WORKSPACE_BYTES), "allocating the cuBLAS workspace")?;
            {
                let (wp, _w) = ws.device_ptr(&self.compute);
                // SAFETY: the workspace is a field of self, declared after `blas`, so it outlives every use of the handle.
                let st = unsafe { blas_sys::cublasSetWorkspace_v2(*self.blas.handle(), wp as *mut _, WORKSPACE_BYTES) };
                if st != blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    return Err(BackendError::Device(anyhow::anyhow!("cublasSetWorkspace: {st:?}")));
                }
            }
            self.blas_workspace = Some(ws);
        }
        drv(self.compute.synchronize(), "synchronizing before capture")?;
        // thread-local: NCCL's own threads may make CUDA calls while this thread captures
        drv(self.compute.begin_capture(drv_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")?;
        self.capturing = true;
        Ok(())
    }

    fn end_graph(&mut self) -> BackendResult<()> {
        if !self.capturing {
            return Err(BackendError::Misuse("internal: end of a graph capture that was not begun".into()));
        }
        self.capturing = false;
        let graph = self
            .compute
            .end_capture(drv_sys::CUgraphInstantiate_flags(0))
            .map_err(|e| anyhow::anyhow!("capturing one token into a CUDA graph failed: CUDA error {e:?} (NCCL 2.9 or later captures collectives)"))?
            .ok_or_else(|| anyhow::anyhow!("the CUDA graph capture of one token produced no graph"))?;
        drv(graph.upload(), "cuGraphUpload")?;
        self.graph = Some(graph);
        self.tail = [None, None];
        Ok(())
    }

    fn launch_graph(&mut self) -> BackendResult<()> {
        self.ensure_anchor()?;
        let Some(g) = &self.graph else {
            return Err(BackendError::Misuse("internal: no graph was captured".into()));
        };
        self.tail = [None, None];
        Ok(drv(g.launch(), "cuGraphLaunch")?)
    }
}

super::trace_executor_impl!(trace_exec::CudaTraceExec);

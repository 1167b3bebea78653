//! CUDA/NCCL backend: GPUs through cudarc (driver, cuBLAS; loaded at run
//! time), NCCL through our own loader ([`crate::nccl`]).
//!
//! Consumes the world communicator (to broadcast NCCL's unique id), the
//! node-local rank (GPU = `local_rank % device_count`), an NCCL library path
//! and the workload spec. Produces device intervals for every collective and
//! device-ordered marks (token and compute boundaries), mapped onto the host
//! timeline through a measured anchor per pass: an event recorded on an idle
//! stream and synchronized, whose host time is known within half the
//! record-to-synchronize interval (the recorded anchor error). Refuses, with a
//! one-line reason: no driver, no GPU, no cuBLAS, an NCCL library that is not
//! the one asked for.
//!
//! Stream semantics (SPEC §2): `issue_allreduce` makes the communication
//! stream wait for the compute stream's work so far (the tensor was produced
//! there, as in PyTorch), records a start event, enqueues `ncclAllReduce`, and
//! records an end event; the host returns at once. `wait_allreduce` is a
//! *stream dependency*: the compute stream waits on the end event; the host
//! does not block. `synchronize` (device synchronization) happens once per
//! pass. cudarc's automatic cross-stream event tracking is disabled so that no
//! dependency exists that the phase did not ask for.
use super::{contribution, Backend, BackendPlan, DeviceInterval, PassTimings};
use crate::clock::RankClock;
use crate::nccl::{NcclComm, NcclLibrary};
use crate::shard::{BackendKind, DeviceIdentity, Dtype, Unmeasured};
use crate::workload::GemmShape;
use anyhow::{bail, Context, Result};
use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{sys as drv_sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use libloading::Library;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::path::Path;
use std::sync::Arc;

/// Why the CUDA backend cannot run here, or `None` when it can be tried.
pub fn unavailable_reason() -> Option<String> {
    match probe_devices() {
        Err(why) => Some(why),
        Ok(0) => Some("the CUDA driver reports no GPU on this machine".into()),
        Ok(_) => None,
    }
}

/// What the CUDA driver reports.
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct DriverReport {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    /// Device names in ordinal order.
    pub devices: Vec<String>,
}

/// Query the driver for its version and device names (our own dlopen, so a
/// missing driver is an error, not a panic).
pub fn driver_report() -> Result<DriverReport, String> {
    let n = probe_devices()?;
    // SAFETY: signatures per the CUDA driver API; the library stays loaded for the calls.
    unsafe {
        let lib = Library::new("libcuda.so.1").map_err(|e| format!("libcuda.so.1: {e}"))?;
        type Ver = unsafe extern "C" fn(*mut i32) -> i32;
        type Get = unsafe extern "C" fn(*mut i32, i32) -> i32;
        type Name = unsafe extern "C" fn(*mut std::os::raw::c_char, i32, i32) -> i32;
        let ver: libloading::Symbol<Ver> = lib.get(b"cuDriverGetVersion\0").map_err(|e| e.to_string())?;
        let get: libloading::Symbol<Get> = lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let name: libloading::Symbol<Name> = lib.get(b"cuDeviceGetName\0").map_err(|e| e.to_string())?;
        let mut v = 0;
        if ver(&mut v) != 0 {
            return Err("cuDriverGetVersion failed".into());
        }
        let mut devices = Vec::new();
        for i in 0..n as i32 {
            let mut dev = 0;
            if get(&mut dev, i) != 0 {
                return Err(format!("cuDeviceGet({i}) failed"));
            }
            let mut buf = [0 as std::os::raw::c_char; 256];
            if name(buf.as_mut_ptr(), 256, dev) != 0 {
                return Err(format!("cuDeviceGetName({i}) failed"));
            }
            devices.push(std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned());
        }
        Ok(DriverReport { driver_version: v, devices })
    }
}

/// Count CUDA devices through the driver API, loaded dynamically.
pub fn probe_devices() -> Result<u32, String> {
    // SAFETY: loading the CUDA driver runs its initialisers; it is the documented way to use it.
    let lib = unsafe { Library::new("libcuda.so.1") }
        .map_err(|e| format!("no CUDA driver: libcuda.so.1 could not be loaded ({e})"))?;
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuCount = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: symbol types match the CUDA driver API (cuInit(unsigned), cuDeviceGetCount(int*)).
    unsafe {
        let init: libloading::Symbol<CuInit> =
            lib.get(b"cuInit\0").map_err(|e| format!("libcuda.so.1 lacks cuInit ({e})"))?;
        let count: libloading::Symbol<CuCount> =
            lib.get(b"cuDeviceGetCount\0").map_err(|e| format!("libcuda.so.1 lacks cuDeviceGetCount ({e})"))?;
        let rc = init(0);
        if rc != 0 {
            return Err(format!("cuInit failed with CUDA error {rc}"));
        }
        let mut n = 0i32;
        let rc = count(&mut n);
        if rc != 0 {
            return Err(format!("cuDeviceGetCount failed with CUDA error {rc}"));
        }
        Ok(n.max(0) as u32)
    }
}

/// cudarc panics when it cannot find a library; find cuBLAS ourselves first.
fn probe_cublas() -> Result<String> {
    let names = cudarc::get_lib_name_candidates("cublas");
    for n in &names {
        // SAFETY: probing a library by name; it is closed again at once.
        if unsafe { Library::new(n) }.is_ok() {
            return Ok(n.clone());
        }
    }
    bail!("cuBLAS not found (tried {}); add its directory to LD_LIBRARY_PATH", names.join(", "))
}

/// NVML facts about one GPU, keys suffixed `_start` or `_end` (driver, PCIe
/// bus and power limit only at start). A fact that cannot be read is reported
/// with the reason, never guessed.
fn nvml_facts(uuid: &str, suffix: &str) -> Vec<(String, String)> {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(n) => n,
        Err(e) => return vec![(format!("nvml{suffix}"), format!("unavailable: {e}"))],
    };
    let mut v = Vec::new();
    let dev = match nvml.device_by_uuid(uuid) {
        Ok(d) => d,
        Err(e) => return vec![(format!("nvml{suffix}"), format!("device {uuid} not found: {e}"))],
    };
    let mut put = |k: &str, r: Result<String, nvml_wrapper::error::NvmlError>| {
        v.push((format!("{k}{suffix}"), r.unwrap_or_else(|e| format!("unreadable: {e}"))));
    };
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    if suffix == "_start" {
        put("driver_version", nvml.sys_driver_version());
        put("cuda_driver_version", nvml.sys_cuda_driver_version().map(|c| format!("{}.{}", c / 1000, (c % 1000) / 10)));
        put("pci_bus_id", dev.pci_info().map(|p| p.bus_id));
        put("power_limit_w", dev.power_management_limit().map(|mw| format!("{:.1}", mw as f64 / 1000.0)));
    }
    put("sm_clock_mhz", dev.clock_info(Clock::SM).map(|c| c.to_string()));
    put("mem_clock_mhz", dev.clock_info(Clock::Memory).map(|c| c.to_string()));
    put("temperature_c", dev.temperature(TemperatureSensor::Gpu).map(|t| t.to_string()));
    put(
        "compute_processes",
        dev.running_compute_processes().map(|ps| {
            let me = std::process::id();
            let others: Vec<String> = ps.iter().filter(|p| p.pid != me).map(|p| p.pid.to_string()).collect();
            format!("{} total, other pids [{}]", ps.len(), others.join(","))
        }),
    );
    v
}

/// `nvidia-smi topo -m`, where the tool exists.
fn topology() -> String {
    match std::process::Command::new("nvidia-smi").args(["topo", "-m"]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().take_while(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("\n"),
        Ok(o) => format!("unavailable: nvidia-smi topo -m exited {:?}", o.status.code()),
        Err(e) => format!("unavailable: nvidia-smi: {e}"),
    }
}

struct Anchor {
    event: CudaEvent,
    host_ns: u64,
    error_ns: u64,
    /// CUPTI's clock against the host clock: (cupti ns, host ns, error ns).
    cupti: Option<(u64, u64, u64)>,
}

/// CUDA backend state of one rank.
pub struct CudaBackend {
    // Fields drop in order: the graph (whose nodes use NCCL's and cuBLAS's
    // resources) before NCCL (which keeps its library loaded) and cuBLAS,
    // and all of them before the context.
    /// Graph mode: the captured token, launched on the compute stream.
    graph: Option<cudarc::driver::CudaGraph>,
    comm: NcclComm,
    blas: CudaBlas,
    compute: Arc<CudaStream>,
    comm_stream: Arc<CudaStream>,
    /// Collective buffers, `max_bytes` each, holding elements of `dtype`.
    send: CudaSlice<u8>,
    recv: CudaSlice<u8>,
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
    pending: Option<(u64, CudaEvent, CudaEvent)>,
    intervals: Vec<(CudaEvent, CudaEvent)>,
    waits: Vec<(CudaEvent, CudaEvent)>,
    marks: Vec<CudaEvent>,
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
    corrupt_next_check: bool,
    cupti: Option<crate::cupti::Cupti>,
    cupti_unavailable: Option<String>,
    fence: CudaEvent,
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

fn drv<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
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
    ) -> Result<Self> {
        if let Some(why) = unavailable_reason() {
            bail!("{why}");
        }
        let cublas_name = probe_cublas()?;
        // CUPTI first, so that it sees every kernel; its absence is recorded, not fatal.
        let (cupti, cupti_unavailable) = match crate::cupti::Cupti::start() {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(format!("{e:#}"))),
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
        let mut id = [0u8; 128];
        if rank == 0 {
            id = lib.unique_id()?;
        }
        mpi::collective::Root::broadcast_into(&world.process_at_rank(0), &mut id[..]);
        drv(ctx.bind_to_thread(), "binding the CUDA context")?;
        let comm = NcclComm::init_rank(lib.clone(), world.size() as u32, id, rank)
            .with_context(|| format!("NCCL {} on GPU {ordinal}", lib.observation().version))?;
        if plan.dtype == Dtype::Bf16 && lib.observation().version_code < 21000 {
            bail!("NCCL {} has no bf16 all-reduce (ncclBfloat16 needs NCCL 2.10 or later)", lib.observation().version);
        }
        let elems = usize::try_from(plan.max_bytes / plan.dtype.size_bytes())?;
        let host: Vec<u8> = match plan.dtype {
            Dtype::F32 => (0..elems).flat_map(|i| contribution(Dtype::F32, rank, i).to_le_bytes()).collect(),
            Dtype::Bf16 => super::bf16_contributions(rank, elems).into_iter().flat_map(u16::to_le_bytes).collect(),
        };
        let send = drv(compute.clone_htod(&host), "copying the send buffer")?;
        let recv = drv(compute.alloc_zeros::<u8>(host.len()), "allocating the receive buffer")?;
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
        Ok(Self {
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
            intervals: Vec::new(),
            waits: Vec::new(),
            marks: Vec::new(),
            free_events,
            produced,
            anchor: None,
            capturing: false,
            graph: None,
            blas_workspace: None,
            corrupt_next_check: false,
            cupti,
            cupti_unavailable,
            fence,
            timeout,
            rank,
            uuid: uuid_str,
            device,
            ctx,
        })
    }

    fn timing_event(&mut self) -> Result<CudaEvent> {
        match self.free_events.pop() {
            Some(e) => Ok(e),
            None => drv(self.ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate"),
        }
    }

    /// At the first device operation of a pass (streams idle), anchor the device timeline.
    fn ensure_anchor(&mut self) -> Result<()> {
        if self.anchor.is_some() {
            return Ok(());
        }
        let event = self.timing_event()?;
        let t1 = self.clock.now_ns();
        drv(event.record(&self.compute), "cuEventRecord (anchor)")?;
        drv(event.synchronize(), "cuEventSynchronize (anchor)")?;
        let t2 = self.clock.now_ns();
        let cupti = match &self.cupti {
            Some(c) => {
                // start from an empty collection: earlier kernels belong to no pass
                let _ = c.drain()?;
                let h1 = self.clock.now_ns();
                let ts = c.timestamp()?;
                let h2 = self.clock.now_ns();
                Some((ts, h1 + (h2 - h1) / 2, (h2 - h1).div_ceil(2)))
            }
            None => None,
        };
        self.anchor = Some(Anchor { event, host_ns: t1 + (t2 - t1) / 2, error_ns: (t2 - t1).div_ceil(2), cupti });
        Ok(())
    }

    /// Wait for everything enqueued on `stream` so far, polling NCCL's
    /// asynchronous error; past the collective timeout, abort the
    /// communicator and fail with a message instead of hanging.
    fn wait_stream(&mut self, comm_stream: bool, what: &str) -> Result<()> {
        let stream = if comm_stream { &self.comm_stream } else { &self.compute };
        drv(self.fence.record(stream), "cuEventRecord (fence)")?;
        let t0 = std::time::Instant::now();
        loop {
            // SAFETY: the fence is a live event of this context.
            match unsafe { cudarc::driver::result::event::query(self.fence.cu_event()) } {
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
            // Spin (yielding) for the first 2 ms: a sleep of 20 us lasts ~70 us
            // under Linux timer slack, and a replay paced from the host's
            // observation of completion would carry that as fake gap and skew.
            // Long waits back off to sleeping.
            if t0.elapsed() < std::time::Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }

    fn to_host_ns(anchor: &Anchor, e: &CudaEvent) -> Result<u64> {
        let ms = drv(anchor.event.elapsed_ms(e), "cuEventElapsedTime")? as f64;
        Ok((anchor.host_ns as f64 + ms * 1e6).max(0.0) as u64)
    }
}

impl CudaBackend {
    /// Reference for the overhead benchmark: one event before and one after
    /// `iters` back-to-back `ncclAllReduce` calls on the comm stream, nothing
    /// else recorded. Returns device ns per collective.
    pub fn reference_loop_ns(&mut self, bytes: u64, iters: u32) -> Result<f64> {
        let count = super::issue_count(self.pending.is_some(), bytes, Dtype::F32, self.dtype, self.send.len() as u64)?;
        self.synchronize()?;
        let start = self.timing_event()?;
        let end = self.timing_event()?;
        drv(start.record(&self.comm_stream), "cuEventRecord")?;
        {
            let (sp, _s) = self.send.device_ptr(&self.comm_stream);
            let (rp, _r) = self.recv.device_ptr_mut(&self.comm_stream);
            for _ in 0..iters {
                // SAFETY: as in issue_allreduce.
                unsafe { self.comm.all_reduce_sum(sp, rp, count, Dtype::F32, self.comm_stream.cu_stream() as *mut _) }?;
            }
        }
        drv(end.record(&self.comm_stream), "cuEventRecord")?;
        let ms = drv(start.elapsed_ms(&end), "cuEventElapsedTime")? as f64;
        self.free_events.push(start);
        self.free_events.push(end);
        Ok(ms * 1e6 / iters.max(1) as f64)
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
                reason: "on the cuda backend these are host enqueue times of the stream dependency; the compute stream's stall is in device_waits".into(),
            },
        ]
        .into_iter()
        .chain(self.cupti_unavailable.as_ref().map(|why| Unmeasured {
            field: "kernels".into(),
            reason: format!("no CUPTI kernel records: {why}"),
        }))
        .collect()
    }

    fn issue_allreduce(&mut self, bytes: u64, dtype: Dtype) -> Result<()> {
        let count = super::issue_count(self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        self.ensure_anchor()?;
        // the collective consumes what the compute stream produced so far
        drv(self.produced.record(&self.compute), "cuEventRecord (produced)")?;
        drv(self.comm_stream.wait(&self.produced), "cuStreamWaitEvent (comm waits compute)")?;
        let start = self.timing_event()?;
        if !self.capturing {
            // inside a capture an event record is a dependency, not a timestamp: no start is taken
            drv(start.record(&self.comm_stream), "cuEventRecord (start)")?;
        }
        {
            let (sp, _s) = self.send.device_ptr(&self.comm_stream);
            let (rp, _r) = self.recv.device_ptr_mut(&self.comm_stream);
            // SAFETY: buffers hold `count` elements of `dtype` on this context's device; the stream belongs to it.
            unsafe { self.comm.all_reduce_sum(sp, rp, count, dtype, self.comm_stream.cu_stream() as *mut _) }?;
        }
        let end = self.timing_event()?;
        drv(end.record(&self.comm_stream), "cuEventRecord (end)")?;
        self.pending = Some((bytes, start, end));
        Ok(())
    }

    fn wait_allreduce(&mut self) -> Result<Option<DeviceInterval>> {
        let Some((_bytes, start, end)) = self.pending.take() else {
            bail!("internal: wait without an outstanding all-reduce");
        };
        if self.capturing {
            // the compute stream joins the communication stream inside the graph; nothing is timed
            drv(self.compute.wait(&end), "cuStreamWaitEvent (compute waits collective, captured)")?;
            self.free_events.push(start);
            self.free_events.push(end);
            return Ok(None);
        }
        let before = self.timing_event()?;
        drv(before.record(&self.compute), "cuEventRecord (before wait)")?;
        drv(self.compute.wait(&end), "cuStreamWaitEvent (compute waits collective)")?;
        let after = self.timing_event()?;
        drv(after.record(&self.compute), "cuEventRecord (after wait)")?;
        self.intervals.push((start, end));
        self.waits.push((before, after));
        Ok(None)
    }

    fn gemm(&mut self, shape: usize, layer: u32, units: u32) -> Result<()> {
        self.ensure_anchor()?;
        let Some(g) = self.gemms.get(shape).copied() else {
            bail!("internal: GEMM shape {shape} was not prepared");
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

    fn membound(&mut self, units: u32) -> Result<()> {
        self.ensure_anchor()?;
        for _ in 0..units {
            drv(self.compute.memcpy_dtod(&self.mem_src, &mut self.mem_dst), "cuMemcpyDtoDAsync")?;
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        self.wait_stream(true, "synchronizing the communication stream")?;
        self.wait_stream(false, "synchronizing the compute stream")?;
        self.comm.async_error()
    }

    fn mark(&mut self) -> Result<Option<usize>> {
        if self.capturing {
            bail!("internal: a timing mark inside a graph capture");
        }
        self.ensure_anchor()?;
        let e = self.timing_event()?;
        drv(e.record(&self.compute), "cuEventRecord (mark)")?;
        self.marks.push(e);
        Ok(Some(self.marks.len() - 1))
    }

    fn finish_pass(&mut self) -> Result<PassTimings> {
        let intervals = std::mem::take(&mut self.intervals);
        let waits_ev = std::mem::take(&mut self.waits);
        let marks = std::mem::take(&mut self.marks);
        let Some(anchor) = self.anchor.take() else {
            return Ok(PassTimings { collectives: vec![None; intervals.len()], ..Default::default() });
        };
        let mut kernels = Vec::new();
        if let (Some(c), Some((ts0, host0, _err))) = (&self.cupti, anchor.cupti) {
            let (raw, _malformed, _dropped) = c.drain()?;
            for k in raw {
                let map = |t: u64| (host0 as i128 + t as i128 - ts0 as i128).max(0) as u64;
                let kind = if k.name.to_ascii_lowercase().contains("nccl") {
                    crate::shard::KernelKind::Nccl
                } else {
                    crate::shard::KernelKind::Compute
                };
                kernels.push(super::PassKernel {
                    kind,
                    name: k.name,
                    start_ns: map(k.start),
                    end_ns: map(k.end),
                    stream: k.stream,
                    correlation: k.correlation,
                });
            }
        }
        let mut collectives = Vec::with_capacity(intervals.len());
        for (s, e) in &intervals {
            collectives.push(Some(DeviceInterval { start_ns: Self::to_host_ns(&anchor, s)?, end_ns: Self::to_host_ns(&anchor, e)? }));
        }
        let marks_ns = marks.iter().map(|m| Self::to_host_ns(&anchor, m)).collect::<Result<Vec<_>>>()?;
        let mut waits = Vec::with_capacity(waits_ev.len());
        for (b, a) in &waits_ev {
            waits.push(Some(DeviceInterval { start_ns: Self::to_host_ns(&anchor, b)?, end_ns: Self::to_host_ns(&anchor, a)? }));
        }
        let error_ns = anchor.error_ns;
        self.free_events.extend(intervals.into_iter().flat_map(|(s, e)| [s, e]));
        self.free_events.extend(waits_ev.into_iter().flat_map(|(s, e)| [s, e]));
        self.free_events.extend(marks);
        self.free_events.push(anchor.event);
        // the kernel anchor's error adds to the event anchor's where both are used
        let error_ns = error_ns.max(anchor.cupti.map(|c| c.2).unwrap_or(0));
        Ok(PassTimings { collectives, marks_ns, anchor_error_ns: Some(error_ns), kernels, waits })
    }

    fn check_last_allreduce(&mut self, bytes: u64, dtype: Dtype) -> std::result::Result<(), String> {
        let count = (bytes / dtype.size_bytes()) as usize;
        let mut host = vec![0u8; self.recv.len()];
        if let Err(e) = self.wait_stream(true, "waiting for the all-reduce to check") {
            return Err(format!("{e:#}"));
        }
        let copy = self.comm_stream.memcpy_dtoh(&self.recv, &mut host).and_then(|_| self.comm_stream.synchronize());
        if let Err(e) = copy {
            return Err(format!("copying the result back failed: {e:?}"));
        }
        let mut values: Vec<f32> = match dtype {
            Dtype::F32 => host.chunks_exact(4).take(count).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::Bf16 => super::bf16_to_f32(&host.chunks_exact(2).take(count).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<u16>>()),
        };
        if std::mem::take(&mut self.corrupt_next_check) {
            if let Some(v) = values.first_mut() {
                *v += 1.0;
            }
        }
        super::verify_sum(&values, dtype, self.world_size)
    }

    fn corrupt_last_result(&mut self) {
        self.corrupt_next_check = true;
    }

    fn begin_graph(&mut self) -> Result<()> {
        if self.capturing || self.pending.is_some() {
            bail!("internal: graph capture begun with a capture or a collective outstanding");
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
                    bail!("cublasSetWorkspace: {st:?}");
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

    fn end_graph(&mut self) -> Result<()> {
        if !self.capturing {
            bail!("internal: end of a graph capture that was not begun");
        }
        self.capturing = false;
        let graph = self
            .compute
            .end_capture(drv_sys::CUgraphInstantiate_flags(0))
            .map_err(|e| anyhow::anyhow!("capturing one token into a CUDA graph failed: CUDA error {e:?} (NCCL 2.9 or later captures collectives)"))?
            .ok_or_else(|| anyhow::anyhow!("the CUDA graph capture of one token produced no graph"))?;
        drv(graph.upload(), "cuGraphUpload")?;
        self.graph = Some(graph);
        Ok(())
    }

    fn launch_graph(&mut self) -> Result<()> {
        self.ensure_anchor()?;
        let Some(g) = &self.graph else {
            bail!("internal: no graph was captured");
        };
        drv(g.launch(), "cuGraphLaunch")
    }
}

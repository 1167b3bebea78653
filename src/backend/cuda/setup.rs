//! Opening the CUDA backend: [`CudaBackend::new`] picks the GPU, loads NCCL
//! and bootstraps its communicator, fills the collective buffers and the
//! GEMM operands, prewarms the timing-event pool and records the device's
//! facts (NCCL library, cuBLAS, CUPTI, anchor method). Refuses, with a
//! one-line reason: no driver or GPU, no cuBLAS, a `--gpu` this node lacks,
//! bf16 on an NCCL before 2.10, a model that does not fit the GPU.
use super::*;
use crate::backend::cuda::cupti::Cupti;

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

/// How [`CudaBackend::new`] opens this rank's device: which GPU, which NCCL,
/// how many timing events to prewarm, how long a collective may take, and
/// whether CUPTI kernel records are on.
pub struct CudaOptions<'a> {
    /// Node-local rank: the GPU is `local_rank % device_count` unless `gpu` is set.
    pub local_rank: u32,
    /// The NCCL library to load (`--nccl-lib`).
    pub nccl_path: &'a Path,
    /// Timing events to prewarm for one pass (cold start, not on the hot path).
    pub events_hint: usize,
    /// The NCCL bootstrap and every wait for the device give up after this long (`--collective-timeout-s`).
    pub timeout: std::time::Duration,
    /// The GPU ordinal to open (`--gpu`), if any.
    pub gpu: Option<u32>,
    /// Record CUPTI kernel activity (`--cupti`).
    pub cupti: bool,
}

impl CudaBackend {
    /// Open GPU `o.gpu` or else `o.local_rank % device_count`, load NCCL from `o.nccl_path`, create
    /// the communicator, and prewarm `o.events_hint` timing events (cold start).
    pub fn new(world: &SimpleCommunicator, plan: &BackendPlan, clock: RankClock, o: CudaOptions<'_>) -> Result<Self> {
        let CudaOptions { local_rank, nccl_path, events_hint, timeout, gpu, cupti } = o;
        if let Some(why) = unavailable_reason() {
            bail!("{why}");
        }
        let cublas_name = probe_cublas()?;
        // CUPTI first, so that it sees every kernel; its absence is recorded, not fatal.
        let (cupti, cupti_unavailable) = if !cupti {
            (
                None,
                Some(
                    "off: kernel records were not asked for (--cupti); their cost stays out of the timings".to_string(),
                ),
            )
        } else {
            match Cupti::start() {
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
            Dtype::Bf16 => {
                crate::backend::bf16_contributions(rank, elems).into_iter().flat_map(u16::to_le_bytes).collect()
            }
        };
        // as nccl-tests and PyTorch hold theirs: cuMemAlloc, not the stream-ordered pool
        let send = buffers::DeviceBytes::from_host(&compute, &host).context("the send buffer")?.used_by(&comm_stream);
        let recv =
            buffers::DeviceBytes::zeros(&compute, host.len()).context("the receive buffer")?.used_by(&comm_stream);
        let (ak, cn) = plan.activation_elems();
        let a = drv(compute.clone_htod(&(0..ak).map(weight_bits).collect::<Vec<u16>>()), "copying A")?;
        let mut b = Vec::with_capacity(plan.gemms.len());
        for g in &plan.gemms {
            let kn = g.k as usize * g.n as usize;
            let first =
                drv(compute.clone_htod(&(0..kn).map(|i| weight_bits(i + 1)).collect::<Vec<u16>>()), "copying B")?;
            let mut sets = vec![first];
            for _ in 1..plan.weight_sets.max(1) {
                let mut next = compute.alloc_zeros::<u16>(kn).map_err(|e| {
                    anyhow::anyhow!(
                        "allocating {} weight sets of {}x{} bf16: CUDA error {e:?} (the model does not fit this GPU)",
                        plan.weight_sets,
                        g.k,
                        g.n
                    )
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
                    format!(
                        "{} bf16 in/out, fp32 accumulate (cublasGemmEx), {} weight set(s)",
                        crate::backend::describe_gemms(&plan.gemms),
                        plan.weight_sets.max(1)
                    ),
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
                Ok(_) => format!(
                    "{ANCHOR_ROUND_TRIPS} round trips per window, each an event between a stream wait the \
                    host releases by a store to mapped memory (cuStreamWaitValue32) and an acknowledgement the device \
                        writes there (cuStreamWriteValue32); start and end of every pass"
                ),
                Err(why) => format!(
                    "{ANCHOR_ROUND_TRIPS} record-and-poll round trips per window (stream memory \
                    operations unavailable: {why}); start and end of every pass"
                ),
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
                Ok(_) => format!(
                    "{TIMER_ROUND_TRIPS} %globaltimer release-and-reply round trips and {TIMER_STAMPS} \
                    stamping kernels per window, start and end of every pass"
                ),
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
            cupti,
            cupti_unavailable,
            cupti_lost: Default::default(),
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
}

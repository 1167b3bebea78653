//! `commcanary rank`: the per-rank SPMD program (SPEC §1).
//!
//! Consumes the command line and the MPI world. Produces, per rank, one shard
//! in `OUT/<run-id>/` and, on rank 0, `run.json` listing every shard's digest.
//! Order: validate arguments (before MPI, so a bad flag is one clear line),
//! MPI init, identity, backend init (timed as cold start), clock window 1,
//! phases, clock window 2, shard, gather digests, run record. Any rank's error
//! aborts the whole job (`MPI_Abort`) after printing which rank failed and why;
//! files already written stay as they are.
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BackendChoice};
use crate::cli::{ClockMode, RankArgs};
use crate::clock::{estimate_window, ClockInjection, ClockModel, PingSample, RankClock};
use crate::phases::{Fault, Runner};
use crate::run::{RunRecord, ShardRef, RUN_FILE, RUN_FORMAT_VERSION};
use crate::shard::{BackendKind, ClockRecord, ColdStart, Dtype, ProcessGroup, Shard, ShardHeader, SHARD_FORMAT_VERSION};
use crate::workload::{parse_phases, DelayInjection, GemmShape, ModelRequest, ModelShape, WorkloadSpec};
use anyhow::{bail, Context, Result};
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::path::PathBuf;

const CLOCK_TAG: i32 = 7001;

/// Everything validated before MPI starts.
struct Plan {
    /// The workload; a model's split over the ranks is bound once the world size is known.
    spec: WorkloadSpec,
    model: Option<ModelRequest>,
    delay: Option<DelayInjection>,
    clock_injections: Vec<ClockInjection>,
    fault: Option<Fault>,
    backend: BackendKind,
    backend_note: Option<String>,
}

/// World rank from the launcher's environment, before MPI is initialised
/// (used only to print an argument error once rather than once per rank).
fn launcher_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Write one whole line to stderr in a single `write`: ranks and the launcher
/// share the pipe, and a line written in pieces gets another process's output
/// spliced into it (seen: mpirun's banner inside a rank's error line).
pub fn write_line_stderr(line: &str) {
    use std::io::Write;
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// World size from the launcher's environment, before MPI is initialised.
fn launcher_world_size() -> Option<u32> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Whether this process should print job-wide messages.
pub fn is_lead_process() -> bool {
    launcher_rank().unwrap_or(0) == 0
}

fn plan(args: &RankArgs) -> Result<Plan> {
    let backend_note;
    let backend = match args.backend {
        BackendChoice::Cpu => {
            backend_note = None;
            BackendKind::Cpu
        }
        BackendChoice::Cuda => match crate::backend::cuda::unavailable_reason() {
            Some(why) => bail!("--backend cuda is unavailable: {why}"),
            None => {
                backend_note = None;
                BackendKind::Cuda
            }
        },
        BackendChoice::Auto => match crate::backend::cuda::unavailable_reason() {
            Some(why) => {
                backend_note = Some(format!("backend auto: chose cpu ({why})"));
                BackendKind::Cpu
            }
            None => {
                backend_note = Some("backend auto: chose cuda (a GPU is visible)".into());
                BackendKind::Cuda
            }
        },
    };
    let gemm: GemmShape = match &args.gemm {
        Some(g) => g.parse()?,
        None => match backend {
            BackendKind::Cpu => GemmShape { m: 64, n: 64, k: 64 },
            BackendKind::Cuda => GemmShape { m: 1024, n: 1024, k: 1024 },
        },
    };
    let shape = match (&args.model_dims, args.model.as_deref()) {
        (Some(dims), _) => Some(ModelShape::parse_dims(dims)?),
        (None, Some("synthetic")) => None,
        (None, Some(name)) => Some(ModelShape::preset(name)?),
        (None, None) => Some(ModelShape::preset(match backend {
            BackendKind::Cpu => "tiny",
            BackendKind::Cuda => "llama3-8b",
        })?),
    };
    if shape.is_some() && args.sizes.is_some() {
        bail!("--sizes applies to --model synthetic; a model's all-reduces are batch x hidden elements");
    }
    if shape.is_none() && (args.prefill_tokens.is_some() || args.batch != 1) {
        bail!("--batch and --prefill-tokens apply to model shapes, not --model synthetic");
    }
    if args.graph && backend != BackendKind::Cuda {
        bail!("--graph needs the cuda backend (CUDA graphs)");
    }
    if args.graph && shape.is_none() && args.phases.split(',').any(|p| matches!(p.trim(), "blocking" | "async" | "all")) {
        // a synthetic token's sizes depend on its position in the phase: one captured token would not stand for all
        bail!("--graph: blocking and async run as graphs for model shapes only (not --model synthetic)");
    }
    let (gemm_dtype, gemm_accumulate_dtype) = match backend {
        BackendKind::Cpu => (Dtype::F32, Dtype::F32),
        BackendKind::Cuda => (Dtype::Bf16, Dtype::F32),
    };
    let spec = WorkloadSpec {
        phases: parse_phases(&args.phases)?,
        tokens: args.tokens,
        warmup_tokens: args.warmup_tokens,
        layers: args.layers.unwrap_or(32),
        sizes_bytes: crate::units::parse_size_list(args.sizes.as_deref().unwrap_or("64KiB,128KiB,256KiB"))?,
        isolated_sizes_bytes: match (&args.min_bytes, &args.max_bytes) {
            (Some(lo), Some(hi)) => {
                crate::workload::size_sweep(crate::units::parse_bytes(lo)?, crate::units::parse_bytes(hi)?, args.step_factor)?
            }
            _ => Vec::new(),
        },
        graph: args.graph,
        gemm,
        iters: args.iters,
        warmup_iters: args.warmup_iters,
        check: args.check,
        fill_residual: args.fill_residual,
        membound_bytes: crate::units::parse_bytes(&args.membound_bytes)?,
        dtype: args.dtype.unwrap_or(if shape.is_some() { Dtype::Bf16 } else { Dtype::F32 }),
        gemm_dtype: Some(gemm_dtype),
        gemm_accumulate_dtype: Some(gemm_accumulate_dtype),
        model: None,
    };
    spec.validate()?;
    let model = shape.map(|shape| ModelRequest {
        shape,
        batch: args.batch,
        prefill_tokens: args.prefill_tokens,
        layers: args.layers,
        // the device holds every layer's weights, as a real model does; the host reuses one set
        per_layer_weights: backend == BackendKind::Cuda,
    });
    if let (Some(req), Some(world)) = (&model, launcher_world_size()) {
        // refuse a shape that does not split over the ranks before MPI starts
        spec.clone().bind_model(req, world)?;
    }
    let delay = args.inject_delay.as_deref().map(DelayInjection::parse).transpose()?;
    let clock_injections: Vec<ClockInjection> =
        args.inject_clock.iter().map(|s| ClockInjection::parse(s)).collect::<Result<_>>()?;
    let fault = args.fault.as_deref().map(Fault::parse).transpose()?;
    if args.graph && backend != BackendKind::Cuda {
        bail!("--graph needs the cuda backend (CUDA graphs)");
    }
    if backend == BackendKind::Cuda && args.nccl_lib.components().count() > 1 && !args.nccl_lib.exists() {
        bail!("--nccl-lib {}: no such file", args.nccl_lib.display());
    }
    if let Some(id) = &args.run_id {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            bail!("--run-id {id:?}: use letters, digits, '.', '_' and '-' only");
        }
    }
    Ok(Plan { spec, model, delay, clock_injections, fault, backend, backend_note })
}

/// Directory (under `--out`) where NCCL writes per-process debug logs before they are kept.
fn nccl_debug_dir(out: &std::path::Path) -> PathBuf {
    out.join(".nccl-debug")
}

/// Ask NCCL for its tuning log. Runs before MPI_Init, while this process is
/// still single-threaded, so changing the environment is safe.
pub fn request_nccl_tuning_log(out: &std::path::Path) -> Result<()> {
    let dir = nccl_debug_dir(out);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir)?;
    let subsys = match std::env::var("NCCL_DEBUG_SUBSYS") {
        Ok(s) if !s.is_empty() && !s.split(',').any(|x| x == "TUNING") => format!("{s},TUNING"),
        Ok(s) if !s.is_empty() => s,
        _ => "TUNING".into(),
    };
    if std::env::var("NCCL_DEBUG").map(|v| v.eq_ignore_ascii_case("TRACE")).unwrap_or(false) {
        // TRACE already includes INFO
    } else {
        std::env::set_var("NCCL_DEBUG", "INFO");
    }
    std::env::set_var("NCCL_DEBUG_SUBSYS", subsys);
    std::env::set_var("NCCL_DEBUG_FILE", dir.join("%h.%p.log"));
    Ok(())
}

/// After the phases: keep this process's NCCL log beside the shard and attach the choices.
fn collect_tuning(out: &std::path::Path, run_dir: &std::path::Path, rank: u32, events: &[(u64, u64)]) -> Result<crate::tuning::TuningCapture> {
    let pid = std::process::id();
    let dir = nccl_debug_dir(out);
    let suffix = format!(".{pid}.log");
    let found = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&suffix)));
    let source = "NCCL_DEBUG_SUBSYS=TUNING log of this process".to_string();
    let Some(path) = found else {
        return Ok(crate::tuning::TuningCapture {
            source,
            log_sha256: None,
            log_file: None,
            unrecognised_lines: 0,
            unavailable: Some(format!("NCCL wrote no debug file for pid {pid} in {}", dir.display())),
            choices: Vec::new(),
        });
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let kept = format!("nccl-debug.rank-{rank:05}.log");
    crate::fsutil::write_new_atomic(&run_dir.join(&kept), &bytes)?;
    let _ = std::fs::remove_file(&path);
    let (lines, unrecognised) = crate::tuning::parse_log(&String::from_utf8_lossy(&bytes));
    let (choices, unavailable) = if lines.is_empty() {
        (Vec::new(), Some("NCCL printed no per-collective tuning lines on this rank (it prints them on rank 0 only)".to_string()))
    } else {
        match crate::tuning::attach(&lines, events) {
            Ok(c) => (c, None),
            Err(why) => (Vec::new(), Some(why)),
        }
    };
    Ok(crate::tuning::TuningCapture {
        source,
        log_sha256: Some(crate::fsutil::sha256_hex(&bytes)),
        log_file: Some(kept),
        unrecognised_lines: unrecognised as u64,
        unavailable,
        choices,
    })
}

/// Entry point of `commcanary rank`.
pub fn run(args: RankArgs) -> Result<()> {
    let plan = plan(&args)?;
    if args.nccl_tuning {
        if plan.backend != BackendKind::Cuda {
            bail!("--nccl-tuning needs the cuda backend (NCCL's tuner is what it records)");
        }
        request_nccl_tuning_log(&args.out)?;
    }
    let t_before_init = crate::clock::monotonic_raw_ns();
    let universe = mpi::initialize().context("MPI is already initialised or could not be initialised")?;
    let mpi_init_ns = crate::clock::monotonic_raw_ns() - t_before_init;
    let world = universe.world();
    let rank = world.rank() as u32;
    if let Err(e) = run_rank(&args, plan, &world, mpi_init_ns) {
        write_line_stderr(&format!("commcanary rank {rank}: error: {e:#}"));
        world.abort(2);
    }
    Ok(())
}

fn broadcast_run_dir(world: &SimpleCommunicator, args: &RankArgs) -> Result<(String, PathBuf)> {
    let root = world.process_at_rank(0);
    let mut buf = [0u8; 256];
    if world.rank() == 0 {
        let res: Result<String> = (|| {
            let id = args.run_id.clone().unwrap_or_else(crate::run::new_run_id);
            std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
            let dir = args.out.join(&id);
            std::fs::create_dir(&dir).with_context(|| {
                format!("creating run directory {} (a run is never overwritten)", dir.display())
            })?;
            Ok(id)
        })();
        match &res {
            Ok(id) => {
                buf[0] = 1;
                buf[1..1 + id.len().min(254)].copy_from_slice(&id.as_bytes()[..id.len().min(254)]);
            }
            Err(e) => {
                let msg = format!("{e:#}");
                let n = msg.len().min(254);
                buf[1..1 + n].copy_from_slice(&msg.as_bytes()[..n]);
            }
        }
    }
    root.broadcast_into(&mut buf[..]);
    let end = buf[1..].iter().position(|&b| b == 0).map(|p| p + 1).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[1..end]).into_owned();
    if buf[0] != 1 {
        bail!("rank 0 could not prepare the output directory: {text}");
    }
    let dir = args.out.join(&text);
    Ok((text, dir))
}

/// One calibration window: every rank r > 0 exchanges `n` ping-pongs with rank 0, one rank at a time.
fn clock_window(world: &SimpleCommunicator, clock: &RankClock, n: u32) -> Vec<PingSample> {
    let rank = world.rank();
    let size = world.size();
    let mut samples = Vec::new();
    world.barrier();
    if rank == 0 {
        for r in 1..size {
            let peer = world.process_at_rank(r);
            for _ in 0..n {
                let (_ping, _) = peer.receive_with_tag::<u64>(CLOCK_TAG);
                let t = clock.now_ns();
                peer.send_with_tag(&t, CLOCK_TAG);
            }
        }
    } else {
        let root = world.process_at_rank(0);
        for _ in 0..n {
            let t_send = clock.now_ns();
            root.send_with_tag(&t_send, CLOCK_TAG);
            let (t_ref, _) = root.receive_with_tag::<u64>(CLOCK_TAG);
            let t_recv = clock.now_ns();
            samples.push(PingSample { t_send_local_ns: t_send, t_ref_ns: t_ref, t_recv_local_ns: t_recv });
        }
    }
    world.barrier();
    samples
}

fn run_rank(args: &RankArgs, mut plan: Plan, world: &SimpleCommunicator, mpi_init_ns: u64) -> Result<()> {
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    if let Some(req) = &plan.model {
        // tensor-parallel degree = the rank count
        plan.spec.bind_model(req, size)?;
    }
    if plan.spec.dtype == Dtype::Bf16 && plan.spec.check > 0 && size > crate::backend::BF16_EXACT_MAX_WORLD {
        bail!(
            "--check with bf16 all-reduces: the check's sums are exact in bf16 up to {} ranks and this job has {size}; pass --check 0 or --dtype f32",
            crate::backend::BF16_EXACT_MAX_WORLD
        );
    }
    let local = world.split_shared(world.rank());
    let (local_rank, local_size) = (local.rank() as u32, local.size() as u32);
    let started_unix_ms = crate::run::unix_ms();
    if rank == 0 && !args.quiet {
        if let Some(note) = &plan.backend_note {
            eprintln!("commcanary: {note}");
        }
    }
    for inj in &plan.clock_injections {
        if inj.rank >= size {
            bail!("--inject-clock names rank {} but the world has {size} ranks", inj.rank);
        }
    }
    if let Some(d) = plan.delay {
        if d.rank >= size {
            bail!("--inject-delay names rank {} but the world has {size} ranks", d.rank);
        }
    }
    let clock = RankClock::new(rank, &plan.clock_injections);
    let identity = crate::identity::capture(rank, size, local_rank, local_size);
    let (run_id, dir) = broadcast_run_dir(world, args)?;
    let file_trace = args.trace.as_deref().map(|p| crate::trace::from_joined_file(p, rank)).transpose()?;
    if let (Some(t), Some(p)) = (&file_trace, &args.trace) {
        if let Some(e) = t.entries.iter().find(|e| e.dtype != plan.spec.dtype) {
            bail!("--trace {}: its collectives are {}, this run's are {} (pass --dtype {})", p.display(), e.dtype.name(), plan.spec.dtype.name(), e.dtype.name());
        }
    }
    let cx = RankContext {
        args,
        plan: &plan,
        world,
        clock: clock.clone(),
        identity,
        run_id,
        dir,
        started_unix_ms,
        local_rank,
        local_size,
        cold_start_mpi_ns: mpi_init_ns,
    };
    let t0 = clock.now_ns();
    match plan.backend {
        BackendKind::Cpu => {
            let mut b = CpuBackend::new(world, &crate::backend::BackendPlan::for_spec(&plan.spec))?;
            finish_rank(cx, file_trace, &mut b, clock.now_ns() - t0)
        }
        BackendKind::Cuda => {
            let mut b = crate::backend::cuda::CudaBackend::new(
                world,
                local_rank,
                &args.nccl_lib,
                &crate::backend::BackendPlan::for_spec(&plan.spec),
                clock.clone(),
                plan.spec.device_events_per_pass(),
                std::time::Duration::from_secs_f64(args.collective_timeout_s),
                args.gpu,
                args.cupti,
            )?;
            finish_rank(cx, file_trace, &mut b, clock.now_ns() - t0)
        }
    }
}

/// Per-rank facts gathered before the backend starts.
struct RankContext<'a> {
    args: &'a RankArgs,
    plan: &'a Plan,
    world: &'a SimpleCommunicator,
    clock: RankClock,
    identity: crate::identity::EnvIdentity,
    run_id: String,
    dir: PathBuf,
    started_unix_ms: u64,
    local_rank: u32,
    local_size: u32,
    cold_start_mpi_ns: u64,
}

/// Clock windows, phases, shard and run record, on any backend.
fn finish_rank<B: Backend>(
    cx: RankContext<'_>,
    file_trace: Option<crate::trace::SourceTrace>,
    backend: &mut B,
    backend_init_ns: u64,
) -> Result<()> {
    let RankContext { args, plan, world, clock, identity, run_id, dir, started_unix_ms, local_rank, local_size, cold_start_mpi_ns } = cx;
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    let identity_sha256 = identity.digest();

    let start_samples = match args.clock {
        ClockMode::Pingpong => clock_window(world, &clock, args.clock_samples),
        ClockMode::None => Vec::new(),
    };

    let mut runner = Runner::new(backend, &clock, world, &plan.spec, plan.delay, plan.fault, file_trace, !args.quiet);
    runner.run_all()?;
    let body = std::mem::take(&mut runner.body);
    let phase_runs = std::mem::take(&mut runner.phase_runs);
    let checks = std::mem::take(&mut runner.checks);
    let tuning = if args.nccl_tuning {
        let events: Vec<(u64, u64)> = body.collectives.iter().filter(|e| e.group == 0).map(|e| (e.seq, e.bytes)).collect();
        Some(collect_tuning(&args.out, &dir, rank, &events)?)
    } else {
        None
    };

    let clock_record = match args.clock {
        ClockMode::None => None,
        ClockMode::Pingpong => {
            let end_samples = clock_window(world, &clock, args.clock_samples);
            let model = if rank == 0 {
                ClockModel::reference()
            } else {
                let a = estimate_window(&start_samples).context("start clock window")?;
                let b = estimate_window(&end_samples).context("end clock window")?;
                ClockModel::fit(a, Some(b)).context("fitting the clock model")?
            };
            Some(ClockRecord { start_samples, end_samples, model })
        }
    };

    let header = ShardHeader {
        format_version: SHARD_FORMAT_VERSION,
        run_id: run_id.clone(),
        rank,
        world_size: size,
        host: identity.host.clone(),
        local_rank,
        local_size,
        backend: backend.kind(),
        device: backend.device(),
        identity,
        identity_sha256: identity_sha256.clone(),
        groups: vec![ProcessGroup { id: 0, members: (0..size).collect() }],
        workload: plan.spec.clone(),
        clock: clock_record,
        clock_injections: plan.clock_injections.clone(),
        clock_anchor_true_ns: clock.anchor_true_ns(),
        delay_injection: plan.delay,
        cold_start: ColdStart { mpi_init_ns: Some(cold_start_mpi_ns), backend_init_ns },
        unmeasured: backend.unmeasured().into_iter().chain(plan.spec.graph.then(|| crate::shard::Unmeasured {
            field: "collectives (graph mode)".into(),
            reason: "blocking and async ran as one CUDA graph per token: per-collective and per-GEMM times are not measured and no collective events are recorded; token start and end are events recorded on the compute stream around each graph launch".into(),
        })).collect(),
        phases: phase_runs,
        started_unix_ms,
        tuning,
        checks,
    };
    let shard = Shard { header, body };
    let bytes = shard.encode()?;
    let file = crate::shard::shard_file_name(rank);
    crate::fsutil::write_new_atomic(&dir.join(&file), &bytes)?;
    let digest = crate::fsutil::sha256_hex(&bytes);

    // gather digests and hosts on rank 0
    let mut mine = [0u8; 32 + 8 + 128];
    mine[..32].copy_from_slice(&hex::decode(&digest).expect("hex"));
    mine[32..40].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    let host = shard.header.host.as_bytes();
    mine[40..40 + host.len().min(127)].copy_from_slice(&host[..host.len().min(127)]);
    let root = world.process_at_rank(0);
    if rank == 0 {
        let mut all = vec![0u8; mine.len() * size as usize];
        root.gather_into_root(&mine[..], &mut all[..]);
        let shards: Vec<ShardRef> = all
            .chunks(mine.len())
            .enumerate()
            .map(|(r, c)| {
                let hend = c[40..].iter().position(|&b| b == 0).map(|p| 40 + p).unwrap_or(c.len());
                ShardRef {
                    rank: r as u32,
                    file: crate::shard::shard_file_name(r as u32),
                    sha256: hex::encode(&c[..32]),
                    size_bytes: u64::from_le_bytes(c[32..40].try_into().expect("8 bytes")),
                    host: String::from_utf8_lossy(&c[40..hend]).into_owned(),
                }
            })
            .collect();
        let record = RunRecord {
            format_version: RUN_FORMAT_VERSION,
            run_id: run_id.clone(),
            world_size: size,
            backend: shard.header.backend,
            workload: plan.spec.clone(),
            argv: std::env::args().collect(),
            rank0_identity_sha256: identity_sha256,
            shards,
            started_unix_ms,
            finished_unix_ms: crate::run::unix_ms(),
        };
        crate::fsutil::write_json_new(&dir.join(RUN_FILE), &record)?;
        println!("run {run_id}: {size} shards and run.json written to {}", dir.display());
        if !args.quiet {
            eprintln!("commcanary: verify and summarize with: commcanary join {}", dir.display());
        }
    } else {
        root.gather_into(&mine[..]);
    }
    // A wrong result recorded by the isolated phase fails the rank only now,
    // once rank 0 has written run.json, so the evidence is complete on disk.
    world.barrier();
    if let Some(c) = shard.header.checks.iter().find(|c| c.wrong_elements > 0) {
        bail!(
            "result check failed on rank {rank}, phase {}, group {} seq {} ({} bytes): {} wrong elements, first: {}; the run is kept in {} and must not be ranked",
            c.phase, c.group, c.seq, c.bytes, c.wrong_elements, c.first_wrong.as_deref().unwrap_or("?"), dir.display()
        );
    }
    Ok(())
}

//! `commcanary rank`: the per-rank SPMD program (docs/ARCHITECTURE.md §3).
//!
//! Consumes the command line and the MPI world. Produces, per rank, one shard
//! in `OUT/<run-id>/` and, on rank 0, `run.json` listing every shard's digest.
//! Order: validate arguments (before MPI, so a bad flag is one clear line),
//! MPI init, identity, backend init (timed as cold start), clock window 1,
//! phases, clock window 2, shard, gather digests, run record. Any rank's error
//! aborts the whole job (`MPI_Abort`) after printing which rank failed and why;
//! files already written stay as they are. Every MPI wait of the program is
//! bounded by `--collective-timeout-s` ([`crate::backend::mpi_deadline`]), so a stopped
//! or dead rank fails the job with `refused[COLLECTIVE_TIMEOUT]` instead of
//! blocking the others.
pub mod bench;
pub mod doctor;
pub mod phases;
pub mod sweep;
use crate::backend::cpu::CpuBackend;
use crate::backend::mpi_deadline::Op;
use crate::backend::Backend;
use crate::core::clock::{compose, fit_rank_model, node_leaders, ClockInjection, ClockModel, ClockPath, ClockSync, PingSample, RankClock, RankClockFit};
use crate::core::workload::{parse_phases, DelayInjection, FillResidual, GemmShape, ModelRequest, ModelShape, WorkloadSpec};
use crate::evidence::run::{RunRecord, ShardRef, RUN_FORMAT_VERSION};
use crate::evidence::shard::{BackendKind, ClockRecord, ColdStart, Dtype, ProcessGroup, Shard, ShardHeader, SHARD_FORMAT_VERSION};
use crate::rank::phases::{Fault, Runner};
use anyhow::{bail, Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::path::PathBuf;

const CLOCK_TAG: i32 = 7001;
/// Ping-pongs of a rank with its node leader (hierarchical calibration).
const CLOCK_TAG_LOCAL: i32 = 7002;
/// A node leader's model, handed to the ranks of its node.
const CLOCK_TAG_HANDOFF: i32 = 7003;

/// Clock calibration mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockMode {
    /// Ping-pong with rank 0 before and after the phases; a rank under rank
    /// 0's kernel (same boot id) whose every sample agrees with one clock
    /// gets offset, drift and bound exactly 0.
    Pingpong,
    /// Ping-pong, and the estimate is kept even under rank 0's kernel (to
    /// see the method's own bound on one node).
    PingpongOnly,
    /// No calibration: arrival skew is reported as unknown.
    None,
}

/// Which ranks calibrate against which (`--clock-sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockSyncChoice {
    /// Hierarchical where the ranks record more than one host name, flat on one.
    Auto,
    /// Every rank against rank 0, one rank at a time: cost grows with ranks.
    Flat,
    /// Node leaders against rank 0, then every other rank against its
    /// leader, the nodes side by side: cost grows with nodes.
    Hierarchical,
}

impl ClockSyncChoice {
    /// The topology used for ranks recording `hosts` distinct host names.
    pub fn resolve(self, hosts: usize) -> ClockSync {
        match self {
            ClockSyncChoice::Flat => ClockSync::Flat,
            ClockSyncChoice::Hierarchical => ClockSync::Hierarchical,
            ClockSyncChoice::Auto if hosts > 1 => ClockSync::Hierarchical,
            ClockSyncChoice::Auto => ClockSync::Flat,
        }
    }
}

/// What one rank runs: `commcanary rank`'s options as plain values (the
/// command-line layer converts its clap arguments into this; see the
/// `rank --help` text for each option's meaning and default).
#[derive(Clone, Debug)]
pub struct RankOptions {
    /// Backend: cpu, cuda, or auto (cuda when usable, else cpu; the choice is printed).
    pub backend: crate::backend::BackendChoice,
    /// Phases in order: isolated,blocking,async,replay,fill,overlap and the ablations
    /// async-wait-immediate,host-delay,membound-fill; `all` = the six main phases.
    pub phases: String,
    /// Timed tokens per workload phase.
    pub tokens: u32,
    /// Warm-up tokens before the timed ones (recorded, flagged).
    pub warmup_tokens: u32,
    /// Workload shape: a model preset (llama3-8b, llama3-70b, tiny) run as
    /// tensor-parallel decode over the ranks, or `synthetic` (one square GEMM
    /// and one all-reduce per layer, sizes from --sizes). Default: llama3-8b
    /// on cuda, tiny on cpu.
    pub model: Option<String>,
    /// Custom model shape H,F,LAYERS (multi-head attention) or H,F,LAYERS,KV_DIM
    /// (grouped-query attention: key/value heads x head dimension).
    pub model_dims: Option<String>,
    /// Model shapes: sequences decoded together (the GEMMs' m; all-reduces of batch x hidden).
    pub batch: u32,
    /// Model shapes: make every step a prefill of this many prompt tokens per
    /// sequence (GEMMs' m and all-reduces of batch x tokens x hidden) instead of a decode step.
    pub prefill_tokens: Option<u32>,
    /// Element type of the all-reduces (default bf16 for model shapes, f32 for synthetic).
    pub dtype: Option<Dtype>,
    /// Layers per token (default: the model's own; 32 for synthetic).
    pub layers: Option<u32>,
    /// Synthetic only: message sizes, cycled per collective (default 64KiB,128KiB,256KiB).
    pub sizes: Option<String>,
    /// Unit GEMM shape N or MxNxK: the synthetic layer's product and the fill
    /// quantum (default 64 on cpu, 1024 on cuda).
    pub gemm: Option<String>,
    /// Isolated phase: smallest size of a sweep (as nccl-tests -b); with
    /// --max-bytes, the isolated phase sweeps instead of using --sizes.
    pub min_bytes: Option<String>,
    /// Isolated phase: largest size of the sweep (as nccl-tests -e).
    pub max_bytes: Option<String>,
    /// Isolated phase: multiply the size by this factor at each step (as nccl-tests -f).
    pub step_factor: u64,
    /// Timed iterations per size in the isolated phase (as nccl-tests -n).
    pub iters: u32,
    /// Warm-up iterations per size in the isolated phase (as nccl-tests -w).
    pub warmup_iters: u32,
    /// Validate the all-reduce result on this many collectives per phase (as nccl-tests -c).
    pub check: u32,
    /// The collective the isolated phase sweeps (as nccl-tests' `*_perf` programs).
    pub collective: crate::core::workload::SweepKind,
    /// The isolated sweep's reduction (as nccl-tests -o); default sum.
    pub op: Option<crate::core::workload::ReduceOp>,
    /// Write the isolated sweep's table as JSON to this file (as nccl-tests -J), from rank 0.
    pub json: Option<PathBuf>,
    /// Fill residual handling: carry rounding errors to the next gap, or drop them.
    pub fill_residual: FillResidual,
    /// Bytes copied by one memory-bound fill unit.
    pub membound_bytes: String,
    /// Joined trace file (from `join --events-out`) to replay instead of this run's blocking phase.
    pub trace: Option<PathBuf>,
    /// With an imported `--trace`: run only its all-reduces, leaving out (and
    /// counting) the other kinds. Without it every kind runs on the trace's
    /// groups (a backend with a trace executor: cpu).
    pub trace_allreduce_only: bool,
    /// Negative control: rank=R,every=K,us=D delays rank R before every K-th collective.
    pub inject_delay: Option<String>,
    /// Negative control: every group-0 all-reduce runs N times back to back, inside one recorded collective.
    pub inject_repeat: Option<u32>,
    /// Test fixture: rank=R,offset_us=X,drift_ppm=Y distorts rank R's clock reads (repeatable).
    pub inject_clock: Vec<String>,
    /// Clock calibration against rank 0.
    pub clock: ClockMode,
    /// Which ranks calibrate against which: flat, hierarchical, or auto.
    pub clock_sync: ClockSyncChoice,
    /// Ping-pong exchanges per calibration window and rank.
    pub clock_samples: u32,
    /// NCCL library for the cuda backend: an explicit path, or a bare name
    /// resolved by the system loader (the file actually mapped is recorded either way).
    pub nccl_lib: PathBuf,
    /// Seconds without completion after which a collective is declared hung and
    /// the job fails with a message (cuda: the NCCL communicator is aborted;
    /// cpu: the wait on MPI_Iallreduce gives up). 0 < value <= 86400.
    pub collective_timeout_s: f64,
    /// Cuda backend: use this GPU ordinal instead of local_rank % device_count.
    pub gpu: Option<u32>,
    /// Cuda backend: capture each size's timed isolated iterations into one
    /// CUDA graph with a timestamp node between collectives, and launch it
    /// once (as serving engines replay decode steps): no host work per
    /// collective; per-collective host times are then the launch's. Model
    /// shapes: blocking and async capture one token's GEMMs and all-reduces
    /// into a CUDA graph and launch it per token; only token boundaries are timed.
    pub graph: bool,
    /// Cuda backend: the stream of the blocking phase's collectives.
    pub comm_stream: crate::core::workload::CommStream,
    /// Cuda backend: record every kernel through CUPTI (kernel timelines,
    /// `overlap` from kernels). Off by default: its per-launch cost would be
    /// mixed into every timing (`bench-overhead --cupti` measures it).
    pub cupti: bool,
    /// Capture NCCL's per-collective tuner choices (cuda backend): sets
    /// NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=TUNING with a per-process NCCL_DEBUG_FILE,
    /// keeps the log beside the shard and attaches the choices where counts and sizes match.
    pub nccl_tuning: bool,
    /// Output directory; the run goes to OUT/<run-id>/.
    pub out: PathBuf,
    /// Run id (default: UTC time plus random hex, chosen by rank 0).
    pub run_id: Option<String>,
    /// Quiet: no per-phase progress on stderr.
    pub quiet: bool,
    /// Negative controls: wrong-sum:R corrupts rank R's results (--check must fail);
    /// hang:R:SEQ stops rank R before collective SEQ (--collective-timeout must fire).
    pub fault: Option<String>,
}

/// Every number of `rank`'s options, against the ranges documented in
/// [`crate::core::ranges`].
pub fn check_ranges(a: &RankOptions) -> Result<()> {
    use crate::core::ranges::{
        int, out, positive, size, sizes, MAX_GEMM_DIM, MAX_INJECT_REPEAT, MAX_MESSAGE_BYTES, MAX_PHASE_COLLECTIVES, MAX_RANK, MAX_TOKENS_IN_FLIGHT,
    };
    int("--tokens", a.tokens, 1, 1_000_000)?;
    int("--warmup-tokens", a.warmup_tokens, 0, 100_000)?;
    if let Some(l) = a.layers {
        int("--layers", l, 1, 10_000)?;
    }
    // a model's own layer count (when --layers is not given) is checked when the model is bound (WorkloadSpec::bind_model)
    let per_phase = (a.tokens as u64 + a.warmup_tokens as u64) * a.layers.unwrap_or(1) as u64;
    int("(--tokens + --warmup-tokens) x --layers", per_phase, 1, MAX_PHASE_COLLECTIVES)?;
    if let Some(d) = &a.model_dims {
        let s = crate::core::workload::ModelShape::parse_dims(d)?;
        int("--model-dims H", s.hidden, 1, 65_536)?;
        int("--model-dims F", s.ffn, 1, 262_144)?;
        int("--model-dims LAYERS", s.layers, 1, 10_000)?;
        int("--model-dims KV_DIM", s.kv_dim, 1, s.hidden)?;
    }
    int("--batch", a.batch, 1, 65_536)?;
    if let Some(p) = a.prefill_tokens {
        int("--prefill-tokens", p, 1, 1 << 20)?;
    }
    int("--batch x --prefill-tokens", a.batch as u64 * a.prefill_tokens.unwrap_or(1) as u64, 1, MAX_TOKENS_IN_FLIGHT)?;
    int("-n/--iters", a.iters, 1, 1_000_000)?;
    int("-w/--warmup-iters", a.warmup_iters, 0, 100_000)?;
    int("--check", a.check, 0, 1_000_000)?;
    if let Some(s) = &a.sizes {
        sizes("--sizes", s)?;
    }
    int("-f/--step-factor", a.step_factor, 2, 1024)?;
    if let (Some(lo), Some(hi)) = (&a.min_bytes, &a.max_bytes) {
        let (lo, hi) = (crate::core::units::parse_bytes(lo)?, crate::core::units::parse_bytes(hi)?);
        size("-b/--min-bytes", lo)?;
        size("-e/--max-bytes", hi)?;
        if hi < lo {
            return Err(out("-e/--max-bytes", hi, &format!("at least -b/--min-bytes {lo}")));
        }
    }
    int("--membound-bytes", crate::core::units::parse_bytes(&a.membound_bytes)?, 4, MAX_MESSAGE_BYTES)?;
    if let Some(g) = &a.gemm {
        let s: crate::core::workload::GemmShape = g.parse()?;
        for (d, v) in [("M", s.m), ("N", s.n), ("K", s.k)] {
            int(&format!("--gemm {d}"), v, 1, MAX_GEMM_DIM)?;
        }
    }
    int("--clock-samples", a.clock_samples, 1, 100_000)?;
    positive("--collective-timeout-s", a.collective_timeout_s, 86_400.0)?;
    if let Some(g) = a.gpu {
        int("--gpu", g, 0, 1023)?;
    }
    crate::core::workload::parse_phases(&a.phases)?;
    if let Some(d) = &a.inject_delay {
        let d = crate::core::workload::DelayInjection::parse(d)?;
        int("--inject-delay rank", d.rank, 0, MAX_RANK)?;
    }
    if let Some(n) = a.inject_repeat {
        int("--inject-repeat", n, 1, MAX_INJECT_REPEAT)?;
    }
    for c in &a.inject_clock {
        int("--inject-clock rank", crate::core::clock::ClockInjection::parse(c)?.rank, 0, MAX_RANK)?;
    }
    if let Some(f) = &a.fault {
        crate::rank::phases::Fault::parse(f)?;
    }
    Ok(())
}

/// Everything validated before MPI starts.
struct Plan {
    /// The workload; a model's split over the ranks is bound once the world size is known.
    spec: WorkloadSpec,
    model: Option<ModelRequest>,
    delay: Option<DelayInjection>,
    /// `--inject-repeat`: runs of every group-0 all-reduce (absent: one).
    repeat: Option<u32>,
    clock_injections: Vec<ClockInjection>,
    fault: Option<Fault>,
    backend: BackendKind,
    backend_note: Option<String>,
}

/// World rank from the launcher's environment, before MPI is initialised
/// (used only to print an argument error once rather than once per rank).
fn launcher_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"].iter().find_map(|k| std::env::var(k).ok()?.parse().ok())
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
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"].iter().find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Print the error that ends this process. The lead process prints at once,
/// and so does any rank once MPI has started: by then an error may be this
/// rank's alone (a failed check, a lost peer), and it is tagged with the rank.
/// An error before MPI starts is every rank's (a bad argument): another rank
/// then waits first ([`let_the_lead_print_first`]), so that the lead prints it once and the
/// launcher, stopping the job when the lead exits, silences the copies; it
/// still prints if the lead never did. Printing only on the lead lost
/// messages both ways: the launcher could kill the lead before it printed,
/// and another rank's own error was never shown.
pub fn print_fatal_error(message: &str) {
    match launcher_rank() {
        None | Some(0) => write_line_stderr(&format!("commcanary: error: {message}")),
        Some(rank) => {
            if !mpi::environment::is_initialized() {
                let_the_lead_print_first();
            }
            write_line_stderr(&format!("commcanary: error (rank {rank}): {message}"));
        }
    }
}

/// How long a non-lead rank waits before printing its fatal error.
const ERROR_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// On an error every rank met before MPI started (a bad argument): a rank
/// other than the lead waits [`ERROR_GRACE`], so that the lead prints the
/// error once and the launcher, stopping the job when the lead exits,
/// silences the copies. The lead returns at once.
pub fn let_the_lead_print_first() {
    if !is_lead_process() {
        std::thread::sleep(ERROR_GRACE);
    }
}

/// Whether this process should print job-wide messages.
pub fn is_lead_process() -> bool {
    launcher_rank().unwrap_or(0) == 0
}

fn plan(args: &RankOptions) -> Result<Plan> {
    let (backend, backend_note) = args.backend.resolve()?;
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
        sizes_bytes: crate::core::units::parse_size_list(args.sizes.as_deref().unwrap_or("64KiB,128KiB,256KiB"))?,
        isolated_sizes_bytes: match (&args.min_bytes, &args.max_bytes) {
            (Some(lo), Some(hi)) => {
                crate::core::workload::size_sweep(crate::core::units::parse_bytes(lo)?, crate::core::units::parse_bytes(hi)?, args.step_factor)?
            }
            _ => Vec::new(),
        },
        graph: args.graph,
        comm_stream: args.comm_stream,
        gemm,
        iters: args.iters,
        warmup_iters: args.warmup_iters,
        check: args.check,
        fill_residual: args.fill_residual,
        membound_bytes: crate::core::units::parse_bytes(&args.membound_bytes)?,
        isolated_collective: (args.collective != crate::core::workload::SweepKind::AllReduce).then_some(args.collective),
        isolated_op: args.op,
        dtype: args.dtype.unwrap_or(if shape.is_some() { Dtype::Bf16 } else { Dtype::F32 }),
        gemm_dtype: Some(gemm_dtype),
        gemm_accumulate_dtype: Some(gemm_accumulate_dtype),
        model: None,
    };
    spec.validate()?;
    sweep::check_options(&spec, backend, args.op.is_some())?;
    if let Some(j) = &args.json {
        if !spec.phases.contains(&crate::core::workload::Phase::Isolated) {
            crate::refuse!(crate::core::refusal::Code::BadArgument, "-J/--json writes the isolated sweep's table: add isolated to --phases");
        }
        if j.exists() {
            crate::refuse!(crate::core::refusal::Code::AlreadyExists, "-J {}: the file already exists; CommCanary never overwrites a record", j.display());
        }
    }
    if let Some(world) = launcher_world_size() {
        // refuse a sweep that cannot run over this many ranks before MPI starts
        sweep::check_world(&spec, world)?;
    }
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
    let clock_injections: Vec<ClockInjection> = args.inject_clock.iter().map(|s| ClockInjection::parse(s)).collect::<Result<_>>()?;
    if let Some(world) = launcher_world_size() {
        // a rank outside the job is refused before MPI starts, with a code
        let named = delay.iter().map(|d| ("--inject-delay", d.rank)).chain(clock_injections.iter().map(|c| ("--inject-clock", c.rank)));
        if let Some((flag, r)) = named.into_iter().find(|(_, r)| *r >= world) {
            crate::refuse!(
                crate::core::refusal::Code::OutOfRange,
                "{flag} names rank {r}, outside this job's ranks 0 to {} (a world of {world})",
                world.saturating_sub(1)
            );
        }
    }
    let fault = args.fault.as_deref().map(Fault::parse).transpose()?;
    if args.inject_repeat.is_some_and(|n| n > 1) && backend != BackendKind::Cpu {
        // the cuda backend times each NCCL call on device events, one per recorded collective
        crate::refuse!(
            crate::core::refusal::Code::BadArgument,
            "--inject-repeat: the cpu backend only (the cuda backend times one NCCL call per recorded collective)"
        );
    }
    if args.graph && backend != BackendKind::Cuda {
        bail!("--graph needs the cuda backend (CUDA graphs)");
    }
    if backend == BackendKind::Cuda && args.nccl_lib.components().count() > 1 && !args.nccl_lib.exists() {
        bail!("--nccl-lib {}: no such file", args.nccl_lib.display());
    }
    if let Some(id) = &args.run_id {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            crate::refuse!(crate::core::refusal::Code::BadArgument, "--run-id {id:?}: use letters, digits, '.', '_' and '-' only");
        }
        // `.` and `..` name the output directory itself or its parent, not a new run directory
        if id.chars().all(|c| c == '.') {
            crate::refuse!(crate::core::refusal::Code::BadArgument, "--run-id {id:?}: names a directory that is not a new run directory under --out");
        }
    }
    Ok(Plan { spec, model, delay, repeat: args.inject_repeat.filter(|&n| n > 1), clock_injections, fault, backend, backend_note })
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
fn collect_tuning(out: &std::path::Path, run_dir: &std::path::Path, rank: u32, events: &[(u64, u64)]) -> Result<crate::evidence::tuning::TuningCapture> {
    let pid = std::process::id();
    let dir = nccl_debug_dir(out);
    let suffix = format!(".{pid}.log");
    let found = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&suffix)));
    let source = "NCCL_DEBUG_SUBSYS=TUNING log of this process".to_string();
    let Some(path) = found else {
        return Ok(crate::evidence::tuning::TuningCapture {
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
    crate::core::fsutil::write_new_atomic(&run_dir.join(&kept), &bytes)?;
    let _ = std::fs::remove_file(&path);
    let (lines, unrecognised) = crate::evidence::tuning::parse_log(&String::from_utf8_lossy(&bytes));
    let (choices, unavailable) = if lines.is_empty() {
        (Vec::new(), Some("NCCL printed no per-collective tuning lines on this rank (it prints them on rank 0 only)".to_string()))
    } else {
        match crate::evidence::tuning::attach(&lines, events) {
            Ok(c) => (c, None),
            Err(why) => (Vec::new(), Some(why)),
        }
    };
    Ok(crate::evidence::tuning::TuningCapture {
        source,
        log_sha256: Some(crate::core::fsutil::sha256_hex(&bytes)),
        log_file: Some(kept),
        unrecognised_lines: unrecognised as u64,
        unavailable,
        choices,
    })
}

/// Entry point of `commcanary rank`.
pub fn run(args: RankOptions) -> Result<()> {
    check_ranges(&args).map_err(crate::core::refusal::or_code(crate::core::refusal::Code::BadArgument))?;
    let plan = plan(&args).map_err(crate::core::refusal::or_code(crate::core::refusal::Code::BadArgument))?;
    if args.nccl_tuning {
        if plan.backend != BackendKind::Cuda {
            crate::refuse!(crate::core::refusal::Code::BadArgument, "--nccl-tuning needs the cuda backend (NCCL's tuner is what it records)");
        }
        request_nccl_tuning_log(&args.out)?;
    }
    let t_before_init = crate::core::clock::monotonic_raw_ns();
    let universe = mpi::initialize().context("MPI is already initialised or could not be initialised")?;
    let mpi_init_ns = crate::core::clock::monotonic_raw_ns() - t_before_init;
    let world = universe.world();
    end_job_on_error(&world, "commcanary", || run_rank(&args, plan, &world, mpi_init_ns))
}

/// Run `body` with MPI up: an error is printed by the rank that met it, as
/// `PREFIX rank N: error: …`, and ends the job (MPI_Abort, exit 2).
/// Returning it instead would finalize MPI while a peer may sit in a
/// collective, and the message might never appear.
pub fn end_job_on_error(world: &SimpleCommunicator, prefix: &str, body: impl FnOnce() -> Result<()>) -> Result<()> {
    if let Err(e) = body() {
        write_line_stderr(&format!("{prefix} rank {}: error: {e:#}", world.rank()));
        world.abort(2);
    }
    Ok(())
}

fn broadcast_run_dir(world: &SimpleCommunicator, args: &RankOptions) -> Result<(String, PathBuf)> {
    let mut mine = None;
    if world.rank() == 0 {
        let res: Result<String> = (|| {
            let id = args.run_id.clone().unwrap_or_else(crate::evidence::run::new_run_id);
            std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
            let dir = args.out.join(&id);
            if let Err(e) = std::fs::create_dir(&dir) {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    crate::refuse!(crate::core::refusal::Code::AlreadyExists, "run directory {} exists (a run is never overwritten)", dir.display());
                }
                return Err(anyhow::Error::new(e).context(format!("creating run directory {} (a run is never overwritten)", dir.display())));
            }
            Ok(id)
        })();
        // '+' and the run id, or '!' and why rank 0 could not make it
        mine = Some(match res {
            Ok(id) => format!("+{id}"),
            Err(e) => format!("!{e:#}"),
        });
    }
    let limit = std::time::Duration::from_secs_f64(args.collective_timeout_s);
    let text =
        broadcast_text(world, mine.as_deref(), limit, Op { what: "broadcast of the run directory", phase: "start-up", peer: Some(0) })?.unwrap_or_default();
    match text.strip_prefix('+') {
        Some(id) => Ok((id.to_string(), args.out.join(id))),
        None => bail!("rank 0 could not prepare the output directory: {}", text.strip_prefix('!').unwrap_or(&text)),
    }
}

/// Rank 0's `text` (cut to 255 bytes) on every rank, within `limit`; `None`
/// where rank 0 passed none or an empty one.
fn broadcast_text(world: &SimpleCommunicator, text: Option<&str>, limit: std::time::Duration, op: Op) -> Result<Option<String>> {
    let mut buf = [0u8; 256];
    if world.rank() == 0 {
        if let Some(t) = text {
            let n = t.len().min(buf.len() - 1);
            buf[..n].copy_from_slice(&t.as_bytes()[..n]);
        }
    }
    crate::backend::mpi_deadline::broadcast(world, 0, &mut buf, limit, op)?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok((end > 0).then(|| String::from_utf8_lossy(&buf[..end]).into_owned()))
}

/// Who calibrates against whom, from every rank's host name and kernel
/// clock id (gathered once, before the start window).
struct ClockTopology {
    sync: ClockSync,
    /// Every rank's node leader (`clock::node_leaders`).
    leader_of: Vec<u32>,
    /// Every rank's kernel clock id (`identity::kernel_clock_id`).
    kernel_ids: Vec<Option<String>>,
}

impl ClockTopology {
    /// The rank `rank` ping-pongs: its leader where that is neither itself
    /// nor rank 0 under hierarchical calibration, else rank 0.
    fn peer_of(&self, rank: u32) -> u32 {
        match self.sync {
            ClockSync::Hierarchical if self.leader_of[rank as usize] != rank => self.leader_of[rank as usize],
            _ => 0,
        }
    }
    /// The ranks that ping-pong `rank` in a window, in order.
    fn served_by(&self, rank: u32) -> Vec<u32> {
        (1..self.leader_of.len() as u32).filter(|&r| r != rank && self.peer_of(r) == rank).collect()
    }
    fn path_of(&self, rank: u32) -> ClockPath {
        match self.peer_of(rank) {
            _ if rank == 0 => ClockPath::Reference,
            0 => ClockPath::Direct,
            _ => ClockPath::ViaLeader,
        }
    }
}

/// Bytes per rank in the exchange of host names and kernel clock ids: each
/// is cut to 127 bytes (a Linux host name has at most 64).
const CLOCK_ID_SLOT: usize = 256;

/// Every rank's recorded host name and kernel clock id, in rank order, on
/// every rank (a gather at rank 0, then a broadcast).
fn exchange_clock_ids(world: &SimpleCommunicator, host: &str, kernel: Option<&str>, limit: std::time::Duration) -> Result<Vec<(String, Option<String>)>> {
    let half = CLOCK_ID_SLOT / 2;
    let mut mine = [0u8; CLOCK_ID_SLOT];
    for (at, text) in [(0, host), (half, kernel.unwrap_or(""))] {
        let n = text.len().min(half - 1);
        mine[at..at + n].copy_from_slice(&text.as_bytes()[..n]);
    }
    let phase = "clock calibration, topology";
    let gathered = crate::backend::mpi_deadline::gather(world, 0, &mine, limit, Op { what: "gather of host names and kernel clock ids", phase, peer: None })?;
    let mut all = gathered.unwrap_or_else(|| vec![0u8; CLOCK_ID_SLOT * world.size() as usize]);
    crate::backend::mpi_deadline::broadcast(world, 0, &mut all, limit, Op { what: "broadcast of host names and kernel clock ids", phase, peer: Some(0) })?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    Ok(all
        .chunks(CLOCK_ID_SLOT)
        .map(|c| {
            let k = text(&c[half..]);
            (text(&c[..half]), (!k.is_empty()).then_some(k))
        })
        .collect())
}

/// Exchange `n` ping-pongs with `peer` on `tag`: the samples, on this rank's clock.
fn ping(world: &SimpleCommunicator, clock: &RankClock, peer: u32, tag: i32, n: u32, limit: std::time::Duration, phase: &str) -> Result<Vec<PingSample>> {
    let op = Op { what: "ping-pong", phase, peer: Some(peer) };
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t_send = clock.now_ns();
        crate::backend::mpi_deadline::send_u64(world, peer, tag, t_send, limit, op)?;
        let t_ref = crate::backend::mpi_deadline::recv_u64(world, peer, tag, limit, op)?;
        let t_recv = clock.now_ns();
        samples.push(PingSample { t_send_local_ns: t_send, t_ref_ns: t_ref, t_recv_local_ns: t_recv });
    }
    Ok(samples)
}

/// Answer `n` ping-pongs of each of `ranks` on `tag`, one rank at a time.
fn answer(world: &SimpleCommunicator, clock: &RankClock, ranks: &[u32], tag: i32, n: u32, limit: std::time::Duration, phase: &str) -> Result<()> {
    for &r in ranks {
        let op = Op { what: "ping-pong", phase, peer: Some(r) };
        for _ in 0..n {
            let _ping = crate::backend::mpi_deadline::recv_u64(world, r, tag, limit, op)?;
            let t = clock.now_ns();
            crate::backend::mpi_deadline::send_u64(world, r, tag, t, limit, op)?;
        }
    }
    Ok(())
}

/// One calibration window, every wait bounded by `limit`. Flat: every rank
/// r > 0 exchanges `n` ping-pongs with rank 0, one rank at a time.
/// Hierarchical: first the node leaders with rank 0, one leader at a time;
/// then, on every node at once, each other rank with its leader, one rank at
/// a time (rank 0's node: with rank 0). Returns this rank's samples against
/// its peer ([`ClockTopology::peer_of`]; none on rank 0) and the window's
/// wall time on this rank (`CLOCK_MONOTONIC`, ns) from the end of the
/// opening barrier to the end of the closing one.
fn clock_window(
    world: &SimpleCommunicator,
    clock: &RankClock,
    n: u32,
    limit: std::time::Duration,
    window: &str,
    topo: &ClockTopology,
) -> Result<(Vec<PingSample>, u64)> {
    let rank = world.rank() as u32;
    let phase = format!("clock calibration, {window} window");
    crate::backend::mpi_deadline::barrier(world, limit, Op { what: "barrier before the ping-pongs", phase: &phase, peer: None })?;
    let t0 = crate::core::clock::monotonic_raw_ns();
    if window == "start" {
        crate::backend::mpi_deadline::test_stop_point("clock", rank);
    }
    let mut samples = Vec::new();
    let peer = topo.peer_of(rank);
    match topo.sync {
        ClockSync::Flat => {
            if rank == 0 {
                answer(world, clock, &topo.served_by(0), CLOCK_TAG, n, limit, &phase)?;
            } else {
                samples = ping(world, clock, 0, CLOCK_TAG, n, limit, &phase)?;
            }
        }
        ClockSync::Hierarchical => {
            let leader = topo.leader_of[rank as usize] == rank;
            // stage 1: node leaders against rank 0, one at a time
            if rank == 0 {
                let leaders: Vec<u32> = topo.served_by(0).into_iter().filter(|&r| topo.leader_of[r as usize] == r).collect();
                answer(world, clock, &leaders, CLOCK_TAG, n, limit, &phase)?;
            } else if leader {
                samples = ping(world, clock, 0, CLOCK_TAG, n, limit, &phase)?;
            }
            // stage 2: every other rank against its leader, the nodes side by side
            if leader {
                let locals: Vec<u32> = (1..topo.leader_of.len() as u32).filter(|&r| r != rank && topo.leader_of[r as usize] == rank).collect();
                answer(world, clock, &locals, CLOCK_TAG_LOCAL, n, limit, &phase)?;
            } else {
                samples = ping(world, clock, peer, CLOCK_TAG_LOCAL, n, limit, &phase)?;
            }
        }
    }
    crate::backend::mpi_deadline::barrier(world, limit, Op { what: "barrier after the ping-pongs", phase: &phase, peer: None })?;
    Ok((samples, crate::core::clock::monotonic_raw_ns() - t0))
}

/// Why this rank cannot take `peer`'s kernel clock for its own (another boot
/// id or time namespace, a synthetic injection, `--clock pingpong-only`), or
/// `None` where it may, given the samples agree with one clock.
fn not_same_kernel(mode: ClockMode, injections: &[ClockInjection], rank: u32, peer: u32, topo: &ClockTopology) -> Option<String> {
    let whose = if peer == 0 { "rank 0".to_string() } else { format!("its leader, rank {peer}") };
    if mode == ClockMode::PingpongOnly {
        return Some("--clock pingpong-only".to_string());
    }
    if injections.iter().any(|i| i.rank == peer || i.rank == rank) {
        return Some(if peer == 0 {
            "a synthetic clock injection on this rank or rank 0".to_string()
        } else {
            format!("a synthetic clock injection on this rank or {whose}")
        });
    }
    match (&topo.kernel_ids[rank as usize], &topo.kernel_ids[peer as usize]) {
        (Some(a), Some(b)) if a == b => None,
        (Some(a), Some(b)) => Some(format!("another kernel or time namespace ({a} against {whose}'s {b})")),
        _ => Some("a boot id or time namespace that could not be read".to_string()),
    }
}

/// Largest serialized model a leader hands to a rank of its node.
const MAX_HANDOFF_BYTES: usize = 1 << 16;

/// A rank's model against rank 0 through its leader: its own fit against
/// the leader composed with the leader's against rank 0 (`clock::compose`).
/// Rank 0's kernel clock where both legs are shared kernel clocks; else the
/// composed models, with the composed ping-pong fits beside them where they
/// differ (a leg that was a shared clock) and why the result is not rank 0's clock.
fn compose_via_leader(own: &RankClockFit, lead: &RankClockFit, leader: u32) -> Result<RankClockFit> {
    let measured = compose(&own.pingpong.unwrap_or(own.model), &lead.pingpong.unwrap_or(lead.model)).context("composing the clock model through the leader")?;
    let model = compose(&own.model, &lead.model).context("composing the clock model through the leader")?;
    let why: Vec<String> = [
        own.refused.as_ref().map(|w| format!("against leader rank {leader}: {w}")),
        lead.refused.as_ref().map(|w| format!("leader rank {leader} against rank 0: {w}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(RankClockFit { pingpong: (model != measured).then_some(measured), model, refused: (!why.is_empty()).then(|| why.join("; ")) })
}

fn run_rank(args: &RankOptions, mut plan: Plan, world: &SimpleCommunicator, mpi_init_ns: u64) -> Result<()> {
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    if let Some(req) = &plan.model {
        // tensor-parallel degree = the rank count
        plan.spec.bind_model(req, size)?;
    }
    sweep::check_world(&plan.spec, size)?;
    if plan.spec.dtype == Dtype::Bf16 && plan.spec.check > 0 && size > crate::backend::BF16_EXACT_MAX_WORLD {
        bail!(
            "--check with bf16 all-reduces: the check's sums are exact in bf16 up to {} ranks and this job has {size}; pass --check 0 or --dtype f32",
            crate::backend::BF16_EXACT_MAX_WORLD
        );
    }
    let limit = std::time::Duration::from_secs_f64(args.collective_timeout_s);
    // MPI_Comm_split_type has no nonblocking form: every rank must have arrived first
    crate::backend::mpi_deadline::barrier(world, limit, Op { what: "barrier before the node split", phase: "start-up", peer: None })?;
    let local = world.split_shared(world.rank());
    let (local_rank, local_size) = (local.rank() as u32, local.size() as u32);
    let started_unix_ms = crate::core::clock::unix_ms();
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
    let identity = crate::core::identity::capture(rank, size, local_rank, local_size);
    let file_trace = match args.trace.as_deref() {
        None => None,
        Some(p) if crate::evidence::trace::is_comm_trace(p)? => {
            Some(crate::evidence::trace::from_comm_trace(p, rank, size, (plan.spec.warmup_tokens, plan.spec.tokens), args.trace_allreduce_only)?)
        }
        Some(p) => {
            if args.trace_allreduce_only {
                bail!("--trace-allreduce-only applies to an imported trace (commcanary import); {} is a joined trace", p.display());
            }
            Some(crate::evidence::trace::from_joined_file(p, rank)?)
        }
    };
    if let (Some(t), Some(p)) = (&file_trace, &args.trace) {
        // the backend's buffers are of the run's dtype: the world all-reduces must be of it (the trace executor's are of their own)
        if let Some(e) = t.entries.iter().find(|e| e.op.is_none() && e.dtype != plan.spec.dtype) {
            bail!(
                "--trace {}: its collectives are {}, this run's are {} (pass --dtype {})",
                p.display(),
                e.dtype.name(),
                plan.spec.dtype.name(),
                e.dtype.name()
            );
        }
    }
    // the run directory is made only once the trace is known good: a refusal leaves nothing behind
    let (run_id, dir) = broadcast_run_dir(world, args)?;
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
    // the backend's communicator duplicate (MPI_Comm_dup) blocks: every rank must have arrived first
    crate::backend::mpi_deadline::barrier(world, limit, Op { what: "barrier before backend initialisation", phase: "start-up", peer: None })?;
    let t0 = clock.now_ns();
    let bplan = crate::backend::BackendPlan::for_spec_and_trace(&plan.spec, file_trace.as_ref());
    match plan.backend {
        BackendKind::Cpu => {
            let mut b = CpuBackend::new(world, &bplan)?.with_timeout(std::time::Duration::from_secs_f64(args.collective_timeout_s));
            finish_rank(cx, file_trace, &mut b, clock.now_ns() - t0)
        }
        BackendKind::Cuda => {
            let mut b = crate::backend::cuda::CudaBackend::new(
                world,
                local_rank,
                &args.nccl_lib,
                &bplan,
                clock.clone(),
                crate::backend::BackendPlan::device_events_per_pass(&plan.spec, file_trace.as_ref()),
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
    args: &'a RankOptions,
    plan: &'a Plan,
    world: &'a SimpleCommunicator,
    clock: RankClock,
    identity: crate::core::identity::EnvIdentity,
    run_id: String,
    dir: PathBuf,
    started_unix_ms: u64,
    local_rank: u32,
    local_size: u32,
    cold_start_mpi_ns: u64,
}

/// Clock windows, phases, shard and run record, on any backend.
fn finish_rank<B: Backend>(cx: RankContext<'_>, file_trace: Option<crate::evidence::trace::SourceTrace>, backend: &mut B, backend_init_ns: u64) -> Result<()> {
    let RankContext { args, plan, world, clock, identity, run_id, dir, started_unix_ms, local_rank, local_size, cold_start_mpi_ns } = cx;
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    let identity_sha256 = identity.digest();

    let limit = std::time::Duration::from_secs_f64(args.collective_timeout_s);
    let topo = match args.clock {
        ClockMode::Pingpong | ClockMode::PingpongOnly => {
            let ids = exchange_clock_ids(world, &identity.host, crate::core::identity::kernel_clock_id().as_deref(), limit)?;
            let hosts: Vec<&str> = ids.iter().map(|(h, _)| h.as_str()).collect();
            let leader_of = node_leaders(&hosts);
            let nodes = leader_of.iter().enumerate().filter(|(r, l)| **l as usize == *r).count();
            Some(ClockTopology { sync: args.clock_sync.resolve(nodes), leader_of, kernel_ids: ids.into_iter().map(|(_, k)| k).collect() })
        }
        ClockMode::None => None,
    };
    let (start_samples, start_wall_ns) = match &topo {
        Some(t) => clock_window(world, &clock, args.clock_samples, limit, "start", t)?,
        None => (Vec::new(), 0),
    };

    // group 0 is the world; an imported trace's other collectives run on its own groups
    let mut groups = vec![ProcessGroup { id: 0, members: (0..size).collect(), name: None }];
    groups.extend(file_trace.as_ref().and_then(|t| t.ops.as_ref()).map(|o| o.groups.clone()).unwrap_or_default());
    // the isolated sweep of another kind runs on a world group of its own (the trace executor's)
    let sweep_group = (plan.spec.phases.contains(&crate::core::workload::Phase::Isolated) && plan.spec.sweep_uses_executor()).then(|| {
        let id = groups.iter().map(|g| g.id).max().unwrap_or(0) + 1;
        groups.push(ProcessGroup { id, members: (0..size).collect(), name: Some(sweep::SWEEP_GROUP_NAME.into()) });
        id
    });
    let mut runner = Runner::new(backend, &clock, world, &plan.spec, plan.delay, plan.fault, file_trace, !args.quiet)
        .with_barrier_timeout(limit)
        .with_repeat(plan.repeat.unwrap_or(1));
    if let Some(id) = sweep_group {
        runner = runner.with_sweep_group(id);
    }
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

    let clock_record = match &topo {
        None => None,
        Some(topo) => {
            let (end_samples, end_wall_ns) = clock_window(world, &clock, args.clock_samples, limit, "end", topo)?;
            let t_fit = crate::core::clock::monotonic_raw_ns();
            let kernel_clock_id = topo.kernel_ids[rank as usize].clone();
            let peer = topo.peer_of(rank);
            let path = topo.path_of(rank);
            let hierarchical = topo.sync == ClockSync::Hierarchical;
            let phase = "clock calibration, hand-off of the leaders' models";
            // against the peer: rank 0 (direct) or the leader (via_leader)
            let own = if rank == 0 {
                RankClockFit { model: ClockModel::reference(), pingpong: None, refused: None }
            } else {
                fit_rank_model(&start_samples, &end_samples, not_same_kernel(args.clock, &plan.clock_injections, rank, peer, topo))
                    .context("fitting the clock model")?
            };
            // a leader other than rank 0 hands its model to the ranks of its node
            if hierarchical && rank != 0 && topo.leader_of[rank as usize] == rank {
                let bytes = serde_json::to_vec(&own).context("encoding this leader's clock model")?;
                for r in topo.served_by(rank) {
                    crate::backend::mpi_deadline::send_bytes(
                        world,
                        r,
                        CLOCK_TAG_HANDOFF,
                        &bytes,
                        limit,
                        Op { what: "send of the leader's clock model", phase, peer: Some(r) },
                    )?;
                }
            }
            let (fit, leader_fit, leader_model) = if path == ClockPath::ViaLeader {
                let bytes = crate::backend::mpi_deadline::recv_bytes(
                    world,
                    peer,
                    CLOCK_TAG_HANDOFF,
                    MAX_HANDOFF_BYTES,
                    limit,
                    Op { what: "receive of the leader's clock model", phase, peer: Some(peer) },
                )?;
                let lead: RankClockFit = serde_json::from_slice(&bytes).with_context(|| format!("decoding the clock model of leader rank {peer}"))?;
                (compose_via_leader(&own, &lead, peer)?, Some(own.model), Some(lead.model))
            } else {
                (own, None, None)
            };
            let handoff_ns = crate::core::clock::monotonic_raw_ns() - t_fit;
            Some(ClockRecord {
                start_samples,
                end_samples,
                model: fit.model,
                kernel_clock_id,
                pingpong_fit: fit.pingpong,
                shared_kernel_clock_refused: fit.refused,
                sync: Some(topo.sync),
                path: Some(path),
                leader: hierarchical.then_some(topo.leader_of[rank as usize]),
                leader_fit,
                leader_model,
                start_window_wall_ns: Some(start_wall_ns),
                end_window_wall_ns: Some(end_wall_ns + if hierarchical { handoff_ns } else { 0 }),
            })
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
        groups,
        workload: plan.spec.clone(),
        clock: clock_record,
        clock_injections: plan.clock_injections.clone(),
        clock_anchor_true_ns: clock.anchor_true_ns(),
        delay_injection: plan.delay,
        repeat_injection: plan.repeat,
        cold_start: ColdStart { mpi_init_ns: Some(cold_start_mpi_ns), backend_init_ns },
        unmeasured: backend
            .unmeasured()
            .into_iter()
            .chain(plan.spec.graph.then(|| crate::evidence::shard::Unmeasured {
                field: "collectives (graph mode)".into(),
                reason: "blocking and async ran as one CUDA graph per token: per-collective and per-GEMM times are not measured and no collective events are recorded; token start and end are events recorded on the compute stream around each graph launch".into(),
            }))
            .chain(sweep_unmeasured(&plan.spec, backend.kind()))
            .collect(),
        phases: phase_runs,
        started_unix_ms,
        tuning,
        checks,
        synthetic: None,
    };
    let shard = Shard { header, body };
    let written = shard.write_new(&dir)?;
    let digest = written.sha256;

    // gather digests and hosts on rank 0
    let mut mine = [0u8; 32 + 8 + 128];
    mine[..32].copy_from_slice(&hex::decode(&digest).expect("hex"));
    mine[32..40].copy_from_slice(&written.size_bytes.to_le_bytes());
    let host = shard.header.host.as_bytes();
    mine[40..40 + host.len().min(127)].copy_from_slice(&host[..host.len().min(127)]);
    crate::backend::mpi_deadline::test_stop_point("gather", rank);
    let gathered = crate::backend::mpi_deadline::gather(
        world,
        0,
        &mine[..],
        limit,
        Op { what: "gather of the shard digests", phase: "after the shards are written", peer: None },
    )?;
    if let Some(all) = gathered {
        let shards: Vec<ShardRef> = all
            .chunks(mine.len())
            .enumerate()
            .map(|(r, c)| {
                let hend = c[40..].iter().position(|&b| b == 0).map(|p| 40 + p).unwrap_or(c.len());
                ShardRef {
                    rank: r as u32,
                    file: crate::evidence::shard::shard_file_name(r as u32),
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
            finished_unix_ms: crate::core::clock::unix_ms(),
        };
        crate::evidence::run::write_run_record(&dir, &record)?;
        println!("run {run_id}: {size} shards and run.json written to {}", dir.display());
        if !args.quiet {
            eprintln!("commcanary: verify and summarize with: commcanary join {}", dir.display());
        }
    }
    // A wrong result recorded by the isolated phase fails the rank only now,
    // once rank 0 has written run.json, so the evidence is complete on disk.
    crate::backend::mpi_deadline::barrier(world, limit, Op { what: "final barrier", phase: "after run.json is written", peer: None })?;
    // As nccl-tests ends with its table: the isolated phase's per size, from
    // the verified run (a join refusal is printed, and the run kept as it is).
    if rank == 0 && plan.spec.phases.contains(&crate::core::workload::Phase::Isolated) && (!args.quiet || args.json.is_some()) {
        match crate::evidence::join::join_dir(&dir) {
            Ok(j) => {
                let rows = crate::evidence::join::isolated_sizes(&j);
                if !args.quiet {
                    print!("{}", crate::evidence::join::render_isolated(&rows));
                }
                if let Some(path) = &args.json {
                    crate::core::fsutil::write_json_new(path, &sweep::report(&j, &rows))?;
                    if !args.quiet {
                        println!("# Writing JSON output to {}", path.display());
                    }
                }
            }
            Err(e) if args.json.is_some() => return Err(e.context(format!("-J: joining {} for the sweep's table", dir.display()))),
            Err(e) => eprintln!("commcanary: no per-size table: join {}: {e:#}", dir.display()),
        }
    }
    if let Some(c) = shard.header.checks.iter().find(|c| c.wrong_elements > 0) {
        bail!(
            "result check failed on rank {rank}, phase {}, group {} seq {} ({} bytes): {} wrong elements, first: {}; the run is kept in {} and must not be ranked",
            c.phase, c.group, c.seq, c.bytes, c.wrong_elements, c.first_wrong.as_deref().unwrap_or("?"), dir.display()
        );
    }
    Ok(())
}

/// What the isolated sweep of another kind does not measure, where it runs:
/// device intervals on GPUs (each iteration is timed on the host, the NCCL
/// call to the end of a stream synchronization), and bf16 reductions on the
/// cpu backend, which MPI reduces in f32 (twice the bytes on the wire).
fn sweep_unmeasured(spec: &crate::core::workload::WorkloadSpec, backend: BackendKind) -> Vec<crate::evidence::shard::Unmeasured> {
    let mut v = Vec::new();
    if !spec.phases.contains(&crate::core::workload::Phase::Isolated) || !spec.sweep_uses_executor() {
        return v;
    }
    let kind = spec.sweep_kind();
    if backend == BackendKind::Cuda {
        v.push(crate::evidence::shard::Unmeasured {
            field: format!("isolated {kind}: device_start_ns, device_end_ns"),
            reason: "the sweep runs through replay-trace's NCCL executor: each iteration is timed on the host from the NCCL call to the end of a stream synchronization, not by device events between back-to-back launches as nccl-tests times its loop".into(),
        });
    }
    if backend == BackendKind::Cpu && kind.reduces() && spec.dtype == Dtype::Bf16 {
        v.push(crate::evidence::shard::Unmeasured {
            field: format!("isolated {kind}: bf16 wire bytes"),
            reason: "MPI has no bf16 type: the cpu executor reduces bf16 as f32 (twice the bytes on the wire) and rounds back; sizes and bandwidths are bf16's"
                .into(),
        });
    }
    v
}

//! `rank`'s arguments checked before MPI starts, so that a bad flag is one
//! clear line: [`check_ranges`] holds every number to its documented range,
//! and `plan` resolves the backend and builds the [`Plan`] (workload spec,
//! model request, injections, fault). Refuses contradictory options, a sweep
//! or model that cannot run over the launcher's world, and an unsafe run id.
use super::fatal::launcher_world_size;
use super::phases::Fault;
use super::{sweep, RankOptions};
use crate::core::clock::ClockInjection;
use crate::core::refusal::Code;
use crate::core::units;
use crate::core::workload::{
    parse_phases, size_sweep, DelayInjection, GemmShape, ModelRequest, ModelShape, Phase, SweepKind, WorkloadSpec,
};
use crate::evidence::shard::{BackendKind, Dtype};
use anyhow::{bail, Result};

/// Every number of `rank`'s options, against the ranges documented in
/// [`crate::core::ranges`].
pub(crate) fn check_ranges(a: &RankOptions) -> Result<()> {
    use crate::core::ranges::{
        int, out, positive, size, sizes, MAX_GEMM_DIM, MAX_INJECT_REPEAT, MAX_MESSAGE_BYTES, MAX_PHASE_COLLECTIVES,
        MAX_RANK, MAX_TOKENS_IN_FLIGHT,
    };
    int("--tokens", a.tokens, 1, 1_000_000)?;
    int("--warmup-tokens", a.warmup_tokens, 0, 100_000)?;
    if let Some(l) = a.layers {
        int("--layers", l, 1, 10_000)?;
    }
    // a model's own layer count (when --layers is not given) is checked when the model is bound
    // (WorkloadSpec::bind_model)
    let per_phase = (a.tokens as u64 + a.warmup_tokens as u64) * a.layers.unwrap_or(1) as u64;
    int("(--tokens + --warmup-tokens) x --layers", per_phase, 1, MAX_PHASE_COLLECTIVES)?;
    if let Some(d) = &a.model_dims {
        let s = ModelShape::parse_dims(d)?;
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
        let (lo, hi) = (units::parse_bytes(lo)?, units::parse_bytes(hi)?);
        size("-b/--min-bytes", lo)?;
        size("-e/--max-bytes", hi)?;
        if hi < lo {
            return Err(out("-e/--max-bytes", hi, &format!("at least -b/--min-bytes {lo}")));
        }
    }
    int("--membound-bytes", units::parse_bytes(&a.membound_bytes)?, 4, MAX_MESSAGE_BYTES)?;
    if let Some(g) = &a.gemm {
        let s: GemmShape = g.parse()?;
        for (d, v) in [("M", s.m), ("N", s.n), ("K", s.k)] {
            int(&format!("--gemm {d}"), v, 1, MAX_GEMM_DIM)?;
        }
    }
    int("--clock-samples", a.clock_samples, 1, 100_000)?;
    positive("--collective-timeout-s", a.collective_timeout_s, 86_400.0)?;
    if let Some(g) = a.gpu {
        int("--gpu", g, 0, 1023)?;
    }
    parse_phases(&a.phases)?;
    if let Some(d) = &a.inject_delay {
        let d = DelayInjection::parse(d)?;
        int("--inject-delay rank", d.rank, 0, MAX_RANK)?;
    }
    if let Some(n) = a.inject_repeat {
        int("--inject-repeat", n, 1, MAX_INJECT_REPEAT)?;
    }
    for c in &a.inject_clock {
        int("--inject-clock rank", ClockInjection::parse(c)?.rank, 0, MAX_RANK)?;
    }
    if let Some(f) = &a.fault {
        Fault::parse(f)?;
    }
    Ok(())
}

/// Everything validated before MPI starts.
pub(super) struct Plan {
    /// The workload; a model's split over the ranks is bound once the world size is known.
    pub(super) spec: WorkloadSpec,
    pub(super) model: Option<ModelRequest>,
    pub(super) delay: Option<DelayInjection>,
    /// `--inject-repeat`: runs of every group-0 all-reduce (absent: one).
    pub(super) repeat: Option<u32>,
    pub(super) clock_injections: Vec<ClockInjection>,
    pub(super) fault: Option<Fault>,
    pub(super) backend: BackendKind,
    pub(super) backend_note: Option<String>,
}

pub(super) fn plan(args: &RankOptions) -> Result<Plan> {
    let (backend, backend_note) = args.backend.resolve()?;
    plan_for(args, backend, backend_note, launcher_world_size(), Where::Here)
}

/// Everything `rank` refuses before MPI starts, for a job of `world` ranks on
/// `backend`, judged where the job is planned rather than where it runs (no
/// device probe, no look at files on the compute host): the check `campaign
/// plan` runs each configuration's rank arguments through.
pub(crate) fn check_before_launch(args: &RankOptions, backend: BackendKind, world: u32) -> Result<()> {
    check_ranges(args)?;
    plan_for(args, backend, None, Some(world), Where::Planned).map(|_| ())
}

/// Whether the host-local facts (an existing `-J` file, an `--nccl-lib` path)
/// are the run's own host, or one the job is only planned from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Where {
    Here,
    Planned,
}

fn plan_for(
    args: &RankOptions,
    backend: BackendKind,
    backend_note: Option<String>,
    world: Option<u32>,
    at: Where,
) -> Result<Plan> {
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
    if args.graph && shape.is_none() && args.phases.split(',').any(|p| matches!(p.trim(), "blocking" | "async" | "all"))
    {
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
        sizes_bytes: units::parse_size_list(args.sizes.as_deref().unwrap_or("64KiB,128KiB,256KiB"))?,
        isolated_sizes_bytes: match (&args.min_bytes, &args.max_bytes) {
            (Some(lo), Some(hi)) => size_sweep(units::parse_bytes(lo)?, units::parse_bytes(hi)?, args.step_factor)?,
            _ => Vec::new(),
        },
        graph: args.graph,
        comm_stream: args.comm_stream,
        gemm,
        iters: args.iters,
        warmup_iters: args.warmup_iters,
        check: args.check,
        fill_residual: args.fill_residual,
        membound_bytes: units::parse_bytes(&args.membound_bytes)?,
        isolated_collective: (args.collective != SweepKind::default()).then_some(args.collective),
        isolated_op: args.op,
        dtype: args.dtype.unwrap_or(if shape.is_some() { Dtype::Bf16 } else { Dtype::F32 }),
        gemm_dtype: Some(gemm_dtype),
        gemm_accumulate_dtype: Some(gemm_accumulate_dtype),
        model: None,
    };
    spec.validate()?;
    super::phases::check_trace_phases(&spec, args.trace.is_some())?;
    sweep::check_options(&spec, backend, args.op.is_some())?;
    if let Some(j) = &args.json {
        if !spec.phases.contains(&Phase::Isolated) {
            crate::refuse!(Code::BadArgument, "-J/--json writes the isolated sweep's table: add isolated to --phases");
        }
        if at == Where::Here && j.exists() {
            crate::refuse!(
                Code::AlreadyExists,
                "-J {}: the file already exists; CommCanary never overwrites a record",
                j.display()
            );
        }
    }
    if let Some(world) = world {
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
    if let (Some(req), Some(world)) = (&model, world) {
        // refuse a shape that does not split over the ranks before MPI starts
        spec.clone().bind_model(req, world)?;
    }
    let delay = args.inject_delay.as_deref().map(DelayInjection::parse).transpose()?;
    let clock_injections: Vec<ClockInjection> =
        args.inject_clock.iter().map(|s| ClockInjection::parse(s)).collect::<Result<_>>()?;
    if let Some(world) = world {
        // a rank outside the job is refused before MPI starts, with a code
        let named = delay
            .iter()
            .map(|d| ("--inject-delay", d.rank))
            .chain(clock_injections.iter().map(|c| ("--inject-clock", c.rank)));
        if let Some((flag, r)) = named.into_iter().find(|(_, r)| *r >= world) {
            crate::refuse!(
                Code::OutOfRange,
                "{flag} names rank {r}, outside this job's ranks 0 to {} (a world of {world})",
                world.saturating_sub(1)
            );
        }
    }
    let fault = args.fault.as_deref().map(Fault::parse).transpose()?;
    if args.inject_repeat.is_some_and(|n| n > 1) && backend != BackendKind::Cpu {
        // the cuda backend times each NCCL call on device events, one per recorded collective
        crate::refuse!(
            Code::BadArgument,
            "--inject-repeat: the cpu backend only (the cuda backend times one NCCL call per recorded collective)"
        );
    }
    if args.graph && backend != BackendKind::Cuda {
        bail!("--graph needs the cuda backend (CUDA graphs)");
    }
    if at == Where::Here
        && backend == BackendKind::Cuda
        && args.nccl_lib.components().count() > 1
        && !args.nccl_lib.exists()
    {
        bail!("--nccl-lib {}: no such file", args.nccl_lib.display());
    }
    if let Some(id) = &args.run_id {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            crate::refuse!(Code::BadArgument, "--run-id {id:?}: use letters, digits, '.', '_' and '-' only");
        }
        // `.` and `..` name the output directory itself or its parent, not a new run directory
        if id.chars().all(|c| c == '.') {
            crate::refuse!(
                Code::BadArgument,
                "--run-id {id:?}: names a directory that is not a new run directory under --out"
            );
        }
    }
    Ok(Plan {
        spec,
        model,
        delay,
        repeat: args.inject_repeat.filter(|&n| n > 1),
        clock_injections,
        fault,
        backend,
        backend_note,
    })
}

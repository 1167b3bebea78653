//! What `validate` fixes before MPI starts: the arguments checked against
//! their ranges ([`check_ranges`]), then a [`Plan`] of backend, site, delay
//! control and settings (the reference's own, or this recording's defaults),
//! and the round's workload spec ([`workload_spec`]). Refuses an existing
//! `--out`, settings flags beside `--reference`, and a reference of another backend.
use super::reference::{self, Settings, Site};
use super::ValidateArgs;
use crate::core::refusal::Code;
use crate::core::units;
use crate::core::workload::{size_sweep, DelayInjection, GemmShape, ModelRequest, ModelShape, Phase, WorkloadSpec};
use crate::evidence::shard::{BackendKind, Dtype};
use anyhow::Result;

/// What is fixed before MPI starts.
pub(super) struct Plan {
    pub(super) backend: BackendKind,
    pub(super) settings: Settings,
    pub(super) reference: Option<reference::ReferenceSet>,
    pub(super) site: Site,
    pub(super) delay: Option<DelayInjection>,
}

/// `validate`'s numbers, checked before any work (its sweep and workload settings are rank's, with the
/// same ranges); the rows are in [`crate::core::ranges::RANGES`].
pub(crate) fn check_ranges(a: &ValidateArgs) -> Result<()> {
    use crate::core::ranges::{int, out as out_of_range, positive, size, MAX_RANK};
    int("--rounds", a.rounds, 2, 1000)?;
    let lo = a.min_bytes.as_deref().map(units::parse_bytes).transpose()?;
    let hi = a.max_bytes.as_deref().map(units::parse_bytes).transpose()?;
    if let Some(lo) = lo {
        size("--min-bytes", lo)?;
    }
    if let Some(hi) = hi {
        size("--max-bytes", hi)?;
        if let Some(lo) = lo.filter(|&lo| hi < lo) {
            return Err(out_of_range("--max-bytes", hi, &format!("at least --min-bytes {lo}")));
        }
    }
    for (what, v, lo, hi) in [
        ("--step-factor", a.step_factor, 2, 1024),
        ("--iters", a.iters.map(u64::from), 1, 1_000_000),
        ("--warmup-iters", a.warmup_iters.map(u64::from), 0, 100_000),
        ("--batch", a.batch.map(u64::from), 1, 65_536),
        ("--tokens", a.tokens.map(u64::from), 1, 1_000_000),
        ("--warmup-tokens", a.warmup_tokens.map(u64::from), 0, 100_000),
    ] {
        if let Some(v) = v {
            int(what, v, lo, hi)?;
        }
    }
    positive("--collective-timeout-s", a.collective_timeout_s, 86_400.0)?;
    if let Some(d) = &a.inject_delay {
        let d = DelayInjection::parse(d)?;
        int("--inject-delay rank", d.rank, 0, MAX_RANK)?;
    }
    Ok(())
}

pub(super) fn plan(a: &ValidateArgs) -> Result<Plan> {
    check_ranges(a)?;
    let (backend, _) = a.backend.resolve()?;
    let site = a.site.as_deref().map(Site::read).transpose()?.unwrap_or_default();
    let delay = a.inject_delay.as_deref().map(DelayInjection::parse).transpose()?;
    if let Some(out) = a.out.as_ref().filter(|o| o.exists()) {
        crate::refuse!(Code::AlreadyExists, "--out {}: already exists (evidence is never written over)", out.display());
    }
    let given: Vec<&str> = [
        ("--min-bytes", a.min_bytes.is_some()),
        ("--max-bytes", a.max_bytes.is_some()),
        ("--step-factor", a.step_factor.is_some()),
        ("--iters", a.iters.is_some()),
        ("--warmup-iters", a.warmup_iters.is_some()),
        ("--model", a.model.is_some()),
        ("--batch", a.batch.is_some()),
        ("--tokens", a.tokens.is_some()),
        ("--warmup-tokens", a.warmup_tokens.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, g)| g.then_some(n))
    .collect();
    if let Some(dir) = &a.reference {
        if !given.is_empty() {
            crate::refuse!(
                Code::BadArgument,
                "{}: a validation runs the reference's own settings; drop {}",
                dir.display(),
                given.join(", ")
            );
        }
        let set = reference::read_set(dir)?;
        let ev = set.first();
        if ev.manifest.node.backend != backend {
            crate::refuse!(
                Code::BadArgument,
                "{}: the reference ran the {} backend and this validation would run {}; pass --backend to match",
                dir.display(),
                reference::backend_name(ev.manifest.node.backend),
                reference::backend_name(backend)
            );
        }
        let settings = ev.manifest.settings.clone();
        return Ok(Plan { backend, settings, reference: Some(set), site, delay });
    }
    let cpu = backend == BackendKind::Cpu;
    let min = units::parse_bytes(a.min_bytes.as_deref().unwrap_or("8"))?;
    let max = units::parse_bytes(a.max_bytes.as_deref().unwrap_or(if cpu { "16MiB" } else { "1GiB" }))?;
    let settings = Settings {
        sizes_bytes: size_sweep(min, max, a.step_factor.unwrap_or(4))?,
        iters: a.iters.unwrap_or(20).max(1),
        warmup_iters: a.warmup_iters.unwrap_or(5),
        dtype: Dtype::Bf16,
        model: a.model.clone().unwrap_or_else(|| if cpu { "tiny" } else { "llama3-8b" }.into()),
        batch: a.batch.unwrap_or(1).max(1),
        tokens: a.tokens.unwrap_or(32).max(1),
        warmup_tokens: a.warmup_tokens.unwrap_or(4),
    };
    ModelShape::preset(&settings.model)?;
    Ok(Plan { backend, settings, reference: None, site, delay })
}

/// The workload of a round: the `blocking` phase of the model preset, bound to `ranks`.
pub(super) fn workload_spec(s: &Settings, backend: BackendKind, ranks: u32) -> Result<WorkloadSpec> {
    let (gemm, gd, ga) = match backend {
        BackendKind::Cpu => (GemmShape { m: 64, n: 64, k: 64 }, Dtype::F32, Dtype::F32),
        BackendKind::Cuda => (GemmShape { m: 1024, n: 1024, k: 1024 }, Dtype::Bf16, Dtype::F32),
    };
    let mut spec = WorkloadSpec::isolated_only(64 * 1024, 1, gemm);
    spec.phases = vec![Phase::Blocking];
    spec.tokens = s.tokens;
    spec.warmup_tokens = s.warmup_tokens;
    spec.dtype = s.dtype;
    spec.gemm_dtype = Some(gd);
    spec.gemm_accumulate_dtype = Some(ga);
    spec.check = 1;
    spec.validate()?;
    let req = ModelRequest {
        shape: ModelShape::preset(&s.model)?,
        batch: s.batch,
        prefill_tokens: None,
        layers: None,
        per_layer_weights: backend == BackendKind::Cuda,
    };
    spec.bind_model(&req, ranks)?;
    Ok(spec)
}

//! `commcanary validate`: may this node rejoin the partition? Device health,
//! topology, a collective sweep and a model-shaped workload, each compared
//! with a reference recorded once on a node the site trusts.
//!
//! Runs under `mpirun`/`srun` with one rank per GPU of one node (or on the
//! CPU backend). Consumes the command line, an optional reference directory
//! and site TOML. Order on every rank: check the arguments (before MPI, so a
//! bad flag is one line and exit 3), MPI init, refuse a job spanning more
//! than one node or fewer than 2 ranks, NVML start snapshot and XID watch
//! (rank 0), backend start, refusal of a reference that does not describe
//! this node ([`reference::contradictions`]), then `rounds` rounds: each runs
//! the all-reduce sweep, the all-gather sweep and the workload in an order
//! shuffled per round (ChaCha8 seeded by `--seed` and the round), then the
//! end snapshot. Rank 0 writes the evidence directory ([`reference`]),
//! prints the table (or `--json`) and every rank exits with the verdict's
//! code: 0 pass, 1 fail, 2 inconclusive, 3 could not run (argument errors,
//! refusals, run failures; a rank's failure aborts the job with code 3).
//!
//! Checks: `health` ([`health::evaluate`]), `topology`
//! ([`topology::differences`] against the reference's), `all-reduce busbw`
//! and `all-gather busbw` (per round, the geometric mean of busbw over the
//! sweep's sizes, [`sweep`]), `workload token latency` (per round, the
//! slowest rank's median per-token latency of the `blocking` phase of
//! [`crate::rank::phases`] on a model preset), each ratio judged against the
//! site's thresholds by [`verdict::job_check`] (a reference of several jobs:
//! the prediction interval of a new job, carrying job-to-job variation) or
//! [`verdict::single_job_check`] (one job: paired rounds, flagged, a FAIL
//! capped to INCONCLUSIVE). Rank 0 also reads the node's CPU load from
//! `/proc` right before and after the rounds ([`load`]); it is reported in
//! the health section and named as the likely cause of a failing ratio
//! check when the job's CPUs were busy with something else.
pub mod health;
pub mod load;
pub mod reference;
pub mod sweep;
pub mod topology;
pub mod verdict;

use crate::backend::{Backend, BackendChoice, BackendPlan};
use crate::core::clock::RankClock;
use crate::core::workload::{DelayInjection, GemmShape, ModelRequest, ModelShape, Phase, WorkloadSpec};
use crate::evidence::shard::{BackendKind, Dtype};
use anyhow::{bail, Context, Result};
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::topology::{Communicator, SimpleCommunicator};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use reference::{Evidence, NodeFacts, RoundRecord, Settings, Site};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use sweep::Collective;
use verdict::CheckVerdict;

/// Exit code of a validation that could not run (argument errors, refusals, failures).
pub const EXIT_COULD_NOT_RUN: i32 = 3;

/// Format version of the printed report (`--json`, `report.json`).
/// 2: ratio checks carry their interval method and reference jobs; `likely_cause`.
pub const REPORT_FORMAT_VERSION: u32 = 2;

/// Ratio checks judged as one family: all-reduce busbw, all-gather busbw,
/// workload token latency.
const RATIO_CHECKS: usize = 3;

/// `commcanary validate`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["record_reference", "reference"])))]
pub struct ValidateArgs {
    /// Backend: cpu, cuda, or auto (cuda when usable, else cpu).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Record this node as the reference into --out (a node the site trusts).
    #[arg(long)]
    pub record_reference: bool,
    /// Compare this node with the reference directory REF (its settings are reused).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Site TOML (keys, units and refusals: docs/VALIDATION.md): busbw_min_ratio (0.95, at most 1), token_latency_max_ratio (1.05, at least 1),
    /// coverage (0.95), nvlink_crc_errors_max (absent: not judged), allow ([]); any other key is refused.
    #[arg(long, requires = "reference")]
    pub site: Option<PathBuf>,
    /// Evidence directory to create (never overwritten); default validate-HOST-UNIXMS.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Rounds (default 6); a comparison pairs as many rounds as both sides have.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub rounds: u32,
    /// Reference only: smallest sweep size (default 8).
    #[arg(long, short = 'b')]
    pub min_bytes: Option<String>,
    /// Reference only: largest sweep size (default 1GiB on cuda, 16MiB on cpu).
    #[arg(long, short = 'e')]
    pub max_bytes: Option<String>,
    /// Reference only: sweep step factor (default 4).
    #[arg(long, short = 'f')]
    pub step_factor: Option<u64>,
    /// Reference only: timed iterations per size (default 20).
    #[arg(long, short = 'n')]
    pub iters: Option<u32>,
    /// Reference only: warm-up iterations per size (default 5).
    #[arg(long, short = 'w')]
    pub warmup_iters: Option<u32>,
    /// Reference only: workload model preset (default llama3-8b on cuda, tiny on cpu).
    #[arg(long)]
    pub model: Option<String>,
    /// Reference only: sequences per decode step (default 1).
    #[arg(long)]
    pub batch: Option<u32>,
    /// Reference only: timed tokens per round (default 32).
    #[arg(long)]
    pub tokens: Option<u32>,
    /// Reference only: warm-up tokens per round (default 4).
    #[arg(long)]
    pub warmup_tokens: Option<u32>,
    /// Seed of the per-round order of the measurements.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// NCCL library for the cuda backend (as `rank --nccl-lib`).
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Seconds without completion after which a collective is declared hung (0 < value <= 86400).
    #[arg(long, default_value_t = crate::core::limits::DEFAULT_COLLECTIVE_TIMEOUT_S)]
    pub collective_timeout_s: f64,
    /// Test and control knob: rank=R,every=K,us=D delays rank R before every
    /// K-th collective of the workload (not the sweep); recorded in the manifest.
    #[arg(long)]
    pub inject_delay: Option<String>,
    /// Print the report as JSON (format `validate-report`).
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// One row of the table.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CheckRow {
    /// Check name.
    pub check: String,
    /// What was measured on this node, in words with units.
    pub measured: String,
    /// The reference's value, in words with units.
    pub reference: String,
    /// The ratio interval, or the findings.
    pub interval: String,
    /// Verdict.
    pub verdict: CheckVerdict,
    /// The ratio statistics, for ratio checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<verdict::RatioCheck>,
    /// Findings and notes (health, topology).
    pub findings: Vec<String>,
}

/// Per size of a collective: this node's and the reference's median busbw over rounds.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SizeRow {
    /// Collective.
    pub collective: Collective,
    /// Size, bytes.
    pub bytes: u64,
    /// Median over rounds of busbw on this node, GB/s.
    pub busbw_gbps: f64,
    /// Median over rounds of the reference's busbw, GB/s (absent when recording).
    pub reference_busbw_gbps: Option<f64>,
    /// Median over rounds of the time per iteration, µs.
    pub time_us: f64,
}

/// `--json` and `report.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ValidationReport {
    /// [`REPORT_FORMAT_VERSION`].
    pub format_version: u32,
    /// `reference` (recorded, no verdict) or `validation`.
    pub kind: String,
    /// The node.
    pub node: NodeFacts,
    /// The reference directory and its manifest's SHA-256.
    pub reference: Option<(String, String)>,
    /// The site's thresholds in force.
    pub site: Site,
    /// Rounds run here.
    pub rounds: u32,
    /// The checks (empty when recording a reference).
    pub checks: Vec<CheckRow>,
    /// Per-size busbw (informative; the verdicts are per collective).
    pub sizes: Vec<SizeRow>,
    /// Overall verdict (absent when recording a reference).
    pub verdict: Option<CheckVerdict>,
    /// Exit code.
    pub exit_code: i32,
    /// The evidence directory written.
    pub evidence_dir: String,
    /// How the comparison is made and what it assumes.
    pub method: String,
    /// When a ratio check fails while the CPUs of this node (or of a reference
    /// job) were busy with something else: that, named as the likely cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likely_cause: Option<String>,
}

/// What is fixed before MPI starts.
struct Plan {
    backend: BackendKind,
    settings: Settings,
    reference: Option<reference::ReferenceSet>,
    site: Site,
    delay: Option<DelayInjection>,
}

/// `validate`'s numbers, checked before any work (its sweep and workload settings are rank's, with the
/// same ranges); the rows are in [`crate::core::ranges::RANGES`].
pub fn check_ranges(a: &ValidateArgs) -> Result<()> {
    use crate::core::ranges::{int, out as out_of_range, positive, size, MAX_RANK};
    int("--rounds", a.rounds, 2, 1000)?;
    let lo = a.min_bytes.as_deref().map(crate::core::units::parse_bytes).transpose()?;
    let hi = a.max_bytes.as_deref().map(crate::core::units::parse_bytes).transpose()?;
    if let Some(lo) = lo {
        size("--min-bytes", lo)?;
    }
    if let Some(hi) = hi {
        size("--max-bytes", hi)?;
        if let Some(lo) = lo.filter(|&lo| hi < lo) {
            return Err(out_of_range("--max-bytes", hi, &format!("at least --min-bytes {lo}")));
        }
    }
    if let Some(f) = a.step_factor {
        int("--step-factor", f, 2, 1024)?;
    }
    if let Some(n) = a.iters {
        int("--iters", n, 1, 1_000_000)?;
    }
    if let Some(w) = a.warmup_iters {
        int("--warmup-iters", w, 0, 100_000)?;
    }
    if let Some(b) = a.batch {
        int("--batch", b, 1, 65_536)?;
    }
    if let Some(t) = a.tokens {
        int("--tokens", t, 1, 1_000_000)?;
    }
    if let Some(t) = a.warmup_tokens {
        int("--warmup-tokens", t, 0, 100_000)?;
    }
    positive("--collective-timeout-s", a.collective_timeout_s, 86_400.0)?;
    if let Some(d) = &a.inject_delay {
        let d = crate::core::workload::DelayInjection::parse(d)?;
        int("--inject-delay rank", d.rank, 0, MAX_RANK)?;
    }
    Ok(())
}

fn plan(a: &ValidateArgs) -> Result<Plan> {
    check_ranges(a)?;
    let (backend, _) = a.backend.resolve()?;
    let site = match &a.site {
        Some(p) => Site::read(p)?,
        None => Site::default(),
    };
    let delay = a.inject_delay.as_deref().map(DelayInjection::parse).transpose()?;
    if let Some(out) = &a.out {
        if out.exists() {
            crate::refuse!(crate::core::refusal::Code::AlreadyExists, "--out {}: already exists (evidence is never written over)", out.display());
        }
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
                crate::core::refusal::Code::BadArgument,
                "{}: a validation runs the reference's own settings; drop {}",
                dir.display(),
                given.join(", ")
            );
        }
        let set = reference::read_set(dir)?;
        let ev = set.first();
        if ev.manifest.node.backend != backend {
            crate::refuse!(
                crate::core::refusal::Code::BadArgument,
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
    let min = crate::core::units::parse_bytes(a.min_bytes.as_deref().unwrap_or("8"))?;
    let max = crate::core::units::parse_bytes(a.max_bytes.as_deref().unwrap_or(if cpu { "16MiB" } else { "1GiB" }))?;
    let settings = Settings {
        sizes_bytes: crate::core::workload::size_sweep(min, max, a.step_factor.unwrap_or(4))?,
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
fn workload_spec(s: &Settings, backend: BackendKind, ranks: u32) -> Result<WorkloadSpec> {
    let gemm = match backend {
        BackendKind::Cpu => GemmShape { m: 64, n: 64, k: 64 },
        BackendKind::Cuda => GemmShape { m: 1024, n: 1024, k: 1024 },
    };
    let (gd, ga) = match backend {
        BackendKind::Cpu => (Dtype::F32, Dtype::F32),
        BackendKind::Cuda => (Dtype::Bf16, Dtype::F32),
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

/// Entry point: the process's exit code.
pub fn command(a: ValidateArgs) -> i32 {
    let say = |msg: &str| {
        if crate::rank::is_lead_process() {
            crate::rank::write_line_stderr(&format!("commcanary validate: {msg}"));
        }
    };
    let plan = match plan(&a) {
        Ok(p) => p,
        Err(e) => {
            say(&format!("could not run: {e:#}"));
            // every rank met the same error
            crate::rank::let_the_lead_print_first();
            return EXIT_COULD_NOT_RUN;
        }
    };
    let Some(universe) = mpi::initialize() else {
        say("could not run: MPI is already initialised or could not be initialised");
        return EXIT_COULD_NOT_RUN;
    };
    let world = universe.world();
    let code = match run_world(&a, &plan, &world) {
        Ok(c) => c,
        Err(e) => {
            crate::rank::write_line_stderr(&format!("commcanary validate rank {}: could not run: {e:#}", world.rank()));
            world.abort(EXIT_COULD_NOT_RUN);
        }
    };
    drop(universe);
    code
}

/// Broadcast rank 0's exit code and message to every rank.
fn agree(world: &SimpleCommunicator, code: i32) -> i32 {
    let mut c = code;
    world.process_at_rank(0).broadcast_into(&mut c);
    c
}

fn run_world(a: &ValidateArgs, plan: &Plan, world: &SimpleCommunicator) -> Result<i32> {
    let rank = world.rank() as u32;
    let ranks = world.size() as u32;
    let local = world.split_shared(world.rank());
    if local.size() as u32 != ranks {
        crate::refuse!(
            crate::core::refusal::Code::BadArgument,
            "validate checks one node, and this job's {ranks} ranks span more than one ({} on this node); launch it with --nodelist/-N 1",
            local.size()
        );
    }
    if ranks < 2 {
        crate::refuse!(
            crate::core::refusal::Code::BadArgument,
            "validate needs at least 2 ranks (one per GPU, or -n 2 or more on CPU): a collective of one rank measures nothing"
        );
    }
    if let Some(d) = plan.delay {
        if d.rank >= ranks {
            crate::refuse!(crate::core::refusal::Code::OutOfRange, "--inject-delay names rank {} but the job has {ranks} ranks", d.rank);
        }
    }
    let started_unix_ms = crate::core::clock::unix_ms();
    let spec = workload_spec(&plan.settings, plan.backend, ranks)?;
    let clock = RankClock::new(rank, &[]);
    let progress = |msg: &str| {
        if rank == 0 && !a.quiet {
            crate::rank::write_line_stderr(&format!("validate: {msg}"));
        }
    };
    // NVML on rank 0 only: it sees every GPU of the node
    let watch = (rank == 0 && plan.backend == BackendKind::Cuda).then(health::Watch::init);
    let start_health = watch.as_ref().and_then(|w| w.as_ref().ok()).map(|w| w.snapshot());
    let xids = watch.as_ref().and_then(|w| w.as_ref().ok()).map(|w| w.watch_xids());
    let max_sweep = plan.settings.sizes_bytes.iter().map(|&b| Collective::AllGather.bytes_for(b, plan.settings.dtype, ranks).max(b)).max().unwrap_or(0);
    let mut bplan = BackendPlan::for_spec(&spec);
    bplan.max_bytes = bplan.max_bytes.max(max_sweep);
    let per_size_events = 4 * (plan.settings.iters + plan.settings.warmup_iters) as usize + 64;
    match plan.backend {
        BackendKind::Cpu => {
            let mut b = crate::backend::cpu::CpuBackend::new(world, &bplan)?.with_timeout(std::time::Duration::from_secs_f64(a.collective_timeout_s));
            measure(a, plan, world, &clock, &spec, &mut b, &watch, start_health, xids, started_unix_ms, &progress)
        }
        BackendKind::Cuda => {
            let local_rank = local.rank() as u32;
            let mut b = crate::backend::cuda::CudaBackend::new(
                world,
                local_rank,
                &a.nccl_lib,
                &bplan,
                clock.clone(),
                spec.device_events_per_pass().max(per_size_events),
                std::time::Duration::from_secs_f64(a.collective_timeout_s),
                None,
                false,
            )?;
            measure(a, plan, world, &clock, &spec, &mut b, &watch, start_health, xids, started_unix_ms, &progress)
        }
    }
}

/// The node's facts (rank 0's view).
fn node_facts<B: Backend>(b: &B, ranks: u32, watch: Option<&health::Watch>) -> NodeFacts {
    let dev = b.device();
    let fact = |k: &str| dev.facts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    NodeFacts {
        host: crate::core::identity::hostname(),
        backend: b.kind(),
        ranks,
        sku: dev.name.clone(),
        gpu_count: watch.and_then(|w| w.nvml().device_count().ok()),
        driver_version: watch.and_then(|w| w.driver_version().value),
        nccl_version: fact("nccl_version"),
        mpi_library: crate::core::identity::mpi_library(),
    }
}

#[allow(clippy::too_many_arguments)]
fn measure<B: Backend>(
    a: &ValidateArgs,
    plan: &Plan,
    world: &SimpleCommunicator,
    clock: &RankClock,
    spec: &WorkloadSpec,
    backend: &mut B,
    watch: &Option<std::result::Result<health::Watch, String>>,
    start_health: Option<Vec<health::GpuHealth>>,
    xids: Option<health::XidSets<'_>>,
    started_unix_ms: u64,
    progress: &dyn Fn(&str),
) -> Result<i32> {
    let rank = world.rank() as u32;
    let ranks = world.size() as u32;
    let w = watch.as_ref().and_then(|w| w.as_ref().ok());
    let node = node_facts(backend, ranks, w);
    // refusal of a reference that does not describe this node: rank 0 decides, every rank exits 3
    let refused = if rank == 0 {
        match &plan.reference {
            Some(set) => {
                let c = reference::contradictions(&node, &set.first().manifest.node, &plan.site);
                for why in &c {
                    crate::rank::write_line_stderr(&format!(
                        "commcanary validate: refused: reference {} is not this node's kind: {why}",
                        a.reference.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
                    ));
                }
                !c.is_empty()
            }
            None => false,
        }
    } else {
        false
    };
    if agree(world, refused as i32) != 0 {
        return Ok(EXIT_COULD_NOT_RUN);
    }
    let s = &plan.settings;
    // the job's process ids, so rank 0 can tell this job's CPU time from everything else's
    let mut job_pids = vec![0u32; ranks as usize];
    world.all_gather_into(&std::process::id(), &mut job_pids[..]);
    let load_start = (rank == 0).then(load::snapshot);
    // rank 0 samples every GPU through NVML on a thread while the rounds run
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rounds, samples) = std::thread::scope(|scope| -> Result<(Vec<RoundRecord>, Vec<health::HealthSample>)> {
        let sampler = w.map(|w| scope.spawn(|| w.sample_until(&stop, std::time::Duration::from_secs(1))));
        let run = (|| -> Result<Vec<RoundRecord>> {
            let mut rounds = Vec::new();
            for round in 0..a.rounds {
                let mut order = ["all-reduce", "all-gather", "workload"];
                order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(a.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(round))));
                let mut rec = RoundRecord {
                    round,
                    order: order.iter().map(|s| s.to_string()).collect(),
                    all_reduce: Vec::new(),
                    all_gather: Vec::new(),
                    token_latency_median_us_per_rank: Vec::new(),
                };
                for what in order {
                    match what {
                        "all-reduce" => {
                            rec.all_reduce =
                                sweep::sweep(backend, world, clock, Collective::AllReduce, &s.sizes_bytes, s.dtype, s.iters, s.warmup_iters, round == 0)?
                        }
                        "all-gather" => {
                            rec.all_gather =
                                sweep::sweep(backend, world, clock, Collective::AllGather, &s.sizes_bytes, s.dtype, s.iters, s.warmup_iters, round == 0)?
                        }
                        _ => rec.token_latency_median_us_per_rank = workload_round(backend, world, clock, spec, plan.delay)?,
                    }
                }
                for (kind, rows) in [("all-reduce", &rec.all_reduce), ("all-gather", &rec.all_gather)] {
                    if let Some((r, w)) = rows.iter().find_map(|r| r.wrong_elements.filter(|w| *w > 0).map(|w| (r, w))) {
                        bail!("round {round}: {kind} of {} bytes returned {w} wrong elements (summed over ranks): the node computes wrong results", r.bytes);
                    }
                }
                progress(&format!(
                    "round {}/{}: all-reduce geomean busbw {:.3} GB/s, all-gather {:.3} GB/s, token latency {:.1} us",
                    round + 1,
                    a.rounds,
                    geo_busbw(&rec.all_reduce).unwrap_or(f64::NAN),
                    geo_busbw(&rec.all_gather).unwrap_or(f64::NAN),
                    rec.token_latency_us()
                ));
                rounds.push(rec);
            }
            Ok(rounds)
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = sampler.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Ok((run?, samples))
    })?;
    let load_end = (rank == 0).then(load::snapshot);
    if rank != 0 {
        return Ok(agree(world, 0));
    }
    let load = load_start.zip(load_end).map(|(a, b)| load::report(&a, &b, &job_pids));
    let (xid_events, xid_unwatched) = xids.map(|x| x.drain()).unwrap_or_default();
    let health = match (watch, plan.backend) {
        (_, BackendKind::Cpu) => {
            health::HealthReport { not_applicable: Some("no GPU: NVML checks not applicable".into()), method: health_method(), ..Default::default() }
        }
        (Some(Ok(w)), _) => health::HealthReport {
            not_applicable: None,
            driver_version: Some(w.driver_version()),
            start: start_health.unwrap_or_default(),
            end: w.snapshot(),
            xid_events,
            xid_unwatched,
            samples,
            method: health_method(),
            load: None,
        },
        (Some(Err(why)), _) => health::HealthReport { not_applicable: Some(why.clone()), method: health_method(), ..Default::default() },
        (None, _) => health::HealthReport { not_applicable: Some("internal: NVML not opened".into()), method: health_method(), ..Default::default() },
    };
    let health = health::HealthReport { load, ..health };
    let topo = match w {
        Some(w) => topology::read(w.nvml(), ranks),
        None => topology::cpu(ranks),
    };
    let kind = if plan.reference.is_some() { "validation" } else { "reference" };
    let manifest = reference::ValidateManifest {
        format_version: reference::VALIDATE_FORMAT_VERSION,
        kind: kind.into(),
        started_unix_ms,
        tool: crate::core::identity::ToolIdentity::current(),
        node: node.clone(),
        settings: s.clone(),
        rounds: a.rounds,
        seed: a.seed,
        reference: plan.reference.as_ref().map(|set| (a.reference.as_ref().map(|p| p.display().to_string()).unwrap_or_default(), set.digest.clone())),
        reference_jobs: plan.reference.as_ref().map(|set| set.jobs.iter().map(|j| (j.name.clone(), j.manifest_sha.clone())).collect()).unwrap_or_default(),
        inject_delay: a.inject_delay.clone(),
        argv: std::env::args().collect(),
        env: crate::core::identity::recorded_env(),
    };
    let ev = Evidence { manifest, rounds: reference::RoundsFile { format_version: reference::VALIDATE_FORMAT_VERSION, rounds }, health, topology: topo };
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from(format!("validate-{}-{}", node.host, started_unix_ms)));
    let report = build_report(plan, &ev, &out)?;
    reference::write(&out, &ev, plan.reference.as_ref().map(|_| &report))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(agree(world, report.exit_code))
}

fn health_method() -> String {
    "NVML snapshots at start and end (rank 0, every GPU NVML enumerates); temperature, power and throttle reasons sampled every second on a thread of rank 0 during the rounds; critical XID events through one NVML event set per GPU, drained at the end".into()
}

/// One round of the workload: per rank, the median per-token latency of the timed tokens, µs, gathered on every rank.
fn workload_round<B: Backend>(
    backend: &mut B,
    world: &SimpleCommunicator,
    clock: &RankClock,
    spec: &WorkloadSpec,
    delay: Option<DelayInjection>,
) -> Result<Vec<f64>> {
    let mut runner = crate::rank::phases::Runner::new(backend, clock, world, spec, delay, None, None, false);
    runner.run_all()?;
    let mut lat: Vec<f64> = runner.body.tokens.iter().filter(|t| !t.warmup).map(|t| t.end_ns.saturating_sub(t.start_ns) as f64 / 1e3).collect();
    let mine = crate::core::stats::median(&mut lat).context("the workload recorded no timed token")?;
    let mut all = vec![0f64; world.size() as usize];
    world.all_gather_into(&mine, &mut all[..]);
    Ok(all)
}

fn geo_busbw(rows: &[sweep::SizeResult]) -> Option<f64> {
    verdict::geometric_mean(&rows.iter().map(|r| r.busbw_gbps).collect::<Vec<_>>())
}

fn median_of(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    crate::core::stats::median(&mut v).unwrap_or(f64::NAN)
}

/// The verdicts (I/O free): this node's evidence against the reference's.
fn build_report(plan: &Plan, ev: &Evidence, out: &std::path::Path) -> Result<ValidationReport> {
    let site = &plan.site;
    let refr = plan.reference.as_ref();
    // every round of every reference job, for the informative medians
    let ref_rounds: Vec<&RoundRecord> = refr.map(|set| set.jobs.iter().flat_map(|j| j.evidence.rounds.rounds.iter()).collect()).unwrap_or_default();
    let mut sizes = Vec::new();
    for kind in [Collective::AllReduce, Collective::AllGather] {
        let pick = |r: &RoundRecord| -> Vec<sweep::SizeResult> {
            match kind {
                Collective::AllReduce => r.all_reduce.clone(),
                Collective::AllGather => r.all_gather.clone(),
            }
        };
        let first = ev.rounds.rounds.first().map(pick).unwrap_or_default();
        for (i, row) in first.iter().enumerate() {
            let here = median_of(ev.rounds.rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.busbw_gbps)));
            let time = median_of(ev.rounds.rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.time_us)));
            let there = refr.map(|_| median_of(ref_rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.busbw_gbps))));
            sizes.push(SizeRow { collective: kind, bytes: row.bytes, busbw_gbps: here, reference_busbw_gbps: there, time_us: time });
        }
    }
    let mut checks = Vec::new();
    let mut likely_cause = None;
    if let Some(set) = refr {
        let rf = set.first();
        let (hv, hf) = health::evaluate(&ev.health, site.nvlink_crc_errors_max);
        checks.push(CheckRow {
            check: "health".into(),
            measured: health_summary(&ev.health),
            reference: health_summary(&rf.health),
            interval: "-".into(),
            verdict: hv,
            ratio: None,
            findings: hf,
        });
        let td = topology::differences(&ev.topology, &rf.topology);
        checks.push(CheckRow {
            check: "topology".into(),
            measured: topo_summary(&ev.topology),
            reference: topo_summary(&rf.topology),
            interval: "-".into(),
            verdict: if td.is_empty() { CheckVerdict::Pass } else { CheckVerdict::Fail },
            ratio: None,
            findings: td,
        });
        let per_job = |stat: &dyn Fn(&RoundRecord) -> f64| -> (Vec<f64>, Vec<Vec<f64>>) {
            (ev.rounds.rounds.iter().map(stat).collect(), set.jobs.iter().map(|j| j.evidence.rounds.rounds.iter().map(stat).collect()).collect())
        };
        // the ratio checks below are one family (any FAIL fails the node)
        let per_check = verdict::check_coverage(site.coverage, RATIO_CHECKS);
        let rows_before_family = checks.len();
        for kind in [Collective::AllReduce, Collective::AllGather] {
            let stat = |r: &RoundRecord| {
                match kind {
                    Collective::AllReduce => geo_busbw(&r.all_reduce),
                    Collective::AllGather => geo_busbw(&r.all_gather),
                }
                .unwrap_or(f64::NAN)
            };
            let (here, there) = per_job(&stat);
            checks.push(ratio_row(
                &format!("{} busbw", kind.name()),
                &here,
                &there,
                site.busbw_min_ratio,
                verdict::Direction::AtLeast,
                per_check,
                "GB/s geomean over sizes",
                3,
            )?);
        }
        let (here, there) = per_job(&RoundRecord::token_latency_us);
        checks.push(ratio_row(
            "workload token latency",
            &here,
            &there,
            site.token_latency_max_ratio,
            verdict::Direction::AtMost,
            per_check,
            "us per token",
            1,
        )?);
        // the family's size sets each check's level: it must be the rows pushed
        debug_assert_eq!(checks.len() - rows_before_family, RATIO_CHECKS, "RATIO_CHECKS must count the ratio checks");
        likely_cause = likely_cause_of(&checks, ev, set);
        if let Some(cause) = &likely_cause {
            for c in checks.iter_mut().filter(|c| c.ratio.is_some() && c.verdict == CheckVerdict::Fail) {
                c.findings.push(format!("likely cause: {cause}"));
            }
        }
    }
    let overall = refr.map(|_| verdict::overall(checks.iter().map(|c| c.verdict)));
    Ok(ValidationReport {
        format_version: REPORT_FORMAT_VERSION,
        kind: ev.manifest.kind.clone(),
        node: ev.manifest.node.clone(),
        reference: ev.manifest.reference.clone(),
        site: site.clone(),
        rounds: ev.manifest.rounds,
        checks,
        sizes,
        verdict: overall,
        exit_code: overall.map(CheckVerdict::exit_code).unwrap_or(0),
        evidence_dir: out.display().to_string(),
        method: "ratio checks: per round, the geometric mean of busbw over the sweep sizes (ratio >= busbw_min_ratio) and the slowest rank's median per-token latency (ratio <= token_latency_max_ratio), on the log scale. The three ratio checks are one family: each interval has coverage 1 - (1 - coverage)/3 (Bonferroni), so that an unchanged node fails some check with probability at most (1 - coverage)/2. A reference of K >= 2 jobs: the prediction interval of a new job's mean from the K reference job means, each over the first n rounds (n the fewest of any job compared), t with K-1 degrees of freedom times s sqrt(1 + 1/K) (Hahn and Meeker 1991, 4.7), s = max(s_J, s_w/sqrt(n)) with s_w the pooled within-job round sd (the job variance component truncated at zero, Searle, Casella and McCulloch 1992, 3.5): it carries job-to-job variation. A reference of one job: round i of this node paired with round i of the reference, the Student-t interval of the mean per-round log-ratio; it carries round-to-round variation only, so a FAIL is reported INCONCLUSIVE".into(),
        likely_cause,
    })
}

/// A failing ratio check on a node (or against a reference job) whose CPUs
/// were busy with something else names that as its likely cause.
fn likely_cause_of(checks: &[CheckRow], ev: &Evidence, set: &reference::ReferenceSet) -> Option<String> {
    if !checks.iter().any(|c| c.ratio.is_some() && c.verdict == CheckVerdict::Fail) {
        return None;
    }
    let here = ev.health.load.as_ref().and_then(load::busy_elsewhere);
    let there: Vec<String> = set
        .jobs
        .iter()
        .filter_map(|j| j.evidence.health.load.as_ref().and_then(load::busy_elsewhere).map(|why| format!("reference job {}: {why}", j.name)))
        .collect();
    match (here, there.is_empty()) {
        (None, true) => None,
        (Some(h), true) => Some(format!("this node: {h}")),
        (h, false) => Some(h.map(|h| format!("this node: {h}; ")).unwrap_or_default() + &there.join("; ")),
    }
}

#[allow(clippy::too_many_arguments)]
fn ratio_row(
    name: &str,
    here: &[f64],
    there: &[Vec<f64>],
    threshold: f64,
    dir: verdict::Direction,
    coverage: f64,
    unit: &str,
    digits: usize,
) -> Result<CheckRow> {
    let r = match there {
        [one] => verdict::single_job_check(here, one, threshold, dir, coverage),
        jobs => verdict::job_check(here, jobs, threshold, dir, coverage),
    }
    .with_context(|| format!("check {name}"))?;
    let med = |v: &[f64]| median_of(v.iter().copied());
    let all_there: Vec<f64> = there.iter().flatten().copied().collect();
    let op = match dir {
        verdict::Direction::AtLeast => ">=",
        verdict::Direction::AtMost => "<=",
    };
    let mut findings = Vec::new();
    match r.method {
        verdict::IntervalMethod::JobPrediction => {
            findings.push(format!(
                "{} reference jobs, each mean over {} rounds; job-to-job sd {:.3}, within-job round sd {} (log scale); ratio {:.3}, threshold {op} {threshold}",
                r.reference_jobs,
                r.pairs,
                r.sd_log,
                r.sd_log_within_jobs.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
                r.ratio
            ));
            if r.verdict == CheckVerdict::Inconclusive {
                findings.push(match r.jobs_to_resolve {
                    Some(k) => format!("inconclusive: about {k} reference jobs would resolve it if the mean and job spread stay as measured"),
                    None => format!(
                        "inconclusive: no number of reference jobs up to {} resolves it at this job spread; more rounds per job narrow the spread only by its within-job part",
                        verdict::MAX_JOBS
                    ),
                });
            }
        }
        verdict::IntervalMethod::PairedRounds => {
            findings.push(format!("{} pairs of rounds; ratio {:.3}, threshold {op} {threshold}", r.pairs, r.ratio));
            findings.push(
                "the reference is one job: its interval carries round-to-round variation only, not job-to-job (record 3 or more reference jobs; docs/VALIDATION.md)".into(),
            );
            if r.capped_from == Some(CheckVerdict::Fail) {
                findings.push("inconclusive: the round interval lies beyond the threshold, but one reference job cannot tell that from job-to-job variation: a FAIL is reported INCONCLUSIVE".into());
            } else if r.verdict == CheckVerdict::Inconclusive {
                findings.push(match r.rounds_to_resolve {
                    Some(n) => format!("inconclusive: about {n} rounds would resolve it if the mean and spread stay as measured"),
                    None => {
                        format!("inconclusive: the ratio sits at the threshold; more than {} rounds would be needed", crate::analysis::inference::MAX_ROUNDS)
                    }
                });
            }
        }
    }
    Ok(CheckRow {
        check: name.into(),
        measured: format!("{:.*} {unit}", digits, med(here)),
        reference: format!("{:.*} {unit}", digits, med(&all_there)),
        interval: format!("x{:.3} [{:.3}, {:.3}] {op} {threshold}", r.ratio, r.ratio_low, r.ratio_high),
        verdict: r.verdict,
        ratio: Some(r),
        findings,
    })
}

fn health_summary(h: &health::HealthReport) -> String {
    let base = match &h.not_applicable {
        Some(why) => why.clone(),
        None => format!("{} GPUs read, {} XID events", h.end.len(), h.xid_events.len()),
    };
    let other = h.load.as_ref().and_then(|l| l.other_share).map(|o| format!("other processes {:.0}% of the job's CPUs", o * 100.0));
    format!("{base}; {}", other.unwrap_or_else(|| "CPU load unmeasured".into()))
}

fn topo_summary(t: &topology::Topology) -> String {
    if t.gpus.is_empty() {
        format!("{} ranks, {}", t.ranks, t.cpu_model.as_deref().unwrap_or("CPU model unknown"))
    } else {
        format!("{} x {}", t.gpus.len(), t.gpus.first().and_then(|g| g.name.value.clone()).unwrap_or_else(|| "?".into()))
    }
}

/// The one-screen table.
pub fn render(r: &ValidationReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "node {} ({}, {} ranks, {}); {} rounds", r.node.host, reference::backend_name(r.node.backend), r.node.ranks, r.node.sku, r.rounds);
    if r.checks.is_empty() {
        let _ = writeln!(s, "{:<11} {:>12} {:>14} {:>12}", "collective", "size", "busbw GB/s", "time us");
        for z in &r.sizes {
            let _ = writeln!(s, "{:<11} {:>12} {:>14.3} {:>12.2}", z.collective.name(), crate::core::units::fmt_bytes(z.bytes), z.busbw_gbps, z.time_us);
        }
        let _ = writeln!(s, "reference recorded in {} (no verdict: this is the reference)", r.evidence_dir);
        return s;
    }
    let _ = writeln!(s, "{:<24} {:<30} {:<30} {:<32} verdict", "check", "measured (median)", "reference (median)", "ratio [interval]");
    let _ = writeln!(
        s,
        "(measured and reference: the median over each side's rounds; the ratio: this job's geometric mean over the reference's (over its jobs' means when it has several, with the prediction interval of a new job; else over paired rounds), so it need not equal the ratio of the two medians)"
    );
    for c in &r.checks {
        let cut = |x: &str, n: usize| if x.chars().count() > n { format!("{}…", x.chars().take(n - 1).collect::<String>()) } else { x.to_string() };
        let _ = writeln!(
            s,
            "{:<24} {:<30} {:<30} {:<32} {}",
            c.check,
            cut(&c.measured, 30),
            cut(&c.reference, 30),
            cut(&c.interval, 32),
            c.verdict.word().to_uppercase()
        );
        for f in c.findings.iter().filter(|_| c.verdict != CheckVerdict::Pass || c.ratio.is_none()) {
            let _ = writeln!(s, "    {f}");
        }
    }
    let failing: Vec<&str> = r.checks.iter().filter(|c| c.verdict == CheckVerdict::Fail).map(|c| c.check.as_str()).collect();
    let v = r.verdict.unwrap_or(CheckVerdict::Inconclusive);
    let _ = writeln!(
        s,
        "verdict: {} (exit {}){}; evidence in {}",
        v.word().to_uppercase(),
        r.exit_code,
        if failing.is_empty() { String::new() } else { format!("; failing: {}", failing.join(", ")) },
        r.evidence_dir
    );
    if let Some(cause) = &r.likely_cause {
        let _ = writeln!(s, "likely cause: {cause}");
    }
    s
}

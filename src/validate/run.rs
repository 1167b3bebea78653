//! The MPI side of `validate` ([`command`]): refuses a job spanning more than
//! one node, fewer than 2 ranks, or a reference that does not describe this
//! node; runs the shuffled rounds (both sweeps and the workload) while rank 0
//! watches health and CPU load; then rank 0 writes the evidence directory and
//! prints the report, and every rank returns the exit code rank 0 decided.
use super::plan::{plan, workload_spec, Plan};
use super::reference::{self, Evidence, NodeFacts, RoundRecord};
use super::report::{build_report, geo_busbw, render};
use super::sweep;
use super::{health, load, topology, ValidateArgs, EXIT_COULD_NOT_RUN};
use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{CudaBackend, CudaOptions};
use crate::backend::{Backend, BackendPlan};
use crate::core::clock::{unix_ms, RankClock};
use crate::core::identity::{self, ToolIdentity};
use crate::core::refusal::Code;
use crate::core::workload::{DelayInjection, WorkloadSpec};
use crate::core::{fsutil, stats};
use crate::evidence::shard::BackendKind;
use crate::rank::phases::{Runner, RunnerControls};
use anyhow::{bail, Context, Result};
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::topology::{Communicator, SimpleCommunicator};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::path::PathBuf;
use std::sync::atomic::{self, AtomicBool};

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
            Code::BadArgument,
            "validate checks one node, and this job's {ranks} ranks span more than one ({} on this node); launch it \
                with --nodelist/-N 1",
            local.size()
        );
    }
    if ranks < 2 {
        crate::refuse!(
            Code::BadArgument,
            "validate needs at least 2 ranks (one per GPU, or -n 2 or more on CPU): a collective of one rank measures \
                nothing"
        );
    }
    if let Some(d) = plan.delay.filter(|d| d.rank >= ranks) {
        crate::refuse!(Code::OutOfRange, "--inject-delay names rank {} but the job has {ranks} ranks", d.rank);
    }
    let started_unix_ms = unix_ms();
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
    let max_sweep = plan
        .settings
        .sizes_bytes
        .iter()
        .flat_map(|&b| sweep::kinds().map(|k| sweep::bytes_for(k, b, plan.settings.dtype, ranks).max(b)))
        .max()
        .unwrap_or(0);
    let mut bplan = BackendPlan::for_spec(&spec);
    bplan.max_bytes = bplan.max_bytes.max(max_sweep);
    let per_size_events = 4 * (plan.settings.iters + plan.settings.warmup_iters) as usize + 64;
    let m = Measurement {
        a,
        plan,
        world,
        clock: &clock,
        spec: &spec,
        watch: &watch,
        start_health,
        xids,
        started_unix_ms,
        progress: &progress,
    };
    match plan.backend {
        BackendKind::Cpu => {
            let mut b = CpuBackend::new(world, &bplan)?
                .with_timeout(std::time::Duration::from_secs_f64(a.collective_timeout_s));
            measure(m, &mut b)
        }
        BackendKind::Cuda => {
            let o = CudaOptions {
                local_rank: local.rank() as u32,
                nccl_path: &a.nccl_lib,
                events_hint: spec.device_events_per_pass().max(per_size_events),
                timeout: std::time::Duration::from_secs_f64(a.collective_timeout_s),
                gpu: None,
                cupti: false,
            };
            let mut b = CudaBackend::new(world, &bplan, clock.clone(), o)?;
            measure(m, &mut b)
        }
    }
}

/// The node's facts (rank 0's view).
fn node_facts<B: Backend>(b: &B, ranks: u32, watch: Option<&health::Watch>) -> NodeFacts {
    let dev = b.device();
    let fact = |k: &str| dev.facts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    NodeFacts {
        host: identity::hostname(),
        backend: b.info().kind,
        ranks,
        sku: dev.name.clone(),
        gpu_count: watch.and_then(|w| w.nvml().device_count().ok()),
        driver_version: watch.and_then(|w| w.driver_version().value),
        nccl_version: fact("nccl_version"),
        mpi_library: identity::mpi_library(),
    }
}

/// What one node's measurement runs with besides its backend: the job, its
/// plan, and rank 0's GPU watch (`None` on the other ranks and on CPU).
struct Measurement<'a> {
    /// The command line.
    a: &'a ValidateArgs,
    /// The plan made from it.
    plan: &'a Plan,
    /// The job's ranks.
    world: &'a SimpleCommunicator,
    /// This rank's clock.
    clock: &'a RankClock,
    /// The workload each round runs.
    spec: &'a WorkloadSpec,
    /// NVML on rank 0 of a GPU node, or why it could not be opened.
    watch: &'a Option<std::result::Result<health::Watch, String>>,
    /// Every GPU's health before the rounds.
    start_health: Option<Vec<health::GpuHealth>>,
    /// The XID event sets watched during the rounds.
    xids: Option<health::XidSets<'a>>,
    /// When the job started, ms since the Unix epoch.
    started_unix_ms: u64,
    /// Prints a progress line (rank 0, unless quiet).
    progress: &'a dyn Fn(&str),
}

/// Runs the shuffled rounds on `backend`; rank 0 then writes the evidence and prints the report.
fn measure<B: Backend>(m: Measurement<'_>, backend: &mut B) -> Result<i32> {
    let Measurement { a, plan, world, clock, spec, watch, start_health, xids, started_unix_ms, progress } = m;
    let rank = world.rank() as u32;
    let ranks = world.size() as u32;
    let w = watch.as_ref().and_then(|w| w.as_ref().ok());
    let node = node_facts(backend, ranks, w);
    // refusal of a reference that does not describe this node: rank 0 decides, every rank exits 3
    let contradictions = match &plan.reference {
        Some(set) if rank == 0 => reference::contradictions(&node, &set.first().manifest.node, &plan.site),
        _ => Vec::new(),
    };
    for why in &contradictions {
        crate::rank::write_line_stderr(&format!(
            "commcanary validate: refused: reference {} is not this node's kind: {why}",
            a.reference.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    if agree(world, !contradictions.is_empty() as i32) != 0 {
        return Ok(EXIT_COULD_NOT_RUN);
    }
    let s = &plan.settings;
    // the job's process ids, so rank 0 can tell this job's CPU time from everything else's
    let mut job_pids = vec![0u32; ranks as usize];
    world.all_gather_into(&std::process::id(), &mut job_pids[..]);
    let load_start = (rank == 0).then(load::snapshot);
    // rank 0 samples every GPU through NVML on a thread while the rounds run
    let stop = AtomicBool::new(false);
    let (rounds, samples) = std::thread::scope(|scope| -> Result<(Vec<RoundRecord>, Vec<health::HealthSample>)> {
        let sampler = w.map(|w| scope.spawn(|| w.sample_until(&stop, std::time::Duration::from_secs(1))));
        let run = (|| -> Result<Vec<RoundRecord>> {
            let mut rounds = Vec::new();
            for round in 0..a.rounds {
                let mut order = ["all-reduce", "all-gather", "workload"];
                order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(
                    a.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(round)),
                ));
                let mut rec = RoundRecord {
                    round,
                    order: order.iter().map(|s| s.to_string()).collect(),
                    all_reduce: Vec::new(),
                    all_gather: Vec::new(),
                    token_latency_median_us_per_rank: Vec::new(),
                };
                let ([all_reduce, all_gather], check) = (sweep::kinds(), s.sweep_loop(round == 0));
                for what in order {
                    match what {
                        "all-reduce" => rec.all_reduce = sweep::sweep(backend, world, clock, all_reduce, &check)?,
                        "all-gather" => rec.all_gather = sweep::sweep(backend, world, clock, all_gather, &check)?,
                        _ => {
                            rec.token_latency_median_us_per_rank =
                                workload_round(backend, world, clock, spec, plan.delay)?
                        }
                    }
                }
                for (kind, rows) in [("all-reduce", &rec.all_reduce), ("all-gather", &rec.all_gather)] {
                    if let Some((r, w)) = rows.iter().find_map(|r| r.wrong_elements.filter(|w| *w > 0).map(|w| (r, w)))
                    {
                        bail!(
                            "round {round}: {kind} of {} bytes returned {w} wrong elements (summed over ranks): the \
                                node computes wrong results",
                            r.bytes
                        );
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
        stop.store(true, atomic::Ordering::Relaxed);
        let samples = sampler.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Ok((run?, samples))
    })?;
    let load_end = (rank == 0).then(load::snapshot);
    if rank != 0 {
        return Ok(agree(world, 0));
    }
    let load = load_start.zip(load_end).map(|(a, b)| load::report(&a, &b, &job_pids));
    let (xid_events, xid_unwatched) = xids.map(|x| x.drain()).unwrap_or_default();
    let not_applicable =
        |why: String| health::HealthReport { not_applicable: Some(why), method: health_method(), ..Default::default() };
    let health = match (watch, plan.backend) {
        (_, BackendKind::Cpu) => not_applicable("no GPU: NVML checks not applicable".into()),
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
        (Some(Err(why)), _) => not_applicable(why.clone()),
        (None, _) => not_applicable("internal: NVML not opened".into()),
    };
    let health = health::HealthReport { load, ..health };
    let manifest = reference::ValidateManifest {
        format_version: reference::VALIDATE_FORMAT_VERSION,
        kind: if plan.reference.is_some() { "validation" } else { "reference" }.into(),
        started_unix_ms,
        tool: ToolIdentity::current(),
        node: node.clone(),
        settings: s.clone(),
        rounds: a.rounds,
        seed: a.seed,
        reference: plan
            .reference
            .as_ref()
            .map(|set| (a.reference.as_ref().map(|p| p.display().to_string()).unwrap_or_default(), set.digest.clone())),
        reference_jobs: plan
            .reference
            .as_ref()
            .map(|set| set.jobs.iter().map(|j| (j.name.clone(), j.manifest_sha.clone())).collect())
            .unwrap_or_default(),
        inject_delay: a.inject_delay.clone(),
        argv: std::env::args().collect(),
        env: identity::recorded_env(),
    };
    let ev = Evidence {
        manifest,
        rounds: reference::RoundsFile { format_version: reference::VALIDATE_FORMAT_VERSION, rounds },
        health,
        topology: w.map_or_else(|| topology::cpu(ranks), |w| topology::read(w.nvml(), ranks)),
    };
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from(format!("validate-{}-{}", node.host, started_unix_ms)));
    let report = build_report(plan, &ev, &out)?;
    reference::write(&out, &ev, plan.reference.as_ref().map(|_| &report))?;
    if let Some(path) = &a.prometheus {
        let text = super::report::prometheus(&report, unix_ms() / 1000);
        fsutil::replace_atomic(path, text.as_bytes()).with_context(|| format!("--prometheus {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(agree(world, report.exit_code))
}

fn health_method() -> String {
    "NVML snapshots at start and end (rank 0, every GPU NVML enumerates); temperature, power and throttle reasons \
        sampled every second on a thread of rank 0 during the rounds; critical XID events through one NVML event set \
        per GPU, drained at the end"
        .into()
}

/// One round of the workload: per rank, the median per-token latency of the timed tokens, µs, gathered on every rank.
fn workload_round<B: Backend>(
    backend: &mut B,
    world: &SimpleCommunicator,
    clock: &RankClock,
    spec: &WorkloadSpec,
    delay: Option<DelayInjection>,
) -> Result<Vec<f64>> {
    let mut runner = Runner::new(backend, clock, spec, RunnerControls { delay, ..Default::default() });
    runner.run_all()?;
    let mut lat: Vec<f64> = runner
        .body
        .tokens
        .iter()
        .filter(|t| !t.warmup)
        .map(|t| t.end_ns.saturating_sub(t.start_ns) as f64 / 1e3)
        .collect();
    let mine = stats::median(&mut lat).context("the workload recorded no timed token")?;
    let mut all = vec![0f64; world.size() as usize];
    world.all_gather_into(&mine, &mut all[..]);
    Ok(all)
}

//! `bench-overhead`: what instrumentation costs per collective.
//!
//! Runs under mpirun: a bare reference loop against the instrumented isolated phase, per backend
//! (docs/METHODS.md, "Instrumentation overhead benchmark"); reports on rank 0 the median
//! per-collective time of each. A benchmark: it prints numbers and asserts nothing.
use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::CudaBackend;
use crate::backend::cuda::CudaOptions;
use crate::backend::{cuda, Backend, Call, Timing};
use crate::core::clock::{monotonic_raw_ns, RankClock};
use crate::core::refusal::Code;
use crate::core::workload::{GemmShape, WorkloadSpec};
use crate::core::{collective, fsutil, stats, units};
use crate::evidence::shard;
use crate::rank::phases::{Runner, RunnerControls};
use anyhow::{Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::topology::Communicator;
use std::path::PathBuf;

/// `commcanary bench-overhead`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchOptions {
    /// Collectives per measurement (cuda: keep it below the device queue's
    /// depth, about a thousand launches, so the host never blocks in a launch).
    #[arg(long, default_value_t = 2000)]
    pub iters: u32,
    /// Message size.
    #[arg(long, default_value = "64KiB")]
    pub size: String,
    /// Alternating repetitions of (bare, instrumented).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Backend: cpu (bare MPI loop vs runner) or cuda (reference NCCL loop vs runner).
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: crate::backend::BackendChoice,
    /// Message sizes for the cuda benchmark.
    #[arg(long, default_value = "64KiB,128KiB,256KiB")]
    pub sizes: String,
    /// NCCL library for the cuda benchmark.
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Cuda: add a third variant, the instrumented loop with CUPTI kernel records on.
    #[arg(long)]
    pub cupti: bool,
    /// Cuda: ask NCCL for its tuning log (NCCL_DEBUG=INFO, SUBSYS=TUNING), as
    /// `rank --nccl-tuning` does, so its cost can be compared run against run.
    #[arg(long)]
    pub nccl_tuning: bool,
    /// Write every measurement (per-rep distributions) as JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// Run the benchmark; rank 0 prints JSON lines.
pub fn run(args: BenchOptions) -> Result<()> {
    let bytes = units::parse_bytes(&args.size)?;
    // refused before the run, not after it: the results would have nowhere to go
    if let Some(p) = args.json_out.as_ref().filter(|p| p.exists()) {
        crate::refuse!(Code::AlreadyExists, "--json-out {} exists (results are never overwritten)", p.display());
    }
    if args.backend == crate::backend::BackendChoice::Cuda {
        return run_cuda(&args);
    }
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = universe.world();
    crate::rank::end_job_on_error(&world, "commcanary bench-overhead", || run_cpu(&args, bytes, &world))
}

fn run_cpu(args: &BenchOptions, bytes: u64, world: &mpi::topology::SimpleCommunicator) -> Result<()> {
    let gemm = GemmShape { m: 8, n: 8, k: 8 };
    let spec = WorkloadSpec::isolated_only(bytes, args.iters, gemm);
    let mut backend = CpuBackend::new(world, &crate::backend::BackendPlan::for_spec(&spec))?;
    let clock = RankClock::new(world.rank() as u32, &[]);
    let mut bare = Vec::new();
    let mut instrumented = Vec::new();
    for _ in 0..args.reps {
        world.barrier();
        let t0 = monotonic_raw_ns();
        for _ in 0..args.iters {
            let kind = collective::CollectiveKind::AllReduce;
            backend.enqueue(Call::World { kind, bytes, dtype: shard::Dtype::F32 }, Timing::Async)?;
            backend.wait()?;
        }
        bare.push((monotonic_raw_ns() - t0) as f64 / args.iters as f64);
        // the bare loop's collectives belong to no pass: drop their (empty) timings
        let _ = backend.finish_pass()?;
        world.barrier();
        let t0 = monotonic_raw_ns();
        let mut runner = Runner::new(&mut backend, &clock, &spec, RunnerControls::default());
        runner.run_all()?;
        instrumented.push((monotonic_raw_ns() - t0) as f64 / args.iters as f64);
        std::hint::black_box(runner.body);
    }
    if world.rank() == 0 {
        let b = stats::median(&mut bare).unwrap_or(f64::NAN);
        let i = stats::median(&mut instrumented).unwrap_or(f64::NAN);
        let out = serde_json::json!({
            "benchmark": "cpu-instrumentation-overhead",
            "ranks": world.size(),
            "bytes": bytes,
            "iters": args.iters,
            "reps": args.reps,
            "bare_ns_per_collective_median": b,
            "instrumented_ns_per_collective_median": i,
            "overhead_ns_per_collective": i - b,
            "overhead_ratio": i / b,
            "note": "instrumented includes two phase barriers per rep, amortised over iters",
        });
        println!("{out}");
    }
    Ok(())
}

/// Per-iteration host times of a loop from the host clock read before each
/// call and once after the last: the time each iteration's whole loop body took.
fn iteration_host_ns(stamps: &[u64]) -> Vec<f64> {
    stamps.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64).collect()
}

/// Quantiles (p50, p90, p99; nearest rank) of a sample, µs.
fn quantiles_us(v: &[f64]) -> [f64; 3] {
    let mut v = v.to_vec();
    [50.0, 90.0, 99.0].map(|p| stats::percentile_nearest_rank(&mut v, p).unwrap_or(f64::NAN) / 1e3)
}

/// One variant's measurement in one repetition.
#[derive(serde::Serialize, Clone, Debug)]
struct VariantRep {
    /// Host time per loop iteration, p50/p90/p99, µs.
    host_iter_us: [f64; 3],
    /// Device time per collective over the whole loop (first event to last), µs.
    device_per_collective_us: f64,
    /// Median per-iteration device interval (boundary to boundary), where measured, µs.
    device_interval_median_us: Option<f64>,
}

/// The CUDA benchmark: per size and repetition, in a rotating order, the bare
/// loop against the instrumented isolated phase (eager, `--graph`, `--cupti`);
/// prints distributions over repetitions (docs/GPU.md, "The CUDA overhead benchmark").
fn run_cuda(args: &BenchOptions) -> Result<()> {
    if let Some(why) = cuda::unavailable_reason() {
        anyhow::bail!("--backend cuda is unavailable: {why}");
    }
    if args.iters < 2 || args.reps == 0 {
        anyhow::bail!("--iters must be at least 2 and --reps at least 1");
    }
    let sizes = units::parse_size_list(&args.sizes)?;
    if args.nccl_tuning {
        crate::rank::request_nccl_tuning_log(&std::env::temp_dir().join("commcanary-bench-tuning"))?;
    }
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = universe.world();
    crate::rank::end_job_on_error(&world, "commcanary bench-overhead", || cuda_body(args, &sizes, &world))
}

fn cuda_body(args: &BenchOptions, sizes: &[u64], world: &mpi::topology::SimpleCommunicator) -> Result<()> {
    let local = mpi::topology::Communicator::split_shared(world, world.rank());
    let clock = RankClock::new(world.rank() as u32, &[]);
    let max = sizes.iter().copied().max().unwrap_or(4);
    let gemm = GemmShape { m: 64, n: 64, k: 64 };
    let o = CudaOptions {
        local_rank: local.rank() as u32,
        nccl_path: &args.nccl_lib,
        events_hint: (args.iters as usize) * 2 + 64,
        timeout: std::time::Duration::from_secs(300),
        gpu: None,
        cupti: args.cupti,
    };
    let mut backend = CudaBackend::new(
        world,
        &crate::backend::BackendPlan::for_spec(&WorkloadSpec::isolated_only(max, args.iters, gemm)),
        clock.clone(),
        o,
    )?;
    // the event timer's granularity and this rank's anchor windows, for the record
    let probe_ns = backend.event_timer_probe(64)?;
    // bare+event: the bare loop with one timing event per call, to separate
    // the timestamp's cost from the instrument's bookkeeping
    let mut variants: Vec<&str> = vec!["bare", "bare+event", "instrumented", "instrumented+graph"];
    if args.cupti {
        variants.push("instrumented+cupti");
    }
    let mut all = Vec::new();
    for &bytes in sizes {
        let spec = WorkloadSpec::isolated_only(bytes, args.iters, gemm);
        let mut reps: Vec<std::collections::BTreeMap<&str, VariantRep>> = Vec::new();
        // one untimed round of each loop first: NCCL connects lazily at a size's first use
        world.barrier();
        backend.reference_loop(bytes, args.iters.min(50))?;
        Runner::new(
            &mut backend,
            &clock,
            &WorkloadSpec::isolated_only(bytes, args.iters.min(50), gemm),
            RunnerControls::default(),
        )
        .run_all()?;
        for rep in 0..args.reps as usize {
            let mut got = std::collections::BTreeMap::new();
            for k in 0..variants.len() {
                let v = variants[(rep + k) % variants.len()];
                if args.cupti {
                    backend.set_cupti(v == "instrumented+cupti")?;
                }
                world.barrier();
                let r = if v == "bare" || v == "bare+event" {
                    let (stamps, device_ns) = backend.reference_loop_marked(bytes, args.iters, v == "bare+event")?;
                    VariantRep {
                        host_iter_us: quantiles_us(&iteration_host_ns(&stamps)),
                        device_per_collective_us: device_ns / 1e3,
                        device_interval_median_us: None,
                    }
                } else {
                    let spec = WorkloadSpec { graph: v == "instrumented+graph", ..spec.clone() };
                    let mut runner = Runner::new(&mut backend, &clock, &spec, RunnerControls::default());
                    runner.run_all()?;
                    let ev = &runner.body.collectives;
                    let stamps: Vec<u64> = if spec.graph {
                        // one launch for all: its host time spread evenly over the collectives
                        let (a, b) = ev.first().map(|e| (e.host_issue_ns, e.host_return_ns)).unwrap_or((0, 0));
                        (0..=ev.len() as u64).map(|i| a + (b - a) * i / ev.len().max(1) as u64).collect()
                    } else {
                        let mut s: Vec<u64> = ev.iter().map(|e| e.host_issue_ns).collect();
                        s.extend(ev.last().map(|e| e.host_return_ns));
                        s
                    };
                    let mut d: Vec<f64> =
                        ev.iter().filter_map(|e| Some((e.device_end_ns? - e.device_start_ns?) as f64)).collect();
                    let span =
                        match (ev.first().and_then(|e| e.device_start_ns), ev.last().and_then(|e| e.device_end_ns)) {
                            (Some(a), Some(b)) => (b - a) as f64 / ev.len() as f64 / 1e3,
                            _ => f64::NAN,
                        };
                    VariantRep {
                        host_iter_us: quantiles_us(&iteration_host_ns(&stamps)),
                        device_per_collective_us: span,
                        device_interval_median_us: stats::median(&mut d).map(|x| x / 1e3),
                    }
                };
                got.insert(v, r);
            }
            reps.push(got);
        }
        if args.cupti {
            backend.set_cupti(false)?;
        }
        if world.rank() == 0 {
            let summary = summarize_cuda_size(&variants, &reps);
            let line = serde_json::json!({
                "benchmark": "cuda-instrumentation-overhead",
                "ranks": world.size(),
                "bytes": bytes,
                "iters": args.iters,
                "reps": args.reps,
                "nccl_tuning": args.nccl_tuning,
                "summary": summary,
                "per_rep": reps,
                "method": "per repetition, in rotating order: bare ncclAllReduce loop vs the isolated phase as rank \
                    runs it (instrumented), and vs the bare loop with one timing event recorded before each call \
                        (bare+event: the timestamp's own cost, apart from the instrument's bookkeeping); host overhead \
                            = per-iteration host-time quantile difference (variant - bare); device inflation = device \
                                time per collective, variant / bare",
            });
            println!("{}", serde_json::json!({"bytes": bytes, "summary": line["summary"]}));
            all.push(line);
        }
    }
    if world.rank() == 0 {
        let anchors = backend.last_anchor_windows();
        let probe = serde_json::json!({
            "benchmark": "cuda-event-timer-and-anchor",
            "event_times_after_first_ns": probe_ns,
            "last_pass_anchor_windows": anchors.map(|(a, b)| serde_json::json!({"start": a, "end": b})),
            "note": "64 events recorded back to back on an idle stream: their spacing shows the timer's granularity \
                (and, where wider, the host cost of one cuEventRecord); anchor windows: intersection of the round \
                    trips the device_anchor fact describes",
        });
        println!("{probe}");
        all.push(probe);
        if let Some(p) = &args.json_out {
            fsutil::write_json_new(p, &all)?;
        }
    }
    Ok(())
}

/// Across repetitions: the distribution (median, min, max) of the host
/// overhead at p50/p90/p99 and of the device inflation, per instrumented variant.
fn summarize_cuda_size(variants: &[&str], reps: &[std::collections::BTreeMap<&str, VariantRep>]) -> serde_json::Value {
    let dist = |mut v: Vec<f64>| -> serde_json::Value {
        v.retain(|x| x.is_finite());
        let lo = v.iter().copied().reduce(f64::min);
        let hi = v.iter().copied().reduce(f64::max);
        serde_json::json!({"median": stats::median(&mut v), "min": lo, "max": hi})
    };
    let mut out = serde_json::Map::new();
    for &v in variants.iter().filter(|v| **v != "bare") {
        let q = |i: usize| dist(reps.iter().map(|r| r[v].host_iter_us[i] - r["bare"].host_iter_us[i]).collect());
        out.insert(
            v.to_string(),
            serde_json::json!({
                "host_overhead_us_p50": q(0),
                "host_overhead_us_p90": q(1),
                "host_overhead_us_p99": q(2),
                "bare_host_iter_us_p50": dist(reps.iter().map(|r| r["bare"].host_iter_us[0]).collect()),
                "device_inflation_ratio": dist(
                    reps.iter().map(|r| r[v].device_per_collective_us / r["bare"].device_per_collective_us).collect()
                ),
                "bare_device_per_collective_us": dist(
                    reps.iter().map(|r| r["bare"].device_per_collective_us).collect()
                ),
                "device_interval_median_us": dist(reps.iter().filter_map(|r| r[v].device_interval_median_us).collect()),
            }),
        );
    }
    serde_json::Value::Object(out)
}

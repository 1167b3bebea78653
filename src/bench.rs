//! `bench-overhead`: what instrumentation costs per collective.
//!
//! Runs under mpirun. CPU backend: alternates `reps` times between a bare
//! loop (issue + wait, nothing recorded) and the instrumented isolated phase
//! (clock reads, event records), `iters` collectives of one size each, and
//! reports on rank 0 the median per-collective time of each and their
//! difference. CUDA backend (`--backend cuda`): per size, a plain reference
//! loop (one CUDA event before and after `iters` back-to-back
//! `ncclAllReduce`s) against the instrumented isolated phase (wall time per
//! collective including the final synchronize, and the median of its
//! per-collective device intervals). A benchmark: it prints numbers and
//! asserts nothing.
use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::cli::BenchOverheadArgs;
use crate::clock::{monotonic_raw_ns, RankClock};
use crate::phases::Runner;
use crate::workload::{GemmShape, WorkloadSpec};
use anyhow::{Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::topology::Communicator;

/// Run the benchmark; rank 0 prints JSON lines.
pub fn run(args: BenchOverheadArgs) -> Result<()> {
    let bytes = crate::units::parse_bytes(&args.size)?;
    if args.backend == crate::backend::BackendChoice::Cuda {
        return run_cuda(&args);
    }
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = universe.world();
    let gemm = GemmShape { m: 8, n: 8, k: 8 };
    let spec = WorkloadSpec::isolated_only(bytes, args.iters, gemm);
    let mut backend = CpuBackend::new(&world, &crate::backend::BackendPlan::for_spec(&spec))?;
    let clock = RankClock::new(world.rank() as u32, &[]);
    let mut bare = Vec::new();
    let mut instrumented = Vec::new();
    for _ in 0..args.reps {
        world.barrier();
        let t0 = monotonic_raw_ns();
        for _ in 0..args.iters {
            backend.issue_allreduce(bytes, crate::shard::Dtype::F32)?;
            backend.wait_allreduce()?;
        }
        bare.push((monotonic_raw_ns() - t0) as f64 / args.iters as f64);
        world.barrier();
        let t0 = monotonic_raw_ns();
        let mut runner = Runner::new(&mut backend, &clock, &world, &spec, None, None, None, false);
        runner.run_all()?;
        instrumented.push((monotonic_raw_ns() - t0) as f64 / args.iters as f64);
        std::hint::black_box(runner.body);
    }
    if world.rank() == 0 {
        let b = crate::stats::median(&mut bare).unwrap_or(f64::NAN);
        let i = crate::stats::median(&mut instrumented).unwrap_or(f64::NAN);
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

fn run_cuda(args: &BenchOverheadArgs) -> Result<()> {
    if let Some(why) = crate::backend::cuda::unavailable_reason() {
        anyhow::bail!("--backend cuda is unavailable: {why}");
    }
    let sizes = crate::units::parse_size_list(&args.sizes)?;
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = universe.world();
    let local = mpi::topology::Communicator::split_shared(&world, world.rank());
    let clock = RankClock::new(world.rank() as u32, &[]);
    let max = sizes.iter().copied().max().unwrap_or(4);
    let gemm = GemmShape { m: 64, n: 64, k: 64 };
    let mut backend = crate::backend::cuda::CudaBackend::new(
        &world, local.rank() as u32, &args.nccl_lib, &crate::backend::BackendPlan::for_spec(&WorkloadSpec::isolated_only(max, args.iters, gemm)), clock.clone(), (args.iters as usize) * 2 + 8,
        std::time::Duration::from_secs(300),
        None,
    )?;
    for &bytes in &sizes {
        let spec = WorkloadSpec::isolated_only(bytes, args.iters, gemm);
        let mut reference = Vec::new();
        let mut wall = Vec::new();
        let mut device = Vec::new();
        for _ in 0..args.reps {
            world.barrier();
            reference.push(backend.reference_loop_ns(bytes, args.iters)?);
            world.barrier();
            let t0 = monotonic_raw_ns();
            let mut runner = Runner::new(&mut backend, &clock, &world, &spec, None, None, None, false);
            runner.run_all()?;
            wall.push((monotonic_raw_ns() - t0) as f64 / args.iters as f64);
            let mut d: Vec<f64> = runner
                .body
                .collectives
                .iter()
                .filter_map(|e| Some((e.device_end_ns? - e.device_start_ns?) as f64))
                .collect();
            device.push(crate::stats::median(&mut d).unwrap_or(f64::NAN));
        }
        if world.rank() == 0 {
            let m = |v: &mut Vec<f64>| crate::stats::median(v).unwrap_or(f64::NAN) / 1e3;
            let (r, w, d) = (m(&mut reference), m(&mut wall), m(&mut device));
            println!(
                "{}",
                serde_json::json!({
                    "benchmark": "cuda-instrumentation-overhead",
                    "ranks": world.size(),
                    "bytes": bytes,
                    "iters": args.iters,
                    "reps": args.reps,
                    "reference_us_per_collective": r,
                    "instrumented_wall_us_per_collective": w,
                    "instrumented_device_interval_median_us": d,
                    "overhead_us_per_collective": w - r,
                    "note": "reference: events around a tight ncclAllReduce loop; instrumented wall includes phase barriers and the final synchronize, amortised over iters",
                })
            );
        }
    }
    Ok(())
}

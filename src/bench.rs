//! `bench-overhead`: what instrumentation costs per collective on the CPU backend.
//!
//! Runs under mpirun. Alternates `reps` times between a bare loop (issue +
//! wait, nothing recorded) and the instrumented isolated phase (clock reads,
//! event records), each `iters` collectives of one size, and reports on rank 0
//! the median per-collective time of each and their difference. A benchmark:
//! it prints numbers, it asserts nothing.
use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::cli::BenchOverheadArgs;
use crate::clock::{monotonic_raw_ns, RankClock};
use crate::phases::Runner;
use crate::workload::{FillResidual, GemmShape, Phase, WorkloadSpec};
use anyhow::{Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::topology::Communicator;

/// Run the benchmark; rank 0 prints one JSON line.
pub fn run(args: BenchOverheadArgs) -> Result<()> {
    let bytes = crate::units::parse_bytes(&args.size)?;
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = universe.world();
    let gemm = GemmShape { m: 8, n: 8, k: 8 };
    let mut backend = CpuBackend::new(&world, bytes, gemm, 4096)?;
    let clock = RankClock::new(world.rank() as u32, &[]);
    let spec = WorkloadSpec {
        phases: vec![Phase::Isolated],
        tokens: 1,
        warmup_tokens: 0,
        layers: 1,
        sizes_bytes: vec![bytes],
        gemm,
        iters: args.iters,
        warmup_iters: 0,
        check: 0,
        fill_residual: FillResidual::Carry,
        membound_bytes: 4096,
    };
    let mut bare = Vec::new();
    let mut instrumented = Vec::new();
    for _ in 0..args.reps {
        world.barrier();
        let t0 = monotonic_raw_ns();
        for _ in 0..args.iters {
            backend.issue_allreduce(bytes)?;
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

//! Start-up of `rank` ([`run`], its entry point): validate the arguments,
//! initialise MPI (timed as cold start), bind the model to the world, capture
//! identity and the source trace, make the run directory on rank 0 (never an
//! existing one) and start the backend, then hand over to `finish_rank`. Any
//! error after MPI is up ends the whole job.
use super::fatal::end_job_on_error;
use super::finish::{finish_rank, RankContext};
use super::plan::{check_ranges, plan, Plan};
use super::tuning::request_nccl_tuning_log;
use super::{sweep, RankOptions};
use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::CudaBackend;
use crate::backend::cuda::CudaOptions;
use crate::backend::mpi_deadline::{barrier, broadcast, Op};
use crate::core::clock::{monotonic_raw_ns, unix_ms, RankClock};
use crate::core::identity;
use crate::core::refusal::{self, Code};
use crate::evidence::schedule::{CallStep, Target};
use crate::evidence::shard::{BackendKind, Dtype};
use crate::evidence::{run, trace};
use anyhow::{bail, Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::path::PathBuf;

/// Entry point of `commcanary rank`.
pub fn run(args: RankOptions) -> Result<()> {
    check_ranges(&args).map_err(refusal::or_code(Code::BadArgument))?;
    let plan = plan(&args).map_err(refusal::or_code(Code::BadArgument))?;
    if args.nccl_tuning {
        if plan.backend != BackendKind::Cuda {
            crate::refuse!(Code::BadArgument, "--nccl-tuning needs the cuda backend (NCCL's tuner is what it records)");
        }
        request_nccl_tuning_log(&args.out)?;
    }
    let t_before_init = monotonic_raw_ns();
    let universe = mpi::initialize().context("MPI is already initialised or could not be initialised")?;
    let mpi_init_ns = monotonic_raw_ns() - t_before_init;
    let world = universe.world();
    end_job_on_error(&world, "commcanary", || run_rank(&args, plan, &world, mpi_init_ns))
}

fn broadcast_run_dir(world: &SimpleCommunicator, args: &RankOptions) -> Result<(String, PathBuf)> {
    let mut mine = None;
    if world.rank() == 0 {
        let res: Result<String> = (|| {
            let id = args.run_id.clone().unwrap_or_else(run::new_run_id);
            std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
            let dir = args.out.join(&id);
            if let Err(e) = std::fs::create_dir(&dir) {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    crate::refuse!(
                        Code::AlreadyExists,
                        "run directory {} exists (a run is never overwritten)",
                        dir.display()
                    );
                }
                return Err(anyhow::Error::new(e)
                    .context(format!("creating run directory {} (a run is never overwritten)", dir.display())));
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
    let op = Op { what: "broadcast of the run directory", phase: "start-up", peer: Some(0) };
    let text = broadcast_text(world, mine.as_deref(), limit, op)?.unwrap_or_default();
    match text.strip_prefix('+') {
        Some(id) => Ok((id.to_string(), args.out.join(id))),
        None => bail!("rank 0 could not prepare the output directory: {}", text.strip_prefix('!').unwrap_or(&text)),
    }
}

/// Rank 0's `text` (cut to 255 bytes) on every rank, within `limit`; `None`
/// where rank 0 passed none or an empty one.
fn broadcast_text(
    world: &SimpleCommunicator,
    text: Option<&str>,
    limit: std::time::Duration,
    op: Op,
) -> Result<Option<String>> {
    let mut buf = [0u8; 256];
    if world.rank() == 0 {
        if let Some(t) = text {
            let n = t.len().min(buf.len() - 1);
            buf[..n].copy_from_slice(&t.as_bytes()[..n]);
        }
    }
    broadcast(world, 0, &mut buf, limit, op)?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok((end > 0).then(|| String::from_utf8_lossy(&buf[..end]).into_owned()))
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
            "--check with bf16 all-reduces: the check's sums are exact in bf16 up to {} ranks and this job has {size}; \
                pass --check 0 or --dtype f32",
            crate::backend::BF16_EXACT_MAX_WORLD
        );
    }
    let limit = std::time::Duration::from_secs_f64(args.collective_timeout_s);
    // MPI_Comm_split_type has no nonblocking form: every rank must have arrived first
    barrier(world, limit, Op { what: "barrier before the node split", phase: "start-up", peer: None })?;
    let local = world.split_shared(world.rank());
    let (local_rank, local_size) = (local.rank() as u32, local.size() as u32);
    let started_unix_ms = unix_ms();
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
    let identity = identity::capture(rank, size, local_rank, local_size);
    let file_trace = match args.trace.as_deref() {
        None => None,
        Some(p) if trace::is_comm_trace(p)? => Some(trace::from_comm_trace(
            p,
            rank,
            size,
            (plan.spec.warmup_tokens, plan.spec.tokens),
            args.trace_allreduce_only,
        )?),
        Some(p) => {
            if args.trace_allreduce_only {
                bail!(
                    "--trace-allreduce-only applies to an imported trace (commcanary import); {} is a joined trace",
                    p.display()
                );
            }
            Some(trace::from_joined_file(p, rank)?)
        }
    };
    if let (Some(t), Some(p)) = (&file_trace, &args.trace) {
        // refused before the run directory is made: only the cpu backend runs point-to-point
        if let (Some(s), true) = (t.prepared.as_ref().and_then(|p| p.p2p.as_ref()), plan.backend != BackendKind::Cpu) {
            crate::refuse!(
                Code::BadArgument,
                "--trace {}: rank {rank} has {} point-to-point operations (mpi.p2p of an MPI capture), which only the \
                    cpu backend runs; run with --backend cpu, or pass --trace-allreduce-only (they are then left out \
                        and counted)",
                p.display(),
                s.ops.len()
            );
        }
        // the backend's buffers are of the run's dtype: the world all-reduces must be of it (the trace executor's are
        // of their own)
        let world = |c: &&CallStep| matches!(c.target, Target::World { .. });
        if let Some(e) = t.calls().filter(world).find(|c| c.dtype != plan.spec.dtype.into()) {
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
    barrier(world, limit, Op { what: "barrier before backend initialisation", phase: "start-up", peer: None })?;
    let t0 = clock.now_ns();
    let bplan = crate::backend::BackendPlan::for_spec_and_trace(&plan.spec, file_trace.as_ref());
    match plan.backend {
        BackendKind::Cpu => {
            let mut b = CpuBackend::new(world, &bplan)?
                .with_timeout(std::time::Duration::from_secs_f64(args.collective_timeout_s));
            finish_rank(cx, file_trace, &mut b, clock.now_ns() - t0)
        }
        BackendKind::Cuda => {
            let o = CudaOptions {
                local_rank,
                nccl_path: &args.nccl_lib,
                events_hint: crate::backend::BackendPlan::device_events_per_pass(&plan.spec, file_trace.as_ref()),
                timeout: std::time::Duration::from_secs_f64(args.collective_timeout_s),
                gpu: args.gpu,
                cupti: args.cupti,
            };
            let mut b = CudaBackend::new(world, &bplan, clock.clone(), o)?;
            finish_rank(cx, file_trace, &mut b, clock.now_ns() - t0)
        }
    }
}

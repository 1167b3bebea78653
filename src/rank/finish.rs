//! The rank once its backend is up (`finish_rank`, on any backend): clock
//! window 1, the phases, clock window 2, then the shard written to the run
//! directory, the digests gathered and `run.json` written on rank 0, and the
//! isolated sweep's table printed (or written with `-J`). A wrong result found
//! by `--check` fails the rank only after its evidence is on disk.
use super::calibration::{self, clock_window};
use super::phases::{Runner, RunnerControls};
use super::plan::Plan;
use super::tuning::collect_tuning;
use super::{sweep, RankOptions};
use crate::backend::mpi_deadline::{barrier, gather, test_stop_point, Op};
use crate::backend::Backend;
use crate::core::clock::{unix_ms, RankClock};
use crate::core::fsutil;
use crate::core::identity::EnvIdentity;
use crate::core::workload::{Phase, ReduceOp, WorkloadSpec};
use crate::evidence::join;
use crate::evidence::run::{write_run_record, RunRecord, ShardRef, RUN_FORMAT_VERSION};
use crate::evidence::schedule::Schedule;
use crate::evidence::shard::{
    shard_file_name, BackendKind, ColdStart, Dtype, ProcessGroup, Shard, ShardHeader, Unmeasured, SHARD_FORMAT_VERSION,
};
use anyhow::{bail, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::path::PathBuf;

/// Per-rank facts gathered before the backend starts.
pub(super) struct RankContext<'a> {
    pub(super) args: &'a RankOptions,
    pub(super) plan: &'a Plan,
    pub(super) world: &'a SimpleCommunicator,
    pub(super) clock: RankClock,
    pub(super) identity: EnvIdentity,
    pub(super) run_id: String,
    pub(super) dir: PathBuf,
    pub(super) started_unix_ms: u64,
    pub(super) local_rank: u32,
    pub(super) local_size: u32,
    pub(super) cold_start_mpi_ns: u64,
}

/// Clock windows, phases, shard and run record, on any backend.
pub(super) fn finish_rank<B: Backend>(
    cx: RankContext<'_>,
    file_trace: Option<Schedule>,
    backend: &mut B,
    backend_init_ns: u64,
) -> Result<()> {
    let RankContext {
        args,
        plan,
        world,
        clock,
        identity,
        run_id,
        dir,
        started_unix_ms,
        local_rank,
        local_size,
        cold_start_mpi_ns,
    } = cx;
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    let identity_sha256 = identity.digest();

    let limit = std::time::Duration::from_secs_f64(args.collective_timeout_s);
    let topo = calibration::topology(world, args, &plan.clock_injections, &identity.host, limit)?;
    let start_window =
        topo.as_ref().map(|t| clock_window(world, &clock, args.clock_samples, limit, "start", t)).transpose()?;

    // group 0 is the world; an imported trace's other collectives run on its own groups
    let mut groups = vec![ProcessGroup { id: 0, members: (0..size).collect(), name: None }];
    groups.extend(file_trace.as_ref().and_then(|t| t.prepared.as_ref()).map(|o| o.groups.clone()).unwrap_or_default());
    // the isolated sweep of another kind or reduction is recorded on a world group of its own
    let sweep_group = (plan.spec.phases.contains(&Phase::Isolated) && plan.spec.sweep_has_own_group()).then(|| {
        let id = groups.iter().map(|g| g.id).max().unwrap_or(0) + 1;
        groups.push(ProcessGroup { id, members: (0..size).collect(), name: Some(sweep::SWEEP_GROUP_NAME.into()) });
        id
    });
    let controls = RunnerControls { delay: plan.delay, fault: plan.fault, file_trace, progress: !args.quiet };
    let mut runner = Runner::new(backend, &clock, &plan.spec, controls)
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
        let events: Vec<(u64, u64)> =
            body.collectives.iter().filter(|e| e.group == 0).map(|e| (e.seq, e.bytes)).collect();
        Some(collect_tuning(&args.out, &dir, rank, &events)?)
    } else {
        None
    };

    let clock_record = match (&topo, start_window) {
        (Some(topo), Some(start)) => Some(calibration::end_record(world, &clock, args, limit, topo, start)?),
        _ => None,
    };

    let header =
        ShardHeader {
            format_version: SHARD_FORMAT_VERSION,
            run_id: run_id.clone(),
            rank,
            world_size: size,
            host: identity.host.clone(),
            local_rank,
            local_size,
            backend: backend.info().kind,
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
                .chain(plan.spec.graph.then(|| {
                    Unmeasured {
                field: "collectives (graph mode)".into(),
                reason: "blocking and async ran as one CUDA graph per token: per-collective and per-GEMM times are not \
                    measured and no collective events are recorded; token start and end are events recorded on the \
                        compute stream around each graph launch".into(),
            }
                }))
                .chain(sweep_unmeasured(&plan.spec, backend.info().kind))
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
    test_stop_point("gather", rank);
    let op = Op { what: "gather of the shard digests", phase: "after the shards are written", peer: None };
    if let Some(all) = gather(world, 0, &mine[..], limit, op)? {
        let shards: Vec<ShardRef> = all
            .chunks(mine.len())
            .enumerate()
            .map(|(r, c)| {
                let hend = c[40..].iter().position(|&b| b == 0).map(|p| 40 + p).unwrap_or(c.len());
                ShardRef {
                    rank: r as u32,
                    file: shard_file_name(r as u32),
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
            finished_unix_ms: unix_ms(),
        };
        write_run_record(&dir, &record)?;
        println!("run {run_id}: {size} shards and run.json written to {}", dir.display());
        if !args.quiet {
            eprintln!("commcanary: verify and summarize with: commcanary join {}", dir.display());
        }
    }
    // A wrong result recorded by the isolated phase fails the rank only now,
    // once rank 0 has written run.json, so the evidence is complete on disk.
    barrier(world, limit, Op { what: "final barrier", phase: "after run.json is written", peer: None })?;
    // As nccl-tests ends with its table: the isolated phase's per size, from
    // the verified run (a join refusal is printed, and the run kept as it is).
    if rank == 0 && plan.spec.phases.contains(&Phase::Isolated) && (!args.quiet || args.json.is_some()) {
        match join::join_dir(&dir) {
            Ok(j) => {
                let rows = join::isolated_sizes(&j);
                if !args.quiet {
                    print!("{}", join::render_isolated(&rows));
                }
                if let Some(path) = &args.json {
                    fsutil::write_json_new(path, &sweep::report(&j, &rows))?;
                    if !args.quiet {
                        println!("# Writing JSON output to {}", path.display());
                    }
                }
            }
            Err(e) if args.json.is_some() => {
                return Err(e.context(format!("-J: joining {} for the sweep's table", dir.display())))
            }
            Err(e) => eprintln!("commcanary: no per-size table: join {}: {e:#}", dir.display()),
        }
    }
    if let Some(c) = shard.header.checks.iter().find(|c| c.wrong_elements > 0) {
        bail!(
            "result check failed on rank {rank}, phase {}, group {} seq {} ({} bytes): {} wrong elements, first: {}; \
                the run is kept in {} and must not be ranked",
            c.phase,
            c.group,
            c.seq,
            c.bytes,
            c.wrong_elements,
            c.first_wrong.as_deref().unwrap_or("?"),
            dir.display()
        );
    }
    Ok(())
}

/// What the isolated sweep of another kind or reduction does not measure, each
/// with its reason: device intervals of another reduction than the sum on GPUs
/// (a sum runs back to back on world calls), and bf16 arithmetic on the cpu backend.
fn sweep_unmeasured(spec: &WorkloadSpec, backend: BackendKind) -> Vec<Unmeasured> {
    let mut v = Vec::new();
    if !spec.phases.contains(&Phase::Isolated) || !spec.sweep_has_own_group() {
        return v;
    }
    let kind = spec.sweep_kind();
    if backend == BackendKind::Cuda && spec.sweep_op() != ReduceOp::Sum {
        v.push(Unmeasured {
            field: format!("isolated {kind}: device_start_ns, device_end_ns"),
            reason:
                "the sweep runs through replay-trace's NCCL executor: each iteration is timed on the host from the \
                NCCL call to the end of a stream synchronization, not by device events between back-to-back launches \
                    as nccl-tests times its loop"
                    .into(),
        });
    }
    if backend == BackendKind::Cpu && kind.reduces() && spec.dtype == Dtype::Bf16 {
        let reason = if spec.sweep_op() == ReduceOp::Sum {
            "MPI has no bf16 type: the world call moves bf16's bytes as MPI_UINT16_T and sums them as integers; sizes \
                and bandwidths are bf16's"
        } else {
            "MPI has no bf16 type: the cpu executor reduces bf16 as f32 (twice the bytes on the wire) and rounds back; \
                sizes and bandwidths are bf16's"
        };
        v.push(Unmeasured { field: format!("isolated {kind}: bf16 wire bytes"), reason: reason.into() });
    }
    v
}

//! `replay-trace`: consumes an imported trace and the backend asked for,
//! runs this rank's collectives under MPI through the phases' one driver (the
//! trace walked as [`TraceWalk::Replay`], the replay phase on the rank clock)
//! and produces `replay-trace.rank-N.json`, rank 0's index `replay-trace.json`
//! (formats in [`crate::evidence::commtrace::replay`]) and each rank's printed
//! summary. Refuses, before MPI starts, an output directory that holds a
//! replay, a paced replay whose gaps pass the replay bound, and an MPI trace's
//! point-to-point program on the cuda backend; before any communicator, a
//! reduction the backend cannot run. Call [`run`].
use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{trace_exec, CudaBackend, CudaOptions};
use crate::backend::trace_share::TraceShare;
use crate::backend::{Backend, BackendPlan};
use crate::core::clock::RankClock;
use crate::core::refusal::Code;
use crate::core::workload::{GemmShape, Phase, ReduceOp, WorkloadSpec};
use crate::core::{clock, fsutil, identity, limits, stats};
use crate::evidence::commtrace::call_order::NonblockingPlan;
use crate::evidence::commtrace::exec::{
    self, ExecRecord, Pace, ReplayOptions, ReplayOutput, WorkloadReport, WORKLOAD_REPORT_FORMAT_VERSION,
};
use crate::evidence::commtrace::replay::{
    ReplayFile, ReplayHeader, ReplayIndex, ReplayIndexRank, REPLAY_FORMAT_VERSION, REPLAY_INDEX_FILE,
};
use crate::evidence::commtrace::summary::compare_kernels;
use crate::evidence::commtrace::{p2p, workload_plan, CollectiveKind, CommTrace, TraceDtype};
use crate::evidence::schedule::Schedule;
use crate::evidence::shard::BackendKind;
use crate::evidence::trace::{walk_comm_trace, ReplayPace, TraceWalk};
use crate::rank::fatal;
use crate::rank::phases::{Fault, Runner, RunnerControls};
use anyhow::{anyhow, bail, Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Executor of a whole trace on one rank, given the trace file's SHA-256.
type ReplayRun<'a> = dyn FnMut(&SimpleCommunicator, &CommTrace, &str) -> Result<ReplayOutput> + 'a;

/// `commcanary replay-trace`.
#[derive(clap::Args, Debug)]
pub struct ReplayTraceArgs {
    /// Communication trace written by `commcanary import`.
    pub trace: PathBuf,
    /// Directory for replay-trace.rank-N.json (created if missing; never overwritten).
    #[arg(short = 'o', long, default_value = "out")]
    pub out: PathBuf,
    /// Validate every collective's result.
    #[arg(long)]
    pub check: bool,
    /// Reduction of all-reduce, reduce and reduce-scatter (default sum: the traces do not record it).
    #[arg(long, value_enum)]
    pub op: Option<ReduceOp>,
    /// Pace by the trace's gaps waited on the host (`gaps`), back to back
    /// (`none`), by the recorded compute re-created on the device
    /// (`workload`, cuda), or by the gaps spun on the device (`device-gaps`, cuda).
    #[arg(long, value_enum, default_value = "gaps")]
    pub pace: Pace,
    /// Negative control: corrupt every result on this rank (--check must fail).
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<u32>,
    /// Backend: cpu (MPI sub-communicators), cuda (NCCL sub-communicators, one GPU per rank), or auto.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: crate::backend::BackendChoice,
    /// NCCL library for the cuda backend: an explicit path, or a bare name resolved by the system loader.
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Skip the untimed warm-up pass of the whole trace (first-use setup of connections then lands in the timed pass).
    #[arg(long)]
    pub no_warmup: bool,
    /// Record the NCCL kernels each collective ran (CUPTI; cuda backend) and compare their families with the trace's
    /// kernels.
    #[arg(long)]
    pub cupti: bool,
}

/// `commcanary replay-trace`: the backend chosen (`cuda` refuses an MPI
/// trace's point-to-point program before the GPU is looked for), the
/// settings named in every rank's header, then [`replay_command`].
pub(crate) fn run(a: &ReplayTraceArgs) -> Result<()> {
    if a.backend == crate::backend::BackendChoice::Cuda {
        // refused before the GPU is even looked for (a decoding fault is replay_command's to report)
        if let Ok(t) = CommTrace::read(&a.trace) {
            p2p::refuse_on_backend_without_p2p(&t, &a.trace, "cuda")?;
        }
    }
    let cuda = a.backend.resolve()?.0 == BackendKind::Cuda;
    eprintln!("replay-trace: backend {}", if cuda { "cuda (NCCL)" } else { "cpu (MPI)" });
    let (op, pace, check, corrupt, warmup, cupti) = (a.op, a.pace, a.check, a.corrupt_rank, !a.no_warmup, a.cupti);
    if cupti && !cuda {
        bail!("--cupti needs the cuda backend (CUPTI records GPU kernels)");
    }
    if cupti && matches!(pace, Pace::Workload | Pace::DeviceGaps) {
        bail!(
            "--cupti is not built for --pace workload or device-gaps (its kernels are matched to host call windows, \
                which these paces do not have)"
        );
    }
    if !cuda && pace == Pace::DeviceGaps {
        bail!(
            "--pace device-gaps needs --backend cuda: it spins on the device (on cpu, --pace gaps waits the same \
                gaps on the host)"
        );
    }
    let paced = pace != Pace::None;
    let word = |v: Option<clap::builder::PossibleValue>| v.map_or("?".to_string(), |p| p.get_name().to_string());
    let mut settings = vec![format!("--pace {}", word(clap::ValueEnum::to_possible_value(&pace)))];
    settings.push(match op {
        Some(o) => format!("--op {}", word(clap::ValueEnum::to_possible_value(&o))),
        None => "--op sum (default)".into(),
    });
    settings.extend(check.then(|| "--check".to_string()));
    settings.extend((!warmup).then(|| "--no-warmup".to_string()));
    settings.extend(cupti.then(|| "--cupti".to_string()));
    settings.extend(corrupt.map(|r| format!("--corrupt-rank {r}")));
    let opts = ReplayOptions { op, pace, check, warmup, corrupt_rank: corrupt };
    let backend = if cuda { "cuda" } else { "cpu" };
    replay_command(&a.trace, &a.out, paced, backend, settings, &mut |world, trace, sha256| {
        trace.check_world_size(world.size() as u32)?;
        // what the backend cannot run is refused on every rank alike, before any communicator is made
        exec::refuse_unsupported(trace, backend, &|c| match cuda {
            true => exec::nccl_cannot_run(c),
            false => {
                c.op.filter(|&o| exec::replay_op(o).is_none())
                    .map(|o| format!("reduction {} is not replayed (sum, prod, max and min are)", o.name()))
            }
        })?;
        let timeout = std::time::Duration::from_secs(300);
        if cuda && matches!(pace, Pace::Workload | Pace::DeviceGaps) {
            return trace_exec::workload(world, &a.nccl_lib, trace, &opts, timeout);
        }
        let rank = world.rank() as u32;
        let mine =
            trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
        // the cpu backend's workload pace: the recorded compute before each collective, waited on the host
        let plan = match pace {
            Pace::Workload => Some(workload_plan::plan(mine)?),
            _ => None,
        };
        let walk = TraceWalk::Replay {
            op,
            pace: match (&plan, pace) {
                (Some(p), _) => {
                    ReplayPace::Given((0..mine.collectives.len()).map(|i| p.compute_before_ns(i).1).collect())
                }
                (None, Pace::None) => ReplayPace::None,
                (None, _) => ReplayPace::Gaps,
            },
        };
        let ranks = (rank, world.size() as u32);
        let schedule = walk_comm_trace(trace, &a.trace, sha256.to_string(), ranks, (warmup as u32, 1), &walk)?;
        let spec = replay_spec(check);
        let bplan = BackendPlan::for_spec(&spec);
        let clock = RankClock::new(rank, &[]);
        let (mut out, pass_host_ns) = if cuda {
            let local_rank = world.split_shared(world.rank()).rank() as u32;
            let events_hint = BackendPlan::device_events_per_pass(&spec, Some(&schedule));
            let o = CudaOptions { local_rank, nccl_path: &a.nccl_lib, events_hint, timeout, gpu: None, cupti };
            let mut b = CudaBackend::new(world, &bplan, clock.clone(), o)?;
            or_abort(world, replay_on(&mut b, &clock, &spec, trace, schedule, (&opts, cupti)))
        } else {
            let mut b = CpuBackend::new(world, &bplan)?;
            or_abort(world, replay_on(&mut b, &clock, &spec, trace, schedule, (&opts, false)))
        };
        if let Some(plan) = plan {
            let (compute_ops, compute_recorded_ns) = plan.compute_total();
            for r in &mut out.records {
                let (ops, ns) = plan.compute_before_ns(r.index as usize);
                (r.compute_ops, r.compute_recorded_ns) = (Some(ops), Some(ns));
            }
            out.workload = Some(WorkloadReport {
                format_version: WORKLOAD_REPORT_FORMAT_VERSION,
                stands_for: "compute".into(),
                rank,
                backend: "cpu".into(),
                compute_model: "a host wait of each kernel's recorded duration (the replay phase's pacing: a spin, \
                    or a sleep where ranks share cores) from the previous call's end, the kernels before a collective \
                    summed in launch order (one stream: kernels the source ran concurrently count in sequence)"
                    .into(),
                streams: plan.stream_names(),
                dependencies_from_timeline: plan.timeline_complete,
                cross_stream_waits: plan.cross_stream_waits(),
                compute_ops,
                compute_recorded_ns,
                compute_launches: None,
                collectives: out.records.len() as u32,
                gated: None,
                gate_lookahead_ops: None,
                spin: None,
                gap_transition: None,
                pass_device_ns: None,
                pass_host_ns,
                trace_span_ns: plan.trace_span_ns(),
            });
        }
        Ok(out)
    })
}

/// `r`, or the job ended on its error while the backend still holds its
/// communicators: a peer may be inside a collective, and destroying them
/// would wait for it.
fn or_abort<T>(world: &SimpleCommunicator, r: Result<T>) -> T {
    r.unwrap_or_else(|e| {
        fatal::write_line_stderr(&format!("commcanary replay-trace rank {}: error: {e:#}", world.rank()));
        world.abort(2)
    })
}

/// What the phase runner needs of a workload to replay a trace: the replay
/// phase alone, every call checked with `check`; the smallest buffers and
/// GEMM (the trace's collectives get their own, the walk runs no compute).
fn replay_spec(check: bool) -> WorkloadSpec {
    let mut spec = WorkloadSpec::isolated_only(64, 1, GemmShape { m: 1, n: 1, k: 1 });
    spec.phases = vec![Phase::Replay];
    spec.check = if check { u32::MAX } else { 0 };
    spec
}

/// Run `schedule` (this rank's walk of `trace`) as the replay phase on
/// `backend`, checks at the pass's end, and turn the timed pass's events into
/// the replay's records: the recorded reduction or `--op`, the wire bytes of
/// the backend, the host call's time, the gap paced (else the time since the
/// previous collective returned), and with CUPTI the kernels that started in
/// each call; the point-to-point pass and the nonblocking posts counted.
/// Returns them and the timed pass's host time.
fn replay_on<B: Backend>(
    backend: &mut B,
    clock: &RankClock,
    spec: &WorkloadSpec,
    trace: &CommTrace,
    schedule: Schedule,
    (o, cupti): (&ReplayOptions, bool),
) -> Result<(ReplayOutput, u64)> {
    let info = backend.info();
    let rank = info.rank;
    // asked for, CUPTI that did not start is refused, not replayed without kernels
    let no_kernels = |b: &B| b.unmeasured().into_iter().filter(|u| u.field == "kernels").map(|u| u.reason);
    if let Some(why) = no_kernels(backend).next().filter(|_| cupti) {
        bail!("--cupti: {why}");
    }
    let p2p_plan = schedule.prepared.as_ref().and_then(|p| p.p2p.clone());
    let fault = o.corrupt_rank.map(|rank| Fault::WrongSum { rank });
    let controls = RunnerControls { fault, file_trace: Some(schedule), ..Default::default() };
    let (body, runs) = {
        let mut runner = Runner::new(&mut *backend, clock, spec, controls).with_checks_at_pass_end();
        runner.run_all()?;
        (std::mem::take(&mut runner.body), std::mem::take(&mut runner.phase_runs))
    };
    let mine = &trace.ranks.iter().find(|r| r.rank == rank).context("internal: no rank")?.collectives;
    let timed: Vec<_> = body.collectives.iter().filter(|e| !e.warmup).collect();
    let mut records = Vec::with_capacity(timed.len());
    let token = body.tokens.iter().find(|t| !t.warmup).context("internal: no timed pass")?;
    let mut prev_return = token.start_ns;
    for e in &timed {
        let i = e.layer.context("internal: a replayed call without its position")? as usize;
        let c = mine.get(i).context("internal: a call past the trace")?;
        let members = trace.group(&c.group).map(|g| g.members.clone()).unwrap_or_default();
        let wire = TraceShare::new(c, rank, &members)?.wire_bytes(info.kind);
        records.push(ExecRecord {
            target_gap_ns: e.replay.map(|r| r.target_gap_ns),
            actual_gap_ns: e.replay.map_or(e.host_issue_ns.saturating_sub(prev_return), |r| r.actual_gap_ns),
            elapsed_ns: e.host_return_ns.saturating_sub(e.host_issue_ns),
            ..ExecRecord::untimed(i, c, rank, exec::reduction(c, o.op), e.checked, wire)
        });
        prev_return = e.host_return_ns;
    }
    let windows: Vec<(u64, u64)> = timed.iter().map(|e| (e.host_issue_ns, e.host_return_ns)).collect();
    let run = runs.first().context("internal: no replay phase")?;
    if cupti {
        let kernels: Vec<(u64, &str)> =
            body.kernels.iter().map(|k| (k.start_ns, body.kernel_names[k.name as usize].as_str())).collect();
        let by = kernels_in_windows(&kernels, &windows, 2_000);
        let within: usize = by.iter().map(Vec::len).sum();
        let lost: Vec<String> = no_kernels(backend).collect();
        eprintln!(
            "replay-trace rank {rank}: CUPTI recorded {} kernels, {within} within the {} timed calls{}",
            kernels.len(),
            windows.len(),
            lost.iter().map(|l| format!("; {l}")).collect::<String>()
        );
        for (r, k) in records.iter_mut().zip(by) {
            r.kernels = Some(k);
        }
    }
    let p2p = match (p2p_plan, run.p2p.iter().find(|p| !p.warmup)) {
        (Some(plan), Some(pass)) => Some(plan.report(pass.receives_checked, pass.host_ns)),
        _ => None,
    };
    let nonblocking = NonblockingPlan::of(trace, rank, mine.len()).map_err(|e| anyhow!("rank {rank}: {e}"))?;
    let output = ReplayOutput { records, workload: None, p2p, nonblocking: nonblocking.map(|n| n.report()) };
    Ok((output, token.end_ns.saturating_sub(token.start_ns)))
}

/// Kernels whose start (host ns) falls within each timed call's window
/// (issue, return), in start order; a kernel is kept by the call whose
/// window, widened by `slack_ns`, holds its start, the nearest where
/// back-to-back calls' widened windows overlap.
fn kernels_in_windows(kernels: &[(u64, &str)], windows: &[(u64, u64)], slack_ns: u64) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); windows.len()];
    let mut sorted = kernels.to_vec();
    sorted.sort_by_key(|k| k.0);
    for (start, name) in sorted {
        let distance = |&(a, b): &(u64, u64)| a.saturating_sub(start).max(start.saturating_sub(b));
        let best = windows
            .iter()
            .enumerate()
            .map(|(i, w)| (i, distance(w)))
            .filter(|&(_, d)| d <= slack_ns)
            .min_by_key(|x| x.1);
        if let Some((i, _)) = best {
            out[i].push(name.to_string());
        }
    }
    out
}

/// Involuntary context switches of this process so far (`getrusage`'s
/// `ru_nivcsw`): the times the kernel took the core away from it.
fn involuntary_switches() -> Option<i64> {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF and a valid pointer to that struct.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0).then_some(u.ru_nivcsw)
}

/// A gap this far off its target is a scheduling event, not pacing error.
const GAP_OFF_NS: u64 = 1_000_000;

/// Refuse, before MPI starts, an output directory that already holds a replay's files.
fn refuse_existing_replay(out: &Path, world_size: u32) -> Result<()> {
    let names = std::iter::once(REPLAY_INDEX_FILE.to_string()).chain(
        (0..world_size)
            .flat_map(|r| [format!("replay-trace.rank-{r}.json"), format!("replay-trace.rank-{r}.workload.json")]),
    );
    for n in names {
        let p = out.join(n);
        if p.symlink_metadata().is_ok() {
            crate::refuse!(
                Code::AlreadyExists,
                "{} exists; replay-trace never overwrites a replay: choose another --out",
                p.display()
            );
        }
    }
    Ok(())
}

/// Gather every rank's (host, file digests) at rank 0 and write the index there.
fn write_replay_index(
    world: &mpi::topology::SimpleCommunicator,
    out: &Path,
    trace_sha256: &str,
    files: &[(String, String)],
) -> Result<()> {
    use mpi::traits::*;
    const SLOT: usize = 4096;
    let host = identity::hostname();
    let mine = serde_json::to_vec(&(host, files))?;
    if mine.len() > SLOT {
        bail!("a rank's file list is {} bytes, more than the {SLOT} of its slot", mine.len());
    }
    let mut send = vec![0u8; SLOT];
    send[..mine.len()].copy_from_slice(&mine);
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    if world.rank() != 0 {
        root.gather_into(&send[..]);
        return Ok(());
    }
    let mut all = vec![0u8; SLOT * n];
    root.gather_into_root(&send[..], &mut all[..]);
    let mut ranks = Vec::new();
    for (r, slot) in all.chunks(SLOT).enumerate() {
        let end = slot.iter().position(|b| *b == 0).unwrap_or(SLOT);
        let (host, files): (String, Vec<(String, String)>) =
            serde_json::from_slice(&slot[..end]).with_context(|| format!("rank {r}'s file list"))?;
        ranks.push(ReplayIndexRank { rank: r as u32, host, files });
    }
    let index = ReplayIndex { format_version: 1, trace_sha256: trace_sha256.to_string(), world_size: n as u32, ranks };
    fsutil::write_json_new(&out.join(REPLAY_INDEX_FILE), &index)
}

/// `replay-trace`: run this rank's collectives of an imported trace through
/// `run` (MPI or NCCL), write its files and print its summary (docs/WORKLOADS.md).
/// A replay `paced` by the trace is refused before MPI starts when a rank's gap
/// passes the one bound of every replay ([`crate::core::limits::check_replay_gaps`]).
pub(crate) fn replay_command(
    trace: &Path,
    out: &Path,
    paced: bool,
    backend: &str,
    settings: Vec<String>,
    run: &mut ReplayRun,
) -> Result<()> {
    let path = trace;
    // the header's digest is of exactly the bytes replayed
    let (trace, trace_sha256) = CommTrace::read_with_sha256(trace)?;
    refuse_existing_replay(out, trace.world_size)?;
    if paced {
        for r in &trace.ranks {
            if let Some(gaps) = exec::gaps_ns(&r.collectives) {
                limits::check_replay_gaps(gaps, &|i| {
                    let c = &r.collectives[i];
                    format!("{}: rank {}'s {} #{} on group {:?}", path.display(), r.rank, c.kind.name(), c.seq, c.group)
                })?;
            }
        }
    }
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = mpi::topology::Communicator::duplicate(&universe.world());
    let rank = mpi::topology::Communicator::rank(&world) as u32;
    let switches_before = involuntary_switches();
    let started_unix_ms = clock::unix_ms();
    // A failing rank aborts the whole job (its peers may be blocked in a collective).
    let (records, workload, p2p, nonblocking) = match run(&world, &trace, &trace_sha256).and_then(|r| {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let header = ReplayHeader {
            tool: format!("commcanary {}", identity::VERSION_LONG),
            trace_path: path.display().to_string(),
            trace_sha256: trace_sha256.clone(),
            rank,
            world_size: mpi::topology::Communicator::size(&world) as u32,
            host: identity::hostname(),
            backend: backend.to_string(),
            settings: settings.clone(),
            started_unix_ms,
            finished_unix_ms: clock::unix_ms(),
        };
        let file = ReplayFile {
            format_version: REPLAY_FORMAT_VERSION,
            header,
            records: r.records,
            p2p: r.p2p,
            nonblocking: r.nonblocking,
        };
        let mut files = Vec::new();
        let name = format!("replay-trace.rank-{rank}.json");
        fsutil::write_json_new(&out.join(&name), &file)?;
        files.push((name.clone(), fsutil::sha256_file(&out.join(&name))?));
        if let Some(w) = &r.workload {
            let name = format!("replay-trace.rank-{rank}.workload.json");
            fsutil::write_json_new(&out.join(&name), w)?;
            files.push((name.clone(), fsutil::sha256_file(&out.join(&name))?));
        }
        write_replay_index(&world, out, &trace_sha256, &files)?;
        Ok((file.records, r.workload, file.p2p, file.nonblocking))
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("commcanary replay-trace rank {rank}: error: {e:#}");
            mpi::topology::Communicator::abort(&world, 2)
        }
    };
    let switches = switches_before.zip(involuntary_switches()).map(|(a, b)| b - a);
    {
        let mut by: BTreeMap<(CollectiveKind, String, TraceDtype), (u64, Vec<f64>)> = BTreeMap::new();
        for r in &records {
            let e = by.entry((r.kind, r.group.clone(), r.dtype)).or_insert((0, Vec::new()));
            e.0 += r.checked as u64;
            e.1.push(r.elapsed_ns as f64 / 1e3);
        }
        for ((k, g, d), (checked, times)) in &mut by {
            let n = times.len();
            let p50 = stats::percentile_nearest_rank(times, 50.0).unwrap_or(f64::NAN);
            let p99 = stats::percentile_nearest_rank(times, 99.0).unwrap_or(f64::NAN);
            println!(
                "rank {rank}: {n} x {} {d} on {g:?}, {checked} checked; time p50 {p50:.1} µs, p99 {p99:.1} µs",
                k.name()
            );
        }
        if let Some(p) = &p2p {
            println!(
                "rank {rank}: {} point-to-point operations ({} sends, {} receives{}; {} nonblocking, {} waits) in \
                    recorded call order, {} bytes sent; {}; time in the calls {:.1} µs",
                p.operations,
                p.sends,
                p.receives,
                if p.receives_empty > 0 {
                    format!(", {} of them cancelled or empty in the application: not replayed", p.receives_empty)
                } else {
                    String::new()
                },
                p.nonblocking,
                p.waits,
                p.bytes_sent,
                match p.receives_checked {
                    Some(n) => format!("{n} receives checked against their matching sends"),
                    None => "receives not checked (--check)".into(),
                },
                p.host_ns as f64 / 1e3
            );
        }
        if let Some(b) = &nonblocking {
            println!(
                "rank {rank}: {} collectives replayed nonblocking (posted with their MPI_I* call, {} waits at their \
                    recorded completing calls{})",
                b.posted,
                b.waits,
                if b.never_completed > 0 {
                    format!(", {} never seen complete: waited for at the end of the pass", b.never_completed)
                } else {
                    String::new()
                }
            );
        }
        let mut err: Vec<f64> = records
            .iter()
            .skip(1)
            .filter_map(|r| r.target_gap_ns.map(|t| r.actual_gap_ns.abs_diff(t) as f64))
            .collect();
        let off = err.iter().filter(|e| **e > GAP_OFF_NS as f64).count();
        if off > 0 {
            eprintln!(
                "commcanary replay-trace rank {rank}: warning: {off} of {} gaps were more than {} ms off their target; \
                    the kernel took the core from this process {} times during the run (involuntary context \
                        switches){}",
                err.len(),
                GAP_OFF_NS / 1_000_000,
                switches.map_or("an unknown number of".to_string(), |n| n.to_string()),
                if switches.is_some_and(|n| n > 0) {
                    ": the host was descheduling it (other load on its cores), and a descheduled wait overshoots its \
                        gap; on GPUs --pace device-gaps is immune"
                } else {
                    ""
                }
            );
        }
        if let Some(p99) = stats::percentile_nearest_rank(&mut err, 99.0) {
            let what = match &workload {
                Some(w) if w.backend == "cuda" && w.stands_for == "gaps" => {
                    "device gap after the previous collective vs the recorded gap (device-paced)"
                }
                Some(w) if w.backend == "cuda" => {
                    "device gap after the previous collective vs the compute recorded between them on its stream"
                }
                Some(_) => "host gap vs the compute recorded before the collective",
                None => "replay gap",
            };
            println!("rank {rank}: {what}: error |actual - target| p99 {:.1} µs over {} gaps", p99 / 1e3, err.len());
        }
        if let Some(w) = &workload {
            let us = |ns: u64| format!("{:.1} µs", ns as f64 / 1e3);
            println!(
                "rank {rank}: workload pass: {} {} ({} recorded{}) and {} collectives on {} stream(s), {} cross-stream \
                    waits; pass {}{}{}; the source's device span {}",
                w.compute_ops,
                if w.stands_for == "gaps" { "gaps" } else { "compute kernels" },
                us(w.compute_recorded_ns),
                w.compute_launches.map_or(String::new(), |n| format!(", {n} launches")),
                w.collectives,
                w.streams.len(),
                w.cross_stream_waits,
                w.pass_device_ns.map_or_else(|| format!("{} \
                    (host)", us(w.pass_host_ns)), |d| format!("{} (device)", us(d))),
                w.spin.as_ref().map_or(String::new(), |s| format!(", spin launch excess {:.0} ns corrected, floor \
                    {:.0} ns", s.excess_ns, s.floor_ns)),
                match (&w.gap_transition, &w.spin) {
                    (Some(t), _) => format!(", gap transition {} ns taken off each gap (warm-up median {:.0} ns over \
                        {} gaps)", t.applied_ns, t.warmup_median_ns, t.gaps),
                    (None, Some(_)) => ", gap transition not corrected (no warm-up pass, or no gap to measure it \
                        on)".to_string(),
                    (None, None) => String::new(),
                },
                w.trace_span_ns.map_or("unknown (times missing)".to_string(), us)
            );
        }
    }
    if let Some(mine) = trace.ranks.iter().find(|r| r.rank == rank) {
        if let Some(k) = compare_kernels(&mine.collectives, &records) {
            let diff: Vec<String> =
                k.differing.iter().map(|(i, want, got)| format!("#{i}: trace {want}, replay {got}")).collect();
            println!(
                "rank {rank}: CUPTI kernel family matches the trace in {} of {} collectives ({} with no replay \
                    kernel){}{}",
                k.same_family,
                k.compared,
                k.missing_in_replay,
                if diff.is_empty() { "" } else { "; differing: " },
                diff.join("; ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::kernels_in_windows;

    #[test]
    fn kernels_land_in_the_call_whose_window_holds_their_start() {
        let windows = [(10_000, 20_000), (30_000, 40_000)];
        let got =
            kernels_in_windows(&[(35_000, "b"), (12_000, "a"), (50_000, "stray"), (21_000, "late-a")], &windows, 2_000);
        assert_eq!(got, vec![vec!["a".to_string(), "late-a".into()], vec!["b".to_string()]]);
        // back to back: the next call starts 1 µs after the previous ends, so the widened windows
        // overlap; a kernel inside the second window belongs to it, not to the first
        let windows = [(10_000, 20_000), (21_000, 30_000)];
        let got = kernels_in_windows(&[(21_500, "second"), (20_400, "first-late")], &windows, 2_000);
        assert_eq!(got, vec![vec!["first-late".to_string()], vec!["second".to_string()]]);
    }
}

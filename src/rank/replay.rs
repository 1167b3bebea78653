//! `replay-trace`: consumes an imported trace and the backend asked for,
//! runs this rank's collectives under MPI through the backend's executor
//! ([`crate::backend::replay`]) and produces `replay-trace.rank-N.json`,
//! rank 0's index `replay-trace.json` (formats in
//! [`crate::evidence::commtrace::replay`]) and each rank's printed summary.
//! Refuses, before MPI starts, an output directory that holds a replay, a
//! paced replay whose gaps pass the replay bound, and an MPI trace's
//! point-to-point program on the cuda backend. Call [`run`].
use crate::backend::cpu::trace_exec::replay;
use crate::backend::cuda::trace_exec;
use crate::backend::replay::ReplayOptions;
use crate::core::refusal::Code;
use crate::core::workload::ReduceOp;
use crate::core::{clock, fsutil, identity, limits, stats};
use crate::evidence::commtrace::exec::{self, Pace};
use crate::evidence::commtrace::replay::{
    ReplayFile, ReplayHeader, ReplayIndex, ReplayIndexRank, REPLAY_FORMAT_VERSION, REPLAY_INDEX_FILE,
};
use crate::evidence::commtrace::summary::compare_kernels;
use crate::evidence::commtrace::{p2p, CollectiveKind, CommTrace, TraceDtype};
use crate::evidence::shard::BackendKind;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Executor of a whole trace on one rank (a backend's `replay`).
type ReplayRun<'a> = dyn FnMut(&mpi::topology::SimpleCommunicator, &CommTrace) -> Result<exec::ReplayOutput> + 'a;

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
    let (op, pace, check, corrupt, lib, warmup, cupti) =
        (a.op, a.pace, a.check, a.corrupt_rank, a.nccl_lib.clone(), !a.no_warmup, a.cupti);
    if cupti && !cuda {
        anyhow::bail!("--cupti needs the cuda backend (CUPTI records GPU kernels)");
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
    replay_command(&a.trace, &a.out, paced, if cuda { "cuda" } else { "cpu" }, settings, &mut |world, trace| {
        if cuda {
            // the cuda executor has no point-to-point replay: refused before anything runs, never silently skipped
            p2p::refuse_on_backend_without_p2p(trace, &a.trace, "cuda")?;
            let timeout = std::time::Duration::from_secs(300);
            trace_exec::replay(world, &lib, trace, &opts, timeout, cupti)
        } else {
            replay(world, trace, &opts)
        }
    })
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
/// `run` (MPI or NCCL), write `OUT/replay-trace.rank-N.json` (a header binding
/// the records to the trace's SHA-256, the rank and the settings; rank 0 then
/// writes `OUT/replay-trace.json`, every rank's files with their digests;
/// an `OUT` that already holds a replay is refused before MPI starts); every rank
/// prints its summary (per kind: count, checks, time p50/p99; the pacing
/// error; the gaps more than 1 ms off and the involuntary context switches
/// during the replay, which say the host took the core away). A replay
/// `paced` by the trace (gaps, device gaps or the recorded workload) is
/// refused before MPI starts when a rank's gap passes the one bound of every
/// replay ([`crate::core::limits::check_replay_gaps`]).
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
    let (records, workload, p2p, nonblocking) = match run(&world, &trace).and_then(|r| {
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
                    format!(
                        ", {} of them cancelled or empty in the application: not \
                    replayed",
                        p.receives_empty
                    )
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
                    format!(
                        ", {} never seen complete: waited for at the end of the \
                    pass",
                        b.never_completed
                    )
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

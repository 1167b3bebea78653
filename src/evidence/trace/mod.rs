//! Source traces for `replay`, `fill`, `overlap` and the ablations, as [`Schedule`]s.
//!
//! Consumes this run's `blocking` events on this rank, a joined trace file
//! (`commcanary join --events-out`), or a communication trace written by
//! `commcanary import`. Produces per collective in order its gap, the compute
//! the source ran in it (imported traces) and its call: a world all-reduce, or
//! a [`Prepared`] collective on its own group, with an MPI capture's
//! point-to-point steps between them. Refuses a joined file without `blocking`
//! events or with undecodable lines, another world size, a trace without
//! times, and (UNSUPPORTED_OPERATION) what a shard cannot hold or the phases
//! cannot run. Method: docs/METHODS.md, "Source traces for the phases".
use crate::core::collective::{Buffers, TraceDtype};
use crate::core::fsutil;
use crate::core::limits::{check_replay_gaps, open_regular, read_bounded, MAX_TEXT_TABLE_BYTES};
use crate::core::refusal::Code;
use crate::core::workload::{self, Phase, ReduceOp};
use crate::evidence::commtrace::call_order::{self, Between, NonblockingPlan};
use crate::evidence::commtrace::p2p::{self, P2pPlan};
use crate::evidence::commtrace::{exec, CollectiveKind, CommTrace, TraceCollective};
use crate::evidence::join::JoinedCollective;
use crate::evidence::schedule::{CallStep, Issue, Prepared, Schedule, Step, Target};
use crate::evidence::shard::TraceP2pCount;
use crate::evidence::shard::{CollectiveEvent, GapTimeline, PhaseRun, ProcessGroup, TraceKindCount, TraceOrigin};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A world all-reduce of a blocking phase or a joined trace: where it started
/// and ended for gap purposes, and its call.
type Timed = (u64, u64, CallStep);

/// The trace-phase steps of world all-reduces in order: per call the gap from
/// the previous one's end (the first's from `phase_start_ns`), the call and its
/// wait; a token opens where a call's token changes and closes before the next.
fn world_steps(phase_start_ns: u64, calls: Vec<Timed>) -> Vec<Step> {
    let mut steps = Vec::with_capacity(calls.len() * 3 + 8);
    let (mut prev_end, mut open) = (phase_start_ns, None);
    for (issue, end, c) in calls {
        if let Some(t) = c.token.filter(|&t| open != Some(t)) {
            if open.is_some() {
                steps.push(Step::TokenEnd);
            }
            steps.push(Step::Token { token: t, warmup: c.warmup });
            open = Some(t);
        }
        steps.push(Step::Gap { ns: issue.saturating_sub(prev_end), compute_ns: None });
        steps.extend([Step::Call(c), Step::Wait]);
        prev_end = end;
    }
    if open.is_some() {
        steps.push(Step::TokenEnd);
    }
    steps
}

/// Where a collective started and ended for gap purposes: the device interval
/// where measured (GPU: the host only enqueues), else the host arrival, and
/// the wait's return. Either way without any injected delay: a delayed host
/// also starts the device late, and a replay of the trace would otherwise
/// apply the control's delay a second time, at the recorded position.
fn span(
    device: (Option<u64>, Option<u64>),
    host_issue_ns: u64,
    injected_delay_ns: Option<u64>,
    wait_end_ns: u64,
) -> (u64, u64) {
    match device {
        (Some(s), Some(d)) => (s.saturating_sub(injected_delay_ns.unwrap_or(0)), d),
        _ => (host_issue_ns.saturating_sub(injected_delay_ns.unwrap_or(0)), wait_end_ns),
    }
}

/// A world all-reduce of a blocking phase as the trace phases run it again.
fn world_call(bytes: u64, dtype: TraceDtype, token: Option<u32>, layer: Option<u32>, warmup: bool) -> Result<CallStep> {
    let run = workload::Dtype::try_from(dtype).context("a world all-reduce of another element type than a run's")?;
    Ok(CallStep::world_all_reduce(bytes, run, token, layer, warmup))
}

/// This rank's own `blocking` phase, as the trace phases walk it.
pub(crate) fn from_blocking_events(run: &PhaseRun, events: &[CollectiveEvent]) -> Result<Schedule> {
    let blocking = || events.iter().filter(|e| e.phase == Phase::Blocking);
    let calls = blocking()
        .map(|e| {
            let (start, end) =
                span((e.device_start_ns, e.device_end_ns), e.host_issue_ns, e.injected_delay_ns, e.wait_end_ns);
            Ok((start, end, world_call(e.bytes, e.dtype, e.token, e.layer, e.warmup)?))
        })
        .collect::<Result<Vec<Timed>>>()?;
    let timeline = GapTimeline::of(blocking().map(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    let steps = world_steps(run.start_ns, calls);
    Ok(Schedule { source: Some((TraceOrigin::ThisRunBlocking, timeline)), prepared: None, steps })
}

/// Rank `rank % source_world`'s blocking phase from a joined trace file.
pub(crate) fn from_joined_file(path: &Path, rank: u32) -> Result<Schedule> {
    let bytes =
        read_bounded(path, MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading trace {}", path.display()))?;
    let sha256 = fsutil::sha256_hex(&bytes);
    let text = std::str::from_utf8(&bytes).with_context(|| format!("{}: not UTF-8", path.display()))?;
    let mut rows: Vec<JoinedCollective> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let c: JoinedCollective = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a joined collective", path.display(), i + 1))?;
        if c.phase == Phase::Blocking {
            rows.push(c);
        }
    }
    if rows.is_empty() {
        bail!("{}: no blocking collectives to replay (capture the trace with --phases blocking)", path.display());
    }
    let world = rows[0].ranks.len() as u32;
    let source_rank = rank % world.max(1);
    let mut calls = Vec::with_capacity(rows.len());
    let mut has_device = Vec::with_capacity(rows.len());
    for c in &rows {
        let t = c.ranks.iter().find(|t| t.rank == source_rank).with_context(|| {
            format!("{}: group {} seq {} has no times for rank {source_rank}", path.display(), c.group, c.seq)
        })?;
        let (issue, end) =
            span((t.device_start_ns, t.device_end_ns), t.host_issue_ns, t.injected_delay_ns, t.wait_end_ns);
        has_device.push(t.device_start_ns.is_some() && t.device_end_ns.is_some());
        let call = world_call(c.bytes, c.dtype, c.token, c.layer, c.warmup)
            .with_context(|| format!("{}: group {} seq {}", path.display(), c.group, c.seq))?;
        calls.push((issue, end, call));
    }
    // The phase start is not in the joined file: the first gap is taken as zero.
    let start = calls[0].0;
    let steps = world_steps(start, calls);
    // a replayed gap is slept or filled: refuse one no workload has, rather than sleep for days
    let gaps = steps.iter().filter_map(|s| if let Step::Gap { ns, .. } = s { Some(*ns) } else { None });
    check_replay_gaps(gaps, &|i| format!("{}: blocking collective {}", path.display(), i + 1))?;
    let origin = TraceOrigin::File { path: path.display().to_string(), sha256, source_rank };
    Ok(Schedule { source: Some((origin, GapTimeline::of(has_device.into_iter()))), prepared: None, steps })
}

/// Read and decode an imported communication trace: the trace and the file's SHA-256.
pub(crate) fn read_comm_trace(path: &Path) -> Result<(CommTrace, String)> {
    let bytes =
        read_bounded(path, MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading trace {}", path.display()))?;
    let t = CommTrace::from_slice(&bytes).with_context(|| format!("--trace {}", path.display()))?;
    Ok((t, fsutil::sha256_hex(&bytes)))
}

/// This rank's collectives of an imported communication trace, walked
/// `warmup_passes + passes` times (see the module doc).
pub(crate) fn from_comm_trace(
    path: &Path,
    rank: u32,
    world_size: u32,
    passes: (u32, u32),
    allreduce_only: bool,
) -> Result<Schedule> {
    let (t, sha256) = read_comm_trace(path)?;
    comm_trace_schedule(&t, path, sha256, rank, world_size, passes, allreduce_only)
}

/// How [`walk_comm_trace`] walks a trace: for the phases, whose shards record
/// it, or for `replay-trace`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TraceWalk {
    /// The phases': with `allreduce_only`, the world all-reduces alone.
    Phases {
        /// `--trace-allreduce-only`.
        allreduce_only: bool,
    },
    /// `replay-trace`'s: every collective a prepared call on its group (kinds
    /// and member sizes a shard cannot hold included), reducing with the
    /// recorded operation, else `op`, else a sum; each warm-up pass back to
    /// back, then a [`Step::Settle`] before the first timed pass.
    Replay {
        /// `--op`.
        op: Option<ReduceOp>,
        /// The gap before each collective of a timed pass: none (back to back),
        /// the recorded ones, or given (the recorded compute, waited on the host).
        pace: ReplayPace,
    },
}

/// How `replay-trace` paces a timed pass ([`TraceWalk::Replay`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReplayPace {
    /// Back to back.
    None,
    /// The recorded gaps, the point-to-point steps' included.
    Gaps,
    /// One gap per collective, the steps unpaced.
    Given(Vec<u64>),
}

/// [`walk_comm_trace`] for the phases.
pub(crate) fn comm_trace_schedule(
    t: &CommTrace,
    path: &Path,
    sha256: String,
    rank: u32,
    world_size: u32,
    passes: (u32, u32),
    allreduce_only: bool,
) -> Result<Schedule> {
    walk_comm_trace(t, path, sha256, (rank, world_size), passes, &TraceWalk::Phases { allreduce_only })
}

/// [`from_comm_trace`] on a trace already read from `path`, walked as `walk` says: which
/// collectives run, on which shard group, and where nonblocking ones are posted and
/// completed (docs/METHODS.md, "Source traces for the phases").
pub(crate) fn walk_comm_trace(
    t: &CommTrace,
    path: &Path,
    sha256: String,
    (rank, world_size): (u32, u32),
    (warmup_passes, passes): (u32, u32),
    walk: &TraceWalk,
) -> Result<Schedule> {
    let (allreduce_only, replay) = match walk {
        TraceWalk::Phases { allreduce_only } => (*allreduce_only, None),
        TraceWalk::Replay { op, pace } => (false, Some((*op, pace))),
    };
    if t.world_size != world_size {
        let n = t.world_size;
        crate::refuse!(Code::BadInput, "--trace {}: recorded on {n} ranks; this job has {world_size}", path.display());
    }
    let mine = &t
        .ranks
        .iter()
        .find(|r| r.rank == rank)
        .with_context(|| format!("--trace {}: no rank {rank}", path.display()))?
        .collectives;
    if replay.is_none() {
        refuse_what_phases_cannot_run(t, path, allreduce_only)?;
    }
    let nonblocking = match allreduce_only {
        true => None,
        false => NonblockingPlan::of(t, rank, mine.len()).or_else(|e| bad_list(path, rank, e))?,
    };
    let kept = kept_calls(t, path, mine, nonblocking.as_ref(), (allreduce_only, replay.map(|r| r.0)))?;
    // replay-trace replays a rank of point-to-point steps alone
    if kept.calls.is_empty() && replay.is_none() {
        let what = if allreduce_only { "all-reduce" } else { "collective" };
        crate::refuse!(Code::BadInput, "--trace {}: rank {rank} has no {what} to run", path.display());
    }
    let colls: Vec<_> = kept.calls.iter().map(|k| k.c.clone()).collect();
    let mut gaps = match replay.map(|r| r.1) {
        Some(ReplayPace::None) => vec![0; colls.len()],
        Some(ReplayPace::Given(g)) => g.clone(),
        Some(ReplayPace::Gaps) => exec::paced_gaps_ns(&colls)?,
        None => exec::gaps_ns(&colls).with_context(|| {
            format!(
                "--trace {}: it records no times (an execution trace); import the profiler (Kineto) trace to pace \
                by its gaps",
                path.display()
            )
        })?,
    };
    if gaps.len() != colls.len() {
        bail!("internal: {} gaps for {} collectives", gaps.len(), colls.len());
    }
    // the steps' recorded gaps pace them only where the recorded gaps pace the collectives
    let step_gaps = matches!(replay.map(|r| r.1), None | Some(ReplayPace::Gaps));
    // an MPI capture's point-to-point program runs between the collectives (not with --trace-allreduce-only)
    let (p2p, p2p_count) = p2p_of(t, path, rank, mine, allreduce_only)?;
    if let Some(p) = p2p.as_ref().filter(|_| step_gaps) {
        // a collective's gap runs from the last step before it, where one is: the steps' own time is not gap
        for (g, a) in gaps.iter_mut().zip(&p.after_step_ns) {
            *g = a.unwrap_or(*g);
        }
        check_replay_gaps(p.gap_ns.iter().copied(), &|i| {
            format!("--trace {}: point-to-point step {}", path.display(), i + 1)
        })?;
    }
    check_replay_gaps(gaps.iter().copied(), &|i| format!("--trace {}: collective {}", path.display(), i + 1))?;
    for c in &colls {
        let elems = c.in_elems.max(c.out_elems);
        if elems.checked_mul(c.dtype.size_bytes()).is_none_or(|b| b > i64::MAX as u64) {
            let (kind, seq, group) = (c.kind.name(), c.seq, &c.group);
            let what = format!("{kind} #{seq} on group {group:?} records {elems} elements: too many bytes");
            crate::refuse!(Code::BadInput, "--trace {}: {what}", path.display());
        }
    }
    // what runs between the collectives, in recorded call order: (before which collective, step)
    let between: Vec<(usize, Step)> =
        call_order::between(t, rank, colls.len(), p2p.as_ref().map(|p| &p.plan), nonblocking.as_ref())
            .or_else(|e| bad_list(path, rank, e))?
            .into_iter()
            .map(|(at, b)| match b {
                Between::P2p(k) => {
                    let p = p2p.as_ref().expect("a step comes from the program");
                    Ok((at, Step::P2p { index: k, gap_ns: p.gap_ns[k], started: p.started[k] }))
                }
                Between::Complete(i) => match kept.calls[i].target {
                    Some(Target::Prepared { index, .. }) => Ok((at, Step::Complete { index })),
                    _ => bail!("internal: posted collective {i} is not a prepared call"),
                },
            })
            .collect::<Result<_>>()?;
    let walk = PassWalk { calls: &kept.calls, gaps: &gaps, between: &between, replay: replay.map(|r| r.1), step_gaps };
    let steps = walk.steps(warmup_passes, warmup_passes + passes)?;
    let origin = TraceOrigin::Imported {
        path: path.display().to_string(),
        sha256,
        source_rank: rank,
        collectives_per_pass: kept.calls.len() as u32,
        left_out_per_pass: kept.counts.values().map(|c| c.left_out_per_pass).sum(),
        kinds: kept.counts.into_values().collect(),
        p2p: p2p_count,
    };
    let timeline = GapTimeline::of(colls.iter().map(|c| c.device.is_some()));
    // making the groups' communicators is collective over the world: a rank with no prepared call of its own
    // prepares too where another has one
    let world: Vec<u32> = (0..world_size).collect();
    let others = !allreduce_only && any_rank_prepares(t, &world, replay.is_some());
    let prepared = (!kept.prepared.is_empty() || p2p.is_some() || others).then(|| Prepared {
        trace: Arc::new(t.clone()),
        colls: kept.prepared,
        groups: kept.groups.into_values().collect(),
        p2p: p2p.map(|p| p.plan),
    });
    Ok(Schedule { source: Some((origin, timeline)), prepared, steps })
}

/// Refuse, on every rank alike before any collective, what the phases cannot
/// run as recorded: a kind they cannot run, and (unless `allreduce_only`)
/// members that disagree on a collective's size, which the join would refuse
/// after the whole run.
fn refuse_what_phases_cannot_run(t: &CommTrace, path: &Path, allreduce_only: bool) -> Result<()> {
    for r in &t.ranks {
        for (i, c) in r.collectives.iter().enumerate() {
            if let Some(why) = exec::phases_cannot_run(c, allreduce_only) {
                crate::refuse!(
                    Code::UnsupportedOperation,
                    "--trace {}: rank {}, collective {i} ({} on group {:?}): {why}; `replay-trace --backend cpu` \
                        replays it",
                    path.display(),
                    r.rank,
                    c.source_name,
                    c.group
                );
            }
        }
    }
    let uneven = if allreduce_only { Default::default() } else { exec::uneven_members(t) };
    if let Some(((r, i), why)) = uneven.into_iter().next() {
        crate::refuse!(
            Code::UnsupportedOperation,
            "--trace {}: rank {r}, collective {i}: {why}; `replay-trace --backend cpu` replays it, and `import mpi \
                --for-phases` leaves such collectives out",
            path.display()
        );
    }
    Ok(())
}

/// A collective a walk runs, and how.
struct KeptCall<'a> {
    c: &'a TraceCollective,
    /// Recorded compute since the previous kept collective (None once a kernel lacks a duration).
    compute_ns: Option<u64>,
    /// `None`: the backend's world all-reduce.
    target: Option<Target>,
    /// Shard group (0: the world).
    group: u32,
    /// Posted nonblocking.
    posted: bool,
}

/// What a walk keeps of a rank's collectives: the calls, per kind what runs
/// and what is left out, the prepared collectives and their groups.
struct Kept<'a> {
    calls: Vec<KeptCall<'a>>,
    counts: BTreeMap<CollectiveKind, TraceKindCount>,
    prepared: Vec<TraceCollective>,
    groups: BTreeMap<u32, ProcessGroup>,
}

/// Rank collectives `mine` as a walk keeps them (`allreduce_only`, and
/// `replay_op`: replay-trace's `--op`, `None` for the phases): every
/// collective a prepared call on its group, except, for the phases, the
/// world all-reduces ([`is_world_all_reduce`]); with `allreduce_only`, the
/// other kinds left out and counted, and an all-reduce off the world or of
/// another element type than a run's refused.
fn kept_calls<'a>(
    t: &CommTrace,
    path: &Path,
    mine: &'a [TraceCollective],
    nonblocking: Option<&NonblockingPlan>,
    (allreduce_only, replay_op): (bool, Option<Option<ReduceOp>>),
) -> Result<Kept<'a>> {
    let world: Vec<u32> = (0..t.world_size).collect();
    let mut kept = Kept { calls: Vec::new(), counts: BTreeMap::new(), prepared: Vec::new(), groups: BTreeMap::new() };
    let mut compute: Option<u64> = Some(0);
    for (ci, c) in mine.iter().enumerate() {
        let posted = nonblocking.is_some_and(|n| n.posted[ci]);
        for k in &c.compute_before {
            compute = compute.zip(k.duration_ns).and_then(|(a, b)| a.checked_add(b));
        }
        let count = kept.counts.entry(c.kind).or_insert_with(|| TraceKindCount {
            kind: c.kind,
            run_per_pass: 0,
            left_out_per_pass: 0,
            dtypes: vec![],
            sizes_bytes: vec![],
        });
        if !count.dtypes.contains(&c.dtype) {
            count.dtypes.push(c.dtype);
            count.dtypes.sort();
        }
        let size = event_bytes(c);
        if !count.sizes_bytes.contains(&size) {
            count.sizes_bytes.push(size);
            count.sizes_bytes.sort_unstable();
        }
        let members = t.group(&c.group).map(|g| g.members.clone()).unwrap_or_default();
        if allreduce_only && c.kind != CollectiveKind::AllReduce {
            count.left_out_per_pass += 1;
            continue;
        }
        let refuse =
            |what: String| -> Result<Kept<'a>> { crate::refuse!(Code::BadInput, "--trace {}: {what}", path.display()) };
        if allreduce_only && members != world {
            return refuse(format!(
                "all-reduce #{} runs on group {:?} of ranks {members:?}; with --trace-allreduce-only the phases run \
                    all-reduces on the whole world in rank order (without it, every group)",
                c.seq, c.group
            ));
        }
        if let (true, Err(e)) = (allreduce_only, workload::Dtype::try_from(c.dtype)) {
            return refuse(format!(
                "all-reduce #{} on group {:?}: {e}; with --trace-allreduce-only the phases run world all-reduces of a \
                    run's element type (without it, every dtype)",
                c.seq, c.group
            ));
        }
        count.run_per_pass += 1;
        // the world all-reduce sums and is waited for: a recorded other reduction, or a post, runs as a trace operation
        let (target, group) = if replay_op.is_none() && is_world_all_reduce(t, &world, c, posted) {
            (None, 0)
        } else {
            let gi = t
                .groups
                .iter()
                .position(|g| g.name == c.group)
                .with_context(|| format!("--trace {}: group {:?} is not described", path.display(), c.group))?;
            let group = gi as u32 + 1;
            kept.groups.entry(group).or_insert_with(|| ProcessGroup {
                id: group,
                members,
                name: Some(c.group.clone()),
            });
            kept.prepared.push(c.clone());
            // the recorded reduction (an MPI capture's max, min, prod), else --op, else a sum
            let op = exec::reduction(c, replay_op.flatten()).0;
            (Some(Target::Prepared { index: kept.prepared.len() - 1, op }), group)
        };
        kept.calls.push(KeptCall { c, compute_ns: compute.replace(0), target, group, posted });
    }
    Ok(kept)
}

/// A walk's passes: the kept calls with their gaps, what runs between them,
/// and how the passes are paced.
struct PassWalk<'a> {
    calls: &'a [KeptCall<'a>],
    gaps: &'a [u64],
    /// (before which call, step), in call order.
    between: &'a [(usize, Step)],
    /// replay-trace's pacing (`None`: the phases').
    replay: Option<&'a ReplayPace>,
    /// Whether the point-to-point steps keep their recorded gaps.
    step_gaps: bool,
}

impl PassWalk<'_> {
    /// The steps of `warmup_passes` warm-up passes, then the timed ones, `total` in all.
    fn steps(&self, warmup_passes: u32, total: u32) -> Result<Vec<Step>> {
        let n = self.calls.len();
        let mut steps = Vec::with_capacity((n * 3 + 2) * total as usize);
        for pass in 0..total {
            let warmup = pass < warmup_passes;
            // replay-trace's warm-up passes run back to back, and every rank starts the timed passes together
            let unpaced = self.replay.is_some_and(|pace| warmup || *pace == ReplayPace::None);
            let steps_paced = self.step_gaps && !unpaced;
            if self.replay.is_some() && warmup_passes > 0 && pass == warmup_passes {
                steps.push(Step::Settle);
            }
            steps.push(Step::Token { token: pass, warmup });
            let mut e = 0;
            let mut run_between = |steps: &mut Vec<Step>, at: usize| {
                while let Some((_, step)) = self.between.get(e).filter(|b| b.0 <= at) {
                    steps.push(match *step {
                        Step::P2p { index, started, .. } if !steps_paced => Step::P2p { index, gap_ns: 0, started },
                        s => s,
                    });
                    e += 1;
                }
            };
            for (i, (k, gap_ns)) in self.calls.iter().zip(self.gaps).enumerate() {
                run_between(&mut steps, i);
                // the first of a pass: the compute recorded before it stands for the gap (or the gap from a step
                // before it)
                let first = i == 0 && self.between.first().is_none_or(|b| b.0 != 0);
                // kernels may overlap one another: never more than the gap
                let compute_ns = k.compute_ns.map(|c| if i == 0 { c } else { c.min(*gap_ns) });
                if self.replay.is_some() {
                    // replay-trace's first gap is the recorded one: 0, or from a step before it
                    if !unpaced {
                        steps.push(Step::Gap { ns: *gap_ns, compute_ns });
                    }
                } else {
                    let ns = if first { k.compute_ns.unwrap_or(0) } else { *gap_ns };
                    steps.push(Step::Gap { ns, compute_ns });
                }
                let (token, layer, c) = (Some(pass), Some(i as u32), k.c);
                let bytes = event_bytes(c);
                match k.target {
                    None => steps.extend([Step::Call(world_call(bytes, c.dtype, token, layer, warmup)?), Step::Wait]),
                    Some(target) => steps.push(Step::Call(CallStep {
                        target,
                        issue: if k.posted { Issue::Post } else { Issue::HostWait },
                        kind: c.kind,
                        group: k.group,
                        bytes,
                        dtype: c.dtype,
                        root: c.root,
                        peer: c.peer,
                        token,
                        layer,
                        iter: None,
                        warmup,
                    })),
                }
            }
            run_between(&mut steps, n);
            steps.push(Step::TokenEnd);
        }
        Ok(steps)
    }
}

/// Whether the phases run `c` (`posted` nonblocking or not) through the
/// backend's world all-reduce: an all-reduce of a run's element type on a
/// group of the whole `world` in rank order, summing and waited for; every
/// other collective is a prepared call.
fn is_world_all_reduce(t: &CommTrace, world: &[u32], c: &TraceCollective, posted: bool) -> bool {
    use crate::evidence::commtrace::CollectiveKind;
    c.kind == CollectiveKind::AllReduce
        && t.group(&c.group).is_some_and(|g| g.members == world)
        && workload::Dtype::try_from(c.dtype).is_ok()
        && c.op.is_none()
        && !posted
}

/// Whether any rank of `t` runs a collective as a prepared call: with
/// `replay`, any collective; for the phases, any but a world all-reduce.
fn any_rank_prepares(t: &CommTrace, world: &[u32], replay: bool) -> bool {
    let posted = |r: u32, i: usize| {
        t.mpi.as_ref().and_then(|m| m.collective_nonblocking.get(r as usize)?.get(i).copied()).unwrap_or(false)
    };
    t.ranks.iter().any(|r| {
        r.collectives.iter().enumerate().any(|(i, c)| replay || !is_world_all_reduce(t, world, c, posted(r.rank, i)))
    })
}

/// An MPI capture's point-to-point program on this rank as the phases run it:
/// each step with the recorded gap before it.
struct P2pProgram {
    /// The rank's steps in recorded call order, and its operations.
    plan: P2pPlan,
    /// Per step: the recorded gap before it, from the previous call's end
    /// (collective or step) to its entry; 0 for a completing wait (the
    /// capture records its completion, not its entry: it is taken to follow
    /// the previous call at once) and for the pass's first call.
    gap_ns: Vec<u64>,
    /// Operations started per step (a post, a send or a receive: 1; a `Sendrecv`: 2; a wait: 0).
    started: Vec<u32>,
    /// Per collective: the recorded gap from the last step before it, where a
    /// step lies between it and the previous collective (see [`p2p_gaps`]).
    after_step_ns: Vec<Option<u64>>,
}

/// This rank's point-to-point program of `t` as the phases run it, and its
/// per-pass counts: `None`s where the trace has none; the counts alone, all
/// left out, with `allreduce_only`.
fn p2p_of(
    t: &CommTrace,
    path: &Path,
    rank: u32,
    mine: &[TraceCollective],
    allreduce_only: bool,
) -> Result<(Option<P2pProgram>, Option<TraceP2pCount>)> {
    use crate::evidence::commtrace::p2p::P2pStep;
    if t.mpi.as_ref().is_none_or(|m| m.p2p.iter().all(Vec::is_empty)) {
        return Ok((None, None));
    }
    let plan = p2p::plans(t).with_context(|| format!("--trace {}", path.display()))?.swap_remove(rank as usize);
    call_order::collective_calls(t, rank, mine.len()).or_else(|e| bad_list(path, rank, e))?;
    let (pass, run) = (plan.report(None, 0), !allreduce_only);
    let count = TraceP2pCount {
        operations_per_pass: if run { pass.operations as u32 } else { 0 },
        left_out_per_pass: if run { 0 } else { pass.operations as u32 },
        calls_per_pass: if run { plan.steps.len() as u32 } else { 0 },
        bytes_sent_per_pass: if run { pass.bytes_sent } else { 0 },
    };
    if allreduce_only {
        return Ok((None, Some(count)));
    }
    let (gap_ns, after_step_ns) = p2p_gaps(t, rank, mine, &plan);
    let started = plan
        .steps
        .iter()
        .map(|(_, s)| match s {
            P2pStep::Post(_) | P2pStep::Blocking(_) => 1,
            P2pStep::SendRecv(..) => 2,
            P2pStep::Complete(_) => 0,
        })
        .collect();
    Ok((Some(P2pProgram { plan, gap_ns, started, after_step_ns }), Some(count)))
}

/// The recorded gaps of a rank's calls in call order, collectives and
/// point-to-point steps merged: per step, the gap before it (see
/// [`P2pProgram::gap_ns`]); per collective, the gap from the last step before
/// it, where a step lies between it and the previous collective (`None`
/// where none does: its gap is the collectives' own).
fn p2p_gaps(t: &CommTrace, rank: u32, mine: &[TraceCollective], plan: &P2pPlan) -> (Vec<u64>, Vec<Option<u64>>) {
    use crate::evidence::commtrace::p2p::P2pStep;
    let Some(m) = &t.mpi else { return (vec![0; plan.steps.len()], vec![None; mine.len()]) };
    let ops = &m.p2p[rank as usize];
    let calls = &m.collective_calls[rank as usize];
    // a step's recorded entry (None: not recorded) and end
    let span = |s: &P2pStep| -> (Option<u64>, Option<u64>) {
        match s {
            P2pStep::Post(i) => (Some(ops[*i].post_ns), Some(ops[*i].post_ns)),
            P2pStep::Blocking(i) | P2pStep::SendRecv(i, _) => {
                (Some(ops[*i].post_ns), Some(ops[*i].complete_ns.unwrap_or(ops[*i].post_ns)))
            }
            P2pStep::Complete(v) => (None, v.iter().filter_map(|&i| ops[i].complete_ns).max()),
        }
    };
    let coll_span = |c: &TraceCollective| match (&c.device, c.host_start_ns, c.host_duration_ns) {
        (Some(d), _, _) => (Some(d.start_ns), Some(d.end_ns)),
        (None, Some(s), Some(d)) => (Some(s), Some(s + d)),
        (None, s, _) => (s, s),
    };
    let (mut step_gaps, mut coll_gaps) = (Vec::with_capacity(plan.steps.len()), vec![None; mine.len()]);
    let mut prev_end: Option<u64> = None;
    let mut step_since_coll = false;
    let (mut k, mut ci) = (0, 0);
    while k < plan.steps.len() || ci < mine.len() {
        let step_first =
            k < plan.steps.len() && (ci >= mine.len() || plan.steps[k].0 < calls.get(ci).copied().unwrap_or(u64::MAX));
        let ((start, end), is_step) =
            if step_first { (span(&plan.steps[k].1), true) } else { (coll_span(&mine[ci]), false) };
        let gap = match (start, prev_end) {
            (Some(s), Some(p)) => s.saturating_sub(p),
            _ => 0,
        };
        if is_step {
            step_gaps.push(gap);
            step_since_coll = true;
            k += 1;
        } else {
            if step_since_coll {
                coll_gaps[ci] = Some(gap);
            }
            step_since_coll = false;
            ci += 1;
        }
        if let Some(e) = end {
            prev_end = Some(prev_end.map_or(e, |p| p.max(e)));
        }
    }
    (step_gaps, coll_gaps)
}

/// Refuse `--trace path` for a fault `e` in rank `rank`'s `mpi` lists.
fn bad_list<T>(path: &Path, rank: u32, e: String) -> Result<T> {
    crate::refuse!(Code::BadInput, "--trace {}: rank {rank}: {e}", path.display())
}

/// Logical bytes of an imported collective as a shard records it: its input
/// (elements x dtype size); a point-to-point operation's message (the larger
/// of its two recorded counts, as `replay-trace` moves); 0 for a barrier.
pub fn event_bytes(c: &TraceCollective) -> u64 {
    let row = c.kind.row();
    let elems = match row.buffers {
        Buffers::Free if !row.p2p => 0,
        _ if row.p2p => c.in_elems.max(c.out_elems),
        _ => c.in_elems,
    };
    elems.saturating_mul(c.dtype.size_bytes())
}

/// Whether `path` holds a communication trace written by `commcanary import`
/// (one JSON document with its format version and groups) rather than a
/// joined trace (one collective per line).
pub(crate) fn is_comm_trace(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut head = Vec::new();
    // a FIFO or device is refused, never opened for a blocking read
    open_regular(path)
        .with_context(|| format!("reading trace {}", path.display()))?
        .0
        .take(4096)
        .read_to_end(&mut head)?;
    Ok(first_key_is_comm_trace(&String::from_utf8_lossy(&head)))
}

/// Whether a document's first object key is one of a communication trace's
/// top-level fields (in any order, pretty or compact); a joined trace's
/// every line is a collective, whose first key is `phase`.
fn first_key_is_comm_trace(text: &str) -> bool {
    const TOP_LEVEL: [&str; 7] = ["format_version", "source", "world_size", "clock", "unknown", "groups", "ranks"];
    let Some(rest) = text.trim_start().strip_prefix('{') else { return false };
    let Some(rest) = rest.trim_start().strip_prefix('"') else { return false };
    rest.split_once('"').is_some_and(|(key, _)| TOP_LEVEL.contains(&key))
}

#[cfg(test)]
pub(crate) mod tests;

//! Source traces for `replay`, `fill`, `overlap` and the ablations.
//!
//! Consumes either this run's `blocking` events on this rank, or a joined
//! trace file written by `commcanary join --events-out` (the shared-trace
//! design: captured once under a reference configuration, replayed under every
//! candidate). Produces, per collective in order, the message size, the
//! token/layer position and the gap: the time from the previous collective's
//! completion (or the phase start) to this collective's issue on that rank.
//! Refuses a file without `blocking` events or with undecodable lines.
//!
//! Also consumes a communication trace written by `commcanary import` (a
//! workload's own PyTorch trace): this rank's collectives, walked once per
//! token (warm-up tokens first), each its position in the pass as its layer,
//! the gap before it from the trace (device interval where recorded, else the
//! host operator) and the compute the trace ran in that gap (the sum of its
//! kernels' durations, at most the gap), which `fill` and `overlap` re-create
//! as calibrated compute. The first collective of a pass has no earlier one
//! to measure a gap from: its gap and its compute are the compute the trace
//! recorded before it (0 where none), so every pass re-creates all of it.
//! Every kind runs on the group the trace names: an f32 or bf16 all-reduce
//! of a group that is the whole world in rank order through the backend's
//! world all-reduce (shard group 0), every other collective (any dtype: f64,
//! i32, i64, … as recorded) as a [`TraceOp`] for
//! the backend's trace executor, on shard group `1 + the trace group's
//! position` with its ordered members, root and peer ([`TraceOps`]). With
//! `--trace-allreduce-only` only the all-reduces run (each on the whole world
//! in rank order), the other kinds left out and counted. Refuses what the
//! phases cannot run as recorded: another world size, a trace without times
//! (an execution trace), and with `--trace-allreduce-only` an all-reduce of
//! a sub-group or of another dtype than f32/bf16, and (UNSUPPORTED_OPERATION,
//! on every rank before any collective) what a shard cannot hold or the
//! phases cannot run: gather, scatter, the scans, v-variants of all-gather
//! and reduce-scatter, logical and bitwise reductions. A reduction the trace
//! records (an MPI capture's max, min, prod) runs as recorded, as a trace
//! operation; a trace without one runs sums. The phase record's origin
//! counts, per kind, what ran and what was left out per pass, with dtypes and sizes.
use crate::core::limits::check_replay_gaps;
use crate::core::workload::Phase;
use crate::evidence::join::JoinedCollective;
use crate::evidence::shard::{CollectiveEvent, CollectiveKind, GapTimeline, PhaseRun, ProcessGroup, TraceOrigin};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// One collective of a source trace.
#[derive(Clone, Debug, PartialEq)]
pub struct GapEntry {
    /// Token index in the source.
    pub token: Option<u32>,
    /// Layer index in the source.
    pub layer: Option<u32>,
    /// Warm-up in the source.
    pub warmup: bool,
    /// Message size.
    pub bytes: u64,
    /// Element type (a world all-reduce's, `op` `None`, is f32 or bf16).
    pub dtype: crate::core::collective::TraceDtype,
    /// Gap before issue.
    pub gap_ns: u64,
    /// Compute the source ran in that gap, where it recorded it (an imported
    /// trace: its kernels' durations, at most the gap); `fill` and `overlap`
    /// then place this much calibrated compute instead of the whole gap.
    pub compute_ns: Option<u64>,
    /// An imported trace's collective that is not a world all-reduce: run
    /// through the backend's trace executor on its own group. `None`: the
    /// backend's all-reduce on the world communicator (group 0).
    pub op: Option<TraceOp>,
}

/// A collective of an imported trace run by the backend's trace executor
/// (every kind, on the trace's own groups) rather than its world all-reduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceOp {
    /// Index into [`TraceOps::colls`].
    pub index: usize,
    /// Kind.
    pub kind: CollectiveKind,
    /// Shard group id: 1 + the trace group's position in the trace's groups.
    pub group: u32,
    /// Broadcast and reduce: the root's world rank.
    pub root: Option<u32>,
    /// Send and receive: the peer's world rank.
    pub peer: Option<u32>,
}

/// What a backend's trace executor needs for a source trace's [`TraceOp`]s.
#[derive(Clone, Debug)]
pub struct TraceOps {
    /// The whole imported trace (every rank makes every group's communicator).
    pub trace: std::sync::Arc<crate::evidence::commtrace::CommTrace>,
    /// This rank's collectives run by the executor, one pass, in order.
    pub colls: Vec<crate::evidence::commtrace::TraceCollective>,
    /// The shard groups they run on (ids from 1), for the shard header.
    pub groups: Vec<ProcessGroup>,
}

/// A source trace with its provenance.
#[derive(Clone, Debug)]
pub struct SourceTrace {
    /// Where it came from.
    pub origin: TraceOrigin,
    /// The timeline its gaps were measured on.
    pub timeline: GapTimeline,
    /// Entries in issue order.
    pub entries: Vec<GapEntry>,
    /// The trace executor's collectives, where some entries have an `op`.
    pub ops: Option<TraceOps>,
}

fn gaps_from(phase_start_ns: u64, times: impl Iterator<Item = (u64, u64, GapEntry)>) -> Vec<GapEntry> {
    let mut prev_end = phase_start_ns;
    times
        .map(|(issue, end, mut e)| {
            e.gap_ns = issue.saturating_sub(prev_end);
            prev_end = end;
            e
        })
        .collect()
}

/// Where a collective started and ended for gap purposes: the device interval
/// where measured (GPU: the host only enqueues), else the host arrival, and
/// the wait's return. Either way without any injected delay: a delayed host
/// also starts the device late, and a replay of the trace would otherwise
/// apply the control's delay a second time, at the recorded position.
fn span(device: (Option<u64>, Option<u64>), host_issue_ns: u64, injected_delay_ns: Option<u64>, wait_end_ns: u64) -> (u64, u64) {
    match device {
        (Some(s), Some(d)) => (s.saturating_sub(injected_delay_ns.unwrap_or(0)), d),
        _ => (host_issue_ns.saturating_sub(injected_delay_ns.unwrap_or(0)), wait_end_ns),
    }
}

/// Gaps of this rank's own `blocking` phase.
pub(crate) fn from_blocking_events(run: &PhaseRun, events: &[CollectiveEvent]) -> SourceTrace {
    let it = events.iter().filter(|e| e.phase == Phase::Blocking).map(|e| {
        let (start, end) = span((e.device_start_ns, e.device_end_ns), e.host_issue_ns, e.injected_delay_ns, e.wait_end_ns);
        (start, end, GapEntry { token: e.token, layer: e.layer, warmup: e.warmup, bytes: e.bytes, dtype: e.dtype, gap_ns: 0, compute_ns: None, op: None })
    });
    let timeline = GapTimeline::of(events.iter().filter(|e| e.phase == Phase::Blocking).map(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    SourceTrace { origin: TraceOrigin::ThisRunBlocking, timeline, entries: gaps_from(run.start_ns, it), ops: None }
}

/// Gaps of rank `rank % source_world` from a joined trace file.
pub(crate) fn from_joined_file(path: &Path, rank: u32) -> Result<SourceTrace> {
    let bytes =
        crate::core::limits::read_bounded(path, crate::core::limits::MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading trace {}", path.display()))?;
    let sha256 = crate::core::fsutil::sha256_hex(&bytes);
    let text = std::str::from_utf8(&bytes).with_context(|| format!("{}: not UTF-8", path.display()))?;
    let mut rows: Vec<JoinedCollective> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let c: JoinedCollective = serde_json::from_str(line).with_context(|| format!("{}:{}: not a joined collective", path.display(), i + 1))?;
        if c.phase == Phase::Blocking {
            rows.push(c);
        }
    }
    if rows.is_empty() {
        bail!("{}: no blocking collectives to replay (capture the trace with --phases blocking)", path.display());
    }
    let world = rows[0].ranks.len() as u32;
    let source_rank = rank % world.max(1);
    let mut times = Vec::with_capacity(rows.len());
    let mut has_device = Vec::with_capacity(rows.len());
    for c in &rows {
        let t = c
            .ranks
            .iter()
            .find(|t| t.rank == source_rank)
            .with_context(|| format!("{}: group {} seq {} has no times for rank {source_rank}", path.display(), c.group, c.seq))?;
        let (issue, end) = span((t.device_start_ns, t.device_end_ns), t.host_issue_ns, t.injected_delay_ns, t.wait_end_ns);
        has_device.push(t.device_start_ns.is_some() && t.device_end_ns.is_some());
        times.push((
            issue,
            end,
            GapEntry { token: c.token, layer: c.layer, warmup: c.warmup, bytes: c.bytes, dtype: c.dtype, gap_ns: 0, compute_ns: None, op: None },
        ));
    }
    // The phase start is not in the joined file: the first gap is taken as zero.
    let start = times[0].0;
    let entries = gaps_from(start, times.into_iter());
    // a replayed gap is slept or filled: refuse one no workload has, rather than sleep for days
    check_replay_gaps(entries.iter().map(|e| e.gap_ns), &|i| format!("{}: blocking collective {}", path.display(), i + 1))?;
    Ok(SourceTrace {
        origin: TraceOrigin::File { path: path.display().to_string(), sha256, source_rank },
        timeline: GapTimeline::of(has_device.into_iter()),
        entries,
        ops: None,
    })
}

/// Read and decode an imported communication trace: the trace and the file's SHA-256.
pub(crate) fn read_comm_trace(path: &Path) -> Result<(crate::evidence::commtrace::CommTrace, String)> {
    let bytes =
        crate::core::limits::read_bounded(path, crate::core::limits::MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading trace {}", path.display()))?;
    let t = crate::evidence::commtrace::CommTrace::from_slice(&bytes).with_context(|| format!("--trace {}", path.display()))?;
    Ok((t, crate::core::fsutil::sha256_hex(&bytes)))
}

/// This rank's collectives of an imported communication trace, as gap entries
/// walked `warmup_passes + passes` times (see the module doc).
pub(crate) fn from_comm_trace(path: &Path, rank: u32, world_size: u32, passes: (u32, u32), allreduce_only: bool) -> Result<SourceTrace> {
    let (t, sha256) = read_comm_trace(path)?;
    comm_trace_entries(&t, path, sha256, rank, world_size, passes, allreduce_only)
}

/// [`from_comm_trace`] on a trace already read from `path`. With
/// `allreduce_only`, only the all-reduces run (each on the whole world in
/// rank order, f32 or bf16), the other kinds left out and counted; else
/// every collective runs: the all-reduces of f32 or bf16 on a group of the
/// whole world in rank order through the backend's world all-reduce (shard
/// group 0, as before format 6), every other one (any kind, any dtype) as a
/// [`TraceOp`] on its own group (shard group `1 + its position in the
/// trace's groups`).
pub(crate) fn comm_trace_entries(
    t: &crate::evidence::commtrace::CommTrace,
    path: &Path,
    sha256: String,
    rank: u32,
    world_size: u32,
    (warmup_passes, passes): (u32, u32),
    allreduce_only: bool,
) -> Result<SourceTrace> {
    use crate::evidence::commtrace::{exec, CollectiveKind};
    use crate::evidence::shard::TraceKindCount;
    let refuse = |what: String| -> Result<SourceTrace> { crate::refuse!(crate::core::refusal::Code::BadInput, "--trace {}: {what}", path.display()) };
    if t.world_size != world_size {
        return refuse(format!("recorded on {} ranks; this job has {world_size}", t.world_size));
    }
    let mine = &t.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("--trace {}: no rank {rank}", path.display()))?.collectives;
    // what the phases cannot run as recorded, refused on every rank alike before any collective
    for r in &t.ranks {
        for (i, c) in r.collectives.iter().enumerate() {
            if let Some(why) = exec::phases_cannot_run(c, allreduce_only) {
                crate::refuse!(
                    crate::core::refusal::Code::UnsupportedOperation,
                    "--trace {}: rank {}, collective {i} ({} on group {:?}): {why}; `replay-trace --backend cpu` replays it",
                    path.display(),
                    r.rank,
                    c.source_name,
                    c.group
                );
            }
        }
    }
    let world: Vec<u32> = (0..world_size).collect();
    let mut counts: std::collections::BTreeMap<CollectiveKind, TraceKindCount> = std::collections::BTreeMap::new();
    let mut kept = Vec::new();
    let mut op_colls = Vec::new();
    let mut groups: std::collections::BTreeMap<u32, ProcessGroup> = std::collections::BTreeMap::new();
    // recorded compute since the previous kept collective (None once a kernel lacks a duration)
    let mut compute: Option<u64> = Some(0);
    for c in mine {
        for k in &c.compute_before {
            compute = compute.zip(k.duration_ns).and_then(|(a, b)| a.checked_add(b));
        }
        let kind = c.kind;
        let count = counts.entry(kind).or_insert_with(|| TraceKindCount { kind, run_per_pass: 0, left_out_per_pass: 0, dtypes: vec![], sizes_bytes: vec![] });
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
        if allreduce_only && members != world {
            return refuse(format!(
                "all-reduce #{} runs on group {:?} of ranks {members:?}; with --trace-allreduce-only the phases run all-reduces on the whole world in rank order (without it, every group)",
                c.seq, c.group
            ));
        }
        let dtype = c.dtype;
        if allreduce_only && dtype.workload().is_none() {
            return refuse(format!(
                "all-reduce #{} on group {:?} is {dtype}; with --trace-allreduce-only the phases run f32 or bf16 world all-reduces (without it, every dtype)",
                c.seq, c.group
            ));
        }
        count.run_per_pass += 1;
        // the world all-reduce sums: a recorded other reduction runs as a trace operation
        let op = if c.kind == CollectiveKind::AllReduce && members == world && dtype.workload().is_some() && c.op.is_none() {
            None
        } else {
            let gi =
                t.groups.iter().position(|g| g.name == c.group).with_context(|| format!("--trace {}: group {:?} is not described", path.display(), c.group))?;
            let group = gi as u32 + 1;
            groups.entry(group).or_insert_with(|| ProcessGroup { id: group, members: members.clone(), name: Some(c.group.clone()) });
            op_colls.push(c.clone());
            Some(TraceOp { index: op_colls.len() - 1, kind, group, root: c.root, peer: c.peer })
        };
        kept.push((c, dtype, compute.replace(0), op));
    }
    let left_out: u32 = counts.values().map(|c| c.left_out_per_pass).sum();
    if kept.is_empty() {
        return refuse(format!("rank {rank} has no {} to run", if allreduce_only { "all-reduce" } else { "collective" }));
    }
    let colls: Vec<_> = kept.iter().map(|(c, _, _, _)| (*c).clone()).collect();
    let gaps = exec::gaps_ns(&colls).with_context(|| {
        format!("--trace {}: it records no times (an execution trace); import the profiler (Kineto) trace to pace by its gaps", path.display())
    })?;
    check_replay_gaps(gaps.iter().copied(), &|i| format!("--trace {}: collective {}", path.display(), i + 1))?;
    for (c, dtype, _, _) in &kept {
        if c.in_elems.max(c.out_elems).checked_mul(dtype.size_bytes()).is_none_or(|b| b > i64::MAX as u64) {
            return refuse(format!("{} #{} on group {:?} records {} elements: too many bytes", c.kind.name(), c.seq, c.group, c.in_elems.max(c.out_elems)));
        }
    }
    let mut entries = Vec::with_capacity(kept.len() * (warmup_passes + passes) as usize);
    for pass in 0..warmup_passes + passes {
        for (i, ((c, dtype, compute, op), gap_ns)) in kept.iter().zip(&gaps).enumerate() {
            entries.push(GapEntry {
                token: Some(pass),
                layer: Some(i as u32),
                warmup: pass < warmup_passes,
                bytes: event_bytes(c),
                dtype: *dtype,
                // the first of a pass: the compute recorded before it stands for the gap
                gap_ns: if i == 0 { compute.unwrap_or(0) } else { *gap_ns },
                // kernels may overlap one another: never more than the gap
                compute_ns: compute.map(|c| if i == 0 { c } else { c.min(*gap_ns) }),
                op: *op,
            });
        }
    }
    let origin = TraceOrigin::Imported {
        path: path.display().to_string(),
        sha256,
        source_rank: rank,
        collectives_per_pass: kept.len() as u32,
        left_out_per_pass: left_out,
        kinds: counts.into_values().collect(),
    };
    let ops = (!op_colls.is_empty()).then(|| TraceOps { trace: std::sync::Arc::new(t.clone()), colls: op_colls, groups: groups.into_values().collect() });
    Ok(SourceTrace { origin, timeline: GapTimeline::of(colls.iter().map(|c| c.device.is_some())), entries, ops })
}

/// Logical bytes of an imported collective as a shard records it: its input
/// (elements x dtype size); a point-to-point operation's message (the larger
/// of its two recorded counts, as `replay-trace` moves); 0 for a barrier.
pub fn event_bytes(c: &crate::evidence::commtrace::TraceCollective) -> u64 {
    let row = c.kind.row();
    let elems = match row.buffers {
        crate::core::collective::Buffers::Free if !row.p2p => 0,
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
    crate::core::limits::open_regular(path).with_context(|| format!("reading trace {}", path.display()))?.0.take(4096).read_to_end(&mut head)?;
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
mod tests {
    use super::*;
    #[test]
    fn comm_traces_are_told_from_joined_traces_by_their_first_key() {
        assert!(first_key_is_comm_trace("{\n  \"format_version\": 1,"));
        // compacted with sorted keys (serde_json::Value): the clock comes first
        assert!(first_key_is_comm_trace("{\"clock\":{\"aligned_across_ranks\":false}"));
        assert!(!first_key_is_comm_trace("{\"phase\":\"blocking\",\"kind\":\"all_reduce\"}\n{\"phase\":"));
        assert!(!first_key_is_comm_trace(""));
        assert!(!first_key_is_comm_trace("[1, 2]"));
    }

    /// A 4-rank trace: tensor-parallel groups of 2 and the world. Rank 0
    /// records an all-reduce on its TP group, one on the world and a
    /// broadcast from rank 0 on the world, each 1 µs after the previous.
    fn four_rank_trace() -> crate::evidence::commtrace::CommTrace {
        use crate::evidence::commtrace::*;
        let groups = vec![
            TraceGroup { name: "0".into(), desc: Some("default_pg".into()), members: vec![0, 1, 2, 3] },
            TraceGroup { name: "tp0".into(), desc: None, members: vec![0, 1] },
            TraceGroup { name: "tp1".into(), desc: None, members: vec![2, 3] },
        ];
        let ranks = (0..4u32)
            .map(|r| {
                let tp = if r < 2 { "tp0" } else { "tp1" };
                let mut colls = vec![
                    TraceCollective::new(CollectiveKind::AllReduce, "allreduce", tp, TraceDtype::Bf16, (8, 8), (None, None), (None, None)),
                    TraceCollective::new(CollectiveKind::AllReduce, "allreduce", "0", TraceDtype::Bf16, (4, 4), (None, None), (None, None)),
                    TraceCollective::new(CollectiveKind::Broadcast, "broadcast", "0", TraceDtype::F32, (16, 16), (None, None), (Some(0), None)),
                ];
                for (i, c) in colls.iter_mut().enumerate() {
                    c.host_start_ns = Some(1_000 * (i as u64 + 1));
                    c.host_duration_ns = Some(100);
                }
                RankTrace { rank: r, collectives: colls, trailing_compute: vec![] }
            })
            .collect();
        CommTrace {
            format_version: COMM_TRACE_FORMAT_VERSION,
            source: TraceSource { kind: SourceKind::Kineto, schema: None, nccl_version: None, files: vec![] },
            world_size: 4,
            clock: TraceClock { domain: ClockDomain::HostPerRank, aligned_across_ranks: false, note: String::new() },
            unknown: vec![],
            groups,
            ranks,
            mpi: None,
        }
    }

    #[test]
    fn every_kind_runs_on_its_group_and_world_allreduces_stay_on_group_0() {
        let t = four_rank_trace();
        let st = comm_trace_entries(&t, Path::new("t.json"), "sha".into(), 2, 4, (1, 2), false).unwrap();
        // 3 passes of 3 collectives
        assert_eq!(st.entries.len(), 9);
        let e = &st.entries[..3];
        // the TP all-reduce on the trace's group "tp1" (position 2: shard group 3), the world one through the backend
        assert_eq!(e[0].op.map(|o| (o.kind, o.group, o.index)), Some((CollectiveKind::AllReduce, 3, 0)));
        assert_eq!(e[1].op, None);
        assert_eq!((e[1].bytes, e[1].dtype), (8, crate::evidence::shard::TraceDtype::Bf16));
        assert_eq!(e[2].op.map(|o| (o.kind, o.group, o.root, o.index)), Some((CollectiveKind::Broadcast, 1, Some(0), 1)));
        assert_eq!((e[2].bytes, e[2].dtype), (64, crate::evidence::shard::TraceDtype::F32));
        assert_eq!(st.entries[3].op, e[0].op, "every pass runs the same prepared collectives");
        let ops = st.ops.as_ref().unwrap();
        assert_eq!(ops.colls.len(), 2);
        let groups: Vec<(u32, Vec<u32>, Option<String>)> = ops.groups.iter().map(|g| (g.id, g.members.clone(), g.name.clone())).collect();
        assert_eq!(groups, vec![(1, vec![0, 1, 2, 3], Some("0".into())), (3, vec![2, 3], Some("tp1".into()))]);
        let TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. } = &st.origin else { panic!("{:?}", st.origin) };
        assert_eq!((*collectives_per_pass, *left_out_per_pass), (3, 0));
        let counts: Vec<(CollectiveKind, u32, u32, Vec<u64>)> =
            kinds.iter().map(|k| (k.kind, k.run_per_pass, k.left_out_per_pass, k.sizes_bytes.clone())).collect();
        assert_eq!(counts, vec![(CollectiveKind::AllReduce, 2, 0, vec![8, 16]), (CollectiveKind::Broadcast, 1, 0, vec![64])]);
    }

    #[test]
    fn allreduce_only_leaves_the_other_kinds_out_and_refuses_sub_groups() {
        let mut t = four_rank_trace();
        let e = comm_trace_entries(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap_err().to_string();
        assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("group \"tp0\""), "{e}");
        for r in &mut t.ranks {
            r.collectives.remove(0);
        }
        let st = comm_trace_entries(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap();
        assert!(st.ops.is_none() && st.entries.iter().all(|e| e.op.is_none()));
        let TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. } = &st.origin else { panic!() };
        assert_eq!((*collectives_per_pass, *left_out_per_pass), (1, 1));
        assert_eq!(
            kinds.iter().map(|k| (k.kind, k.run_per_pass, k.left_out_per_pass)).collect::<Vec<_>>(),
            vec![(CollectiveKind::AllReduce, 1, 0), (CollectiveKind::Broadcast, 0, 1)]
        );
        // a world all-reduce of another dtype than f32/bf16: refused with --trace-allreduce-only ...
        use crate::evidence::commtrace::TraceDtype;
        t.ranks[0].collectives[0].dtype = TraceDtype::F64;
        let e = comm_trace_entries(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap_err().to_string();
        assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("all-reduce #") && e.contains("is f64"), "{e}");
        // ... run in its own dtype through the trace executor with every kind (shard group 1: the world's trace group)
        t.ranks[0].collectives[1].dtype = TraceDtype::I8;
        let st = comm_trace_entries(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), false).unwrap();
        let got: Vec<_> = st.entries.iter().map(|e| (e.op.map(|o| (o.kind, o.group)), e.dtype, e.bytes)).collect();
        assert_eq!(got, vec![(Some((CollectiveKind::AllReduce, 1)), TraceDtype::F64, 32), (Some((CollectiveKind::Broadcast, 1)), TraceDtype::I8, 16)]);
    }

    #[test]
    fn gaps_are_issue_minus_previous_completion() {
        let e = |t| GapEntry {
            token: Some(t),
            layer: Some(0),
            warmup: false,
            bytes: 4,
            dtype: crate::evidence::shard::TraceDtype::F32,
            gap_ns: 0,
            compute_ns: None,
            op: None,
        };
        let g = gaps_from(100, vec![(150, 200, e(0)), (260, 300, e(1)), (300, 310, e(2))].into_iter());
        let gaps: Vec<u64> = g.iter().map(|x| x.gap_ns).collect();
        assert_eq!(gaps, vec![50, 60, 0]);
    }
}

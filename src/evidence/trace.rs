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
//! recorded before it (0 where none), so every pass re-creates all of it. The phases issue sum all-reduces
//! on the world communicator, so it refuses what they cannot run as
//! recorded: another kind (unless left out, counted, with
//! `--trace-allreduce-only`), a group that is not the whole world in rank
//! order, another world size, another dtype than f32/bf16, a trace without
//! times (an execution trace). The trace does not record the reduction (nor
//! do NCCL's kernel names show it): the phases run sums. `replay-trace` runs
//! every kind on every group.
use crate::core::workload::Phase;
use crate::evidence::join::JoinedCollective;
use crate::evidence::shard::{CollectiveEvent, GapTimeline, PhaseRun, TraceOrigin};
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
    /// Element type.
    pub dtype: crate::evidence::shard::Dtype,
    /// Gap before issue.
    pub gap_ns: u64,
    /// Compute the source ran in that gap, where it recorded it (an imported
    /// trace: its kernels' durations, at most the gap); `fill` and `overlap`
    /// then place this much calibrated compute instead of the whole gap.
    pub compute_ns: Option<u64>,
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
}

/// Longest gap a trace file may ask to replay: 60 s.
pub const MAX_REPLAY_GAP_NS: u64 = 60_000_000_000;

/// The one gap bound of every replay (`rank --trace`, `replay-trace`): the
/// first gap over [`MAX_REPLAY_GAP_NS`] is refused with
/// `refused[OUT_OF_RANGE]`, `what(i)` naming the collective before which it
/// lies, before anything is replayed (a replayed gap is slept, spun or filled:
/// no workload waits for minutes between two collectives).
pub fn check_replay_gaps(gaps: impl IntoIterator<Item = u64>, what: &dyn Fn(usize) -> String) -> Result<()> {
    if let Some((i, g)) = gaps.into_iter().enumerate().find(|(_, g)| *g > MAX_REPLAY_GAP_NS) {
        crate::refuse!(
            crate::core::refusal::Code::OutOfRange,
            "{} has a gap of {g} ns before it; replayed gaps are at most {MAX_REPLAY_GAP_NS} ns (60 s)",
            what(i)
        );
    }
    Ok(())
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
pub fn from_blocking_events(run: &PhaseRun, events: &[CollectiveEvent]) -> SourceTrace {
    let it = events.iter().filter(|e| e.phase == Phase::Blocking).map(|e| {
        let (start, end) = span((e.device_start_ns, e.device_end_ns), e.host_issue_ns, e.injected_delay_ns, e.wait_end_ns);
        (start, end, GapEntry { token: e.token, layer: e.layer, warmup: e.warmup, bytes: e.bytes, dtype: e.dtype, gap_ns: 0, compute_ns: None })
    });
    let timeline = GapTimeline::of(events.iter().filter(|e| e.phase == Phase::Blocking).map(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    SourceTrace { origin: TraceOrigin::ThisRunBlocking, timeline, entries: gaps_from(run.start_ns, it) }
}

/// Gaps of rank `rank % source_world` from a joined trace file.
pub fn from_joined_file(path: &Path, rank: u32) -> Result<SourceTrace> {
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
        times.push((issue, end, GapEntry { token: c.token, layer: c.layer, warmup: c.warmup, bytes: c.bytes, dtype: c.dtype, gap_ns: 0, compute_ns: None }));
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
    })
}

/// Read and decode an imported communication trace: the trace and the file's SHA-256.
pub fn read_comm_trace(path: &Path) -> Result<(crate::evidence::commtrace::CommTrace, String)> {
    let bytes =
        crate::core::limits::read_bounded(path, crate::core::limits::MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading trace {}", path.display()))?;
    let t = crate::evidence::commtrace::CommTrace::from_slice(&bytes).with_context(|| format!("--trace {}", path.display()))?;
    Ok((t, crate::core::fsutil::sha256_hex(&bytes)))
}

/// This rank's collectives of an imported communication trace, as gap entries
/// walked `warmup_passes + passes` times (see the module doc).
pub fn from_comm_trace(path: &Path, rank: u32, world_size: u32, passes: (u32, u32), allreduce_only: bool) -> Result<SourceTrace> {
    let (t, sha256) = read_comm_trace(path)?;
    comm_trace_entries(&t, path, sha256, rank, world_size, passes, allreduce_only)
}

/// [`from_comm_trace`] on a trace already read from `path`.
pub fn comm_trace_entries(
    t: &crate::evidence::commtrace::CommTrace,
    path: &Path,
    sha256: String,
    rank: u32,
    world_size: u32,
    (warmup_passes, passes): (u32, u32),
    allreduce_only: bool,
) -> Result<SourceTrace> {
    use crate::evidence::commtrace::{cpu_exec, TraceDtype, TraceKind};
    let refuse = |what: String| -> Result<SourceTrace> { crate::refuse!(crate::core::refusal::Code::BadInput, "--trace {}: {what}", path.display()) };
    if t.world_size != world_size {
        return refuse(format!("recorded on {} ranks; this job has {world_size}", t.world_size));
    }
    let mine = &t.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("--trace {}: no rank {rank}", path.display()))?.collectives;
    let world: Vec<u32> = (0..world_size).collect();
    let mut other_kinds: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    let mut kept = Vec::new();
    // recorded compute since the previous kept collective (None once a kernel lacks a duration)
    let mut compute: Option<u64> = Some(0);
    for c in mine {
        for k in &c.compute_before {
            compute = compute.zip(k.duration_ns).and_then(|(a, b)| a.checked_add(b));
        }
        if c.kind != TraceKind::AllReduce {
            *other_kinds.entry(c.kind.name()).or_insert(0) += 1;
            continue;
        }
        let members = t.group(&c.group).map(|g| g.members.clone()).unwrap_or_default();
        if members != world {
            return refuse(format!(
                "all-reduce #{} runs on group {:?} of ranks {members:?}; the phases run on the whole world in rank order (replay-trace runs sub-groups)",
                c.seq, c.group
            ));
        }
        let dtype = match c.dtype {
            TraceDtype::F32 => crate::evidence::shard::Dtype::F32,
            TraceDtype::Bf16 => crate::evidence::shard::Dtype::Bf16,
            other => return refuse(format!("all-reduce #{} is {other:?}; the phases reduce f32 or bf16", c.seq)),
        };
        kept.push((c, dtype, compute.replace(0)));
    }
    let left_out: u32 = other_kinds.values().sum();
    if left_out > 0 && !allreduce_only {
        let list: Vec<String> = other_kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        return refuse(format!(
            "rank {rank} has collectives the phases cannot issue ({}); pass --trace-allreduce-only to run only its all-reduces (the left-out count is recorded), or run them all with replay-trace",
            list.join(", ")
        ));
    }
    if kept.is_empty() {
        return refuse(format!("rank {rank} has no all-reduce to run"));
    }
    let colls: Vec<_> = kept.iter().map(|(c, _, _)| (*c).clone()).collect();
    let gaps = cpu_exec::gaps_ns(&colls).with_context(|| {
        format!("--trace {}: it records no times (an execution trace); import the profiler (Kineto) trace to pace by its gaps", path.display())
    })?;
    check_replay_gaps(gaps.iter().copied(), &|i| format!("--trace {}: all-reduce {}", path.display(), i + 1))?;
    for (c, dtype, _) in &kept {
        if c.in_elems.checked_mul(dtype.size_bytes()).is_none_or(|b| b > i64::MAX as u64) {
            return refuse(format!("all-reduce #{} on group {:?} records {} elements: too many bytes", c.seq, c.group, c.in_elems));
        }
    }
    let mut entries = Vec::with_capacity(kept.len() * (warmup_passes + passes) as usize);
    for pass in 0..warmup_passes + passes {
        for (i, ((c, dtype, compute), gap_ns)) in kept.iter().zip(&gaps).enumerate() {
            entries.push(GapEntry {
                token: Some(pass),
                layer: Some(i as u32),
                warmup: pass < warmup_passes,
                bytes: c.in_elems * dtype.size_bytes(),
                dtype: *dtype,
                // the first of a pass: the compute recorded before it stands for the gap
                gap_ns: if i == 0 { compute.unwrap_or(0) } else { *gap_ns },
                // kernels may overlap one another: never more than the gap
                compute_ns: compute.map(|c| if i == 0 { c } else { c.min(*gap_ns) }),
            });
        }
    }
    let origin = TraceOrigin::Imported {
        path: path.display().to_string(),
        sha256,
        source_rank: rank,
        collectives_per_pass: kept.len() as u32,
        left_out_per_pass: left_out,
    };
    Ok(SourceTrace { origin, timeline: GapTimeline::of(colls.iter().map(|c| c.device.is_some())), entries })
}

/// Whether `path` holds a communication trace written by `commcanary import`
/// (one JSON document with its format version and groups) rather than a
/// joined trace (one collective per line).
pub fn is_comm_trace(path: &Path) -> Result<bool> {
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

    #[test]
    fn gaps_are_issue_minus_previous_completion() {
        let e =
            |t| GapEntry { token: Some(t), layer: Some(0), warmup: false, bytes: 4, dtype: crate::evidence::shard::Dtype::F32, gap_ns: 0, compute_ns: None };
        let g = gaps_from(100, vec![(150, 200, e(0)), (260, 300, e(1)), (300, 310, e(2))].into_iter());
        let gaps: Vec<u64> = g.iter().map(|x| x.gap_ns).collect();
        assert_eq!(gaps, vec![50, 60, 0]);
    }
}

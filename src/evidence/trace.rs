//! Source traces for `replay`, `fill`, `overlap` and the ablations.
//!
//! Consumes either this run's `blocking` events on this rank, or a joined
//! trace file written by `commcanary join --events-out` (the shared-trace
//! design: captured once under a reference configuration, replayed under every
//! candidate). Produces, per collective in order, the message size, the
//! token/layer position and the gap: the time from the previous collective's
//! completion (or the phase start) to this collective's issue on that rank.
//! Refuses a file without `blocking` events or with undecodable lines.
use crate::core::workload::Phase;
use crate::evidence::join::JoinedCollective;
use crate::evidence::shard::{CollectiveEvent, PhaseRun, TraceOrigin};
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
}

/// A source trace with its provenance.
#[derive(Clone, Debug)]
pub struct SourceTrace {
    /// Where it came from.
    pub origin: TraceOrigin,
    /// Entries in issue order.
    pub entries: Vec<GapEntry>,
}

/// Longest gap a trace file may ask to replay: 60 s.
pub const MAX_REPLAY_GAP_NS: u64 = 60_000_000_000;

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
        (start, end, GapEntry { token: e.token, layer: e.layer, warmup: e.warmup, bytes: e.bytes, dtype: e.dtype, gap_ns: 0 })
    });
    SourceTrace { origin: TraceOrigin::ThisRunBlocking, entries: gaps_from(run.start_ns, it) }
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
    for c in &rows {
        let t = c
            .ranks
            .iter()
            .find(|t| t.rank == source_rank)
            .with_context(|| format!("{}: group {} seq {} has no times for rank {source_rank}", path.display(), c.group, c.seq))?;
        let (issue, end) = span((t.device_start_ns, t.device_end_ns), t.host_issue_ns, t.injected_delay_ns, t.wait_end_ns);
        times.push((issue, end, GapEntry { token: c.token, layer: c.layer, warmup: c.warmup, bytes: c.bytes, dtype: c.dtype, gap_ns: 0 }));
    }
    // The phase start is not in the joined file: the first gap is taken as zero.
    let start = times[0].0;
    let entries = gaps_from(start, times.into_iter());
    // a replayed gap is slept or filled: refuse one no workload has, rather than sleep for days
    if let Some((i, e)) = entries.iter().enumerate().find(|(_, e)| e.gap_ns > MAX_REPLAY_GAP_NS) {
        crate::refuse!(
            crate::core::refusal::Code::OutOfRange,
            "{}: blocking collective {} has a gap of {} ns before it; replayed gaps are at most {} ns (60 s)",
            path.display(),
            i + 1,
            e.gap_ns,
            MAX_REPLAY_GAP_NS
        );
    }
    Ok(SourceTrace { origin: TraceOrigin::File { path: path.display().to_string(), sha256, source_rank }, entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn gaps_are_issue_minus_previous_completion() {
        let e = |t| GapEntry { token: Some(t), layer: Some(0), warmup: false, bytes: 4, dtype: crate::evidence::shard::Dtype::F32, gap_ns: 0 };
        let g = gaps_from(100, vec![(150, 200, e(0)), (260, 300, e(1)), (300, 310, e(2))].into_iter());
        let gaps: Vec<u64> = g.iter().map(|x| x.gap_ns).collect();
        assert_eq!(gaps, vec![50, 60, 0]);
    }
}

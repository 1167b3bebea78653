//! Stalls: stretches in which one rank made no progress for far longer than
//! its own phase's typical interval (a rank stopped, swapped out, descheduled
//! for seconds, or a paused VM).
//!
//! Consumes one rank's shard (its collective events in issue order, on its own
//! clock). Produces the [`Stall`]s found in it, before or inside a collective,
//! at least [`STALL_MIN_NS`] and [`STALL_MEDIAN_FACTOR`] times the phase's
//! median. Reported, never used to drop data. Refuses nothing: a shard with no
//! stall yields an empty list.
//!
//! Method: docs/METHODS.md, "Stalls".
use crate::core::stats;
use crate::core::workload::Phase;
use crate::evidence::shard::{CollectiveEvent, Shard};
use serde::{Deserialize, Serialize};

/// Shortest interval called a stall, ns (1 s).
pub const STALL_MIN_NS: u64 = 1_000_000_000;
/// How many times its phase's median an interval must last to be a stall.
pub const STALL_MEDIAN_FACTOR: f64 = 100.0;

/// Where the rank stood still.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum StallAt {
    /// Between the previous collective's completion and this one's issue (beyond the phase's design).
    Before,
    /// Inside the collective, from its issue to its wait's return (waiting for a member, or stopped in it).
    Inside,
}

/// One stall of one rank.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Stall {
    /// World rank.
    pub rank: u32,
    /// Phase.
    pub phase: Phase,
    /// Process group of the collective it is before or inside.
    pub group: u32,
    /// Its per-group sequence number.
    pub seq: u64,
    /// Before or inside that collective.
    pub at: StallAt,
    /// Length of the interval, ms (design gaps already subtracted).
    pub duration_ms: f64,
    /// Median of that kind of interval in this rank's phase, ms.
    pub phase_median_ms: f64,
}

/// The stalls of one rank's shard.
pub(crate) fn of_shard(shard: &Shard) -> Vec<Stall> {
    of_rank(shard.header.rank, &shard.body.collectives)
}

/// The stalls in one rank's collective events (its issue order), by phase, group and sequence.
pub(crate) fn of_rank(rank: u32, ev: &[CollectiveEvent]) -> Vec<Stall> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < ev.len() {
        let phase = ev[start].phase;
        let end = ev[start..].iter().position(|e| e.phase != phase).map_or(ev.len(), |n| start + n);
        let run = &ev[start..end];
        let inside: Vec<u64> = run.iter().map(|e| e.wait_end_ns.saturating_sub(e.host_issue_ns)).collect();
        // by design before a collective: its recorded gap (replay), its injected delay, its fill's compute
        let design = |e: &CollectiveEvent| -> u64 {
            let replay = e.replay.as_ref().map_or(0, |r| r.target_gap_ns);
            let fill = if phase == Phase::Fill {
                e.fill.as_ref().map_or(0, |f| u64::from(f.units).saturating_mul(f.quantum_ns))
            } else {
                0
            };
            replay.saturating_add(e.injected_delay_ns.unwrap_or(0)).saturating_add(fill)
        };
        let before: Vec<u64> = run
            .windows(2)
            .map(|w| w[1].host_issue_ns.saturating_sub(w[0].wait_end_ns).saturating_sub(design(&w[1])))
            .collect();
        for (at, values, offset) in [(StallAt::Inside, &inside, 0), (StallAt::Before, &before, 1)] {
            let mut v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
            let Some(median) = stats::median_unsorted(&mut v) else { continue };
            for (i, &x) in values.iter().enumerate() {
                if x >= STALL_MIN_NS && x as f64 >= STALL_MEDIAN_FACTOR * median {
                    let e = &run[i + offset];
                    out.push(Stall {
                        rank,
                        phase,
                        group: e.group,
                        seq: e.seq,
                        at,
                        duration_ms: x as f64 / 1e6,
                        phase_median_ms: median / 1e6,
                    });
                }
            }
        }
        start = end;
    }
    out.sort_by_key(|s| (s.phase as u32, s.group, s.seq, s.at == StallAt::Inside));
    out
}

/// Text lines for `join`: one per stalled collective, naming who stood still
/// before it and who waited inside it.
pub fn render(stalls: &[Stall]) -> Vec<String> {
    let mut keys: Vec<(Phase, u32, u64)> = stalls.iter().map(|s| (s.phase, s.group, s.seq)).collect();
    keys.sort_by_key(|k| (k.0 as u32, k.1, k.2));
    keys.dedup();
    keys.into_iter()
        .map(|(phase, group, seq)| {
            let of = |at: StallAt| -> Vec<String> {
                stalls
                    .iter()
                    .filter(|s| s.phase == phase && s.group == group && s.seq == seq && s.at == at)
                    .map(|s| {
                        format!("rank {} {:.2} s (its median {:.3} ms)", s.rank, s.duration_ms / 1e3, s.phase_median_ms)
                    })
                    .collect()
            };
            let (before, inside) = (of(StallAt::Before), of(StallAt::Inside));
            let mut parts = Vec::new();
            if !before.is_empty() {
                parts.push(format!("no progress before it: {}", before.join(", ")));
            }
            if !inside.is_empty() {
                parts.push(format!("inside it: {}", inside.join(", ")));
            }
            format!("stall at {phase} group {group} seq {seq}: {}", parts.join("; "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::shard::ReplayTiming;

    fn ev(seq: u64, issue_ns: u64, end_ns: u64) -> CollectiveEvent {
        serde_json::from_value(
            serde_json::json!({"phase": "blocking", "kind": "all_reduce", "group": 0, "seq": seq, "bytes": 4,
            "dtype": "f32", "token": 0, "layer": 0, "iter": null, "warmup": false, "host_issue_ns": issue_ns,
            "host_return_ns": issue_ns, "wait_start_ns": issue_ns, "wait_end_ns": end_ns,
            "device_start_ns": null, "device_end_ns": null, "injected_delay_ns": null, "replay": null,
            "fill": null, "checked": false}),
        )
        .unwrap()
    }

    /// 100 collectives of 100 µs, 1 ms apart; rank 1 stops 3 s before the
    /// 50th; rank 0 waits inside it. Nothing else is flagged, and a uniform
    /// slowness (every gap 2 s) is no stall.
    #[test]
    fn a_stop_shows_before_on_the_stopped_rank_and_inside_on_the_others() {
        let timeline = |stop_before: Option<u64>, wait_inside: Option<u64>| -> Vec<CollectiveEvent> {
            let mut t = 0u64;
            (0..100u64)
                .map(|i| {
                    if stop_before == Some(i) {
                        t += 3_000_000_000;
                    }
                    let inside = if wait_inside == Some(i) { 3_000_000_000 } else { 100_000 };
                    let e = ev(i, t, t + inside);
                    t += inside + 1_000_000;
                    e
                })
                .collect()
        };
        let stopped = of_rank(1, &timeline(Some(50), None));
        assert_eq!(stopped.len(), 1, "{stopped:?}");
        assert_eq!((stopped[0].seq, stopped[0].at), (50, StallAt::Before));
        assert!((stopped[0].duration_ms - 3001.0).abs() < 1.0, "{stopped:?}");
        let waiting = of_rank(0, &timeline(None, Some(50)));
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert_eq!((waiting[0].seq, waiting[0].at), (50, StallAt::Inside));
        let lines = render(&[stopped, waiting].concat());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("no progress before it: rank 1 3.00 s") && lines[0].contains("inside it: rank 0 3.00 s"),
            "{lines:?}"
        );
        // a phase slow throughout: 2 s between every pair is its median, not a stall
        let slow: Vec<CollectiveEvent> =
            (0..20u64).map(|i| ev(i, i * 2_000_100_000, i * 2_000_100_000 + 100_000)).collect();
        assert!(of_rank(0, &slow).is_empty());
        // a replayed gap of 30 s recorded in the trace is the design, not a stall
        let mut replay = timeline(Some(50), None);
        replay.iter_mut().for_each(|e| e.phase = Phase::Replay);
        replay[50].replay =
            Some(ReplayTiming { target_gap_ns: 3_000_000_000 + 1_000_000, actual_gap_ns: 3_001_000_000 });
        assert!(of_rank(1, &replay).is_empty());
    }
}

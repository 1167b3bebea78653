//! The arrival-delay negative control: the skew must rise in exactly the
//! delayed windows. Consumes the timed joined collectives of a run with an
//! injected delay; produces a [`DelayControlReport`] (counts against
//! [`detection_line_us`], per phase, and beyond the replay's design), or none
//! without a delay or calibrated arrivals. Use [`delay_control`] on a joined
//! run; the summary collects a [`DelayRec`] per collective instead.
use super::{JoinedCollective, JoinedRun};
use crate::core::stats;
use crate::core::workload::{DelayInjection, Phase};
use crate::evidence::shard::BackendKind;
use serde::{Deserialize, Serialize};

/// How the arrival-delay negative control behaved (docs/ARCHITECTURE.md §4: the skew metric
/// must rise in exactly the delayed windows). A delayed collective counts as
/// detected when `skew >= delay/2 - bound` ([`detection_line_us`]); an
/// undelayed one on or above that line is a false alarm. The delay shifts the
/// delayed rank's *natural* arrival, so the skew of a delayed collective is the
/// delay less the other ranks' own lateness: the counts show what that
/// lateness did rather than hide it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DelayControlReport {
    /// Delayed rank.
    pub rank: u32,
    /// Period in sequence numbers.
    pub every: u64,
    /// Nominal injected delay, µs (the detection line uses it).
    pub delay_us: f64,
    /// Median delay actually achieved (sleep overshoots), µs.
    pub achieved_delay_median_us: Option<f64>,
    /// Timed collectives that were delayed.
    pub delayed: u64,
    /// Of those, with skew >= delay/2 - bound.
    pub delayed_detected: u64,
    /// Smallest skew among delayed collectives, µs.
    pub delayed_skew_min_us: Option<f64>,
    /// Timed collectives not delayed.
    pub undelayed: u64,
    /// Of those, with skew >= delay/2 - bound (false alarms).
    pub undelayed_false_alarms: u64,
    /// Median skew of undelayed collectives, µs.
    pub undelayed_skew_median_us: Option<f64>,
    /// Phases whose collectives the counts above judge: those whose arrival
    /// the host paces. On CPUs every phase; on GPUs only where the host waits
    /// for the device before each issue (`replay`), since elsewhere the device
    /// queue runs ahead of the host and a host delay need not move the
    /// collective at all. Absent in older summaries.
    #[serde(default)]
    pub judged_phases: Vec<Phase>,
    /// The same counts per phase, judged or not.
    #[serde(default)]
    pub per_phase: Vec<PhaseDelayControl>,
    /// The judged collectives again, on the skew the run did not design:
    /// in `replay` each rank arrives its paced gap after it saw the previous
    /// collective complete, so ranks pacing different gaps (the source's
    /// own per-rank gaps, or a host stall in the pacing) are skewed by
    /// design; there the skew counted is that of arrival less paced gap
    /// across ranks (see [`unexplained_skew_us`]). Elsewhere it is the skew.
    /// Absent in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_design: Option<BeyondDesign>,
}

/// The delay control's counts on skew beyond the run's design (see
/// [`DelayControlReport::beyond_design`]).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BeyondDesign {
    /// Judged collectives whose skew was taken beyond the design (replayed
    /// on every rank); the others count their skew.
    pub corrected: u64,
    /// Delayed collectives with skew beyond design >= delay/2 - bound (the
    /// sum of the bounds of the two ranks that set it).
    pub delayed_detected: u64,
    /// Undelayed ones above that line (false alarms).
    pub undelayed_false_alarms: u64,
    /// Median skew beyond design of the undelayed collectives, µs.
    pub undelayed_skew_median_us: Option<f64>,
}

/// Skew a replayed collective shows beyond what the replay designed: each
/// rank's arrival less the gap it paced (ending when it saw the previous
/// collective complete), max minus min across ranks, µs. What remains is
/// when each host saw the previous completion, its issue latency, an
/// injected delay and the clocks' error. `None` unless every rank replayed
/// the collective and its arrivals are calibrated.
pub fn unexplained_skew_us(c: &JoinedCollective) -> Option<f64> {
    unexplained_skew_and_bound_us(c).map(|(skew, _)| skew)
}

/// [`unexplained_skew_us`] with its error bound, µs: the sum of the bounds
/// of the two ranks that set it (the collective's bound where per-rank
/// bounds were not kept).
pub(crate) fn unexplained_skew_and_bound_us(c: &JoinedCollective) -> Option<(f64, f64)> {
    let offsets = c.arrival_offsets_us.as_ref()?;
    let residuals: Option<Vec<f64>> =
        offsets.iter().zip(&c.ranks).map(|(o, t)| Some(o - t.replay_gap_ns? as f64 / 1e3)).collect();
    let r = residuals?;
    let lo = (0..r.len()).min_by(|&a, &b| r[a].total_cmp(&r[b]))?;
    let hi = (0..r.len()).max_by(|&a, &b| r[a].total_cmp(&r[b]))?;
    let bound = match &c.arrival_bounds_us {
        Some(b) if b.len() == r.len() => {
            if lo == hi {
                0.0
            } else {
                b[lo] + b[hi]
            }
        }
        _ => c.arrival_bound_us.unwrap_or(0.0),
    };
    Some((r[hi] - r[lo], bound))
}

/// One phase's delayed/undelayed counts (see [`DelayControlReport`]).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PhaseDelayControl {
    /// Phase.
    pub phase: Phase,
    /// Whether the phase's counts enter the verdict.
    pub judged: bool,
    /// Timed collectives that were delayed.
    pub delayed: u64,
    /// Of those, with skew >= delay/2 - bound.
    pub delayed_detected: u64,
    /// Timed collectives not delayed.
    pub undelayed: u64,
    /// Of those, with skew >= delay/2 - bound.
    pub undelayed_false_alarms: u64,
    /// Delayed ones detected on skew beyond design (see
    /// [`DelayControlReport::beyond_design`]). Absent in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_design_detected: Option<u64>,
    /// Undelayed ones above the line on skew beyond design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_design_false_alarms: Option<u64>,
}

/// What the delay control needs of one timed collective.
pub(super) struct DelayRec {
    phase: Phase,
    delayed: bool,
    skew: Option<f64>,
    bound: Option<f64>,
    beyond: Option<(f64, f64)>,
    injected_us: Vec<f64>,
}

impl DelayRec {
    pub(super) fn of(c: &JoinedCollective) -> Self {
        let delayed = c.ranks.iter().any(|t| t.injected_delay_ns.is_some());
        DelayRec {
            phase: c.phase,
            delayed,
            skew: c.arrival_skew_us,
            bound: c.arrival_bound_us,
            beyond: unexplained_skew_and_bound_us(c),
            injected_us: if delayed {
                c.ranks.iter().filter_map(|t| t.injected_delay_ns).map(|ns| ns as f64 / 1e3).collect()
            } else {
                Vec::new()
            },
        }
    }
}

/// The skew, µs, at and above which the arrival-delay control counts a
/// collective as showing an injected delay of `delay_us` (less the skew's
/// bound): half the delay (docs/METHODS.md, "Join internals").
pub fn detection_line_us(delay_us: f64) -> f64 {
    delay_us / 2.0
}

/// The arrival-delay control of a run, when one was injected and clocks were calibrated.
pub fn delay_control(j: &JoinedRun) -> Option<DelayControlReport> {
    let d = j.shards[0].header.delay_injection?;
    let recs: Vec<DelayRec> = j.collectives.iter().filter(|c| !c.warmup).map(DelayRec::of).collect();
    delay_control_of(&recs, d, j.shards[0].header.backend, &j.run.workload.phases)
}

/// [`delay_control`] from the records of the timed collectives.
pub(super) fn delay_control_of(
    all_timed: &[DelayRec],
    d: DelayInjection,
    backend: BackendKind,
    phases: &[Phase],
) -> Option<DelayControlReport> {
    if all_timed.iter().any(|c| c.skew.is_none()) {
        return None;
    }
    let gpu = backend == BackendKind::Cuda;
    let judged = |p: Phase| !gpu || p == Phase::Replay;
    let delay_us = d.delay_ns as f64 / 1e3;
    let line_us = detection_line_us(delay_us);
    let above = |c: &DelayRec| c.skew.unwrap_or(0.0) >= line_us - c.bound.unwrap_or(0.0);
    let beyond_and_bound = |c: &DelayRec| c.beyond.unwrap_or((c.skew.unwrap_or(0.0), c.bound.unwrap_or(0.0)));
    let beyond = |c: &DelayRec| beyond_and_bound(c).0;
    let above_design = |c: &DelayRec| {
        let (skew, bound) = beyond_and_bound(c);
        skew >= line_us - bound
    };
    let per_phase = phases
        .iter()
        .map(|&phase| {
            let (dl, ud): (Vec<&DelayRec>, Vec<&DelayRec>) =
                all_timed.iter().filter(|c| c.phase == phase).partition(|c| c.delayed);
            PhaseDelayControl {
                phase,
                judged: judged(phase),
                delayed: dl.len() as u64,
                delayed_detected: dl.iter().filter(|c| above(c)).count() as u64,
                undelayed: ud.len() as u64,
                undelayed_false_alarms: ud.iter().filter(|c| above(c)).count() as u64,
                beyond_design_detected: Some(dl.iter().filter(|c| above_design(c)).count() as u64),
                beyond_design_false_alarms: Some(ud.iter().filter(|c| above_design(c)).count() as u64),
            }
        })
        .collect();
    let (dl, ud): (Vec<&DelayRec>, Vec<&DelayRec>) =
        all_timed.iter().filter(|c| judged(c.phase)).partition(|c| c.delayed);
    let mut ud_skews: Vec<f64> = ud.iter().filter_map(|c| c.skew).collect();
    let mut ud_beyond: Vec<f64> = ud.iter().map(|c| beyond(c)).collect();
    let beyond_design = BeyondDesign {
        corrected: dl.iter().chain(&ud).filter(|c| c.beyond.is_some()).count() as u64,
        delayed_detected: dl.iter().filter(|c| above_design(c)).count() as u64,
        undelayed_false_alarms: ud.iter().filter(|c| above_design(c)).count() as u64,
        undelayed_skew_median_us: stats::median(&mut ud_beyond),
    };
    let mut achieved: Vec<f64> = dl.iter().flat_map(|c| c.injected_us.iter().copied()).collect();
    Some(DelayControlReport {
        achieved_delay_median_us: stats::median(&mut achieved),
        rank: d.rank,
        every: d.every,
        delay_us,
        delayed: dl.len() as u64,
        delayed_detected: dl.iter().filter(|c| above(c)).count() as u64,
        delayed_skew_min_us: dl.iter().filter_map(|c| c.skew).reduce(f64::min),
        undelayed: ud.len() as u64,
        undelayed_false_alarms: ud.iter().filter(|c| above(c)).count() as u64,
        undelayed_skew_median_us: stats::median(&mut ud_skews),
        judged_phases: phases.iter().copied().filter(|&p| judged(p)).collect(),
        per_phase,
        beyond_design: Some(beyond_design),
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{collective, times};
    use super::*;

    #[test]
    fn skew_beyond_the_replay_design_takes_each_ranks_paced_gap_off_its_arrival() {
        // rank 1 was designed to arrive 30 us after rank 0 (its gap is 30 us longer) and did,
        // 2 us more: 2 us beyond design; the skew itself is 32 us
        let mut c = collective(vec![times(0, 0, None), times(1, 0, None)]);
        c.phase = Phase::Replay;
        c.arrival_offsets_us = Some(vec![0.0, 32.0]);
        c.arrival_skew_us = Some(32.0);
        c.ranks[0].replay_gap_ns = Some(40_000);
        c.ranks[1].replay_gap_ns = Some(70_000);
        let u = unexplained_skew_us(&c).unwrap();
        assert!((u - 2.0).abs() < 1e-9, "{u}");
        // the same gaps with rank 0 the later one by 5 us: 35 us beyond design
        c.arrival_offsets_us = Some(vec![5.0, 0.0]);
        let u = unexplained_skew_us(&c).unwrap();
        assert!((u - 35.0).abs() < 1e-9, "{u}");
        // one rank without a paced gap, or no calibrated arrivals: no such figure
        c.ranks[1].replay_gap_ns = None;
        assert_eq!(unexplained_skew_us(&c), None);
        c.ranks[1].replay_gap_ns = Some(70_000);
        c.arrival_offsets_us = None;
        assert_eq!(unexplained_skew_us(&c), None);
        // three ranks: the raw extremes are ranks 0 and 2 (bound 1 + 3), but beyond design
        // ranks 0 and 1 set the spread, so its bound is theirs (1 + 2)
        let mut c = collective(vec![times(0, 0, None), times(1, 0, None), times(2, 0, None)]);
        c.arrival_offsets_us = Some(vec![0.0, 10.0, 50.0]);
        c.arrival_bound_us = Some(4.0);
        c.arrival_bounds_us = Some(vec![1.0, 2.0, 3.0]);
        for (t, gap) in c.ranks.iter_mut().zip([100_000, 80_000, 145_000]) {
            t.replay_gap_ns = Some(gap);
        }
        // residuals -100, -70, -95: spread 30 between ranks 0 and 1
        assert_eq!(unexplained_skew_and_bound_us(&c), Some((30.0, 3.0)));
        c.arrival_bounds_us = None;
        assert_eq!(
            unexplained_skew_and_bound_us(&c),
            Some((30.0, 4.0)),
            "the collective's bound where per-rank ones were not kept"
        );
    }
}

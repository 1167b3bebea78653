//! `join`: verify a run's shards and match events by operation identity.
//!
//! Consumes a run directory (`run.json` plus one shard per rank). Produces the
//! joined trace (one [`JoinedCollective`] per operation, with every rank's
//! times and the arrival offsets on rank 0's calibrated timebase) and a
//! [`JoinSummary`]. Refuses, naming file, rank, group and sequence: a missing
//! `run.json`, a missing or duplicated rank shard, a shard whose hash fails or
//! differs from `run.json`, a shard from another run, inconsistent group
//! membership, a duplicated event, an event present on some ranks only, and
//! an identity mismatch (kind, size, dtype, phase) between ranks. Events are
//! never matched by closeness in time. Nothing on disk is modified.
//!
//! Operation identity (docs/ARCHITECTURE.md §6.3) = (process group, ordered membership,
//! collective kind, bytes, per-group sequence number, phase; for broadcast
//! and reduce the root). The group id and sequence number locate the
//! operation; every other component must agree. A send and its receive
//! (shard format 6) are one operation located by (group, sender, receiver,
//! sequence number of that pair): the sender's event must be a send to the
//! receiver and the receiver's a receive from the sender, of the same bytes,
//! dtype and phase; the joined operation is of kind `send`, its members
//! `[sender, receiver]`.
use crate::core::clock::ClockModel;
use crate::core::refusal::Code;
use crate::core::stats;
use crate::core::workload::Phase;
use crate::evidence::run::{RunRecord, RUN_FILE};
use crate::evidence::shard::{CollectiveKind, Dtype, Shard};
use crate::refuse;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One rank's view of a joined collective (local clock, ns). A field not
/// recorded for this collective (not measured, not injected, not replayed)
/// is absent, never 0, which keeps the joined trace small: most are phase-
/// or backend-specific.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankTimes {
    /// World rank.
    pub rank: u32,
    /// Arrival (issue) time.
    pub host_issue_ns: u64,
    /// Issue call return.
    pub host_return_ns: u64,
    /// Wait start.
    pub wait_start_ns: u64,
    /// Wait end.
    pub wait_end_ns: u64,
    /// Device interval start, where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_start_ns: Option<u64>,
    /// Device interval end, where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_end_ns: Option<u64>,
    /// Injected arrival delay, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_delay_ns: Option<u64>,
    /// Replay error (actual minus target gap), where replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_error_ns: Option<i64>,
    /// Gap this rank paced before the collective (replay): from when its
    /// host saw the previous collective complete to the end of its pacing
    /// (before any injected delay and the issue), ns. The replay's design:
    /// ranks pacing different gaps are skewed by design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_gap_ns: Option<u64>,
    /// Fill units, where filled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill_units: Option<u32>,
    /// Fill quantization error, where filled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill_quantization_error_ns: Option<i64>,
    /// How long the compute stream stalled on this collective (GPU), where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_wait_ns: Option<u64>,
    /// Start of this collective's NCCL kernel (CUPTI, placed on the host clock
    /// through the phase's `%globaltimer` kernel anchor), where the phase's
    /// NCCL kernels and collectives pair one to one in launch order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_start_ns: Option<u64>,
}

impl RankTimes {
    /// Time the collective took on this rank: the device interval where the
    /// backend measured one (GPU events), else issue to wait return on the host.
    pub fn completion_ns(&self) -> u64 {
        match (self.device_start_ns, self.device_end_ns) {
            (Some(s), Some(e)) => e.saturating_sub(s),
            _ => self.wait_end_ns.saturating_sub(self.host_issue_ns),
        }
    }

    /// Which interval [`Self::completion_ns`] used.
    pub fn completion_source(&self) -> CompletionSource {
        if self.device_start_ns.is_some() && self.device_end_ns.is_some() {
            CompletionSource::DeviceEvents
        } else {
            CompletionSource::HostIssueToWaitReturn
        }
    }
}

/// Where a completion time comes from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CompletionSource {
    /// Device events around the collective on its stream.
    DeviceEvents,
    /// Host clock from the issue call to the wait's return.
    HostIssueToWaitReturn,
    /// Both kinds within one phase (should not happen within one backend).
    Mixed,
}

/// Which time a rank's arrival at a collective is.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalSource {
    /// Every member's NCCL kernel start (CUPTI through the `%globaltimer`
    /// anchor; bound: clock calibration plus the kernel anchor's error).
    NcclKernel,
    /// The device event before the collective where measured (bound: clock
    /// calibration plus the event anchor's error), else the host issue time.
    DeviceEventOrHostIssue,
}

/// Whether arrival offsets could be computed.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalStatus {
    /// Every rank had a clock model.
    Calibrated,
    /// At least one rank had none: offsets and skew are unknown, not zero.
    UnknownUncalibrated,
}

/// A collective matched across ranks.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct JoinedCollective {
    /// Phase.
    pub phase: Phase,
    /// Kind.
    pub kind: CollectiveKind,
    /// Process group id.
    pub group: u32,
    /// Ordered membership.
    pub members: Vec<u32>,
    /// Per-group sequence number (a send/recv pair: per sender and receiver on the group).
    pub seq: u64,
    /// Logical bytes.
    pub bytes: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Broadcast and reduce: the root's world rank; absent for other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// Token.
    pub token: Option<u32>,
    /// Layer.
    pub layer: Option<u32>,
    /// Iteration (isolated).
    pub iter: Option<u32>,
    /// Warm-up.
    pub warmup: bool,
    /// Per-rank times, in membership order.
    pub ranks: Vec<RankTimes>,
    /// Calibration status of the arrival figures.
    pub arrival_status: ArrivalStatus,
    /// Per-rank arrival minus the earliest arrival, µs, on rank 0's timebase
    /// (device start where measured, else host issue).
    pub arrival_offsets_us: Option<Vec<f64>>,
    /// Max minus min arrival, µs.
    pub arrival_skew_us: Option<f64>,
    /// Error bound of the skew, µs (sum of the bounds of the two ranks involved:
    /// clock calibration, plus the device anchor's error on GPUs).
    pub arrival_bound_us: Option<f64>,
    /// Whether the skew exceeds its bound (otherwise the data do not support a non-zero skew).
    pub skew_resolved: Option<bool>,
    /// Each rank's arrival error bound, µs, in membership order (clock
    /// calibration plus, on GPUs, the anchor's error): the skew between any
    /// two ranks is bounded by the sum of theirs. Absent in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_bounds_us: Option<Vec<f64>>,
    /// Which time the arrival figures use; absent where they are unknown.
    #[serde(default)]
    pub arrival_source: Option<ArrivalSource>,
    /// NCCL's tuner choice for this collective, where captured (`rank --nccl-tuning`).
    #[serde(default)]
    pub tuner: Option<crate::evidence::tuning::TunerChoice>,
}

/// Per-rank clock report.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankClockReport {
    /// World rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Whether a clock model exists.
    pub calibrated: bool,
    /// Estimated offset (local - rank 0) at the start window, µs.
    pub offset_us: Option<f64>,
    /// Estimated drift, ppm.
    pub drift_ppm: Option<f64>,
    /// Offset error bound, µs.
    pub bound_us: Option<f64>,
    /// Drift uncertainty, ppm.
    pub drift_bound_ppm: Option<f64>,
    /// The rank reads rank 0's kernel clock (same boot id and time
    /// namespace, every ping-pong sample consistent with one clock): offset,
    /// drift and bound are 0 by construction.
    #[serde(default)]
    pub shared_kernel_clock: bool,
    /// Why a rank other than 0 does not read rank 0's kernel clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_kernel_clock_refused: Option<String>,
    /// The ping-pong estimate at the start window, µs, whatever the model
    /// (on a shared kernel clock, the evidence kept beside it).
    #[serde(default)]
    pub pingpong_offset_us: Option<f64>,
    /// Half the best start-window round trip (the estimate's bound), µs.
    #[serde(default)]
    pub pingpong_bound_us: Option<f64>,
    /// Injected offset at the start window relative to rank 0 (truth), µs.
    pub injected_offset_us: Option<f64>,
    /// Injected drift relative to rank 0 (truth), ppm.
    pub injected_drift_ppm: Option<f64>,
    /// |estimate - truth| (truth = injected, or 0 when none) within the bound.
    pub offset_within_bound: Option<bool>,
    /// |drift estimate - truth| within the drift bound.
    pub drift_within_bound: Option<bool>,
    /// How the model was obtained: `reference` (rank 0), `direct` (against
    /// rank 0), `via_leader` (against `leader`, composed with the leader's
    /// model). Absent where uncalibrated; `direct` for shards before format 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::core::clock::ClockPath>,
    /// This rank's node leader under hierarchical calibration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<u32>,
    /// `via_leader`: the bound of this rank's model against its leader, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_leg_bound_us: Option<f64>,
    /// `via_leader`: the bound of the leader's model against rank 0, µs
    /// (`bound_us` is the two legs' sum plus the drift's second-order term).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_bound_us: Option<f64>,
    /// Wall time of this rank's two calibration windows together, ns;
    /// absent where unmeasured (uncalibrated, shards before format 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_wall_ns: Option<u64>,
}

/// Per-node clock consistency: ranks on one node share a clock in truth.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NodeClockReport {
    /// Host.
    pub host: String,
    /// Ranks on it.
    pub ranks: Vec<u32>,
    /// Whether every un-injected rank's ping-pong [estimate ± bound]
    /// intervals intersect (rank 0's is 0 ± 0), also where a rank's model is
    /// the shared kernel clock.
    pub consistent: Option<bool>,
    /// Widest model bound on the node, µs.
    pub max_bound_us: Option<f64>,
    /// The node's leader under hierarchical calibration (its lowest rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<u32>,
    /// The leader's bound against rank 0, µs (0 on rank 0's node): every
    /// other rank's bound on the node includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_bound_us: Option<f64>,
}

/// Per-phase summary.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PhaseSummary {
    /// Phase.
    pub phase: Phase,
    /// Timed (non-warm-up) collectives per rank.
    pub collectives_per_rank: u64,
    /// Warm-up collectives per rank (recorded, excluded from statistics).
    pub warmup_collectives_per_rank: u64,
    /// Timed collectives per message size (bytes → count, per rank).
    pub sizes_bytes: BTreeMap<u64, u64>,
    /// Issue order of the first sizes (to show cycling).
    pub first_sizes_bytes: Vec<u64>,
    /// What the completion figures measure.
    pub completion_source: Option<CompletionSource>,
    /// Median per-rank completion time, µs, timed events, all ranks.
    pub completion_median_us: Option<f64>,
    /// 99th percentile (nearest rank) of the same.
    pub completion_p99_us: Option<f64>,
    /// Median token latency, µs, all ranks.
    pub token_median_us: Option<f64>,
    /// 99th percentile token latency, µs.
    pub token_p99_us: Option<f64>,
    /// Median arrival skew, µs (absent when uncalibrated).
    pub skew_median_us: Option<f64>,
    /// Median error bound of the arrival skew, µs (absent when uncalibrated).
    #[serde(default)]
    pub skew_bound_median_us: Option<f64>,
    /// Timed collectives whose arrival is every member's NCCL kernel start
    /// (the rest use device events or host issue times).
    #[serde(default)]
    pub arrivals_from_nccl_kernels: u64,
    /// Median time the compute stream stalled on a collective, µs (GPU; absent when unmeasured).
    #[serde(default)]
    pub device_wait_median_us: Option<f64>,
    /// Timed collectives per NCCL tuner choice `ALGO/PROTO/channels` (empty when not captured).
    #[serde(default)]
    pub tuner_choices: BTreeMap<String, u64>,
    /// Trace phases: the timeline their source gaps were measured on (rank
    /// 0's record; absent without a trace or in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_timeline: Option<crate::evidence::shard::GapTimeline>,
}

/// One size of the isolated phase, in nccl-tests' terms (its
/// `doc/PERFORMANCE.md` and per-iteration timing, `-I 1`): an iteration's
/// time is the largest over ranks; `time` is the mean per iteration, and
/// bus bandwidth scales algorithm bandwidth by the swept kind's factor
/// ([`crate::core::workload::SweepKind::busbw_factor`]: `2(n-1)/n` for
/// all-reduce). `bytes` is nccl-tests' size of the kind
/// ([`crate::core::workload::SweepKind`]: an all-gather's is the gathered buffer).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IsolatedSizeRow {
    /// Message size.
    pub bytes: u64,
    /// Timed iterations.
    pub iterations: u64,
    /// Mean over ranks of each rank's mean per-iteration time, µs.
    pub time_us: f64,
    /// Algorithm bandwidth, bytes / time, GB/s.
    pub algbw_gbps: f64,
    /// Bus bandwidth, algbw × the kind's factor (all-reduce 2(n−1)/n), GB/s.
    pub busbw_gbps: f64,
    /// Wrong elements found by the result checks of this size; absent when none was checked.
    pub wrong_elements: Option<u64>,
    /// Median per-iteration time (largest over ranks), µs.
    pub p50_us: f64,
    /// 99th percentile (nearest rank) of the same, µs.
    pub p99_us: f64,
    /// What the times measure.
    pub source: CompletionSource,
    /// Elements per rank (bytes / element size): nccl-tests' `count`
    /// (absent in summaries written before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Element type: nccl-tests' `type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    /// Reduction: nccl-tests' `redop` (`none` for a kind without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redop: Option<String>,
    /// The collective swept (absent in summaries written before other kinds
    /// could be swept: all-reduce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<crate::core::workload::SweepKind>,
    /// Root rank of a broadcast or reduce; absent for the other kinds (nccl-tests' root -1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
}

/// The isolated phase of a joined run, per size, for the kind it swept
/// (`--collective`, recorded in the workload; the events carry it too).
pub fn isolated_sizes(j: &JoinedRun) -> Vec<IsolatedSizeRow> {
    let kind = j.run.workload.sweep_kind();
    let n = j.run.world_size;
    let mut by_size: BTreeMap<u64, Vec<&JoinedCollective>> = BTreeMap::new();
    for c in j.collectives.iter().filter(|c| c.phase == Phase::Isolated && !c.warmup && c.kind.name() == kind.name()) {
        by_size.entry(c.bytes).or_default().push(c);
    }
    by_size
        .into_iter()
        .map(|(event_bytes, cs)| {
            let bytes = kind.size_bytes(event_bytes, n);
            let mut iter_max: Vec<f64> = cs.iter().map(|c| c.ranks.iter().map(|t| t.completion_ns() as f64).fold(0.0, f64::max) / 1e3).collect();
            let ranks = cs[0].ranks.len();
            let time_us =
                (0..ranks).map(|r| cs.iter().map(|c| c.ranks[r].completion_ns() as f64 / 1e3).sum::<f64>() / cs.len() as f64).sum::<f64>() / ranks as f64;
            let algbw_gbps = bytes as f64 / (time_us * 1e3);
            let checks: Vec<u64> = j
                .shards
                .iter()
                .flat_map(|s| s.header.checks.iter())
                .filter(|k| k.phase == Phase::Isolated && k.bytes == event_bytes)
                .map(|k| k.wrong_elements)
                .collect();
            let source = cs[0].ranks[0].completion_source();
            // nccl-tests' nearest-rank indices: p50 = sorted[n/2], p99 = sorted[ceil(0.99 n) - 1]
            iter_max.sort_by(f64::total_cmp);
            let len = iter_max.len();
            let p99_idx = ((len * 99).div_ceil(100)).saturating_sub(1).min(len - 1);
            IsolatedSizeRow {
                bytes,
                iterations: len as u64,
                time_us,
                algbw_gbps,
                busbw_gbps: algbw_gbps * kind.busbw_factor(n),
                wrong_elements: (!checks.is_empty()).then(|| checks.iter().sum()),
                p50_us: iter_max[len / 2],
                p99_us: iter_max[p99_idx],
                source,
                count: Some(bytes / cs[0].dtype.size_bytes()),
                dtype: Some(cs[0].dtype),
                redop: Some(if kind.reduces() { j.run.workload.sweep_op().name() } else { "none" }.into()),
                collective: Some(kind),
                root: cs[0].root,
            }
        })
        .collect()
}

/// Event-by-event comparison of tuner choices between a workload phase and a
/// proxy that replays it (the k-th collective of each, warm-ups included;
/// sizes must agree pairwise or the comparison is refused).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TuningComparison {
    /// Workload phase.
    pub workload: Phase,
    /// Proxy phase.
    pub proxy: Phase,
    /// Pairs compared.
    pub compared: u64,
    /// Pairs with the same algorithm, protocol and channel count.
    pub same: u64,
    /// The first differing pairs: (index, workload choice, proxy choice).
    pub first_differences: Vec<(u64, String, String)>,
    /// Why no comparison was made, when none was.
    pub refused: Option<String>,
}

/// How the arrival-delay negative control behaved (docs/ARCHITECTURE.md §4: the skew metric
/// must rise in exactly the delayed windows). A delayed collective counts as
/// detected when `skew >= delay - bound`; an undelayed one above that line is
/// a false alarm. The delay shifts the delayed rank's *natural* arrival, so a
/// rank that would have arrived early can fall short by the natural spread:
/// the counts show it rather than hide it.
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
    /// Of those, with skew >= delay - bound.
    pub delayed_detected: u64,
    /// Smallest skew among delayed collectives, µs.
    pub delayed_skew_min_us: Option<f64>,
    /// Timed collectives not delayed.
    pub undelayed: u64,
    /// Of those, with skew >= delay - bound (false alarms).
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
    /// Delayed collectives with skew beyond design >= delay - bound (the
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
pub fn unexplained_skew_and_bound_us(c: &JoinedCollective) -> Option<(f64, f64)> {
    let offsets = c.arrival_offsets_us.as_ref()?;
    let residuals: Option<Vec<f64>> = offsets.iter().zip(&c.ranks).map(|(o, t)| Some(o - t.replay_gap_ns? as f64 / 1e3)).collect();
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
    /// Of those, with skew >= delay - bound.
    pub delayed_detected: u64,
    /// Timed collectives not delayed.
    pub undelayed: u64,
    /// Of those, with skew >= delay - bound.
    pub undelayed_false_alarms: u64,
    /// Delayed ones detected on skew beyond design (see
    /// [`DelayControlReport::beyond_design`]). Absent in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_design_detected: Option<u64>,
    /// Undelayed ones above the line on skew beyond design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_design_false_alarms: Option<u64>,
}

/// The `join --json` summary.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct JoinSummary {
    /// Run id.
    pub run_id: String,
    /// World size.
    pub world_size: u32,
    /// Joined collectives.
    pub collectives: u64,
    /// Per phase.
    pub phases: Vec<PhaseSummary>,
    /// Per rank clock.
    pub clocks: Vec<RankClockReport>,
    /// Per node clock consistency.
    pub nodes: Vec<NodeClockReport>,
    /// Which ranks calibrated against which (`flat`, `hierarchical`);
    /// absent where uncalibrated or in shards before format 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_sync: Option<crate::core::clock::ClockSync>,
    /// Calibration wall time of the run: the largest over the ranks of their
    /// two windows' wall time, ns; absent where any rank's is unmeasured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_wall_ns: Option<u64>,
    /// Arrival-delay control, when one was injected and clocks were calibrated.
    pub delay_control: Option<DelayControlReport>,
    /// Tuner choices of each proxy phase against `blocking`, where captured.
    #[serde(default)]
    pub tuning_comparisons: Vec<TuningComparison>,
    /// The isolated phase per size, as nccl-tests reports it (absent without an isolated phase).
    #[serde(default)]
    pub isolated_sizes: Vec<IsolatedSizeRow>,
    /// Verified shard digests.
    pub shards: Vec<crate::evidence::run::ShardRef>,
    /// Stretches in which a rank made no progress far beyond its phase's
    /// typical interval (a stopped or descheduled rank), per rank; empty
    /// where none was found (summaries written before this field: absent).
    #[serde(default)]
    pub stalls: Vec<crate::evidence::stalls::Stall>,
}

/// A verified, joined run.
pub struct JoinedRun {
    /// The run record.
    pub run: RunRecord,
    /// Shards by rank.
    pub shards: Vec<Shard>,
    /// Joined collectives in (group, seq) order.
    pub collectives: Vec<JoinedCollective>,
}

/// Load and verify every shard of `dir`, then join.
pub fn join_dir(dir: &Path) -> Result<JoinedRun> {
    if !dir.is_dir() {
        refuse!(Code::NoSuchInput, "{}: no such run directory", dir.display());
    }
    let run_path = dir.join(RUN_FILE);
    if !run_path.exists() {
        // an --out root (rank --out DIR writes DIR/<run-id>/): name the runs in it
        let mut runs: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join(RUN_FILE).is_file()).map(|p| p.display().to_string()).collect())
            .unwrap_or_default();
        let has_shards = std::fs::read_dir(dir).is_ok_and(|mut rd| rd.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "shard"))));
        if !runs.is_empty() && !has_shards {
            runs.sort();
            refuse!(
                Code::NoSuchInput,
                "{} is not a run but holds {} run(s) (rank --out writes OUT/<run-id>/); join one of them: {}",
                dir.display(),
                runs.len(),
                runs.join(", ")
            );
        }
        refuse!(Code::NoSuchInput, "{}: missing; rank 0 writes it after every shard is on disk, so the run is incomplete", run_path.display());
    }
    let run = crate::evidence::run::read_run_record(&run_path)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "shard"))
        .collect();
    files.sort();
    let mut by_rank: BTreeMap<u32, (PathBuf, Shard)> = BTreeMap::new();
    for f in files {
        let bytes = crate::core::limits::read_bounded(&f, crate::core::limits::MAX_SHARD_BYTES)?;
        let (shard, digest) = Shard::decode_with_digest(&bytes, &f.display().to_string())?;
        let h = &shard.header;
        if h.run_id != run.run_id {
            refuse!(Code::ForeignShard, "{}: belongs to run {}, not {}", f.display(), h.run_id, run.run_id);
        }
        if h.world_size != run.world_size || h.rank >= run.world_size {
            refuse!(Code::ForeignShard, "{}: rank {} of {} does not fit run {} of {} ranks", f.display(), h.rank, h.world_size, run.run_id, run.world_size);
        }
        let Some(want) = run.shards.iter().find(|s| s.rank == h.rank) else {
            refuse!(Code::UnlistedRank, "{}: rank {} is not listed in run.json", f.display(), h.rank);
        };
        if want.sha256 != digest {
            refuse!(
                Code::Stale,
                "{}: rank {} shard differs from the one run.json recorded (sha256 {} vs {}): stale or replaced",
                f.display(),
                h.rank,
                digest,
                want.sha256
            );
        }
        if let Some((prev, _)) = by_rank.get(&h.rank) {
            refuse!(Code::DuplicateRank, "duplicate shards for rank {}: {} and {}", h.rank, prev.display(), f.display());
        }
        by_rank.insert(h.rank, (f, shard));
    }
    for r in 0..run.world_size {
        if !by_rank.contains_key(&r) {
            refuse!(Code::MissingRank, "rank {r} shard missing: expected {} in {}", crate::evidence::shard::shard_file_name(r), dir.display());
        }
    }
    let shards: Vec<Shard> = by_rank.into_values().map(|(_, s)| s).collect();
    let collectives = match_events(&shards)?;
    Ok(JoinedRun { run, shards, collectives })
}

/// Match collective events across shards by operation identity.
pub fn match_events(shards: &[Shard]) -> Result<Vec<JoinedCollective>> {
    // group membership must agree, name ranks of this run once each, and
    // every shard must be its own rank (indexing below relies on it)
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (i, s) in shards.iter().enumerate() {
        if s.header.rank as usize != i {
            refuse!(Code::BadStructure, "shard {i} says it is rank {}: shards must be ranks 0 to {} in order", s.header.rank, shards.len().saturating_sub(1));
        }
        for g in &s.header.groups {
            let mut seen = std::collections::BTreeSet::new();
            if g.members.is_empty() {
                refuse!(Code::BadStructure, "rank {}: group {} has no members", s.header.rank, g.id);
            }
            for &m in &g.members {
                if m as usize >= shards.len() {
                    refuse!(Code::BadStructure, "rank {}: group {} names rank {m}, outside a world of {} ranks", s.header.rank, g.id, shards.len());
                }
                if !seen.insert(m) {
                    refuse!(
                        Code::BadStructure,
                        "rank {}: group {} lists rank {m} more than once ({:?}); each member counts once",
                        s.header.rank,
                        g.id,
                        g.members
                    );
                }
            }
            match groups.get(&g.id) {
                Some(m) if *m != g.members => {
                    refuse!(Code::GroupMismatch, "group {} membership differs: rank {} says {:?}, another rank says {:?}", g.id, s.header.rank, g.members, m)
                }
                _ => {
                    groups.insert(g.id, g.members.clone());
                }
            }
        }
    }
    let models: Vec<Option<ClockModel>> = shards.iter().map(|s| s.header.clock.as_ref().map(|c| c.model)).collect();
    // per rank: the compute stream's measured stalls by (group, seq)
    let waits: Vec<BTreeMap<(u32, u64), u64>> =
        shards.iter().map(|s| s.body.device_waits.iter().map(|w| ((w.group, w.seq), w.end_ns.saturating_sub(w.start_ns))).collect()).collect();
    // per rank: captured tuner choices by group-0 sequence number
    let tuners: Vec<BTreeMap<u64, crate::evidence::tuning::TunerChoice>> =
        shards.iter().map(|s| s.header.tuning.as_ref().map(|t| t.choices.iter().cloned().collect()).unwrap_or_default()).collect();
    // per rank and phase: the device anchor's error (GPU), added to arrival bounds
    let anchors: Vec<BTreeMap<Phase, u64>> =
        shards.iter().map(|s| s.header.phases.iter().filter_map(|p| Some((p.phase, p.device_anchor_error_ns?))).collect()).collect();
    // per rank and phase: the kernel anchor's error; per rank: NCCL kernel starts by (group, seq)
    let kernel_anchors: Vec<BTreeMap<Phase, u64>> =
        shards.iter().map(|s| s.header.phases.iter().filter_map(|p| Some((p.phase, p.kernel_anchor.as_ref()?.error_ns))).collect()).collect();
    let kernel_starts: Vec<BTreeMap<(u32, u64), u64>> = shards.iter().map(nccl_kernel_starts).collect();
    // index events per rank: (group, seq, (sender, receiver) of a point-to-point pair),
    // each rank's index sorted by key (a sorted list walked once, not a tree
    // searched per member and operation; the refusals are the same, in the same order)
    type Key = (u32, u64, Option<(u32, u32)>);
    let mut per_rank: Vec<Vec<(Key, usize)>> = Vec::with_capacity(shards.len());
    for s in shards {
        let mut m: Vec<(Key, usize)> = Vec::with_capacity(s.body.collectives.len());
        let rank = s.header.rank;
        // the first event whose key an earlier event of this rank recorded: refused
        // before any fault of a later event, as the events are read in order
        let twice = |m: &mut Vec<(Key, usize)>| -> Result<()> {
            m.sort_unstable();
            if let Some(i) = m.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).min() {
                let e = &s.body.collectives[i];
                let (_, _, pair) = m.iter().find(|x| x.1 == i).expect("indexed").0;
                let with = pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
                refuse!(Code::DuplicateEvent, "rank {rank}: group {} seq {}{with} is recorded twice", e.group, e.seq);
            }
            Ok(())
        };
        for (i, e) in s.body.collectives.iter().enumerate() {
            let Some(members) = groups.get(&e.group) else {
                twice(&mut m)?;
                anyhow::bail!("rank {rank}: event group {} seq {} names an undeclared group", e.group, e.seq);
            };
            if !members.contains(&rank) {
                twice(&mut m)?;
                refuse!(Code::GroupMismatch, "rank {rank} recorded group {} seq {} but is not a member of group {}", e.group, e.seq, e.group);
            }
            let pair = match (e.kind, e.peer) {
                (CollectiveKind::Send | CollectiveKind::Recv, None) => {
                    twice(&mut m)?;
                    refuse!(Code::BadStructure, "rank {rank}: {} on group {} seq {} names no peer", e.kind.name(), e.group, e.seq)
                }
                (CollectiveKind::Send | CollectiveKind::Recv, Some(p)) if p == rank || !members.contains(&p) => {
                    twice(&mut m)?;
                    refuse!(
                        Code::GroupMismatch,
                        "rank {rank}: {} on group {} seq {} names peer {p}, not another member of the group",
                        e.kind.name(),
                        e.group,
                        e.seq
                    )
                }
                (CollectiveKind::Send, Some(p)) => Some((rank, p)),
                (CollectiveKind::Recv, Some(p)) => Some((p, rank)),
                _ => None,
            };
            m.push(((e.group, e.seq, pair), i));
        }
        twice(&mut m)?;
        per_rank.push(m);
    }
    let mut keys: Vec<Key> = per_rank.iter().flat_map(|m| m.iter().map(|x| x.0)).collect();
    keys.sort_unstable();
    keys.dedup();
    // per rank: how far its sorted index has been walked (keys come in ascending order)
    let mut cursor = vec![0usize; shards.len()];
    let mut find = |r: u32, key: &Key| -> Option<usize> {
        let (m, c) = (&per_rank[r as usize], &mut cursor[r as usize]);
        while *c < m.len() && m[*c].0 < *key {
            *c += 1;
        }
        m.get(*c).filter(|x| x.0 == *key).map(|x| x.1)
    };
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let (group, seq, pair) = key;
        let members = match pair {
            Some((a, b)) => vec![a, b],
            None => groups[&group].clone(),
        };
        let members = &members;
        let what = pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
        let at: Vec<Option<usize>> = members.iter().map(|&r| find(r, &key)).collect();
        let present: Vec<u32> = members.iter().zip(&at).filter(|(_, i)| i.is_some()).map(|(&r, _)| r).collect();
        if present.len() != members.len() {
            let missing: Vec<u32> = members.iter().copied().filter(|r| !present.contains(r)).collect();
            let any = &shards[present[0] as usize].body.collectives[at.iter().flatten().copied().next().expect("present")];
            refuse!(
                Code::UnmatchedEvent,
                "unmatched event: group {group} seq {seq}{what} ({}, {} bytes) is on ranks {present:?} but missing on ranks {missing:?} ({})",
                any.phase,
                any.bytes,
                any.kind.name()
            );
        }
        let at: Vec<usize> = at.into_iter().flatten().collect();
        let first_rank = members[0];
        let first = &shards[first_rank as usize].body.collectives[at[0]];
        let mut ranks = Vec::with_capacity(members.len());
        for (k, &r) in members.iter().enumerate() {
            let e = &shards[r as usize].body.collectives[at[k]];
            // a pair: the sender's send to the receiver and the receiver's receive from the sender
            let kind_agrees = match pair {
                Some(_) => e.kind == if k == 0 { CollectiveKind::Send } else { CollectiveKind::Recv },
                None => e.kind == first.kind,
            };
            if !kind_agrees || e.bytes != first.bytes || e.dtype != first.dtype || e.phase != first.phase || e.root != first.root {
                let root = |x: Option<u32>| x.map(|r| format!(" root {r}")).unwrap_or_default();
                refuse!(
                    Code::IdentityMismatch,
                    "identity mismatch at group {group} seq {seq}{what}: rank {first_rank} has {}{} {} bytes {} in {}, rank {r} has {}{} {} bytes {} in {}",
                    first.kind.name(),
                    root(first.root),
                    first.bytes,
                    first.dtype.name(),
                    first.phase,
                    e.kind.name(),
                    root(e.root),
                    e.bytes,
                    e.dtype.name(),
                    e.phase
                );
            }
            ranks.push(RankTimes {
                rank: r,
                host_issue_ns: e.host_issue_ns,
                host_return_ns: e.host_return_ns,
                wait_start_ns: e.wait_start_ns,
                wait_end_ns: e.wait_end_ns,
                device_start_ns: e.device_start_ns,
                device_end_ns: e.device_end_ns,
                injected_delay_ns: e.injected_delay_ns,
                replay_error_ns: e.replay.map(|t| t.actual_gap_ns as i64 - t.target_gap_ns as i64),
                replay_gap_ns: e.replay.map(|t| t.actual_gap_ns),
                fill_units: e.fill.map(|f| f.units),
                fill_quantization_error_ns: e.fill.map(|f| f.quantization_error_ns),
                device_wait_ns: waits[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
                kernel_start_ns: kernel_starts[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
            });
        }
        let mut jc = JoinedCollective {
            phase: first.phase,
            kind: first.kind,
            group,
            members: members.clone(),
            seq,
            bytes: first.bytes,
            dtype: first.dtype,
            root: first.root,
            token: first.token,
            layer: first.layer,
            iter: first.iter,
            warmup: first.warmup,
            ranks,
            arrival_status: ArrivalStatus::UnknownUncalibrated,
            arrival_offsets_us: None,
            arrival_skew_us: None,
            arrival_bound_us: None,
            skew_resolved: None,
            arrival_bounds_us: None,
            arrival_source: None,
            tuner: members.iter().find_map(|&r| tuners[r as usize].get(&seq).cloned()).filter(|_| group == 0),
        };
        attach_arrival(&mut jc, &models, &anchors, &kernel_anchors);
        out.push(jc);
    }
    Ok(out)
}

/// Per collective (group, seq) of a shard: its NCCL kernel's start, for the
/// phases whose kernel times are anchored through `%globaltimer` and whose
/// NCCL kernels (in CUPTI correlation order, i.e. launch order) are exactly
/// as many as their collectives (one kernel per collective, as NCCL launches
/// an ungrouped collective). Other phases pair nothing.
fn nccl_kernel_starts(s: &Shard) -> BTreeMap<(u32, u64), u64> {
    let mut out = BTreeMap::new();
    for p in s.header.phases.iter().filter(|p| p.kernel_anchor.is_some()) {
        let mut kernels: Vec<&crate::evidence::shard::KernelEvent> =
            s.body.kernels.iter().filter(|k| k.phase == p.phase && k.kind == crate::evidence::shard::KernelKind::Nccl).collect();
        kernels.sort_by_key(|k| k.correlation);
        let collectives: Vec<&crate::evidence::shard::CollectiveEvent> = s.body.collectives.iter().filter(|c| c.phase == p.phase).collect();
        if kernels.len() == collectives.len() {
            for (c, k) in collectives.iter().zip(&kernels) {
                out.insert((c.group, c.seq), k.start_ns);
            }
        }
    }
    out
}

/// Compute arrival offsets, skew and bound on rank 0's timebase; leave them
/// unknown when any member lacks a clock model. The arrival is every
/// member's NCCL kernel start where each has one with a kernel anchor (the
/// anchor's error added to the rank's bound); otherwise, per rank, the
/// device start where one was measured (GPU: the comm stream reached the
/// collective; the host only enqueued it earlier), with the event anchor's
/// error added; otherwise the host issue time.
fn attach_arrival(jc: &mut JoinedCollective, models: &[Option<ClockModel>], anchors: &[BTreeMap<Phase, u64>], kernel_anchors: &[BTreeMap<Phase, u64>]) {
    let by_kernel = jc.ranks.iter().all(|t| t.kernel_start_ns.is_some() && kernel_anchors[t.rank as usize].contains_key(&jc.phase));
    let mut arrivals = Vec::with_capacity(jc.ranks.len());
    for t in &jc.ranks {
        let Some(m) = &models[t.rank as usize] else { return };
        let (local, extra_ns) = match (by_kernel, t.kernel_start_ns, t.device_start_ns) {
            (true, Some(k), _) => (k, kernel_anchors[t.rank as usize][&jc.phase] as f64),
            (_, _, Some(d)) => (d, anchors[t.rank as usize].get(&jc.phase).copied().unwrap_or(0) as f64),
            _ => (t.host_issue_ns, 0.0),
        };
        arrivals.push((m.to_reference(local), m.bound_ns + extra_ns));
    }
    jc.arrival_source = Some(if by_kernel { ArrivalSource::NcclKernel } else { ArrivalSource::DeviceEventOrHostIssue });
    let (imin, min) = arrivals.iter().enumerate().min_by(|a, b| a.1 .0.total_cmp(&b.1 .0)).map(|(i, a)| (i, a.0)).expect("non-empty");
    let (imax, max) = arrivals.iter().enumerate().max_by(|a, b| a.1 .0.total_cmp(&b.1 .0)).map(|(i, a)| (i, a.0)).expect("non-empty");
    let skew_ns = max - min;
    let bound_ns = if imin == imax { 0.0 } else { arrivals[imin].1 + arrivals[imax].1 };
    jc.arrival_status = ArrivalStatus::Calibrated;
    jc.arrival_offsets_us = Some(arrivals.iter().map(|a| (a.0 - min) / 1e3).collect());
    jc.arrival_skew_us = Some(skew_ns / 1e3);
    jc.arrival_bound_us = Some(bound_ns / 1e3);
    jc.arrival_bounds_us = Some(arrivals.iter().map(|a| a.1 / 1e3).collect());
    jc.skew_resolved = Some(skew_ns > bound_ns);
}

fn clock_reports(shards: &[Shard]) -> Vec<RankClockReport> {
    let rank0 = &shards[0].header;
    let inj_of = |rank: u32| rank0.clock_injections.iter().find(|i| i.rank == rank).copied();
    shards
        .iter()
        .map(|s| {
            let h = &s.header;
            let model = h.clock.as_ref().map(|c| c.model);
            // the ping-pong estimate: the model itself unless that is the shared kernel clock
            let estimate = h.clock.as_ref().map(|c| c.pingpong_fit.unwrap_or(c.model));
            // truth relative to rank 0 at the start window (true time ~ reference time)
            let (inj_off, inj_drift) = match (model, inj_of(h.rank), inj_of(0)) {
                (Some(m), a, b) if a.is_some() || b.is_some() => {
                    let t_true = m.start.ref_ns;
                    let off = |i: Option<crate::core::clock::ClockInjection>, anchor: u64| i.map(|i| i.offset_at(anchor, t_true)).unwrap_or(0.0);
                    let o = off(a, h.clock_anchor_true_ns) - off(b, rank0.clock_anchor_true_ns);
                    let d = a.map(|i| i.drift_ppm).unwrap_or(0.0) - b.map(|i| i.drift_ppm).unwrap_or(0.0);
                    (Some(o), Some(d))
                }
                _ => (None, None),
            };
            let truth_off = inj_off.unwrap_or(0.0);
            let truth_drift = inj_drift.unwrap_or(0.0);
            RankClockReport {
                rank: h.rank,
                host: h.host.clone(),
                calibrated: model.is_some(),
                offset_us: model.map(|m| m.start.offset_ns / 1e3),
                drift_ppm: model.and_then(|m| m.drift_ppm),
                bound_us: model.map(|m| m.bound_ns / 1e3),
                drift_bound_ppm: model.and_then(|m| m.drift_bound_ppm),
                shared_kernel_clock: model.is_some_and(|m| m.shared_kernel_clock),
                shared_kernel_clock_refused: h.clock.as_ref().and_then(|c| c.shared_kernel_clock_refused.clone()),
                pingpong_offset_us: estimate.filter(|_| h.rank != 0).map(|m| m.start.offset_ns / 1e3),
                pingpong_bound_us: estimate.filter(|_| h.rank != 0).map(|m| m.start.bound_ns / 1e3),
                injected_offset_us: inj_off.map(|o| o / 1e3),
                injected_drift_ppm: inj_drift,
                // the estimator against the truth (on a shared kernel clock, its
                // ping-pong fit); small slack for the integer truncation of clock reads
                offset_within_bound: estimate.map(|m| (m.start.offset_ns - truth_off).abs() <= m.start.bound_ns + 2.0),
                drift_within_bound: estimate.and_then(|m| Some((m.drift_ppm? - truth_drift).abs() <= m.drift_bound_ppm? + 1e-3)),
                path: h
                    .clock
                    .as_ref()
                    .map(|c| c.path.unwrap_or(if h.rank == 0 { crate::core::clock::ClockPath::Reference } else { crate::core::clock::ClockPath::Direct })),
                leader: h.clock.as_ref().and_then(|c| c.leader),
                leader_leg_bound_us: h.clock.as_ref().and_then(|c| c.leader_fit).map(|m| m.bound_ns / 1e3),
                leader_bound_us: h.clock.as_ref().and_then(|c| c.leader_model).map(|m| m.bound_ns / 1e3),
                calibration_wall_ns: h.clock.as_ref().and_then(|c| Some(c.start_window_wall_ns? + c.end_window_wall_ns?)),
            }
        })
        .collect()
}

fn node_reports(shards: &[Shard], clocks: &[RankClockReport]) -> Vec<NodeClockReport> {
    let mut nodes: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for s in shards {
        nodes.entry(s.header.host.clone()).or_default().push(s.header.rank);
    }
    let injected: BTreeSet<u32> = shards[0].header.clock_injections.iter().map(|i| i.rank).collect();
    nodes
        .into_iter()
        .map(|(host, ranks)| {
            let cs: Vec<&RankClockReport> = ranks.iter().map(|&r| &clocks[r as usize]).filter(|c| !injected.contains(&c.rank)).collect();
            // the ping-pong estimates (rank 0: its model, 0 ± 0), also where a
            // rank's model is the shared kernel clock: one clock must fit them all
            let intervals: Option<Vec<(f64, f64)>> = cs
                .iter()
                .map(|c| {
                    let (o, b) = (c.pingpong_offset_us.or(c.offset_us)?, c.pingpong_bound_us.or(c.bound_us)?);
                    Some((o - b, o + b))
                })
                .collect();
            let consistent = intervals.as_ref().map(|iv| {
                let lo = iv.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
                let hi = iv.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
                iv.is_empty() || lo <= hi + 0.002
            });
            let max_bound_us = cs.iter().filter_map(|c| c.bound_us).reduce(f64::max);
            let leader = clocks[ranks[0] as usize].leader;
            let leader_bound_us = leader.and_then(|l| clocks.get(l as usize)).and_then(|c| c.bound_us);
            NodeClockReport { host, ranks, consistent, max_bound_us, leader, leader_bound_us }
        })
        .collect()
}

/// Summarize a joined run.
pub fn summarize(j: &JoinedRun) -> JoinSummary {
    let phases_in_order: Vec<Phase> = j.run.workload.phases.clone();
    let mut phases = Vec::new();
    for phase in phases_in_order {
        let cs: Vec<&JoinedCollective> = j.collectives.iter().filter(|c| c.phase == phase).collect();
        let timed: Vec<&&JoinedCollective> = cs.iter().filter(|c| !c.warmup).collect();
        let mut sizes = BTreeMap::new();
        for c in &timed {
            *sizes.entry(c.bytes).or_insert(0u64) += 1;
        }
        let mut completion: Vec<f64> = timed.iter().flat_map(|c| c.ranks.iter().map(|t| t.completion_ns() as f64 / 1e3)).collect();
        let sources: BTreeSet<String> = timed.iter().flat_map(|c| c.ranks.iter().map(|t| format!("{:?}", t.completion_source()))).collect();
        let completion_source = match sources.len() {
            0 => None,
            1 => timed.first().map(|c| c.ranks[0].completion_source()),
            _ => Some(CompletionSource::Mixed),
        };
        let mut tokens: Vec<f64> = j
            .shards
            .iter()
            .flat_map(|s| s.body.tokens.iter())
            .filter(|t| t.phase == phase && !t.warmup)
            .map(|t| (t.end_ns - t.start_ns) as f64 / 1e3)
            .collect();
        let mut skews: Vec<f64> = timed.iter().filter_map(|c| c.arrival_skew_us).collect();
        let mut skew_bounds: Vec<f64> = timed.iter().filter_map(|c| c.arrival_bound_us).collect();
        let mut dwaits: Vec<f64> = timed.iter().flat_map(|c| c.ranks.iter().filter_map(|t| t.device_wait_ns)).map(|ns| ns as f64 / 1e3).collect();
        let mut tuner_choices = BTreeMap::new();
        for c in &timed {
            if let Some(t) = &c.tuner {
                *tuner_choices.entry(tuner_label(t)).or_insert(0u64) += 1;
            }
        }
        phases.push(PhaseSummary {
            phase,
            collectives_per_rank: timed.len() as u64,
            warmup_collectives_per_rank: (cs.len() - timed.len()) as u64,
            sizes_bytes: sizes,
            first_sizes_bytes: timed.iter().take(6).map(|c| c.bytes).collect(),
            completion_source,
            completion_median_us: stats::median(&mut completion),
            completion_p99_us: stats::percentile_nearest_rank(&mut completion, 99.0),
            token_median_us: stats::median(&mut tokens),
            token_p99_us: stats::percentile_nearest_rank(&mut tokens, 99.0),
            skew_median_us: stats::median(&mut skews),
            skew_bound_median_us: stats::median(&mut skew_bounds),
            arrivals_from_nccl_kernels: timed.iter().filter(|c| c.arrival_source == Some(ArrivalSource::NcclKernel)).count() as u64,
            device_wait_median_us: stats::median(&mut dwaits),
            tuner_choices,
            source_timeline: j.shards[0].header.phases.iter().find(|r| r.phase == phase).and_then(|r| r.trace_timeline),
        });
    }
    let clocks = clock_reports(&j.shards);
    let nodes = node_reports(&j.shards, &clocks);
    let delay_control = delay_control(j);
    let tuning_comparisons = if j.collectives.iter().any(|c| c.tuner.is_some()) {
        [Phase::Replay, Phase::Fill, Phase::Overlap]
            .into_iter()
            .filter(|p| j.run.workload.phases.contains(p) && j.run.workload.phases.contains(&Phase::Blocking))
            .map(|p| compare_tuning(&j.collectives, Phase::Blocking, p))
            .collect()
    } else {
        Vec::new()
    };
    JoinSummary {
        isolated_sizes: isolated_sizes(j),
        tuning_comparisons,
        delay_control,
        run_id: j.run.run_id.clone(),
        world_size: j.run.world_size,
        collectives: j.collectives.len() as u64,
        phases,
        clock_sync: j.shards.iter().find_map(|s| s.header.clock.as_ref()?.sync),
        calibration_wall_ns: clocks.iter().map(|c| c.calibration_wall_ns).collect::<Option<Vec<u64>>>().and_then(|v| v.into_iter().max()),
        clocks,
        nodes,
        shards: j.run.shards.clone(),
        stalls: j.shards.iter().flat_map(crate::evidence::stalls::of_shard).collect(),
    }
}

fn tuner_label(t: &crate::evidence::tuning::TunerChoice) -> String {
    format!("{}/{}/{}ch", t.algo, t.proto, t.channels)
}

/// Compare the k-th collectives of two phases.
pub fn compare_tuning(all: &[JoinedCollective], workload: Phase, proxy: Phase) -> TuningComparison {
    let a: Vec<&JoinedCollective> = all.iter().filter(|c| c.phase == workload).collect();
    let b: Vec<&JoinedCollective> = all.iter().filter(|c| c.phase == proxy).collect();
    let mut out = TuningComparison { workload, proxy, compared: 0, same: 0, first_differences: Vec::new(), refused: None };
    if a.len() != b.len() {
        out.refused = Some(format!("{workload} has {} collectives and {proxy} has {}", a.len(), b.len()));
        return out;
    }
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        if x.bytes != y.bytes {
            out.refused = Some(format!("collective {k}: {workload} has {} bytes, {proxy} has {}", x.bytes, y.bytes));
            return out;
        }
        let (Some(tx), Some(ty)) = (&x.tuner, &y.tuner) else {
            out.refused = Some(format!("collective {k} has no captured choice in one of the phases"));
            return out;
        };
        out.compared += 1;
        if tx == ty {
            out.same += 1;
        } else if out.first_differences.len() < 10 {
            out.first_differences.push((k as u64, tuner_label(tx), tuner_label(ty)));
        }
    }
    out
}

/// The arrival-delay control of a run, when one was injected and clocks were calibrated.
pub fn delay_control(j: &JoinedRun) -> Option<DelayControlReport> {
    let d = j.shards[0].header.delay_injection?;
    let all_timed: Vec<&JoinedCollective> = j.collectives.iter().filter(|c| !c.warmup).collect();
    if all_timed.iter().any(|c| c.arrival_skew_us.is_none()) {
        return None;
    }
    let gpu = j.shards[0].header.backend == crate::evidence::shard::BackendKind::Cuda;
    let judged = |p: Phase| !gpu || p == Phase::Replay;
    let delay_us = d.delay_ns as f64 / 1e3;
    let above = |c: &JoinedCollective| c.arrival_skew_us.unwrap_or(0.0) >= delay_us - c.arrival_bound_us.unwrap_or(0.0);
    let beyond_and_bound =
        |c: &JoinedCollective| unexplained_skew_and_bound_us(c).unwrap_or((c.arrival_skew_us.unwrap_or(0.0), c.arrival_bound_us.unwrap_or(0.0)));
    let beyond = |c: &JoinedCollective| beyond_and_bound(c).0;
    let above_design = |c: &JoinedCollective| {
        let (skew, bound) = beyond_and_bound(c);
        skew >= delay_us - bound
    };
    let was_delayed = |c: &JoinedCollective| c.ranks.iter().any(|t| t.injected_delay_ns.is_some());
    let per_phase = j
        .run
        .workload
        .phases
        .iter()
        .map(|&phase| {
            let (dl, ud): (Vec<&&JoinedCollective>, Vec<&&JoinedCollective>) = all_timed.iter().filter(|c| c.phase == phase).partition(|c| was_delayed(c));
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
    let timed: Vec<&JoinedCollective> = all_timed.into_iter().filter(|c| judged(c.phase)).collect();
    let (dl, ud): (Vec<&JoinedCollective>, Vec<&JoinedCollective>) = timed.into_iter().partition(|c| was_delayed(c));
    let mut ud_skews: Vec<f64> = ud.iter().filter_map(|c| c.arrival_skew_us).collect();
    let mut ud_beyond: Vec<f64> = ud.iter().map(|c| beyond(c)).collect();
    let beyond_design = BeyondDesign {
        corrected: dl.iter().chain(&ud).filter(|c| unexplained_skew_us(c).is_some()).count() as u64,
        delayed_detected: dl.iter().filter(|c| above_design(c)).count() as u64,
        undelayed_false_alarms: ud.iter().filter(|c| above_design(c)).count() as u64,
        undelayed_skew_median_us: stats::median(&mut ud_beyond),
    };
    let mut achieved: Vec<f64> = dl.iter().flat_map(|c| c.ranks.iter().filter_map(|t| t.injected_delay_ns)).map(|ns| ns as f64 / 1e3).collect();
    Some(DelayControlReport {
        achieved_delay_median_us: stats::median(&mut achieved),
        rank: d.rank,
        every: d.every,
        delay_us,
        delayed: dl.len() as u64,
        delayed_detected: dl.iter().filter(|c| above(c)).count() as u64,
        delayed_skew_min_us: dl.iter().filter_map(|c| c.arrival_skew_us).reduce(f64::min),
        undelayed: ud.len() as u64,
        undelayed_false_alarms: ud.iter().filter(|c| above(c)).count() as u64,
        undelayed_skew_median_us: stats::median(&mut ud_skews),
        judged_phases: j.run.workload.phases.iter().copied().filter(|&p| judged(p)).collect(),
        per_phase,
        beyond_design: Some(beyond_design),
    })
}

/// The isolated phase's per-size table, as nccl-tests prints its own: size,
/// count, type, redop and root columns (redop `none` for a kind without a
/// reduction, root -1 for a kind without a root), units in the header, and
/// the "Avg bus bandwidth" footer, the arithmetic mean of busbw over the
/// sizes (nccl-tests' `src/common.cu` sums busbw over the sizes and divides
/// by their number). Empty when no size was run.
pub fn render_isolated(rows: &[IsolatedSizeRow]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if rows.is_empty() {
        return o;
    }
    let kind = rows[0].collective.unwrap_or_default();
    let size_is = match kind {
        crate::core::workload::SweepKind::AllGather => "the gathered receive buffer",
        crate::core::workload::SweepKind::ReduceScatter => "the whole send buffer",
        crate::core::workload::SweepKind::AllToAll => "one rank's send buffer",
        _ => "the buffer",
    };
    let _ = writeln!(o, "isolated {kind}, per size (size is {size_is}, as nccl-tests; an iteration's time is the largest over ranks, as nccl-tests -I 1):");
    let _ = writeln!(
        o,
        "{:>12} {:>12} {:>6} {:>6} {:>5} {:>7} {:>10} {:>12} {:>12} {:>7} {:>10} {:>10}",
        "size(B)", "count(elts)", "type", "redop", "root", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "p50(us)", "p99(us)"
    );
    for r in rows {
        let wrong = r.wrong_elements.map(|w| w.to_string()).unwrap_or_else(|| "n/a".into());
        let count = r.count.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
        let dtype = r.dtype.map(|d| d.name().to_string()).unwrap_or_else(|| "?".into());
        let _ = writeln!(
            o,
            "{:>12} {:>12} {:>6} {:>6} {:>5} {:>7} {:>10.2} {:>12.2} {:>12.2} {:>7} {:>10.2} {:>10.2}",
            r.bytes,
            count,
            dtype,
            r.redop.as_deref().unwrap_or("?"),
            r.root.map_or(-1, i64::from),
            r.iterations,
            r.time_us,
            r.algbw_gbps,
            r.busbw_gbps,
            wrong,
            r.p50_us,
            r.p99_us
        );
    }
    let avg = rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / rows.len() as f64;
    let _ = writeln!(o, "# Avg bus bandwidth    : {avg:.3} GB/s (arithmetic mean over {} sizes, as nccl-tests prints it)", rows.len());
    o
}

/// Human-readable rendering of a summary.
pub fn render_summary(s: &JoinSummary) -> String {
    use std::fmt::Write;
    let f = |x: Option<f64>| x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "unknown".into());
    let mut o = String::new();
    let _ = writeln!(o, "run {}: {} ranks, {} joined collectives, every shard hash verified", s.run_id, s.world_size, s.collectives);
    let dev = s.phases.iter().any(|p| p.completion_source == Some(CompletionSource::DeviceEvents));
    let _ = writeln!(o, "completion = {}", if dev { "device interval (CUDA events on the comm stream)" } else { "host issue to wait return" });
    let _ = writeln!(
        o,
        "{:<21} {:>7} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "phase", "coll/rk", "warmup", "compl p50us", "compl p99us", "token p50us", "token p99us", "skew p50us"
    );
    for p in &s.phases {
        let _ = writeln!(
            o,
            "{:<21} {:>7} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10}",
            p.phase.name(),
            p.collectives_per_rank,
            p.warmup_collectives_per_rank,
            f(p.completion_median_us),
            f(p.completion_p99_us),
            f(p.token_median_us),
            f(p.token_p99_us),
            f(p.skew_median_us)
        );
    }
    for p in s.phases.iter().filter(|p| p.arrivals_from_nccl_kernels > 0) {
        let _ = writeln!(
            o,
            "{}: arrival = NCCL kernel start (CUPTI through %globaltimer) on {} of {} collectives; skew bound p50 {} us",
            p.phase.name(),
            p.arrivals_from_nccl_kernels,
            p.collectives_per_rank,
            f(p.skew_bound_median_us)
        );
    }
    o.push_str(&render_isolated(&s.isolated_sizes));
    for line in crate::evidence::stalls::render(&s.stalls) {
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(o, "clocks (offset vs rank 0 at the start window; bound = half the best round trip, 0 on rank 0's kernel clock; via a leader, the two legs' bounds summed):");
    if let Some(sync) = s.clock_sync {
        let wall = s.calibration_wall_ns.map(|n| format!("{:.3} ms", n as f64 / 1e6)).unwrap_or_else(|| "unmeasured".into());
        let _ = writeln!(o, "  calibration {}: {wall} wall (both windows, slowest rank)", sync.name());
    }
    for c in &s.clocks {
        let inj = match (c.injected_offset_us, c.injected_drift_ppm) {
            (Some(o2), Some(d)) => format!("  injected {o2:.3} us, {d:.2} ppm"),
            _ => String::new(),
        };
        let inj = match (c.shared_kernel_clock, c.pingpong_offset_us, c.pingpong_bound_us) {
            (true, Some(o2), Some(b)) => format!("{inj}  rank 0's kernel clock (ping-pong {o2:.3} ± {b:.3} us agrees)"),
            _ => match &c.shared_kernel_clock_refused {
                // the alarming refusal: one kernel, yet a sample one clock cannot give
                Some(why) if why.contains("same kernel, but") => format!("{inj}  NOT rank 0's clock: {why}"),
                _ => inj,
            },
        };
        // after the columns other scripts read (rank, host, offset, bound): how the model was obtained
        let inj = match (c.path, c.leader, c.leader_leg_bound_us, c.leader_bound_us) {
            (Some(crate::core::clock::ClockPath::ViaLeader), Some(l), Some(a), Some(b)) => format!("{inj}  via leader {l} (± {a:.3} + ± {b:.3} us)"),
            _ => inj,
        };
        let inj = match c.calibration_wall_ns {
            Some(n) => format!("{inj}  calib {:.3} ms", n as f64 / 1e6),
            None => inj,
        };
        let _ = writeln!(
            o,
            "  rank {:>3} {:<16} offset {:>10} us ± {:>8} us  drift {:>9} ppm ± {:>8}{}",
            c.rank,
            c.host,
            c.offset_us.map(|v| format!("{v:.3}")).unwrap_or_else(|| "unknown".into()),
            c.bound_us.map(|v| format!("{v:.3}")).unwrap_or_else(|| "unknown".into()),
            c.drift_ppm.map(|v| format!("{v:.2}")).unwrap_or_else(|| "unknown".into()),
            c.drift_bound_ppm.map(|v| format!("{v:.2}")).unwrap_or_else(|| "unknown".into()),
            inj
        );
    }
    for n in &s.nodes {
        let verdict = match n.consistent {
            Some(true) => "consistent with one shared clock",
            Some(false) => "INCONSISTENT: estimates exclude a shared clock",
            None => "unknown (uncalibrated)",
        };
        let lead = match (n.leader, n.leader_bound_us) {
            (Some(l), Some(b)) => format!("; leader rank {l} ± {b:.3} us against rank 0"),
            _ => String::new(),
        };
        let _ = writeln!(o, "  node {} ranks {:?}: {verdict}{lead}", n.host, n.ranks);
    }
    for p in s.phases.iter().filter(|p| p.device_wait_median_us.is_some()) {
        let _ = writeln!(o, "compute stream stalled on a collective (p50) in {:<13} {} us", p.phase.name(), f(p.device_wait_median_us));
    }
    for p in s.phases.iter() {
        if let Some(t) = p.source_timeline {
            let what = match t {
                crate::evidence::shard::GapTimeline::Device => "device timeline (collective intervals on the GPU)",
                crate::evidence::shard::GapTimeline::Host => "host timeline (issue to the previous wait's return)",
                crate::evidence::shard::GapTimeline::Mixed => "mixed: device intervals where measured, host times elsewhere",
            };
            let _ = writeln!(o, "source gaps of {:<13} {what}", p.phase.name());
        }
    }
    for p in s.phases.iter().filter(|p| !p.tuner_choices.is_empty()) {
        let list: Vec<String> = p.tuner_choices.iter().map(|(k, v)| format!("{k} x{v}")).collect();
        let _ = writeln!(o, "tuner choices {:<13} {}", p.phase.name(), list.join(", "));
    }
    for t in &s.tuning_comparisons {
        match &t.refused {
            Some(why) => {
                let _ = writeln!(o, "tuner choices {} vs {}: not compared ({why})", t.workload, t.proxy);
            }
            None => {
                let _ = writeln!(
                    o,
                    "tuner choices {} vs {}: {}/{} collectives chose the same algorithm, protocol and channels",
                    t.workload, t.proxy, t.same, t.compared
                );
            }
        }
    }
    if let Some(dc) = &s.delay_control {
        let _ = writeln!(
            o,
            "delay control (rank {} +{:.0} us every {}, achieved median {} us): {}/{} delayed collectives show skew >= delay - bound (min {}), {}/{} undelayed do (median skew {})",
            dc.rank, dc.delay_us, dc.every, f(dc.achieved_delay_median_us), dc.delayed_detected, dc.delayed,
            f(dc.delayed_skew_min_us), dc.undelayed_false_alarms, dc.undelayed, f(dc.undelayed_skew_median_us)
        );
        if let Some(b) = &dc.beyond_design {
            let _ = writeln!(
                o,
                "  on skew beyond the replay's design (arrival less paced gap; {} of the judged collectives replayed): {}/{} delayed detected, {}/{} undelayed above the line (median {})",
                b.corrected,
                b.delayed_detected,
                dc.delayed,
                b.undelayed_false_alarms,
                dc.undelayed,
                f(b.undelayed_skew_median_us)
            );
        }
        for p in &dc.per_phase {
            let design = match (p.beyond_design_detected, p.beyond_design_false_alarms) {
                (Some(d), Some(fa)) if p.phase == Phase::Replay => format!("; beyond design {d}/{} and {fa}/{}", p.delayed, p.undelayed),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "  {:<21} {}: detected {}/{} delayed, false alarms {}/{} undelayed{design}",
                p.phase.name(),
                if p.judged { "judged" } else { "not judged (device queue may run ahead of the host)" },
                p.delayed_detected,
                p.delayed,
                p.undelayed_false_alarms,
                p.undelayed
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(rank: u32, host_issue_ns: u64, device_start_ns: Option<u64>) -> RankTimes {
        RankTimes {
            rank,
            host_issue_ns,
            host_return_ns: host_issue_ns,
            wait_start_ns: host_issue_ns,
            wait_end_ns: host_issue_ns + 10,
            device_start_ns,
            device_end_ns: device_start_ns.map(|d| d + 5),
            injected_delay_ns: None,
            replay_error_ns: None,
            replay_gap_ns: None,
            fill_units: None,
            fill_quantization_error_ns: None,
            device_wait_ns: None,
            kernel_start_ns: None,
        }
    }

    fn collective(ranks: Vec<RankTimes>) -> JoinedCollective {
        JoinedCollective {
            phase: Phase::Blocking,
            kind: CollectiveKind::AllReduce,
            group: 0,
            members: ranks.iter().map(|t| t.rank).collect(),
            seq: 0,
            bytes: 4,
            dtype: Dtype::F32,
            root: None,
            token: None,
            layer: None,
            iter: None,
            warmup: false,
            ranks,
            arrival_status: ArrivalStatus::UnknownUncalibrated,
            arrival_offsets_us: None,
            arrival_skew_us: None,
            arrival_bound_us: None,
            skew_resolved: None,
            arrival_bounds_us: None,
            arrival_source: None,
            tuner: None,
        }
    }

    #[test]
    fn gpu_arrival_is_the_device_start_and_its_bound_includes_the_anchor() {
        // hosts enqueue 1 ms apart, devices reach the collective 3 us apart
        let mut jc = collective(vec![times(0, 1_000_000, Some(5_000_000)), times(1, 2_000_000, Some(5_003_000))]);
        let models = vec![Some(ClockModel::reference()), Some(ClockModel::reference())];
        let anchors: Vec<BTreeMap<Phase, u64>> = vec![[(Phase::Blocking, 1_000)].into(), [(Phase::Blocking, 2_000)].into()];
        attach_arrival(&mut jc, &models, &anchors, &[BTreeMap::new(), BTreeMap::new()]);
        assert_eq!(jc.arrival_status, ArrivalStatus::Calibrated);
        assert_eq!(jc.arrival_skew_us, Some(3.0));
        assert_eq!(jc.arrival_bound_us, Some(3.0)); // 1 us + 2 us of anchor error, clocks exact
        assert_eq!(jc.skew_resolved, Some(false)); // 3 us is not more than its 3 us bound
        assert_eq!(jc.arrival_source, Some(ArrivalSource::DeviceEventOrHostIssue));
    }

    #[test]
    fn gpu_arrival_is_the_nccl_kernel_start_where_every_member_has_one_anchored() {
        // events 3 us apart with 2 us anchors; NCCL kernels 2.5 us apart with 0.5 us kernel anchors
        let mut r0 = times(0, 1_000_000, Some(5_000_000));
        let mut r1 = times(1, 2_000_000, Some(5_003_000));
        r0.kernel_start_ns = Some(5_001_000);
        r1.kernel_start_ns = Some(5_003_500);
        let models = vec![Some(ClockModel::reference()), Some(ClockModel::reference())];
        let anchors: Vec<BTreeMap<Phase, u64>> = vec![[(Phase::Blocking, 2_000)].into(), [(Phase::Blocking, 2_000)].into()];
        let kernel: Vec<BTreeMap<Phase, u64>> = vec![[(Phase::Blocking, 500)].into(), [(Phase::Blocking, 500)].into()];
        let mut jc = collective(vec![r0.clone(), r1.clone()]);
        attach_arrival(&mut jc, &models, &anchors, &kernel);
        assert_eq!((jc.arrival_skew_us, jc.arrival_bound_us, jc.skew_resolved), (Some(2.5), Some(1.0), Some(true)));
        assert_eq!(jc.arrival_source, Some(ArrivalSource::NcclKernel));
        // one member without a kernel anchor for the phase: every member falls back to events
        let mut jc = collective(vec![r0, r1]);
        attach_arrival(&mut jc, &models, &anchors, &[kernel[0].clone(), BTreeMap::new()]);
        assert_eq!((jc.arrival_skew_us, jc.arrival_bound_us), (Some(3.0), Some(4.0)));
        assert_eq!(jc.arrival_source, Some(ArrivalSource::DeviceEventOrHostIssue));
    }

    /// A one-rank shard whose phase `blocking` has `n` collectives, `k` NCCL
    /// kernels (correlation ids descending, so that order comes from them)
    /// and, if `anchored`, a kernel anchor.
    fn shard_with_kernels(n: u64, k: u64, anchored: bool) -> Shard {
        let anchor = serde_json::json!({"error_ns": 1200, "globaltimer_bound_ns": 800.0, "cupti_offset_bound_ns": 368.0,
            "globaltimer_resolution_ns": 32, "best_round_trip_ns": 1700, "round_trips": 256, "stamp_kernels": 8,
            "cupti_minus_globaltimer_ns": -205000.0, "cupti_own_minus_anchored_ns": null});
        let phase = serde_json::json!({"phase": "blocking", "start_ns": 0, "end_ns": 1, "device_anchor_error_ns": 2300,
            "quantum_ns": null, "trace": null, "collectives": n, "kernel_anchor": if anchored { anchor } else { serde_json::Value::Null }});
        let collectives = (0..n)
            .map(|seq| {
                serde_json::from_value(serde_json::json!({"phase": "blocking", "kind": "all_reduce", "group": 0, "seq": seq, "bytes": 4,
                    "dtype": "f32", "token": 0, "layer": seq, "iter": null, "warmup": false, "host_issue_ns": 10 * seq,
                    "host_return_ns": 10 * seq + 1, "wait_start_ns": 10 * seq + 1, "wait_end_ns": 10 * seq + 2,
                    "device_start_ns": 100 * seq, "device_end_ns": 100 * seq + 50, "injected_delay_ns": null, "replay": null,
                    "fill": null, "checked": false}))
                .unwrap()
            })
            .collect();
        let kernels = (0..k)
            .map(|i| crate::evidence::shard::KernelEvent {
                phase: Phase::Blocking,
                kind: crate::evidence::shard::KernelKind::Nccl,
                name: 0,
                start_ns: 100 * i + 7,
                end_ns: 100 * i + 40,
                stream: 1,
                correlation: (1000 - i) as u32,
            })
            .collect();
        let body = crate::evidence::shard::ShardBody {
            collectives,
            kernels,
            kernel_names: vec!["ncclDevKernel_AllReduce_Sum_f32_RING_LL".into()],
            ..Default::default()
        };
        Shard { header: crate::evidence::shard::test_header("cuda", serde_json::json!([phase])), body }
    }

    /// The sorted per-rank index refuses what the per-event reading did, first fault first.
    #[test]
    fn events_are_matched_in_key_order_and_the_first_fault_in_recording_order_is_refused() {
        let joined = match_events(&[shard_with_kernels(6, 0, false)]).unwrap();
        assert_eq!(joined.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        let refused = |edit: &dyn Fn(&mut Shard)| {
            let mut s = shard_with_kernels(6, 0, false);
            edit(&mut s);
            format!("{:#}", match_events(&[s]).unwrap_err())
        };
        let e = refused(&|s| s.body.collectives[3].seq = 1);
        assert!(e.starts_with("refused[DUPLICATE_EVENT]: rank 0: group 0 seq 1 is recorded twice"), "{e}");
        // seq 1 repeats at the 4th event, seq 0 only at the 6th: seq 1 is named
        let e = refused(&|s| {
            s.body.collectives[3].seq = 1;
            s.body.collectives[5].seq = 0;
        });
        assert!(e.contains("group 0 seq 1 is recorded twice"), "{e}");
        // a repeat before an undeclared group is refused as the repeat, and after it as the group
        let e = refused(&|s| {
            s.body.collectives[2].seq = 0;
            s.body.collectives[4].group = 9;
        });
        assert!(e.contains("group 0 seq 0 is recorded twice"), "{e}");
        let e = refused(&|s| {
            s.body.collectives[1].group = 9;
            s.body.collectives[3].seq = 0;
        });
        assert!(e.contains("event group 9 seq 1 names an undeclared group"), "{e}");
    }

    #[test]
    fn nccl_kernels_pair_with_collectives_in_launch_order_only_one_to_one_and_anchored() {
        let got = nccl_kernel_starts(&shard_with_kernels(3, 3, true));
        // correlation order is launch order: the kernel with the highest id was launched last
        assert_eq!(got.into_iter().collect::<Vec<_>>(), vec![((0, 0), 207), ((0, 1), 107), ((0, 2), 7)]);
        assert!(nccl_kernel_starts(&shard_with_kernels(3, 2, true)).is_empty(), "a missing kernel pairs nothing");
        assert!(nccl_kernel_starts(&shard_with_kernels(3, 3, false)).is_empty(), "without a kernel anchor nothing pairs");
    }

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
        assert_eq!(unexplained_skew_and_bound_us(&c), Some((30.0, 4.0)), "the collective's bound where per-rank ones were not kept");
    }

    #[test]
    fn cpu_arrival_is_the_host_issue_and_missing_clock_is_unknown() {
        let mut jc = collective(vec![times(0, 1_000_000, None), times(1, 1_004_000, None)]);
        let models = vec![Some(ClockModel::reference()), Some(ClockModel::reference())];
        attach_arrival(&mut jc, &models, &[BTreeMap::new(), BTreeMap::new()], &[BTreeMap::new(), BTreeMap::new()]);
        assert_eq!(jc.arrival_skew_us, Some(4.0));
        let mut jc = collective(vec![times(0, 1_000_000, None), times(1, 1_004_000, None)]);
        attach_arrival(&mut jc, &[Some(ClockModel::reference()), None], &[BTreeMap::new(), BTreeMap::new()], &[BTreeMap::new(), BTreeMap::new()]);
        assert_eq!(jc.arrival_status, ArrivalStatus::UnknownUncalibrated);
        assert_eq!(jc.arrival_skew_us, None, "unknown, never 0");
    }

    #[test]
    fn tuning_comparison_pairs_by_order_and_refuses_size_mismatch() {
        let t = |a: &str, p: &str| Some(crate::evidence::tuning::TunerChoice { algo: a.into(), proto: p.into(), channels: 8 });
        let mk = |phase, bytes, tuner| {
            let mut c = collective(vec![times(0, 0, None)]);
            c.phase = phase;
            c.bytes = bytes;
            c.tuner = tuner;
            c
        };
        let all = vec![
            mk(Phase::Blocking, 4, t("RING", "LL")),
            mk(Phase::Blocking, 8, t("RING", "LL")),
            mk(Phase::Replay, 4, t("RING", "LL")),
            mk(Phase::Replay, 8, t("TREE", "LL")),
        ];
        let c = compare_tuning(&all, Phase::Blocking, Phase::Replay);
        assert_eq!((c.compared, c.same), (2, 1));
        assert_eq!(c.first_differences, vec![(1, "RING/LL/8ch".to_string(), "TREE/LL/8ch".to_string())]);
        let bad = vec![mk(Phase::Blocking, 4, t("RING", "LL")), mk(Phase::Replay, 8, t("RING", "LL"))];
        assert!(compare_tuning(&bad, Phase::Blocking, Phase::Replay).refused.unwrap().contains("bytes"));
    }
}

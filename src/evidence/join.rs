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
//! never matched by closeness in time. Nothing on disk is modified. Shards
//! marked synthetic (`synth-shards`) are joined like any other; the stages
//! that take measurements refuse them ([`refuse_synthetic`]).
//!
//! Two ways to run it, one matching engine (per rank an index sorted by key,
//! a k-way merge of the ranks by key, the same refusals in the same order):
//! [`join_dir`] holds every shard and every joined collective in memory (the
//! library's consumers: analyze, export, overlap); the `join` command uses
//! [`join_summary_streaming`], which holds neither. Its pass 1 reads,
//! verifies and decodes the shards on several threads, one shard per thread
//! at a time, and keeps per rank only its header, its tokens and where its
//! events start in the file; pass 2 reads each shard again through a 32 KiB
//! buffer, one event at a time, in key order (a rank whose events were not
//! recorded in key order, several groups interleaved, is kept decoded
//! instead), re-hashing it to the digest pass 1 verified; the joined
//! collectives stream to the summary and the `--events-out` file (written
//! atomically) and are dropped. Peak memory: about one decoded shard per
//! thread, plus per rank a header and a buffer, plus the summary's per-phase
//! completion times (8 bytes per timed rank-event, for exact medians).
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
use crate::evidence::shard::{CollectiveEvent, CollectiveKind, Dtype, Shard, ShardHeader};
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

/// The run record of `dir` and its shard files, sorted (refusing a missing
/// directory or `run.json`).
fn run_and_files(dir: &Path) -> Result<(RunRecord, Vec<PathBuf>)> {
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
    Ok((run, files))
}

/// Load and verify every shard of `dir`, then join.
pub fn join_dir(dir: &Path) -> Result<JoinedRun> {
    let (run, files) = run_and_files(dir)?;
    let mut by_rank: BTreeMap<u32, (PathBuf, Shard)> = BTreeMap::new();
    for f in files {
        let bytes = crate::core::limits::read_bounded(&f, crate::core::limits::MAX_SHARD_BYTES)?;
        let (shard, digest) = Shard::decode_with_digest(&bytes, &f.display().to_string())?;
        check_against_run(&f, &shard, &digest, &run)?;
        let h = &shard.header;
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

/// An event's place in the join: (group, sequence number, (sender, receiver)
/// of a point-to-point pair).
type Key = (u32, u64, Option<(u32, u32)>);

/// Process group membership from every rank's header, in rank order: each
/// header is its own rank, every group has members, names ranks of this run
/// once each, and ranks agree on it.
fn check_groups(headers: &[&ShardHeader]) -> Result<BTreeMap<u32, Vec<u32>>> {
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (i, h) in headers.iter().enumerate() {
        if h.rank as usize != i {
            refuse!(Code::BadStructure, "shard {i} says it is rank {}: shards must be ranks 0 to {} in order", h.rank, headers.len().saturating_sub(1));
        }
        for g in &h.groups {
            let mut seen = std::collections::BTreeSet::new();
            if g.members.is_empty() {
                refuse!(Code::BadStructure, "rank {}: group {} has no members", h.rank, g.id);
            }
            for &m in &g.members {
                if m as usize >= headers.len() {
                    refuse!(Code::BadStructure, "rank {}: group {} names rank {m}, outside a world of {} ranks", h.rank, g.id, headers.len());
                }
                if !seen.insert(m) {
                    refuse!(Code::BadStructure, "rank {}: group {} lists rank {m} more than once ({:?}); each member counts once", h.rank, g.id, g.members);
                }
            }
            match groups.get(&g.id) {
                Some(m) if *m != g.members => {
                    refuse!(Code::GroupMismatch, "group {} membership differs: rank {} says {:?}, another rank says {:?}", g.id, h.rank, g.members, m)
                }
                _ => {
                    groups.insert(g.id, g.members.clone());
                }
            }
        }
    }
    Ok(groups)
}

/// One rank's events indexed by key, sorted (a sorted list walked once by
/// the merge). Refuses, the first fault in recording order first: an event
/// of an undeclared group or of a group the rank is not in, a send or
/// receive without a peer or with a peer outside its group, and a key
/// recorded twice (before any fault of a later event).
fn index_rank(rank: u32, events: &[CollectiveEvent], groups: &BTreeMap<u32, Vec<u32>>) -> Result<Vec<(Key, usize)>> {
    let mut m: Vec<(Key, usize)> = Vec::with_capacity(events.len());
    let twice = |m: &mut Vec<(Key, usize)>| -> Result<()> {
        m.sort_unstable();
        if let Some(i) = m.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).min() {
            let e = &events[i];
            let (_, _, pair) = m.iter().find(|x| x.1 == i).expect("indexed").0;
            let with = pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
            refuse!(Code::DuplicateEvent, "rank {rank}: group {} seq {}{with} is recorded twice", e.group, e.seq);
        }
        Ok(())
    };
    for (i, e) in events.iter().enumerate() {
        let Some(members) = groups.get(&e.group) else {
            twice(&mut m)?;
            anyhow::bail!("rank {rank}: event group {} seq {} names an undeclared group", e.group, e.seq);
        };
        if !members.contains(&rank) {
            twice(&mut m)?;
            refuse!(Code::GroupMismatch, "rank {rank} recorded group {} seq {} but is not a member of group {}", e.group, e.seq, e.group);
        }
        match (e.kind, e.peer) {
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
            _ => {}
        }
        m.push((key_of(rank, e), i));
    }
    twice(&mut m)?;
    Ok(m)
}

/// The key of an event of `rank` (whose peer, for a send or receive, [`index_rank`] checked).
fn key_of(rank: u32, e: &CollectiveEvent) -> Key {
    let pair = match (e.kind, e.peer) {
        (CollectiveKind::Send, Some(p)) => Some((rank, p)),
        (CollectiveKind::Recv, Some(p)) => Some((p, rank)),
        _ => None,
    };
    (e.group, e.seq, pair)
}

/// What the join takes from each rank besides its events.
struct RankCtx {
    models: Vec<Option<ClockModel>>,
    /// The compute stream's measured stalls by (group, seq).
    waits: Vec<BTreeMap<(u32, u64), u64>>,
    /// Captured tuner choices by group-0 sequence number.
    tuners: Vec<BTreeMap<u64, crate::evidence::tuning::TunerChoice>>,
    /// The device anchor's error per phase (GPU), added to arrival bounds.
    anchors: Vec<BTreeMap<Phase, u64>>,
    /// The kernel anchor's error per phase.
    kernel_anchors: Vec<BTreeMap<Phase, u64>>,
    /// NCCL kernel starts by (group, seq).
    kernel_starts: Vec<BTreeMap<(u32, u64), u64>>,
}

impl RankCtx {
    fn with_capacity(n: usize) -> Self {
        RankCtx {
            models: Vec::with_capacity(n),
            waits: Vec::with_capacity(n),
            tuners: Vec::with_capacity(n),
            anchors: Vec::with_capacity(n),
            kernel_anchors: Vec::with_capacity(n),
            kernel_starts: Vec::with_capacity(n),
        }
    }
    fn push(&mut self, r: RankExtract) {
        self.models.push(r.model);
        self.waits.push(r.waits);
        self.tuners.push(r.tuners);
        self.anchors.push(r.anchors);
        self.kernel_anchors.push(r.kernel_anchors);
        self.kernel_starts.push(r.kernel_starts);
    }
}

/// One rank's part of [`RankCtx`].
struct RankExtract {
    model: Option<ClockModel>,
    waits: BTreeMap<(u32, u64), u64>,
    tuners: BTreeMap<u64, crate::evidence::tuning::TunerChoice>,
    anchors: BTreeMap<Phase, u64>,
    kernel_anchors: BTreeMap<Phase, u64>,
    kernel_starts: BTreeMap<(u32, u64), u64>,
}

fn rank_extract(s: &Shard) -> RankExtract {
    RankExtract {
        model: s.header.clock.as_ref().map(|c| c.model),
        waits: s.body.device_waits.iter().map(|w| ((w.group, w.seq), w.end_ns.saturating_sub(w.start_ns))).collect(),
        tuners: s.header.tuning.as_ref().map(|t| t.choices.iter().cloned().collect()).unwrap_or_default(),
        anchors: s.header.phases.iter().filter_map(|p| Some((p.phase, p.device_anchor_error_ns?))).collect(),
        kernel_anchors: s.header.phases.iter().filter_map(|p| Some((p.phase, p.kernel_anchor.as_ref()?.error_ns))).collect(),
        kernel_starts: nccl_kernel_starts(s),
    }
}

/// Where the merge reads one rank's events, in key order.
enum Cursor<'a> {
    /// Decoded events and their sorted index.
    Indexed { events: std::borrow::Cow<'a, [CollectiveEvent]>, index: Vec<(Key, usize)>, pos: usize },
    /// The shard file, read again one event at a time: its events were
    /// recorded in key order.
    Stream(Box<StreamReader>),
}

impl Cursor<'_> {
    fn head(&self) -> Option<(Key, &CollectiveEvent)> {
        match self {
            Cursor::Indexed { events, index, pos } => index.get(*pos).map(|&(k, i)| (k, &events[i])),
            Cursor::Stream(s) => s.head.as_ref().map(|(k, e)| (*k, e)),
        }
    }
    fn advance(&mut self) -> Result<()> {
        match self {
            Cursor::Indexed { pos, .. } => {
                *pos += 1;
                Ok(())
            }
            Cursor::Stream(s) => s.advance(),
        }
    }
}

/// A verified shard read again from its first byte to its last, decoding
/// its collective events one at a time into a small buffer and hashing
/// every byte: at the end the digest must be the one the first pass
/// verified (and run.json recorded), or the shard changed while it was
/// being joined (`refused[STALE]`).
struct StreamReader {
    name: String,
    rank: u32,
    version: u32,
    file: std::fs::File,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    eof: bool,
    hasher: sha2::Sha256,
    remaining: u64,
    digest: String,
    head: Option<(Key, CollectiveEvent)>,
}

/// Buffer of each streamed shard.
const STREAM_BUF: usize = 32 << 10;

impl StreamReader {
    fn open(path: &Path, rank: u32, version: u32, events_at: usize, events: u64, digest: String) -> Result<Self> {
        let file = std::fs::File::open(path).with_context(|| format!("reopening {}", path.display()))?;
        let mut r = StreamReader {
            name: path.display().to_string(),
            rank,
            version,
            file,
            buf: vec![0; STREAM_BUF],
            lo: 0,
            hi: 0,
            eof: false,
            hasher: sha2::Sha256::default(),
            remaining: events,
            digest,
            head: None,
        };
        let mut skip = events_at;
        while skip > 0 {
            if r.lo == r.hi && !r.fill()? {
                return Err(r.changed());
            }
            let n = skip.min(r.hi - r.lo);
            r.lo += n;
            skip -= n;
        }
        r.advance()?;
        Ok(r)
    }

    /// Read more of the file (hashing it); false at its end.
    fn fill(&mut self) -> Result<bool> {
        use sha2::Digest;
        use std::io::Read;
        if self.eof {
            return Ok(false);
        }
        if self.lo > 0 {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
        }
        if self.hi == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let n = self.file.read(&mut self.buf[self.hi..]).with_context(|| format!("reading {}", self.name))?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.hasher.update(&self.buf[self.hi..self.hi + n]);
        self.hi += n;
        Ok(true)
    }

    fn changed(&self) -> anyhow::Error {
        crate::core::refusal::refuse(
            Code::Stale,
            format!("{}: rank {} shard changed while join read it (it no longer reads as it verified)", self.name, self.rank),
        )
    }

    fn advance(&mut self) -> Result<()> {
        use sha2::Digest;
        if self.remaining == 0 {
            self.head = None;
            // the rest of the file, hashed, then the digest checked
            self.lo = self.hi;
            while self.fill()? {
                self.lo = self.hi;
            }
            let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
            if got != self.digest {
                return Err(self.changed());
            }
            self.buf = Vec::new();
            return Ok(());
        }
        loop {
            match crate::evidence::shard::decode_collective_event(self.version, &self.buf[self.lo..self.hi]) {
                Ok((e, used)) => {
                    self.lo += used;
                    self.remaining -= 1;
                    self.head = Some((key_of(self.rank, &e), e));
                    return Ok(());
                }
                Err(bincode::error::DecodeError::UnexpectedEnd { .. }) if !self.eof => {
                    if !self.fill()? {
                        return Err(self.changed());
                    }
                }
                Err(_) => return Err(self.changed()),
            }
        }
    }
}

/// Walk every rank's events in key order, joining each operation across
/// its members (identity checked, times gathered, arrival attached) and
/// handing it to `emit` in ascending key order. The keys come from a map of
/// the ranks' next keys, so memory is one event per rank beyond the cursors.
fn merge(cursors: &mut [Cursor<'_>], groups: &BTreeMap<u32, Vec<u32>>, ctx: &RankCtx, emit: &mut dyn FnMut(JoinedCollective) -> Result<()>) -> Result<()> {
    let mut pending: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    for (r, c) in cursors.iter().enumerate() {
        if let Some((k, _)) = c.head() {
            pending.entry(k).or_default().push(r as u32);
        }
    }
    let mut here = vec![false; cursors.len()];
    let mut spare: Vec<Vec<u32>> = Vec::new();
    while let Some((key, ranks)) = pending.pop_first() {
        for &r in &ranks {
            here[r as usize] = true;
        }
        let jc = join_key(key, cursors, &here, groups, ctx);
        for &r in &ranks {
            here[r as usize] = false;
        }
        emit(jc?)?;
        for &r in &ranks {
            let c = &mut cursors[r as usize];
            c.advance()?;
            if let Some((k, _)) = c.head() {
                pending.entry(k).or_insert_with(|| spare.pop().unwrap_or_default()).push(r);
            }
        }
        let mut ranks = ranks;
        ranks.clear();
        spare.push(ranks);
    }
    Ok(())
}

/// Join the operation `key` from the heads of the cursors of the ranks
/// marked `here` (exactly those whose next event has this key).
fn join_key(key: Key, cursors: &[Cursor<'_>], here: &[bool], groups: &BTreeMap<u32, Vec<u32>>, ctx: &RankCtx) -> Result<JoinedCollective> {
    let (group, seq, pair) = key;
    let members = match pair {
        Some((a, b)) => vec![a, b],
        None => groups[&group].clone(),
    };
    let what = || pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
    let event = |r: u32| cursors[r as usize].head().expect("a rank marked here has a head").1;
    if members.iter().any(|&r| !here[r as usize]) {
        let present: Vec<u32> = members.iter().copied().filter(|&r| here[r as usize]).collect();
        let missing: Vec<u32> = members.iter().copied().filter(|&r| !here[r as usize]).collect();
        let any = event(present[0]);
        refuse!(
            Code::UnmatchedEvent,
            "unmatched event: group {group} seq {seq}{} ({}, {} bytes) is on ranks {present:?} but missing on ranks {missing:?} ({})",
            what(),
            any.phase,
            any.bytes,
            any.kind.name()
        );
    }
    let first_rank = members[0];
    let first = event(first_rank);
    let mut ranks = Vec::with_capacity(members.len());
    for (k, &r) in members.iter().enumerate() {
        let e = event(r);
        // a pair: the sender's send to the receiver and the receiver's receive from the sender
        let kind_agrees = match pair {
            Some(_) => e.kind == if k == 0 { CollectiveKind::Send } else { CollectiveKind::Recv },
            None => e.kind == first.kind,
        };
        if !kind_agrees || e.bytes != first.bytes || e.dtype != first.dtype || e.phase != first.phase || e.root != first.root {
            let root = |x: Option<u32>| x.map(|r| format!(" root {r}")).unwrap_or_default();
            refuse!(
                Code::IdentityMismatch,
                "identity mismatch at group {group} seq {seq}{}: rank {first_rank} has {}{} {} bytes {} in {}, rank {r} has {}{} {} bytes {} in {}",
                what(),
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
            device_wait_ns: ctx.waits[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
            kernel_start_ns: ctx.kernel_starts[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
        });
    }
    let tuner = members.iter().find_map(|&r| ctx.tuners[r as usize].get(&seq).cloned()).filter(|_| group == 0);
    let mut jc = JoinedCollective {
        phase: first.phase,
        kind: first.kind,
        group,
        members,
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
        tuner,
    };
    attach_arrival(&mut jc, &ctx.models, &ctx.anchors, &ctx.kernel_anchors);
    Ok(jc)
}

/// Match collective events across shards by operation identity (in memory).
pub fn match_events(shards: &[Shard]) -> Result<Vec<JoinedCollective>> {
    let headers: Vec<&ShardHeader> = shards.iter().map(|s| &s.header).collect();
    let groups = check_groups(&headers)?;
    let mut ctx = RankCtx::with_capacity(shards.len());
    for s in shards {
        ctx.push(rank_extract(s));
    }
    let mut cursors = Vec::with_capacity(shards.len());
    for s in shards {
        let index = index_rank(s.header.rank, &s.body.collectives, &groups)?;
        cursors.push(Cursor::Indexed { events: std::borrow::Cow::Borrowed(&s.body.collectives[..]), index, pos: 0 });
    }
    let mut out = Vec::new();
    merge(&mut cursors, &groups, &ctx, &mut |c| {
        out.push(c);
        Ok(())
    })?;
    Ok(out)
}

/// A rank's decoded events and their sorted index.
type DecodedRank = (Vec<CollectiveEvent>, Vec<(Key, usize)>);

/// What the first pass of the streaming join keeps of one shard.
struct Scanned {
    path: PathBuf,
    header: ShardHeader,
    digest: String,
    tokens: Vec<crate::evidence::shard::TokenEvent>,
    stalls: Vec<crate::evidence::stalls::Stall>,
    extract: RankExtract,
    version: u32,
    events_at: usize,
    events: u64,
    /// Its events' faults, or how the merge reads them: `None` streams them
    /// from the file (recorded in key order), else they are kept decoded.
    order: Result<Option<DecodedRank>>,
}

/// Run `f` on every item on up to `threads` threads, results in item order.
fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: &(dyn Fn(&T) -> R + Sync)) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = threads.clamp(1, items.len().max(1));
    let mut got: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { return out };
                        out.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a join thread panicked")).collect()
    });
    got.sort_by_key(|g| g.0);
    got.into_iter().map(|g| g.1).collect()
}

/// A run joined by [`join_dir_streaming`]: the record and every rank's header and tokens.
pub struct StreamedRun {
    /// The run record.
    pub run: RunRecord,
    /// Headers by rank.
    pub headers: Vec<ShardHeader>,
    /// Token events by rank.
    pub tokens: Vec<Vec<crate::evidence::shard::TokenEvent>>,
    /// Stalls by rank ([`crate::evidence::stalls`]).
    pub stalls: Vec<Vec<crate::evidence::stalls::Stall>>,
}

/// What the merge of the streaming join works on.
struct Engine {
    groups: BTreeMap<u32, Vec<u32>>,
    ctx: RankCtx,
    cursors: Vec<Cursor<'static>>,
}

/// [`join_dir`] without holding the run in memory: the same checks and
/// refusals (in the same order), the same joined collectives handed to
/// `emit` in the same order.
///
/// Pass 1 reads, verifies and decodes each shard on up to `threads` threads
/// (one shard per thread at a time) and keeps its header, its tokens, and,
/// only where its events are not recorded in key order, its decoded events.
/// Pass 2 merges the ranks' events in key order, reading each shard file
/// again through a 32 KiB buffer and checking its digest again at its end.
/// Memory: about `threads` decoded shards at once in pass 1, then per rank
/// its header, tokens, buffer and next event, plus whatever `emit` keeps.
pub fn join_dir_streaming(dir: &Path, threads: usize, emit: &mut dyn FnMut(JoinedCollective) -> Result<()>) -> Result<StreamedRun> {
    let (run, mut e) = prepare_streaming(dir, threads)?;
    merge(&mut e.cursors, &e.groups, &e.ctx, emit)?;
    Ok(run)
}

/// Pass 1 of [`join_dir_streaming`], and the cursors of pass 2.
fn prepare_streaming(dir: &Path, threads: usize) -> Result<(StreamedRun, Engine)> {
    let (run, files) = run_and_files(dir)?;
    // the groups as the headers declare them, read ahead of the checks (a hint
    // to index events against while each shard is decoded; checked below)
    let peeked: Vec<Option<ShardHeader>> = par_map(&files, threads, &|f: &PathBuf| crate::evidence::shard::peek_header(f));
    let mut hint: Vec<&ShardHeader> = peeked.iter().flatten().collect();
    hint.sort_by_key(|h| h.rank);
    let hint_groups = check_groups(&hint).ok();
    drop(peeked);
    let scanned: Vec<Result<Scanned>> = par_map(&files, threads, &|f: &PathBuf| scan_shard(f, &run, hint_groups.as_ref()));
    let mut by_rank: BTreeMap<u32, Scanned> = BTreeMap::new();
    for s in scanned {
        let s = s?;
        if let Some(prev) = by_rank.get(&s.header.rank) {
            refuse!(Code::DuplicateRank, "duplicate shards for rank {}: {} and {}", s.header.rank, prev.path.display(), s.path.display());
        }
        by_rank.insert(s.header.rank, s);
    }
    for r in 0..run.world_size {
        if !by_rank.contains_key(&r) {
            refuse!(Code::MissingRank, "rank {r} shard missing: expected {} in {}", crate::evidence::shard::shard_file_name(r), dir.display());
        }
    }
    let scanned: Vec<Scanned> = by_rank.into_values().collect();
    let headers: Vec<&ShardHeader> = scanned.iter().map(|s| &s.header).collect();
    let groups = check_groups(&headers)?;
    if hint_groups.as_ref() != Some(&groups) {
        refuse!(Code::Stale, "{}: a shard's header changed while join read it (its process groups read differently twice)", dir.display());
    }
    let mut ctx = RankCtx::with_capacity(scanned.len());
    let mut cursors: Vec<Option<Cursor<'static>>> = Vec::with_capacity(scanned.len());
    let mut heads = Vec::with_capacity(scanned.len());
    let mut tokens = Vec::with_capacity(scanned.len());
    let mut stalls = Vec::with_capacity(scanned.len());
    let mut streamed: Vec<(PathBuf, u32, u32, usize, u64, String)> = Vec::new();
    for s in scanned {
        let rank = s.header.rank;
        match s.order? {
            Some((events, index)) => cursors.push(Some(Cursor::Indexed { events: std::borrow::Cow::Owned(events), index, pos: 0 })),
            None => {
                cursors.push(None);
                streamed.push((s.path, rank, s.version, s.events_at, s.events, s.digest));
            }
        }
        ctx.push(s.extract);
        heads.push(s.header);
        tokens.push(s.tokens);
        stalls.push(s.stalls);
    }
    // the streamed shards, opened again (each reads its first buffer)
    let opened = par_map(&streamed, threads, &|(p, rank, version, at, n, digest)| StreamReader::open(p, *rank, *version, *at, *n, digest.clone()));
    for ((_, rank, ..), s) in streamed.iter().zip(opened) {
        cursors[*rank as usize] = Some(Cursor::Stream(Box::new(s?)));
    }
    let cursors = cursors.into_iter().map(|c| c.expect("every rank has a cursor")).collect();
    Ok((StreamedRun { run, headers: heads, tokens, stalls }, Engine { groups, ctx, cursors }))
}

/// Pass 1 of the streaming join on one shard file: read, verify and decode
/// it, check it against the run record, and index its events against the
/// process groups the headers declared (`hint`).
fn scan_shard(f: &Path, run: &RunRecord, hint: Option<&BTreeMap<u32, Vec<u32>>>) -> Result<Scanned> {
    let bytes = crate::core::limits::read_bounded(f, crate::core::limits::MAX_SHARD_BYTES)?;
    let name = f.display().to_string();
    let (shard, digest) = Shard::decode_with_digest(&bytes, &name)?;
    check_against_run(f, &shard, &digest, run)?;
    let (events_at, events) = crate::evidence::shard::collectives_region(&bytes, &name)?;
    drop(bytes);
    let extract = rank_extract(&shard);
    let Shard { header, body } = shard;
    let stalls = crate::evidence::stalls::of_rank(header.rank, &body.collectives);
    let order = match hint {
        None => Err(anyhow::anyhow!("process groups unknown")), // the group check refuses first
        Some(groups) => index_rank(header.rank, &body.collectives, groups).map(|index| {
            let in_order = index.iter().enumerate().all(|(i, x)| x.1 == i);
            (!in_order).then_some((body.collectives, index))
        }),
    };
    Ok(Scanned { path: f.to_path_buf(), version: header.format_version, header, digest, tokens: body.tokens, stalls, extract, events_at, events, order })
}

/// A verified shard against the run record: same run, a rank that fits,
/// listed, and the bytes run.json recorded.
fn check_against_run(f: &Path, shard: &Shard, digest: &str, run: &RunRecord) -> Result<()> {
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
    Ok(())
}

/// The streaming join of `dir` and its summary; each joined collective is
/// also written to `events_out` (one JSON line each, as [`join_dir`]'s
/// caller writes them) where given. The merge runs on its own thread, the
/// summary and the joined trace on this one.
pub fn join_summary_streaming(dir: &Path, threads: usize, events_out: Option<&mut dyn std::io::Write>) -> Result<JoinSummary> {
    let (run, mut engine) = prepare_streaming(dir, threads)?;
    let mut b = SummaryBuilder::new(&run.run, run.headers.iter().collect());
    for t in &run.tokens {
        b.add_tokens(t);
    }
    for st in &run.stalls {
        b.add_stalls(st);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<JoinedCollective>>(16);
    let mut out = events_out;
    std::thread::scope(|s| -> Result<()> {
        let merger = s.spawn(move || -> Result<()> {
            let e = &mut engine;
            let mut batch = Vec::with_capacity(8);
            merge(&mut e.cursors, &e.groups, &e.ctx, &mut |c| {
                batch.push(c);
                if batch.len() == 8 {
                    tx.send(std::mem::replace(&mut batch, Vec::with_capacity(8))).map_err(|_| anyhow::anyhow!("the summary stopped"))?;
                }
                Ok(())
            })?;
            if !batch.is_empty() {
                tx.send(batch).map_err(|_| anyhow::anyhow!("the summary stopped"))?;
            }
            Ok(())
        });
        let mut fault = None;
        'recv: for batch in rx.iter() {
            for c in batch {
                if let Some(w) = out.as_deref_mut() {
                    if let Err(e) = serde_json::to_writer(&mut *w, &c).map_err(anyhow::Error::from).and_then(|()| w.write_all(b"\n").map_err(Into::into)) {
                        fault = Some(e);
                        break 'recv;
                    }
                }
                b.add(&c);
            }
        }
        drop(rx);
        let merged = merger.join().expect("the join thread panicked");
        match fault {
            Some(e) => Err(e),
            None => merged,
        }
    })?;
    Ok(b.finish())
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

fn clock_reports(headers: &[&ShardHeader]) -> Vec<RankClockReport> {
    let rank0 = headers[0];
    let inj_of = |rank: u32| rank0.clock_injections.iter().find(|i| i.rank == rank).copied();
    headers
        .iter()
        .map(|h| {
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

fn node_reports(headers: &[&ShardHeader], clocks: &[RankClockReport]) -> Vec<NodeClockReport> {
    let mut nodes: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for h in headers {
        nodes.entry(h.host.clone()).or_default().push(h.rank);
    }
    let injected: BTreeSet<u32> = headers[0].clock_injections.iter().map(|i| i.rank).collect();
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

/// One phase's figures, gathered collective by collective.
#[derive(Default)]
struct PhaseAcc {
    all: u64,
    timed: u64,
    sizes: BTreeMap<u64, u64>,
    first_sizes: Vec<u64>,
    completion: Vec<f64>,
    device_source: bool,
    host_source: bool,
    first_source: Option<CompletionSource>,
    tokens: Vec<f64>,
    skews: Vec<f64>,
    skew_bounds: Vec<f64>,
    device_waits: Vec<f64>,
    tuner_choices: BTreeMap<String, u64>,
    from_kernels: u64,
}

/// What the delay control needs of one timed collective.
struct DelayRec {
    phase: Phase,
    delayed: bool,
    skew: Option<f64>,
    bound: Option<f64>,
    beyond: Option<(f64, f64)>,
    injected_us: Vec<f64>,
}

impl DelayRec {
    fn of(c: &JoinedCollective) -> Self {
        let delayed = c.ranks.iter().any(|t| t.injected_delay_ns.is_some());
        DelayRec {
            phase: c.phase,
            delayed,
            skew: c.arrival_skew_us,
            bound: c.arrival_bound_us,
            beyond: unexplained_skew_and_bound_us(c),
            injected_us: if delayed { c.ranks.iter().filter_map(|t| t.injected_delay_ns).map(|ns| ns as f64 / 1e3).collect() } else { Vec::new() },
        }
    }
}

/// What the tuning comparison needs of one collective.
struct TuneRec {
    phase: Phase,
    bytes: u64,
    tuner: Option<crate::evidence::tuning::TunerChoice>,
}

/// One size of the isolated phase: each collective's per-rank completion times.
struct IsoSize {
    completions: Vec<Vec<u64>>,
    dtype: Dtype,
    root: Option<u32>,
    source: CompletionSource,
}

/// The isolated phase's collectives of the swept kind, per size, as they come.
#[derive(Default)]
struct IsolatedAcc {
    by_size: BTreeMap<u64, IsoSize>,
}

impl IsolatedAcc {
    fn add(&mut self, c: &JoinedCollective, kind: &str) {
        if c.phase == Phase::Isolated && !c.warmup && c.kind.name() == kind {
            let s = self.by_size.entry(c.bytes).or_insert_with(|| IsoSize {
                completions: Vec::new(),
                dtype: c.dtype,
                root: c.root,
                source: c.ranks[0].completion_source(),
            });
            s.completions.push(c.ranks.iter().map(|t| t.completion_ns()).collect());
        }
    }

    fn rows(self, run: &RunRecord, headers: &[&ShardHeader]) -> Vec<IsolatedSizeRow> {
        let kind = run.workload.sweep_kind();
        let n = run.world_size;
        self.by_size
            .into_iter()
            .map(|(event_bytes, cs)| {
                let bytes = kind.size_bytes(event_bytes, n);
                let mut iter_max: Vec<f64> = cs.completions.iter().map(|c| c.iter().map(|&t| t as f64).fold(0.0, f64::max) / 1e3).collect();
                let ranks = cs.completions[0].len();
                let len_cs = cs.completions.len();
                let time_us = (0..ranks).map(|r| cs.completions.iter().map(|c| c[r] as f64 / 1e3).sum::<f64>() / len_cs as f64).sum::<f64>() / ranks as f64;
                let algbw_gbps = bytes as f64 / (time_us * 1e3);
                let checks: Vec<u64> = headers
                    .iter()
                    .flat_map(|h| h.checks.iter())
                    .filter(|k| k.phase == Phase::Isolated && k.bytes == event_bytes)
                    .map(|k| k.wrong_elements)
                    .collect();
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
                    source: cs.source,
                    count: Some(bytes / cs.dtype.size_bytes()),
                    dtype: Some(cs.dtype),
                    redop: Some(if kind.reduces() { run.workload.sweep_op().name() } else { "none" }.into()),
                    collective: Some(kind),
                    root: cs.root,
                }
            })
            .collect()
    }
}

/// The isolated phase of a joined run, per size, for the kind it swept
/// (`--collective`, recorded in the workload; the events carry it too).
pub fn isolated_sizes(j: &JoinedRun) -> Vec<IsolatedSizeRow> {
    let kind = j.run.workload.sweep_kind();
    let mut acc = IsolatedAcc::default();
    for c in &j.collectives {
        acc.add(c, kind.name());
    }
    let headers: Vec<&ShardHeader> = j.shards.iter().map(|s| &s.header).collect();
    acc.rows(&j.run, &headers)
}

/// A [`JoinSummary`] built one joined collective at a time, in join order
/// (what [`summarize`] computes from a joined run in memory, and the
/// streaming join from collectives it does not keep). Keeps per phase each
/// timed rank-event's completion time (8 bytes), and small records per
/// collective.
pub struct SummaryBuilder<'a> {
    run: &'a RunRecord,
    headers: Vec<&'a ShardHeader>,
    phases: BTreeMap<Phase, PhaseAcc>,
    collectives: u64,
    delay_recs: Option<Vec<DelayRec>>,
    tunes: Vec<TuneRec>,
    any_tuner: bool,
    iso: IsolatedAcc,
    iso_kind: &'static str,
    stalls: Vec<crate::evidence::stalls::Stall>,
}

impl<'a> SummaryBuilder<'a> {
    /// A builder for a run and its headers by rank.
    pub fn new(run: &'a RunRecord, headers: Vec<&'a ShardHeader>) -> Self {
        let delay_recs = headers.first().and_then(|h| h.delay_injection).map(|_| Vec::new());
        SummaryBuilder {
            run,
            phases: run.workload.phases.iter().map(|&p| (p, PhaseAcc::default())).collect(),
            headers,
            collectives: 0,
            delay_recs,
            tunes: Vec::new(),
            any_tuner: false,
            iso: IsolatedAcc::default(),
            iso_kind: run.workload.sweep_kind().name(),
            stalls: Vec::new(),
        }
    }

    /// A rank's stalls ([`crate::evidence::stalls::of_rank`]).
    pub fn add_stalls(&mut self, stalls: &[crate::evidence::stalls::Stall]) {
        self.stalls.extend_from_slice(stalls);
    }

    /// A rank's token events.
    pub fn add_tokens(&mut self, tokens: &[crate::evidence::shard::TokenEvent]) {
        for t in tokens.iter().filter(|t| !t.warmup) {
            if let Some(acc) = self.phases.get_mut(&t.phase) {
                acc.tokens.push((t.end_ns - t.start_ns) as f64 / 1e3);
            }
        }
    }

    /// The next joined collective.
    pub fn add(&mut self, c: &JoinedCollective) {
        self.collectives += 1;
        if let Some(acc) = self.phases.get_mut(&c.phase) {
            acc.all += 1;
            if !c.warmup {
                acc.timed += 1;
                *acc.sizes.entry(c.bytes).or_insert(0) += 1;
                if acc.first_sizes.len() < 6 {
                    acc.first_sizes.push(c.bytes);
                }
                if acc.first_source.is_none() {
                    acc.first_source = Some(c.ranks[0].completion_source());
                }
                for t in &c.ranks {
                    acc.completion.push(t.completion_ns() as f64 / 1e3);
                    match t.completion_source() {
                        CompletionSource::DeviceEvents => acc.device_source = true,
                        _ => acc.host_source = true,
                    }
                    if let Some(ns) = t.device_wait_ns {
                        acc.device_waits.push(ns as f64 / 1e3);
                    }
                }
                acc.skews.extend(c.arrival_skew_us);
                acc.skew_bounds.extend(c.arrival_bound_us);
                if let Some(t) = &c.tuner {
                    *acc.tuner_choices.entry(tuner_label(t)).or_insert(0) += 1;
                }
                if c.arrival_source == Some(ArrivalSource::NcclKernel) {
                    acc.from_kernels += 1;
                }
            }
        }
        if !c.warmup {
            if let Some(recs) = &mut self.delay_recs {
                recs.push(DelayRec::of(c));
            }
        }
        self.any_tuner |= c.tuner.is_some();
        self.tunes.push(TuneRec { phase: c.phase, bytes: c.bytes, tuner: c.tuner.clone() });
        self.iso.add(c, self.iso_kind);
    }

    /// The summary.
    pub fn finish(mut self) -> JoinSummary {
        let mut done: BTreeMap<Phase, PhaseSummary> = BTreeMap::new();
        let mut phases = Vec::new();
        for &phase in &self.run.workload.phases {
            if let Some(p) = done.get(&phase) {
                phases.push(p.clone());
                continue;
            }
            let a = self.phases.get_mut(&phase).expect("every workload phase has an accumulator");
            let completion_source = match (a.device_source, a.host_source) {
                (false, false) => None,
                (true, true) => Some(CompletionSource::Mixed),
                _ => a.first_source,
            };
            let p = PhaseSummary {
                phase,
                collectives_per_rank: a.timed,
                warmup_collectives_per_rank: a.all - a.timed,
                sizes_bytes: std::mem::take(&mut a.sizes),
                first_sizes_bytes: std::mem::take(&mut a.first_sizes),
                completion_source,
                completion_median_us: stats::median(&mut a.completion),
                completion_p99_us: stats::percentile_nearest_rank(&mut a.completion, 99.0),
                token_median_us: stats::median(&mut a.tokens),
                token_p99_us: stats::percentile_nearest_rank(&mut a.tokens, 99.0),
                skew_median_us: stats::median(&mut a.skews),
                skew_bound_median_us: stats::median(&mut a.skew_bounds),
                arrivals_from_nccl_kernels: a.from_kernels,
                device_wait_median_us: stats::median(&mut a.device_waits),
                tuner_choices: std::mem::take(&mut a.tuner_choices),
                source_timeline: self.headers[0].phases.iter().find(|r| r.phase == phase).and_then(|r| r.trace_timeline),
            };
            done.insert(phase, p.clone());
            phases.push(p);
        }
        let clocks = clock_reports(&self.headers);
        let nodes = node_reports(&self.headers, &clocks);
        let delay_control = match (&self.delay_recs, self.headers[0].delay_injection) {
            (Some(recs), Some(d)) => delay_control_of(recs, d, self.headers[0].backend, &self.run.workload.phases),
            _ => None,
        };
        let tuning_comparisons = if self.any_tuner {
            [Phase::Replay, Phase::Fill, Phase::Overlap]
                .into_iter()
                .filter(|p| self.run.workload.phases.contains(p) && self.run.workload.phases.contains(&Phase::Blocking))
                .map(|p| compare_tuning_of(&self.tunes, Phase::Blocking, p))
                .collect()
        } else {
            Vec::new()
        };
        let iso = std::mem::take(&mut self.iso);
        JoinSummary {
            isolated_sizes: iso.rows(self.run, &self.headers),
            tuning_comparisons,
            delay_control,
            run_id: self.run.run_id.clone(),
            world_size: self.run.world_size,
            collectives: self.collectives,
            phases,
            clock_sync: self.headers.iter().find_map(|h| h.clock.as_ref()?.sync),
            calibration_wall_ns: clocks.iter().map(|c| c.calibration_wall_ns).collect::<Option<Vec<u64>>>().and_then(|v| v.into_iter().max()),
            clocks,
            nodes,
            shards: self.run.shards.clone(),
            stalls: std::mem::take(&mut self.stalls),
        }
    }
}

/// Summarize a joined run.
pub fn summarize(j: &JoinedRun) -> JoinSummary {
    let mut b = SummaryBuilder::new(&j.run, j.shards.iter().map(|s| &s.header).collect());
    for s in &j.shards {
        b.add_tokens(&s.body.tokens);
        b.add_stalls(&crate::evidence::stalls::of_shard(s));
    }
    for c in &j.collectives {
        b.add(c);
    }
    b.finish()
}

fn tuner_label(t: &crate::evidence::tuning::TunerChoice) -> String {
    format!("{}/{}/{}ch", t.algo, t.proto, t.channels)
}

/// Compare the k-th collectives of two phases.
pub fn compare_tuning(all: &[JoinedCollective], workload: Phase, proxy: Phase) -> TuningComparison {
    let recs: Vec<TuneRec> = all.iter().map(|c| TuneRec { phase: c.phase, bytes: c.bytes, tuner: c.tuner.clone() }).collect();
    compare_tuning_of(&recs, workload, proxy)
}

fn compare_tuning_of(all: &[TuneRec], workload: Phase, proxy: Phase) -> TuningComparison {
    let a: Vec<&TuneRec> = all.iter().filter(|c| c.phase == workload).collect();
    let b: Vec<&TuneRec> = all.iter().filter(|c| c.phase == proxy).collect();
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

/// The skew, µs, at and above which the arrival-delay control counts a
/// collective as showing an injected delay of `delay_us` (less the skew's
/// bound, which may have hidden that much). The line is the midpoint between
/// the two outcomes the control tells apart, a skew of about 0 without the
/// delay and about the delay with it: the minimum-error rule between two
/// equally likely hypotheses of equal spread (Duda, Hart and Stork, *Pattern
/// Classification*, 2nd ed., 2001, §2.6). A delayed collective's skew is the
/// delay less the lateness of the other ranks (a rank the scheduler stops in
/// its own gap arrives late: a few milliseconds on a busy 2-core machine), so
/// a line at the full delay counted exactly measured skews as misses; at half
/// the delay both kinds of error need the natural lateness to reach half the
/// delay, and a control's delay is chosen far above it.
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
fn delay_control_of(
    all_timed: &[DelayRec],
    d: crate::core::workload::DelayInjection,
    backend: crate::evidence::shard::BackendKind,
    phases: &[Phase],
) -> Option<DelayControlReport> {
    if all_timed.iter().any(|c| c.skew.is_none()) {
        return None;
    }
    let gpu = backend == crate::evidence::shard::BackendKind::Cuda;
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
            let (dl, ud): (Vec<&DelayRec>, Vec<&DelayRec>) = all_timed.iter().filter(|c| c.phase == phase).partition(|c| c.delayed);
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
    let (dl, ud): (Vec<&DelayRec>, Vec<&DelayRec>) = all_timed.iter().filter(|c| judged(c.phase)).partition(|c| c.delayed);
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

/// Refuse a joined run whose shards are synthetic (`synth-shards`) where a
/// measurement is required; `what` names the stage.
pub fn refuse_synthetic(headers: &[&ShardHeader], run_id: &str, what: &str) -> Result<()> {
    if let Some(h) = headers.iter().find(|h| h.synthetic.is_some()) {
        let m = h.synthetic.as_ref().expect("found");
        refuse!(
            Code::Synthetic,
            "run {run_id}: rank {} shard is synthetic (generated by {}, seed {}), not a measurement; {what} takes measured runs only",
            h.rank,
            m.generator,
            m.seed
        );
    }
    Ok(())
}

impl JoinedRun {
    /// [`refuse_synthetic`] of this run.
    pub fn refuse_synthetic(&self, what: &str) -> Result<()> {
        let headers: Vec<&ShardHeader> = self.shards.iter().map(|s| &s.header).collect();
        refuse_synthetic(&headers, &self.run.run_id, what)
    }
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
            "delay control (rank {} +{:.0} us every {}, achieved median {} us): {}/{} delayed collectives show skew >= delay/2 - bound (min {}), {}/{} undelayed do (median skew {})",
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

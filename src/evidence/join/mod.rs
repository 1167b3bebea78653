//! `join`: verify a run's shards and match events by operation identity.
//!
//! Consumes a run directory (`run.json` plus one shard per rank). Produces the
//! joined trace (one [`JoinedCollective`] per operation, arrivals on rank 0's
//! calibrated timebase) and a [`JoinSummary`], in memory ([`join_dir`]) or
//! streamed ([`join_summary_streaming`]). Refuses, naming file, rank, group
//! and sequence: a missing, duplicated, foreign or altered shard, inconsistent
//! membership, a duplicated or one-sided event, an identity mismatch between
//! ranks. Never matches by time; modifies nothing. Synthetic shards join; the
//! stages that take measurements refuse them ([`refuse_synthetic`]).
//!
//! Method and parts: docs/METHODS.md, "Join".
mod clocks;
mod cursor;
mod delay;
mod isolated;
mod load;
mod matching;
mod render;
mod summary;
mod tuning;

pub use clocks::{NodeClockReport, RankClockReport};
pub use delay::{
    delay_control, detection_line_us, unexplained_skew_us, BeyondDesign, DelayControlReport, PhaseDelayControl,
};
pub use isolated::{isolated_sizes, IsolatedSizeRow};
pub use load::{join_dir, join_dir_streaming, join_summary_streaming, refuse_synthetic, StreamedRun};
pub use render::{render_isolated, render_summary};
pub use summary::{summarize, JoinSummary, PhaseSummary};
pub use tuning::{compare_tuning, TuningComparison};

use crate::core::collective;
use crate::core::workload::Phase;
use crate::evidence::run::RunRecord;
use crate::evidence::shard::{CollectiveKind, Shard};
use crate::evidence::tuning::TunerChoice;
use serde::{Deserialize, Serialize};

/// One rank's view of a joined collective (local clock, ns). A field not
/// recorded for this collective (not measured, not injected, not replayed)
/// is absent, never 0, which keeps the joined trace small: most are phase-
/// or backend-specific.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
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
    pub dtype: collective::TraceDtype,
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
    pub tuner: Option<TunerChoice>,
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

/// Joined collectives and shards the parts' tests build.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::core::collective;
    use crate::evidence::shard::{self, KernelEvent, KernelKind, ShardBody};

    pub(super) fn times(rank: u32, host_issue_ns: u64, device_start_ns: Option<u64>) -> RankTimes {
        RankTimes {
            rank,
            host_issue_ns,
            host_return_ns: host_issue_ns,
            wait_start_ns: host_issue_ns,
            wait_end_ns: host_issue_ns + 10,
            device_start_ns,
            device_end_ns: device_start_ns.map(|d| d + 5),
            ..Default::default()
        }
    }

    pub(super) fn collective(ranks: Vec<RankTimes>) -> JoinedCollective {
        JoinedCollective {
            phase: Phase::Blocking,
            kind: CollectiveKind::AllReduce,
            group: 0,
            members: ranks.iter().map(|t| t.rank).collect(),
            seq: 0,
            bytes: 4,
            dtype: collective::TraceDtype::F32,
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

    /// A one-rank shard whose phase `blocking` has `n` collectives, `k` NCCL
    /// kernels (correlation ids descending, so that order comes from them)
    /// and, if `anchored`, a kernel anchor.
    pub(super) fn shard_with_kernels(n: u64, k: u64, anchored: bool) -> Shard {
        let anchor = serde_json::json!({
            "error_ns": 1200, "globaltimer_bound_ns": 800.0, "cupti_offset_bound_ns": 368.0,
            "globaltimer_resolution_ns": 32, "best_round_trip_ns": 1700, "round_trips": 256, "stamp_kernels": 8,
            "cupti_minus_globaltimer_ns": -205000.0, "cupti_own_minus_anchored_ns": null
        });
        let phase = serde_json::json!({
            "phase": "blocking", "start_ns": 0, "end_ns": 1, "device_anchor_error_ns": 2300,
            "quantum_ns": null, "trace": null, "collectives": n,
            "kernel_anchor": if anchored { anchor } else { serde_json::Value::Null }
        });
        let collectives = (0..n)
            .map(|seq| {
                serde_json::from_value(serde_json::json!({
                    "phase": "blocking", "kind": "all_reduce", "group": 0, "seq": seq, "bytes": 4,
                    "dtype": "f32", "token": 0, "layer": seq, "iter": null, "warmup": false, "host_issue_ns": 10 * seq,
                    "host_return_ns": 10 * seq + 1, "wait_start_ns": 10 * seq + 1, "wait_end_ns": 10 * seq + 2,
                    "device_start_ns": 100 * seq, "device_end_ns": 100 * seq + 50, "injected_delay_ns": null,
                    "replay": null, "fill": null, "checked": false
                }))
                .unwrap()
            })
            .collect();
        let kernels = (0..k)
            .map(|i| KernelEvent {
                phase: Phase::Blocking,
                kind: KernelKind::Nccl,
                name: 0,
                start_ns: 100 * i + 7,
                end_ns: 100 * i + 40,
                stream: 1,
                correlation: (1000 - i) as u32,
            })
            .collect();
        let body = ShardBody {
            collectives,
            kernels,
            kernel_names: vec!["ncclDevKernel_AllReduce_Sum_f32_RING_LL".into()],
            ..Default::default()
        };
        Shard { header: shard::test_header("cuda", serde_json::json!([phase])), body }
    }
}

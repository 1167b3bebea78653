//! The isolated phase per size, in nccl-tests' terms: time, algorithm and
//! bus bandwidth, p50 and p99 of an iteration's time, count, type, redop,
//! root and the result checks' wrong elements. Consumes the timed joined
//! collectives of the swept kind and the headers' checks; produces one
//! [`IsolatedSizeRow`] per size. Use [`isolated_sizes`] on a joined run; the
//! summary feeds an [`IsolatedAcc`] one collective at a time.
use super::{CompletionSource, JoinedCollective, JoinedRun};
use crate::core::collective;
use crate::core::workload::{Phase, SweepKind};
use crate::evidence::run::RunRecord;
use crate::evidence::shard::ShardHeader;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    pub dtype: Option<collective::TraceDtype>,
    /// Reduction: nccl-tests' `redop` (`none` for a kind without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redop: Option<String>,
    /// The collective swept (absent in summaries written before other kinds
    /// could be swept: all-reduce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<SweepKind>,
    /// Root rank of a broadcast or reduce; absent for the other kinds (nccl-tests' root -1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
}

/// One size of the isolated phase: each collective's per-rank completion times.
struct IsoSize {
    completions: Vec<Vec<u64>>,
    dtype: collective::TraceDtype,
    root: Option<u32>,
    source: CompletionSource,
}

/// The isolated phase's collectives of the swept kind, per size, as they come.
#[derive(Default)]
pub(super) struct IsolatedAcc {
    by_size: BTreeMap<u64, IsoSize>,
}

impl IsolatedAcc {
    pub(super) fn add(&mut self, c: &JoinedCollective, kind: &str) {
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

    pub(super) fn rows(self, run: &RunRecord, headers: &[&ShardHeader]) -> Vec<IsolatedSizeRow> {
        let kind = run.workload.sweep_kind();
        let n = run.world_size;
        self.by_size
            .into_iter()
            .map(|(event_bytes, cs)| {
                let bytes = kind.size_bytes(event_bytes, n);
                let mut iter_max: Vec<f64> =
                    cs.completions.iter().map(|c| c.iter().map(|&t| t as f64).fold(0.0, f64::max) / 1e3).collect();
                let ranks = cs.completions[0].len();
                let len_cs = cs.completions.len();
                let time_us = (0..ranks)
                    .map(|r| cs.completions.iter().map(|c| c[r] as f64 / 1e3).sum::<f64>() / len_cs as f64)
                    .sum::<f64>()
                    / ranks as f64;
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

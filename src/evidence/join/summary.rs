//! The join summary (`join --json`): per phase the counts, sizes, completion,
//! token, skew and device-wait figures, then clocks, delay control, tuner
//! comparisons, isolated sizes, stalls and verified digests. Consumes joined
//! collectives one at a time in join order, and each rank's tokens and
//! stalls; keeps per phase one f64 per timed rank-event. Use [`summarize`] on
//! a joined run, or feed a [`SummaryBuilder`] and call its `finish`.
use super::clocks::{clock_reports, node_reports, NodeClockReport, RankClockReport};
use super::delay::{delay_control_of, DelayControlReport, DelayRec};
use super::isolated::{IsolatedAcc, IsolatedSizeRow};
use super::tuning::{compare_tuning_of, tuner_label, TuneRec, TuningComparison};
use super::{ArrivalSource, CompletionSource, JoinedCollective, JoinedRun};
use crate::core::clock::ClockSync;
use crate::core::stats;
use crate::core::workload::Phase;
use crate::evidence::run::{RunRecord, ShardRef};
use crate::evidence::shard::{GapTimeline, ShardHeader, TokenEvent};
use crate::evidence::stalls::{self, Stall};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    pub source_timeline: Option<GapTimeline>,
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
    pub clock_sync: Option<ClockSync>,
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
    pub shards: Vec<ShardRef>,
    /// Stretches in which a rank made no progress far beyond its phase's
    /// typical interval (a stopped or descheduled rank), per rank; empty
    /// where none was found (summaries written before this field: absent).
    #[serde(default)]
    pub stalls: Vec<Stall>,
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

/// A [`JoinSummary`] built one joined collective at a time, in join order
/// (what [`summarize`] computes from a joined run in memory, and the
/// streaming join from collectives it does not keep). Keeps per phase each
/// timed rank-event's completion time (8 bytes), and small records per
/// collective.
pub(crate) struct SummaryBuilder<'a> {
    run: &'a RunRecord,
    headers: Vec<&'a ShardHeader>,
    phases: BTreeMap<Phase, PhaseAcc>,
    collectives: u64,
    delay_recs: Option<Vec<DelayRec>>,
    tunes: Vec<TuneRec>,
    any_tuner: bool,
    iso: IsolatedAcc,
    iso_kind: &'static str,
    stalls: Vec<Stall>,
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
    pub fn add_stalls(&mut self, stalls: &[Stall]) {
        self.stalls.extend_from_slice(stalls);
    }

    /// A rank's token events.
    pub fn add_tokens(&mut self, tokens: &[TokenEvent]) {
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
                completion_median_us: stats::median_unsorted(&mut a.completion),
                completion_p99_us: stats::percentile_nearest_rank_unsorted(&mut a.completion, 99.0),
                token_median_us: stats::median_unsorted(&mut a.tokens),
                token_p99_us: stats::percentile_nearest_rank_unsorted(&mut a.tokens, 99.0),
                skew_median_us: stats::median_unsorted(&mut a.skews),
                skew_bound_median_us: stats::median_unsorted(&mut a.skew_bounds),
                arrivals_from_nccl_kernels: a.from_kernels,
                device_wait_median_us: stats::median_unsorted(&mut a.device_waits),
                tuner_choices: std::mem::take(&mut a.tuner_choices),
                source_timeline: self.headers[0]
                    .phases
                    .iter()
                    .find(|r| r.phase == phase)
                    .and_then(|r| r.trace_timeline),
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
            calibration_wall_ns: clocks
                .iter()
                .map(|c| c.calibration_wall_ns)
                .collect::<Option<Vec<u64>>>()
                .and_then(|v| v.into_iter().max()),
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
        b.add_stalls(&stalls::of_shard(s));
    }
    for c in &j.collectives {
        b.add(c);
    }
    b.finish()
}

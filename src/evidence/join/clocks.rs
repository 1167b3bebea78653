//! Clock alignment: arrivals on rank 0's calibrated timebase, and the clock
//! reports of a run. Consumes each rank's clock model, device and kernel
//! anchors and NCCL kernel starts; produces a collective's arrival offsets,
//! skew and bound ([`attach_arrival`]), a [`RankClockReport`] per rank and a
//! [`NodeClockReport`] per host. Refuses nothing: a member without a clock
//! model leaves the arrival unknown, never 0.
use super::{ArrivalSource, ArrivalStatus, JoinedCollective};
use crate::core::clock::{ClockInjection, ClockModel, ClockPath};
use crate::core::workload::Phase;
use crate::evidence::shard::{CollectiveEvent, KernelEvent, KernelKind, Shard, ShardHeader};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

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
    /// (on a shared kernel clock, the evidence kept beside it; absent where
    /// the rank took its leader's kernel clock without a ping-pong on any leg).
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
    pub path: Option<ClockPath>,
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

/// Per collective (group, seq) of a shard: its NCCL kernel's start, for the
/// phases whose kernel times are anchored through `%globaltimer` and whose
/// NCCL kernels (in CUPTI correlation order, i.e. launch order) are exactly
/// as many as their collectives (one kernel per collective, as NCCL launches
/// an ungrouped collective). Other phases pair nothing.
pub(super) fn nccl_kernel_starts(s: &Shard) -> BTreeMap<(u32, u64), u64> {
    let mut out = BTreeMap::new();
    for p in s.header.phases.iter().filter(|p| p.kernel_anchor.is_some()) {
        let mut kernels: Vec<&KernelEvent> =
            s.body.kernels.iter().filter(|k| k.phase == p.phase && k.kind == KernelKind::Nccl).collect();
        kernels.sort_by_key(|k| k.correlation);
        let collectives: Vec<&CollectiveEvent> = s.body.collectives.iter().filter(|c| c.phase == p.phase).collect();
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
pub(super) fn attach_arrival(
    jc: &mut JoinedCollective,
    models: &[Option<ClockModel>],
    anchors: &[BTreeMap<Phase, u64>],
    kernel_anchors: &[BTreeMap<Phase, u64>],
) {
    let by_kernel =
        jc.ranks.iter().all(|t| t.kernel_start_ns.is_some() && kernel_anchors[t.rank as usize].contains_key(&jc.phase));
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
    let (imin, min) =
        arrivals.iter().enumerate().min_by(|a, b| a.1 .0.total_cmp(&b.1 .0)).map(|(i, a)| (i, a.0)).expect("non-empty");
    let (imax, max) =
        arrivals.iter().enumerate().max_by(|a, b| a.1 .0.total_cmp(&b.1 .0)).map(|(i, a)| (i, a.0)).expect("non-empty");
    let skew_ns = max - min;
    let bound_ns = if imin == imax { 0.0 } else { arrivals[imin].1 + arrivals[imax].1 };
    jc.arrival_status = ArrivalStatus::Calibrated;
    jc.arrival_offsets_us = Some(arrivals.iter().map(|a| (a.0 - min) / 1e3).collect());
    jc.arrival_skew_us = Some(skew_ns / 1e3);
    jc.arrival_bound_us = Some(bound_ns / 1e3);
    jc.arrival_bounds_us = Some(arrivals.iter().map(|a| a.1 / 1e3).collect());
    jc.skew_resolved = Some(skew_ns > bound_ns);
}

pub(super) fn clock_reports(headers: &[&ShardHeader]) -> Vec<RankClockReport> {
    let rank0 = headers[0];
    let inj_of = |rank: u32| rank0.clock_injections.iter().find(|i| i.rank == rank).copied();
    headers
        .iter()
        .map(|h| {
            let model = h.clock.as_ref().map(|c| c.model);
            // the ping-pong estimate: the model itself unless that is the shared
            // kernel clock; none where that clock was taken without a ping-pong
            let pingpong =
                h.clock.as_ref().and_then(|c| c.pingpong_fit.or((!c.model.shared_kernel_clock).then_some(c.model)));
            // what is checked against the truth: the ping-pong estimate, else the model
            let estimate = pingpong.or(model);
            // truth relative to rank 0 at the start window (true time ~ reference time)
            let (inj_off, inj_drift) = match (model, inj_of(h.rank), inj_of(0)) {
                (Some(m), a, b) if a.is_some() || b.is_some() => {
                    let t_true = m.start.ref_ns;
                    let off =
                        |i: Option<ClockInjection>, anchor: u64| i.map(|i| i.offset_at(anchor, t_true)).unwrap_or(0.0);
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
                pingpong_offset_us: pingpong.filter(|_| h.rank != 0).map(|m| m.start.offset_ns / 1e3),
                pingpong_bound_us: pingpong.filter(|_| h.rank != 0).map(|m| m.start.bound_ns / 1e3),
                injected_offset_us: inj_off.map(|o| o / 1e3),
                injected_drift_ppm: inj_drift,
                // the estimator against the truth (on a shared kernel clock, its
                // ping-pong fit); small slack for the integer truncation of clock reads
                offset_within_bound: estimate.map(|m| (m.start.offset_ns - truth_off).abs() <= m.start.bound_ns + 2.0),
                drift_within_bound: estimate
                    .and_then(|m| Some((m.drift_ppm? - truth_drift).abs() <= m.drift_bound_ppm? + 1e-3)),
                path: h
                    .clock
                    .as_ref()
                    .map(|c| c.path.unwrap_or(if h.rank == 0 { ClockPath::Reference } else { ClockPath::Direct })),
                leader: h.clock.as_ref().and_then(|c| c.leader),
                leader_leg_bound_us: h.clock.as_ref().and_then(|c| c.leader_fit).map(|m| m.bound_ns / 1e3),
                leader_bound_us: h.clock.as_ref().and_then(|c| c.leader_model).map(|m| m.bound_ns / 1e3),
                calibration_wall_ns: h
                    .clock
                    .as_ref()
                    .and_then(|c| Some(c.start_window_wall_ns? + c.end_window_wall_ns?)),
            }
        })
        .collect()
}

pub(super) fn node_reports(headers: &[&ShardHeader], clocks: &[RankClockReport]) -> Vec<NodeClockReport> {
    let mut nodes: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for h in headers {
        nodes.entry(h.host.clone()).or_default().push(h.rank);
    }
    let injected: BTreeSet<u32> = headers[0].clock_injections.iter().map(|i| i.rank).collect();
    nodes
        .into_iter()
        .map(|(host, ranks)| {
            let cs: Vec<&RankClockReport> =
                ranks.iter().map(|&r| &clocks[r as usize]).filter(|c| !injected.contains(&c.rank)).collect();
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{collective, shard_with_kernels, times};
    use super::*;

    #[test]
    fn gpu_arrival_is_the_device_start_and_its_bound_includes_the_anchor() {
        // hosts enqueue 1 ms apart, devices reach the collective 3 us apart
        let mut jc = collective(vec![times(0, 1_000_000, Some(5_000_000)), times(1, 2_000_000, Some(5_003_000))]);
        let models = vec![Some(ClockModel::reference()), Some(ClockModel::reference())];
        let anchors: Vec<BTreeMap<Phase, u64>> =
            vec![[(Phase::Blocking, 1_000)].into(), [(Phase::Blocking, 2_000)].into()];
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
        let anchors: Vec<BTreeMap<Phase, u64>> =
            vec![[(Phase::Blocking, 2_000)].into(), [(Phase::Blocking, 2_000)].into()];
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

    #[test]
    fn nccl_kernels_pair_with_collectives_in_launch_order_only_one_to_one_and_anchored() {
        let got = nccl_kernel_starts(&shard_with_kernels(3, 3, true));
        // correlation order is launch order: the kernel with the highest id was launched last
        assert_eq!(got.into_iter().collect::<Vec<_>>(), vec![((0, 0), 207), ((0, 1), 107), ((0, 2), 7)]);
        assert!(nccl_kernel_starts(&shard_with_kernels(3, 2, true)).is_empty(), "a missing kernel pairs nothing");
        assert!(
            nccl_kernel_starts(&shard_with_kernels(3, 3, false)).is_empty(),
            "without a kernel anchor nothing pairs"
        );
    }

    #[test]
    fn cpu_arrival_is_the_host_issue_and_missing_clock_is_unknown() {
        let none = [BTreeMap::new(), BTreeMap::new()];
        let mut jc = collective(vec![times(0, 1_000_000, None), times(1, 1_004_000, None)]);
        let models = vec![Some(ClockModel::reference()), Some(ClockModel::reference())];
        attach_arrival(&mut jc, &models, &none, &none);
        assert_eq!(jc.arrival_skew_us, Some(4.0));
        let mut jc = collective(vec![times(0, 1_000_000, None), times(1, 1_004_000, None)]);
        attach_arrival(&mut jc, &[Some(ClockModel::reference()), None], &none, &none);
        assert_eq!(jc.arrival_status, ArrivalStatus::UnknownUncalibrated);
        assert_eq!(jc.arrival_skew_us, None, "unknown, never 0");
    }
}

//! The `workload` pace's plan: one rank's trace as a list of device
//! operations on streams, with the cross-stream waits that keep its order.
//!
//! Consumes one rank's collectives of a [`CommTrace`](super::CommTrace), each
//! with the compute launched before it (and the compute after the last).
//! Produces a [`WorkloadPlan`]: every kernel on its recorded stream, every
//! collective on its own, each operation with the operations of other streams
//! it waits for, consecutive kernels merged where nothing waits between them.
//! Pure: no I/O. Refuses a compute kernel with no recorded duration (an
//! execution trace: import the profiler trace), naming the collective it
//! precedes. Method: docs/METHODS.md, "Workload pace plan".
use super::{ComputeOp, RankTrace};
use crate::core::stats;
use anyhow::{bail, Result};

/// Stream key of operations the source recorded without a stream.
pub const NO_STREAM: u64 = u64::MAX;

/// What one planned operation does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlannedWork {
    /// Device work of this duration (consecutive compute kernels of the source).
    Compute {
        /// Recorded durations, summed.
        duration_ns: u64,
        /// Source kernels it stands for (1 where none were merged).
        kernels: u32,
    },
    /// Collective `index` of the rank's trace.
    Collective {
        /// Position in the rank's collectives.
        index: usize,
    },
}

/// One operation of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedOp {
    /// What it does.
    pub work: PlannedWork,
    /// Recorded stream ([`NO_STREAM`] where none was recorded).
    pub stream: u64,
    /// Operations (indices into [`WorkloadPlan::ops`], all earlier, each on
    /// another stream) that must end before this one starts.
    pub waits_for: Vec<usize>,
    /// Recorded device start, ns on the trace clock, where known.
    pub recorded_start_ns: Option<u64>,
    /// Recorded device end, where known.
    pub recorded_end_ns: Option<u64>,
}

/// One rank's trace as device operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadPlan {
    /// In launch order.
    pub ops: Vec<PlannedOp>,
    /// The distinct streams, in first-use order.
    pub streams: Vec<u64>,
    /// Whether every operation had recorded device times (dependencies from
    /// the timeline); otherwise some came from launch order.
    pub timeline_complete: bool,
}

impl WorkloadPlan {
    /// Operations some later operation waits for (those need a completion marker).
    pub fn waited_on(&self) -> Vec<bool> {
        let mut v = vec![false; self.ops.len()];
        for op in &self.ops {
            for &w in &op.waits_for {
                v[w] = true;
            }
        }
        v
    }

    /// Recorded start of the first operation to recorded end of the last, where every time is known.
    pub fn trace_span_ns(&self) -> Option<u64> {
        let starts: Option<Vec<u64>> = self.ops.iter().map(|o| o.recorded_start_ns).collect();
        let ends: Option<Vec<u64>> = self.ops.iter().map(|o| o.recorded_end_ns).collect();
        let (starts, ends) = (starts?, ends?);
        Some(ends.iter().max()?.saturating_sub(*starts.iter().min()?))
    }

    /// Cross-stream waits in the plan.
    pub fn cross_stream_waits(&self) -> u32 {
        self.ops.iter().map(|o| o.waits_for.len() as u32).sum()
    }

    /// Source compute kernels and their recorded durations, summed.
    pub fn compute_total(&self) -> (u32, u64) {
        self.ops.iter().fold((0, 0), |(n, t), o| match o.work {
            PlannedWork::Compute { duration_ns, kernels } => (n + kernels, t + duration_ns),
            PlannedWork::Collective { .. } => (n, t),
        })
    }

    /// Compute operations of the plan (launches on a device), after merging.
    pub fn compute_launches(&self) -> u32 {
        self.ops.iter().filter(|o| matches!(o.work, PlannedWork::Compute { .. })).count() as u32
    }

    /// The streams as the report names them.
    pub fn stream_names(&self) -> Vec<String> {
        self.streams.iter().map(|&s| if s == NO_STREAM { "unrecorded".to_string() } else { s.to_string() }).collect()
    }

    /// Source compute kernels planned before collective `index` (after the
    /// previous one), and their durations summed.
    pub fn compute_before_ns(&self, index: usize) -> (u32, u64) {
        let end = self.ops.iter().position(|o| o.work == PlannedWork::Collective { index }).unwrap_or(self.ops.len());
        let start =
            self.ops[..end].iter().rposition(|o| matches!(o.work, PlannedWork::Collective { .. })).map_or(0, |p| p + 1);
        self.ops[start..end].iter().fold((0, 0), |(n, t), o| match o.work {
            PlannedWork::Compute { duration_ns, kernels } => (n + kernels, t + duration_ns),
            PlannedWork::Collective { .. } => (n, t),
        })
    }

    /// The gaps a device pass can compare with the recording: each pair of
    /// consecutive collectives of this rank (by index) on one stream, with
    /// the compute operations planned between them on that stream.
    pub fn same_stream_gaps(&self) -> Vec<StreamGap> {
        let mut out: Vec<StreamGap> = Vec::new();
        // per stream: the open gap (index into `out`) since its last collective
        let mut open: Vec<(u64, usize)> = Vec::new();
        let mut last: Option<(usize, u64)> = None;
        for (x, o) in self.ops.iter().enumerate() {
            match o.work {
                PlannedWork::Collective { index } => {
                    if let Some(at) = open.iter().position(|(st, _)| *st == o.stream) {
                        let (_, g) = open.remove(at);
                        if last == Some((index.wrapping_sub(1), o.stream)) {
                            let g = &mut out[g];
                            g.after = index;
                            g.waits |= !o.waits_for.is_empty();
                        }
                    }
                    out.push(StreamGap {
                        before: index,
                        after: usize::MAX,
                        stream: o.stream,
                        recorded_ns: 0,
                        compute_ops: Vec::new(),
                        waits: false,
                    });
                    open.push((o.stream, out.len() - 1));
                    last = Some((index, o.stream));
                }
                PlannedWork::Compute { duration_ns, .. } => {
                    if let Some(&(_, g)) = open.iter().find(|(st, _)| *st == o.stream) {
                        let g = &mut out[g];
                        g.recorded_ns += duration_ns;
                        g.compute_ops.push(x);
                        g.waits |= !o.waits_for.is_empty();
                    }
                }
            }
        }
        // only those closed by the next collective (by index) on the same stream
        out.retain(|g| g.after != usize::MAX);
        out
    }

    /// Per operation, the nanoseconds its device work is shortened by so that
    /// each of `gaps` ends `trim_ns` sooner: the gap's compute operations
    /// give it up in launch order, each at most `room(duration)` (what its
    /// launch can lose). Operations in no gap are not trimmed. Used to take
    /// a measured collective-to-compute transition off each gap.
    pub fn gap_trims_ns(&self, gaps: &[StreamGap], trim_ns: u64, room: impl Fn(u64) -> u64) -> Vec<u64> {
        let mut trims = vec![0u64; self.ops.len()];
        for g in gaps {
            let mut left = trim_ns;
            for &x in &g.compute_ops {
                if let PlannedWork::Compute { duration_ns, .. } = self.ops[x].work {
                    let t = left.min(room(duration_ns));
                    trims[x] = t;
                    left -= t;
                }
            }
        }
        trims
    }
}

/// Two consecutive collectives of a rank on one stream and the compute
/// planned between them there (see [`WorkloadPlan::same_stream_gaps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamGap {
    /// Index of the earlier collective.
    pub before: usize,
    /// Index of the later one (`before + 1`).
    pub after: usize,
    /// Their stream.
    pub stream: u64,
    /// Recorded compute between them on that stream, summed.
    pub recorded_ns: u64,
    /// The compute operations (indices into [`WorkloadPlan::ops`]), in launch order.
    pub compute_ops: Vec<usize>,
    /// Whether one of them, or the later collective, waits for another stream.
    pub waits: bool,
}

/// The collective-to-compute transition of a device pass: the median, over
/// the gaps with compute and no cross-stream wait, of the device gap less
/// what its launches take back to back (`expected_ns` of the gap, e.g. the
/// spins' calibrated times, each at least the launch floor), with the number
/// of gaps; `None` where there is no such gap. `intervals[i]` is collective
/// `i`'s device (start, end), ns.
pub(crate) fn transition_ns(
    gaps: &[StreamGap],
    intervals: &[(u64, u64)],
    expected_ns: impl Fn(&StreamGap) -> f64,
) -> Option<(f64, u32)> {
    let mut excess: Vec<f64> = gaps
        .iter()
        .filter(|g| !g.compute_ops.is_empty() && !g.waits)
        .map(|g| intervals[g.after].0 as f64 - intervals[g.before].1 as f64 - expected_ns(g))
        .collect();
    let n = excess.len() as u32;
    Some((stats::median(&mut excess)?, n))
}

/// Plan one rank's collectives with the trace's gaps (`gaps_ns[i]` before
/// collective `i`, as [`super::exec::gaps_ns`] measures them) as the
/// device work between them, in place of the recorded compute: each gap is
/// one operation on its collective's stream, recorded as starting where the
/// previous collective ended, so cross-stream waits follow the recorded
/// timeline as for compute.
pub(crate) fn plan_gaps(rank: &RankTrace, gaps_ns: &[u64]) -> Result<WorkloadPlan> {
    if gaps_ns.len() != rank.collectives.len() {
        bail!("internal: {} gaps for {} collectives", gaps_ns.len(), rank.collectives.len());
    }
    let mut gapped = RankTrace { rank: rank.rank, collectives: rank.collectives.clone(), trailing_compute: Vec::new() };
    for (c, &gap) in gapped.collectives.iter_mut().zip(gaps_ns) {
        c.compute_before = match gap {
            0 => Vec::new(),
            _ => vec![ComputeOp {
                name: "recorded gap".into(),
                stream: c.stream,
                device_start_ns: c.device.as_ref().map(|d| d.start_ns.saturating_sub(gap)),
                duration_ns: Some(gap),
            }],
        };
    }
    plan(&gapped)
}

/// Plan one rank's trace.
pub fn plan(rank: &RankTrace) -> Result<WorkloadPlan> {
    let mut ops: Vec<PlannedOp> = Vec::new();
    let compute = |c: &ComputeOp, before: &str| -> Result<PlannedOp> {
        let Some(d) = c.duration_ns else {
            bail!(
                "rank {}: compute kernel {:?} before {before} has no recorded duration (an execution trace records \
                    none): import the profiler (Kineto) trace for the workload pace",
                rank.rank,
                c.name
            )
        };
        Ok(PlannedOp {
            work: PlannedWork::Compute { duration_ns: d, kernels: 1 },
            stream: c.stream.unwrap_or(NO_STREAM),
            waits_for: Vec::new(),
            recorded_start_ns: c.device_start_ns,
            recorded_end_ns: c.device_start_ns.map(|s| s.saturating_add(d)),
        })
    };
    for (i, c) in rank.collectives.iter().enumerate() {
        let name = format!("collective {i} ({} #{} on group {:?})", c.kind.name(), c.seq, c.group);
        for k in &c.compute_before {
            ops.push(compute(k, &name)?);
        }
        ops.push(PlannedOp {
            work: PlannedWork::Collective { index: i },
            stream: c.stream.unwrap_or(NO_STREAM),
            waits_for: Vec::new(),
            recorded_start_ns: c.device.as_ref().map(|d| d.start_ns),
            recorded_end_ns: c.device.as_ref().map(|d| d.end_ns),
        });
    }
    for k in &rank.trailing_compute {
        ops.push(compute(k, "the end of the trace")?);
    }
    let mut streams: Vec<u64> = Vec::new();
    let mut timeline_complete = true;
    for x in 0..ops.len() {
        let s = ops[x].stream;
        if !streams.contains(&s) {
            streams.push(s);
        }
        let mut waits = Vec::new();
        for &t in streams.iter().filter(|&&t| t != s) {
            let earlier = (0..x).rev().filter(|&y| ops[y].stream == t);
            let chosen = match ops[x].recorded_start_ns {
                Some(start) => {
                    let mut found = None;
                    for y in earlier {
                        match ops[y].recorded_end_ns {
                            Some(end) if end <= start => {
                                found = Some(y);
                                break;
                            }
                            Some(_) => continue,
                            // an earlier operation of unknown end: keep launch order
                            None => {
                                timeline_complete = false;
                                found = Some(y);
                                break;
                            }
                        }
                    }
                    found
                }
                None => {
                    timeline_complete = false;
                    (0..x).rev().find(|&y| ops[y].stream == t)
                }
            };
            if let Some(y) = chosen {
                waits.push(y);
            }
        }
        // a wait already implied by an earlier wait of this stream is kept: it is cheap and explicit
        ops[x].waits_for = waits;
    }
    Ok(WorkloadPlan { ops: merge_consecutive_compute(ops), streams, timeline_complete })
}

/// Consecutive compute kernels of one stream as one operation, where no
/// collective was launched between them, the later one waits for nothing and
/// the earlier ones are waited on by nothing (so no other stream's timing
/// changes); the waits of what follows are renumbered.
fn merge_consecutive_compute(ops: Vec<PlannedOp>) -> Vec<PlannedOp> {
    let mut waited = vec![false; ops.len()];
    for o in &ops {
        for &w in &o.waits_for {
            waited[w] = true;
        }
    }
    let mut out: Vec<PlannedOp> = Vec::with_capacity(ops.len());
    let mut out_waited: Vec<bool> = Vec::with_capacity(ops.len());
    let mut new_index = vec![0usize; ops.len()];
    // per stream, the output operation a compute kernel may extend
    let mut open: Vec<(u64, usize)> = Vec::new();
    for (x, mut o) in ops.into_iter().enumerate() {
        o.waits_for = o.waits_for.iter().map(|&w| new_index[w]).collect();
        match o.work {
            PlannedWork::Collective { .. } => open.clear(),
            PlannedWork::Compute { duration_ns, kernels } => {
                let target = open.iter().find(|(s, _)| *s == o.stream).map(|&(_, i)| i);
                if let Some(i) = target.filter(|&i| o.waits_for.is_empty() && !out_waited[i]) {
                    let m = &mut out[i];
                    if let PlannedWork::Compute { duration_ns: d, kernels: k } = &mut m.work {
                        *d += duration_ns;
                        *k += kernels;
                    }
                    m.recorded_end_ns = o.recorded_end_ns.filter(|_| m.recorded_end_ns.is_some());
                    out_waited[i] |= waited[x];
                    new_index[x] = i;
                    continue;
                }
            }
        }
        new_index[x] = out.len();
        if matches!(o.work, PlannedWork::Compute { .. }) {
            open.retain(|(s, _)| *s != o.stream);
            open.push((o.stream, out.len()));
        }
        out_waited.push(waited[x]);
        out.push(o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::commtrace::{CollectiveKind, DeviceSpan, TraceCollective, TraceDtype};

    fn k(stream: u64, start: u64, d: u64) -> ComputeOp {
        ComputeOp { name: "k".into(), stream: Some(stream), device_start_ns: Some(start), duration_ns: Some(d) }
    }

    fn rank(collectives: Vec<TraceCollective>, trailing_compute: Vec<ComputeOp>) -> RankTrace {
        RankTrace { rank: 0, collectives, trailing_compute }
    }

    fn coll(stream: u64, start: u64, end: u64, before: Vec<ComputeOp>) -> TraceCollective {
        let mut c = TraceCollective::plain(CollectiveKind::AllReduce, "allreduce", "0", TraceDtype::F32, 4);
        c.stream = Some(stream);
        c.device =
            Some(DeviceSpan { start_ns: start, end_ns: end, kernel: "ncclDevKernel_AllReduce_Sum_f32_RING_LL".into() });
        c.compute_before = before;
        c
    }

    #[test]
    fn one_stream_needs_no_waits_and_sums_compute_per_collective() {
        let r =
            rank(vec![coll(7, 30, 40, vec![k(7, 0, 10), k(7, 12, 15)]), coll(7, 60, 70, vec![k(7, 45, 5)])], vec![]);
        let p = plan(&r).unwrap();
        // the two kernels before the first collective are one launch of their sum
        assert_eq!(p.ops.len(), 4);
        assert_eq!(p.ops[0].work, PlannedWork::Compute { duration_ns: 25, kernels: 2 });
        assert_eq!((p.ops[0].recorded_start_ns, p.ops[0].recorded_end_ns), (Some(0), Some(27)));
        assert!(p.ops.iter().all(|o| o.waits_for.is_empty()));
        assert_eq!(p.streams, vec![7]);
        assert_eq!(p.compute_before_ns(0), (2, 25));
        assert_eq!(p.compute_before_ns(1), (1, 5));
        assert_eq!((p.compute_total(), p.compute_launches()), ((3, 30), 2));
        assert!(p.timeline_complete);
    }

    #[test]
    fn gaps_stand_in_for_compute_on_each_collectives_stream() {
        let r = rank(
            vec![coll(7, 30, 40, vec![k(7, 0, 10)]), coll(7, 60, 70, vec![k(7, 45, 5)]), coll(20, 75, 90, vec![])],
            vec![k(7, 95, 3)],
        );
        let p = plan_gaps(&r, &[0, 20, 5]).unwrap();
        // the recorded compute is gone; a gap before each later collective, on its stream
        assert_eq!(p.compute_total(), (2, 25));
        assert_eq!((p.compute_before_ns(0), p.compute_before_ns(1), p.compute_before_ns(2)), ((0, 0), (1, 20), (1, 5)));
        // the gap on stream 20 starts where the collective on 7 ended (70): it waits for it
        let gap20 = p.ops.iter().position(|o| o.stream == 20).unwrap();
        assert_eq!(p.ops[gap20].work, PlannedWork::Compute { duration_ns: 5, kernels: 1 });
        assert_eq!(p.ops[gap20].waits_for, vec![gap20 - 1]);
        assert!(plan_gaps(&r, &[0, 1]).is_err());
    }

    #[test]
    fn the_transition_comes_off_each_measured_gap_and_nowhere_else() {
        // stream 7: C0, gap (3 ns, a kernel of stream 20, 8 ns waiting for it), C1; then C2 on
        // stream 20 between compute of stream 7 (A, B, A: no measured gap); C3, 9 ns, C4 on 7
        let r = rank(
            vec![
                coll(7, 30, 40, vec![k(7, 0, 10)]),
                coll(7, 60, 70, vec![k(7, 41, 3), k(20, 41, 2), k(7, 45, 8)]),
                coll(20, 80, 90, vec![k(7, 71, 4)]),
                coll(7, 100, 110, vec![k(7, 91, 5)]),
                coll(7, 130, 140, vec![k(7, 111, 9)]),
            ],
            vec![k(7, 145, 6)],
        );
        let p = plan(&r).unwrap();
        let gaps = p.same_stream_gaps();
        let summary: Vec<(usize, usize, u64, u64, usize)> =
            gaps.iter().map(|g| (g.before, g.after, g.stream, g.recorded_ns, g.compute_ops.len())).collect();
        assert_eq!(summary, vec![(0, 1, 7, 11, 2), (3, 4, 7, 9, 1)]);
        // the 8 ns kernel waits for stream 20; every operation of 7 after C2 waits for C2
        assert!(gaps[0].waits && gaps[1].waits);
        let d = |x: usize| match p.ops[x].work {
            PlannedWork::Compute { duration_ns, .. } => duration_ns,
            PlannedWork::Collective { .. } => 0,
        };
        let by_duration = |trims: &[u64]| -> Vec<(u64, u64)> {
            (0..p.ops.len()).filter(|&x| d(x) > 0).map(|x| (d(x), trims[x])).collect()
        };
        // each gap loses 5 in launch order (3 then 2 of the 8; 5 of the 9): nothing before the
        // first collective, after the last, on another stream or between C1 and C3
        let trims = p.gap_trims_ns(&gaps, 5, |d| d);
        assert_eq!(by_duration(&trims), vec![(10, 0), (3, 3), (2, 0), (8, 2), (4, 0), (5, 0), (9, 5), (6, 0)]);
        // a launch's room limits what it gives up; the rest passes to the next launch of the gap
        let trims = p.gap_trims_ns(&gaps, 5, |d| d.saturating_sub(2));
        assert_eq!(by_duration(&trims), vec![(10, 0), (3, 1), (2, 0), (8, 4), (4, 0), (5, 0), (9, 5), (6, 0)]);
        assert!(p.gap_trims_ns(&gaps, 0, |d| d).iter().all(|&t| t == 0));
    }

    #[test]
    fn the_transition_is_the_median_excess_over_gaps_with_compute_and_no_wait() {
        // one stream: C0, 20 ns, C1, nothing, C2, 30 ns, C3, 40 ns, C4
        let r = rank(
            vec![
                coll(7, 0, 10, vec![]),
                coll(7, 30, 40, vec![k(7, 10, 20)]),
                coll(7, 40, 50, vec![]),
                coll(7, 80, 90, vec![k(7, 50, 30)]),
                coll(7, 130, 140, vec![k(7, 90, 40)]),
            ],
            vec![],
        );
        let p = plan(&r).unwrap();
        let gaps = p.same_stream_gaps();
        assert_eq!(gaps.len(), 4);
        assert!(gaps.iter().all(|g| !g.waits));
        // device gaps 25, 2 (no compute: left out), 33, 47 against 20, 30, 40 expected
        let intervals = [(0, 10), (35, 45), (47, 57), (90, 100), (147, 157)];
        let (median, n) = transition_ns(&gaps, &intervals, |g| g.recorded_ns as f64).unwrap();
        assert_eq!((median, n), (5.0, 3));
        // what the launches take is the baseline, not the recording (a floor of 32 ns here)
        let (median, _) = transition_ns(&gaps, &intervals, |g| (g.recorded_ns as f64).max(32.0)).unwrap();
        assert_eq!(median, 1.0);
        assert_eq!(transition_ns(&gaps[1..2], &intervals, |_| 0.0), None);
    }

    #[test]
    fn kernels_merge_only_where_nothing_waits_between_them() {
        // merged, and what waited for the second kernel now waits for the merged operation
        let p = plan(&rank(vec![coll(7, 20, 30, vec![k(7, 0, 2), k(7, 2, 2), k(20, 10, 1)])], vec![])).unwrap();
        assert_eq!(p.ops.len(), 3);
        assert_eq!(p.ops[0].work, PlannedWork::Compute { duration_ns: 4, kernels: 2 });
        assert_eq!((p.ops[1].waits_for.clone(), p.ops[2].waits_for.clone()), (vec![0], vec![1]));
        assert_eq!(p.compute_before_ns(0), (3, 5));
        // the later kernel waits for another stream: kept apart
        let p = plan(&rank(vec![coll(7, 40, 50, vec![k(7, 0, 5), k(20, 0, 10), k(7, 20, 5)])], vec![])).unwrap();
        assert_eq!(p.compute_launches(), 3);
        assert_eq!(p.ops[2].waits_for, vec![1]);
        // the earlier kernel is waited on by another stream: kept apart
        let p = plan(&rank(vec![coll(9, 40, 50, vec![k(20, 0, 10), k(7, 15, 5), k(20, 10, 10)])], vec![])).unwrap();
        assert_eq!(p.ops[1].waits_for, vec![0]);
        assert_eq!(p.compute_launches(), 3);
        // a collective launched between them (on another stream, concurrent): kept apart, so
        // that the compute before each collective stays what the source launched before it
        let p = plan(&rank(vec![coll(20, 1, 100, vec![k(7, 0, 5)])], vec![k(7, 10, 5)])).unwrap();
        assert!(p.ops.iter().all(|o| o.waits_for.is_empty()));
        assert_eq!(p.compute_launches(), 2);
        assert_eq!(p.compute_before_ns(0), (1, 5));
    }

    #[test]
    fn concurrent_work_stays_concurrent_and_sequenced_work_waits() {
        // compute on 7 [0,100); collective on 20 starts at 10 (overlaps the compute: no wait),
        // ends at 50; the next compute on 7 starts at 120, after the collective ended: it waits for it
        let p = plan(&rank(vec![coll(20, 10, 50, vec![k(7, 0, 100)])], vec![k(7, 120, 10)])).unwrap();
        assert_eq!(p.ops[1].work, PlannedWork::Collective { index: 0 });
        assert!(p.ops[1].waits_for.is_empty(), "the collective overlapped the compute in the source");
        assert_eq!(p.ops[2].waits_for, vec![1]);
        assert_eq!(p.waited_on(), vec![false, true, false]);
        // the same collective starting after the compute ended waits for it
        let r = rank(vec![coll(20, 100, 150, vec![k(7, 0, 100)])], vec![]);
        assert_eq!(plan(&r).unwrap().ops[1].waits_for, vec![0]);
        // per stream: each kernel stays on its own stream
        let p = plan(&rank(vec![coll(20, 100, 150, vec![k(7, 0, 100), k(20, 10, 30)])], vec![])).unwrap();
        let on = |s: u64| {
            p.ops
                .iter()
                .filter(|o| o.stream == s && matches!(o.work, PlannedWork::Compute { .. }))
                .map(|o| o.work.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(p.compute_before_ns(0), (2, 130));
        assert_eq!(
            (on(20), on(7)),
            (
                vec![PlannedWork::Compute { duration_ns: 30, kernels: 1 }],
                vec![PlannedWork::Compute { duration_ns: 100, kernels: 1 }]
            )
        );
    }

    #[test]
    fn missing_times_fall_back_to_launch_order_and_missing_durations_are_refused() {
        let mut c = coll(20, 10, 50, vec![k(7, 0, 100)]);
        c.device = None;
        let p = plan(&rank(vec![c.clone()], vec![])).unwrap();
        assert_eq!(p.ops[1].waits_for, vec![0]);
        assert!(!p.timeline_complete);
        c.compute_before[0].duration_ns = None;
        let e = plan(&RankTrace { rank: 3, collectives: vec![c], trailing_compute: vec![] }).unwrap_err().to_string();
        assert!(e.contains("rank 3") && e.contains("collective 0") && e.contains("no recorded duration"), "{e}");
    }
}

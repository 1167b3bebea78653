//! Overlap of compute and communication from intervals (docs/ARCHITECTURE.md §9), free of I/O.
//!
//! Consumes two interval sets (compute, communication) on one time axis.
//! Produces the union of each, their intersection, the wall span, and the
//! three ratios, each labelled by what it divides by. Pairwise overlaps are
//! never summed: with intervals that overlap among themselves, that counts
//! the same instant several times; unions first, then one intersection.
//! Refuses intervals whose end precedes their start, and non-finite values.
use crate::core::workload::Phase;
use crate::evidence::shard::{KernelEvent, Shard};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Overlap figures, in µs and as fractions.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OverlapReport {
    /// Length of the union of compute intervals.
    pub compute_active_us: f64,
    /// Length of the union of communication intervals.
    pub comm_active_us: f64,
    /// Length of the intersection of the two unions.
    pub overlap_us: f64,
    /// From the earliest start to the latest end over both sets.
    pub wall_us: f64,
    /// overlap / comm_active (share of communication hidden under compute); absent when comm_active is 0.
    pub overlap_of_comm: Option<f64>,
    /// overlap / compute_active; absent when compute_active is 0.
    pub overlap_of_compute: Option<f64>,
    /// overlap / wall; absent when wall is 0.
    pub overlap_of_wall: Option<f64>,
}

/// Sorted, disjoint union of intervals.
pub(crate) fn union(intervals: &[(f64, f64)]) -> Result<Vec<(f64, f64)>> {
    let mut v: Vec<(f64, f64)> = Vec::with_capacity(intervals.len());
    for &(s, e) in intervals {
        if !s.is_finite() || !e.is_finite() {
            bail!("interval [{s}, {e}] is not finite");
        }
        if e < s {
            bail!("interval [{s}, {e}] ends before it starts");
        }
        v.push((s, e));
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    Ok(out)
}

fn length(u: &[(f64, f64)]) -> f64 {
    u.iter().fold(0.0, |acc, (s, e)| acc + (e - s))
}

/// Length of the intersection of two disjoint, sorted unions.
pub(crate) fn intersection_length(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut t) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        t += (e - s).max(0.0);
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    t
}

/// Overlap report of compute and communication intervals given in µs.
pub fn overlap(compute_us: &[(f64, f64)], comm_us: &[(f64, f64)]) -> Result<OverlapReport> {
    let (cu, mu) = (union(compute_us)?, union(comm_us)?);
    let (ca, ma, ov) = (length(&cu), length(&mu), intersection_length(&cu, &mu));
    let lo = cu.iter().chain(&mu).map(|x| x.0).fold(f64::INFINITY, f64::min);
    let hi = cu.iter().chain(&mu).map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    let wall = if lo.is_finite() && hi.is_finite() { hi - lo } else { 0.0 };
    let frac = |den: f64| (den > 0.0).then(|| ov / den);
    Ok(OverlapReport {
        compute_active_us: ca,
        comm_active_us: ma,
        overlap_us: ov,
        wall_us: wall,
        overlap_of_comm: frac(ma),
        overlap_of_compute: frac(ca),
        overlap_of_wall: frac(wall),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hand_example() {
        // compute [0,10] and [20,30]; comm [5,25] and [8,12] (comm overlaps itself)
        let r = overlap(&[(0.0, 10.0), (20.0, 30.0)], &[(5.0, 25.0), (8.0, 12.0)]).unwrap();
        assert_eq!(r.compute_active_us, 20.0);
        assert_eq!(r.comm_active_us, 20.0);
        assert_eq!(r.overlap_us, 10.0); // [5,10] and [20,25]; summing pairs would say 12
        assert_eq!(r.wall_us, 30.0);
        assert_eq!(r.overlap_of_comm, Some(0.5));
        assert_eq!(r.overlap_of_wall, Some(10.0 / 30.0));
    }

    #[test]
    fn empty_and_bad_input() {
        let r = overlap(&[], &[]).unwrap();
        assert_eq!((r.overlap_us, r.wall_us, r.overlap_of_comm), (0.0, 0.0, None));
        assert!(overlap(&[(3.0, 1.0)], &[]).is_err());
        assert!(overlap(&[(f64::NAN, 1.0)], &[]).is_err());
    }

    fn ivs() -> impl Strategy<Value = Vec<(f64, f64)>> {
        proptest::collection::vec((0u32..1000, 0u32..100), 0..30)
            .prop_map(|v| v.into_iter().map(|(s, l)| (s as f64, (s + l) as f64)).collect())
    }

    proptest! {
        #[test]
        fn bounds_and_symmetry(a in ivs(), b in ivs()) {
            let r = overlap(&a, &b).unwrap();
            let s = overlap(&b, &a).unwrap();
            prop_assert_eq!(r.overlap_us, s.overlap_us);
            prop_assert!(r.overlap_us <= r.compute_active_us.min(r.comm_active_us) + 1e-9);
            prop_assert!(r.compute_active_us + r.comm_active_us - r.overlap_us <= r.wall_us + 1e-9);
            // brute force on the integer grid
            let covered = |v: &Vec<(f64, f64)>, x: f64| v.iter().any(|&(s, e)| s <= x && x + 1.0 <= e);
            let brute = (0..1100).filter(|&x| covered(&a, x as f64) && covered(&b, x as f64)).count() as f64;
            prop_assert_eq!(r.overlap_us, brute);
        }
    }
}

/// Where the intervals of an overlap computation come from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IntervalSource {
    /// CUPTI kernel records: compute = non-NCCL kernels, comm = NCCL kernels.
    CuptiKernels,
    /// CUDA events bracketing each operation on its stream.
    DeviceEvents,
    /// Host clock: compute intervals as timed, comm from issue to wait return
    /// (an upper bound on when the library could have been working).
    Host,
}

/// Overlap of one phase on one rank of a run.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PhaseOverlap {
    /// Phase.
    pub phase: Phase,
    /// World rank.
    pub rank: u32,
    /// What the intervals are.
    pub source: IntervalSource,
    /// The figures.
    pub report: OverlapReport,
}

/// One rank's compute and communication intervals in `phase`, in ns: from
/// CUPTI kernels where the phase has NCCL kernels (compute = the other
/// kernels); else compute intervals (GEMM and memory-bound; host-only work is
/// not on the compute engine) against each collective's device interval, or
/// issue to wait return on the host when any collective lacks one.
pub fn phase_intervals_ns(s: &Shard, phase: Phase) -> (IntervalSource, IntervalsNs, IntervalsNs) {
    use crate::evidence::shard::{ComputeKind, KernelKind};
    let kernels: Vec<&KernelEvent> = s.body.kernels.iter().filter(|k| k.phase == phase).collect();
    if kernels.iter().any(|k| k.kind == KernelKind::Nccl) {
        let of = |kind| kernels.iter().filter(|k| k.kind == kind).map(|k| (k.start_ns, k.end_ns)).collect();
        return (IntervalSource::CuptiKernels, of(KernelKind::Compute), of(KernelKind::Nccl));
    }
    let compute = s
        .body
        .compute
        .iter()
        .filter(|c| c.phase == phase && c.kind != ComputeKind::HostDelay)
        .map(|c| (c.start_ns, c.end_ns))
        .collect();
    let mut device = true;
    let comm = s
        .body
        .collectives
        .iter()
        .filter(|c| c.phase == phase)
        .map(|c| {
            let (a, b, on_device) = c.execution_interval_ns();
            device &= on_device;
            (a, b)
        })
        .collect();
    (if device { IntervalSource::DeviceEvents } else { IntervalSource::Host }, compute, comm)
}

/// Half-open `[start, end)` intervals in ns.
pub(crate) type IntervalsNs = Vec<(u64, u64)>;

/// Overlap per phase and rank from verified shards ([`phase_intervals_ns`]).
pub fn per_phase(shards: &[Shard]) -> Result<Vec<PhaseOverlap>> {
    let us = |v: Vec<(u64, u64)>| v.into_iter().map(|(a, b)| (a as f64 / 1e3, b as f64 / 1e3)).collect::<Vec<_>>();
    let mut out = Vec::new();
    for s in shards {
        for p in &s.header.workload.phases {
            let (source, compute, comm) = phase_intervals_ns(s, *p);
            out.push(PhaseOverlap {
                phase: *p,
                rank: s.header.rank,
                source,
                report: overlap(&us(compute), &us(comm))
                    .map_err(|e| anyhow::anyhow!("rank {} phase {p}: {e}", s.header.rank))?,
            });
        }
    }
    Ok(out)
}

/// The `--intervals` file: `{"compute": [[start_us, end_us], ...], "comm": [[start_us, end_us], ...]}`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct IntervalFile {
    /// Compute intervals, µs.
    pub compute: Vec<(f64, f64)>,
    /// Communication intervals, µs.
    pub comm: Vec<(f64, f64)>,
}

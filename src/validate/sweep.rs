//! The collective sweep of `validate`: all-reduce and all-gather over
//! sizes, timed as nccl-tests times them, with busbw per size.
//!
//! Consumes a backend, the world communicator and the sizes. Produces, per
//! collective and size, the mean time per iteration of the slowest rank,
//! algbw and busbw, and the elements a result check found wrong. Refuses
//! nothing itself (a backend without all-gather fails the job).
//!
//! Timing, bandwidths and sizes: docs/METHODS.md, "Validate sweep timing".
use crate::backend::{Backend, Call, Checked, Timing};
use crate::core::clock::RankClock;
use crate::core::collective::CollectiveKind;
use crate::core::workload::SweepKind;
use crate::evidence::shard::Dtype;
use anyhow::Result;
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::{Deserialize, Serialize};

// validate's own names (kebab case, in its checks, tables and reports);
// what it runs, its size rule and bus-bandwidth factor come from the kind
// table through `Collective::kind`.
/// A swept collective.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Sum all-reduce.
    AllReduce,
    /// All-gather.
    AllGather,
}

impl Collective {
    /// The kind it sweeps.
    pub fn kind(self) -> SweepKind {
        match self {
            Collective::AllReduce => SweepKind::default(),
            Collective::AllGather => SweepKind::of(CollectiveKind::AllGather).expect("all-gather has a bus-bandwidth factor"),
        }
    }

    /// Name used in check names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks (the table's, also at one rank).
    pub fn busbw_factor(self, n: u32) -> f64 {
        self.kind().kind().row().bus_bw.map_or(1.0, |b| b.factor(n))
    }

    /// The size actually run for a requested `bytes`: the sweep's element
    /// count ([`SweepKind::count`]), at least one element per rank.
    pub fn bytes_for(self, bytes: u64, dtype: Dtype, n: u32) -> u64 {
        let k = self.kind();
        let least = if k.splits() { u64::from(n.max(1)) } else { 1 };
        k.count(bytes, dtype.size_bytes(), n.max(1)).unwrap_or(least) * dtype.size_bytes()
    }
}

/// One size of one collective in one round.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SizeResult {
    /// Size run, bytes (an all-gather's gathered total).
    pub bytes: u64,
    /// Mean time per iteration of the slowest rank, µs.
    pub time_us: f64,
    /// bytes / time, GB/s (10^9 bytes per second).
    pub algbw_gbps: f64,
    /// algbw × nccl-tests' bus factor, GB/s.
    pub busbw_gbps: f64,
    /// Wrong elements in the result of the last iteration, summed over ranks;
    /// absent in rounds that did not check (the first round checks every size).
    pub wrong_elements: Option<u64>,
}

/// What one sweep runs: the sizes, their element type and iteration counts
/// (a reference's settings), and whether the last iteration of every size
/// is checked.
pub struct SweepLoop<'a> {
    /// Requested sizes, bytes.
    pub sizes_bytes: &'a [u64],
    /// Element type.
    pub dtype: Dtype,
    /// Timed iterations per size.
    pub iters: u32,
    /// Warm-up iterations per size.
    pub warmup_iters: u32,
    /// Check the last iteration of every size.
    pub check: bool,
}

/// Sweep the sizes of `l` of `kind` once; every rank calls this in step.
/// Returns the rows on every rank (the maxima and sums are all-reduced).
pub fn sweep<B: Backend>(backend: &mut B, world: &SimpleCommunicator, clock: &RankClock, kind: Collective, l: &SweepLoop) -> Result<Vec<SizeResult>> {
    let (sizes, dtype, iters, warmup_iters, check) = (l.sizes_bytes, l.dtype, l.iters, l.warmup_iters, l.check);
    let n = world.size() as u32;
    let mut rows = Vec::with_capacity(sizes.len());
    for &requested in sizes {
        let bytes = kind.bytes_for(requested, dtype, n);
        for _ in 0..warmup_iters {
            backend.enqueue(Call::World { kind: kind.kind().kind(), bytes, dtype }, Timing::Async)?;
            backend.wait()?;
        }
        backend.synchronize()?;
        world.barrier();
        let t0 = clock.now_ns();
        for _ in 0..iters {
            backend.enqueue(Call::World { kind: kind.kind().kind(), bytes, dtype }, Timing::Async)?;
            backend.wait()?;
        }
        backend.synchronize()?;
        let elapsed_ns = clock.now_ns().saturating_sub(t0);
        backend.finish_pass()?;
        let mut slowest_ns = 0u64;
        world.all_reduce_into(&elapsed_ns, &mut slowest_ns, SystemOperation::max());
        let wrong = if check {
            let outcome = backend.check(Checked::Last { kind: kind.kind().kind(), bytes, dtype }, false)?;
            let mut wrong = 0u64;
            world.all_reduce_into(&outcome.wrong_elements, &mut wrong, SystemOperation::sum());
            Some(wrong)
        } else {
            None
        };
        let time_us = slowest_ns as f64 / 1e3 / f64::from(iters.max(1));
        let algbw = if time_us > 0.0 { bytes as f64 / (time_us * 1e3) } else { f64::NAN };
        rows.push(SizeResult { bytes, time_us, algbw_gbps: algbw, busbw_gbps: algbw * kind.busbw_factor(n), wrong_elements: wrong });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_are_nccl_tests() {
        assert_eq!(Collective::AllReduce.busbw_factor(8), 1.75);
        assert_eq!(Collective::AllGather.busbw_factor(8), 0.875);
        assert_eq!(Collective::AllReduce.busbw_factor(2), 1.0);
    }

    #[test]
    fn gather_sizes_split_into_whole_elements() {
        assert_eq!(Collective::AllGather.bytes_for(8, Dtype::Bf16, 4), 8);
        assert_eq!(Collective::AllGather.bytes_for(8, Dtype::Bf16, 8), 16);
        assert_eq!(Collective::AllGather.bytes_for(100, Dtype::F32, 3), 96);
        assert_eq!(Collective::AllReduce.bytes_for(8, Dtype::Bf16, 8), 8);
        // the sweep's count rule: whole elements, split kinds a multiple of n, never empty
        for n in 1..=9u32 {
            for bytes in 0..300u64 {
                for dtype in [Dtype::Bf16, Dtype::F32] {
                    let e = dtype.size_bytes();
                    assert_eq!(Collective::AllReduce.bytes_for(bytes, dtype, n), (bytes / e).max(1) * e);
                    let unit = e * u64::from(n);
                    assert_eq!(Collective::AllGather.bytes_for(bytes, dtype, n), (bytes / unit).max(1) * unit, "{bytes} B over {n}");
                }
            }
        }
    }
}

//! The isolated phase's sweep, as nccl-tests runs it: which collective
//! ([`SweepKind`]: its root, bus-bandwidth factor, size and count conventions)
//! and which sizes ([`size_sweep`], nccl-tests' `-b/-e/-f`). Refuses a step
//! factor below 2, a smallest size that is not a whole number of float32
//! elements, and a range whose largest size is below its smallest.
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The collective the isolated phase sweeps (`rank --collective`), as
/// nccl-tests' `*_perf` programs do, one kind per run.
///
/// Size convention, as nccl-tests prints its `size` column (its
/// `doc/PERFORMANCE.md`, "Bus bandwidth"): all-reduce, broadcast and reduce:
/// the buffer (send = receive); all-gather: the gathered receive buffer,
/// every rank's part (`sendcount x n`); reduce-scatter: the whole send buffer
/// (`recvcount x n`); all-to-all: one rank's send buffer (= its receive
/// buffer). The shard's events keep their own convention
/// ([`crate::evidence::shard::CollectiveKind`]: an all-gather's `bytes` is one
/// member's input), and [`SweepKind::size_bytes`] converts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum SweepKind {
    /// All-reduce (`all_reduce_perf`).
    #[default]
    AllReduce,
    /// All-gather (`all_gather_perf`).
    AllGather,
    /// Reduce-scatter (`reduce_scatter_perf`).
    ReduceScatter,
    /// Broadcast from rank 0 (`broadcast_perf -r 0`).
    Broadcast,
    /// Reduce to rank 0 (`reduce_perf -r 0`).
    Reduce,
    /// All-to-all, an even split (`alltoall_perf`).
    AllToAll,
}

impl SweepKind {
    /// The collective kind it sweeps.
    pub fn kind(self) -> crate::core::collective::CollectiveKind {
        use crate::core::collective::CollectiveKind as T;
        match self {
            SweepKind::AllReduce => T::AllReduce,
            SweepKind::AllGather => T::AllGather,
            SweepKind::ReduceScatter => T::ReduceScatter,
            SweepKind::Broadcast => T::Broadcast,
            SweepKind::Reduce => T::Reduce,
            SweepKind::AllToAll => T::AllToAll,
        }
    }

    /// Snake-case name, as on the command line and in the shard's events.
    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    /// Whether it reduces (and so has a `redop`).
    pub fn reduces(self) -> bool {
        self.kind().row().reduces
    }

    /// The root, for the rooted kinds (nccl-tests' default `-r 0`).
    pub fn root(self) -> Option<u32> {
        self.kind().is_rooted().then_some(0)
    }

    /// Whether a size is split evenly over the ranks (nccl-tests rounds its
    /// element count down to a multiple of the rank count).
    pub fn splits(self) -> bool {
        matches!(self, SweepKind::AllGather | SweepKind::ReduceScatter | SweepKind::AllToAll)
    }

    /// Bus-bandwidth factor over `n` ranks: busbw = algbw x factor
    /// (nccl-tests' `doc/PERFORMANCE.md`, "Summary": all-reduce 2(n-1)/n;
    /// reduce-scatter, all-gather and all-to-all (n-1)/n; broadcast and
    /// reduce 1). One rank: 1 for every kind, as nccl-tests' own `*_perf`
    /// programs then report busbw = algbw.
    pub fn busbw_factor(self, n: u32) -> f64 {
        if n <= 1 {
            return 1.0;
        }
        self.kind().row().bus_bw.map_or(1.0, |b| b.factor(n))
    }

    /// nccl-tests' size (bytes) of an event of this kind whose shard `bytes`
    /// (one member's input) is `event_bytes`, over `n` ranks.
    pub fn size_bytes(self, event_bytes: u64, n: u32) -> u64 {
        match self {
            SweepKind::AllGather => event_bytes * n as u64,
            _ => event_bytes,
        }
    }

    /// The size a sweep step of `size_bytes` runs as over `n` ranks, in
    /// elements of `elem_bytes`: nccl-tests' count (split kinds rounded down
    /// to a multiple of `n`). `None` when no whole element is left per rank.
    pub fn count(self, size_bytes: u64, elem_bytes: u64, n: u32) -> Option<u64> {
        let count = size_bytes / elem_bytes;
        let count = if self.splits() { count / n as u64 * n as u64 } else { count };
        (count > 0).then_some(count)
    }
}

impl fmt::Display for SweepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The sizes nccl-tests sweeps for `-b MIN -e MAX -f FACTOR`: MIN, then
/// multiplied by FACTOR while it stays at most MAX.
pub fn size_sweep(min_bytes: u64, max_bytes: u64, factor: u64) -> Result<Vec<u64>> {
    if factor < 2 {
        bail!("--step-factor {factor}: must be at least 2");
    }
    if min_bytes == 0 || min_bytes % 4 != 0 {
        bail!("--min-bytes {min_bytes}: must be a positive multiple of 4 (float32 elements)");
    }
    if max_bytes < min_bytes {
        bail!("--max-bytes {max_bytes} is smaller than --min-bytes {min_bytes}");
    }
    let mut v = vec![min_bytes];
    while let Some(next) = v.last().and_then(|b| b.checked_mul(factor)).filter(|&n| n <= max_bytes) {
        v.push(next);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep runs exactly the kinds whose bus-bandwidth factor the kind table defines.
    #[test]
    fn the_sweep_runs_every_kind_with_a_bus_bandwidth_factor() {
        use clap::ValueEnum;
        let swept: std::collections::BTreeSet<_> = SweepKind::value_variants().iter().map(|k| k.kind()).collect();
        let defined: std::collections::BTreeSet<_> = crate::core::collective::KINDS.iter().filter(|r| r.bus_bw.is_some()).map(|r| r.kind).collect();
        assert_eq!(swept, defined);
        for k in SweepKind::value_variants() {
            assert_eq!(k.to_possible_value().unwrap().get_name(), k.name(), "the command line spells the kind as the table does");
        }
    }
    /// nccl-tests' `doc/PERFORMANCE.md` "Summary" factors, and its size and
    /// count conventions (split kinds rounded down to a multiple of n).
    #[test]
    fn bus_bandwidth_factors_and_sizes_follow_nccl_tests() {
        use SweepKind::*;
        for (kind, n, want) in [
            (AllReduce, 2, 1.0),
            (AllReduce, 8, 1.75),
            (AllGather, 2, 0.5),
            (AllGather, 8, 0.875),
            (ReduceScatter, 4, 0.75),
            (AllToAll, 8, 0.875),
            (Broadcast, 8, 1.0),
            (Reduce, 8, 1.0),
            (AllReduce, 1, 1.0),
            (AllGather, 1, 1.0),
        ] {
            assert_eq!(kind.busbw_factor(n), want, "{kind} over {n}");
        }
        assert_eq!(AllGather.size_bytes(16, 4), 64);
        assert_eq!(ReduceScatter.size_bytes(64, 4), 64);
        assert_eq!(AllGather.count(8, 4, 2), Some(2));
        assert_eq!(AllGather.count(8, 4, 3), None);
        assert_eq!(AllToAll.count(40, 4, 3), Some(9));
        assert_eq!(Broadcast.count(8, 4, 3), Some(2));
        assert_eq!(Reduce.root(), Some(0));
        assert_eq!(AllGather.root(), None);
        assert!(ReduceScatter.reduces() && !AllToAll.reduces());
    }

    #[test]
    fn sweep_follows_nccl_tests() {
        assert_eq!(size_sweep(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(size_sweep(8, 100, 4).unwrap(), vec![8, 32]);
        assert!(size_sweep(8, 4, 2).unwrap_err().to_string().contains("--max-bytes"));
        assert!(size_sweep(8, 64, 1).unwrap_err().to_string().contains("--step-factor"));
        assert!(size_sweep(6, 64, 2).unwrap_err().to_string().contains("multiple of 4"));
    }
}

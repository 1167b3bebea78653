//! The isolated phase's sweep, as nccl-tests runs it: which collective
//! ([`SweepKind`]: its root, bus-bandwidth factor, size and count conventions)
//! and which sizes ([`size_sweep`], nccl-tests' `-b/-e/-f`). Refuses a step
//! factor below 2, a smallest size that is not a whole number of float32
//! elements, and a range whose largest size is below its smallest.
use crate::core::collective::{Buffers, CollectiveKind, KINDS};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

// The type's documentation, shared with its JSON Schema's description.
macro_rules! sweep_kind_doc {
    () => {
        "The collective the isolated phase sweeps (`rank --collective`), as
nccl-tests' `*_perf` programs do, one kind per run.

Size convention, as nccl-tests prints its `size` column (its
`doc/PERFORMANCE.md`, \"Bus bandwidth\"): all-reduce, broadcast and reduce:
the buffer (send = receive); all-gather: the gathered receive buffer,
every rank's part (`sendcount x n`); reduce-scatter: the whole send buffer
(`recvcount x n`); all-to-all: one rank's send buffer (= its receive
buffer). The shard's events keep their own convention
([`crate::core::collective::CollectiveKind`]: an all-gather's `bytes` is one
member's input), and [`SweepKind::size_bytes`] converts."
    };
}

#[doc = sweep_kind_doc!()]
///
/// A kind of the collective table ([`crate::core::collective::KINDS`]) whose
/// row has a bus-bandwidth factor: those rows, in table order, are the
/// command line's values ([`clap::ValueEnum`]), the serialized names (the
/// kind's own) and the JSON Schema's constants, so that a kind added to the
/// table with a factor sweeps with nothing added here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SweepKind(CollectiveKind);

/// How many rows of the kind table have a bus-bandwidth factor.
const SWEPT_COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < KINDS.len() {
        if KINDS[i].bus_bw.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
};

/// The kinds with a bus-bandwidth factor, in table order.
const SWEPT: [SweepKind; SWEPT_COUNT] = {
    let mut out = [SweepKind(CollectiveKind::AllReduce); SWEPT_COUNT];
    let (mut i, mut j) = (0, 0);
    while i < KINDS.len() {
        if KINDS[i].bus_bw.is_some() {
            out[j] = SweepKind(KINDS[i].kind);
            j += 1;
        }
        i += 1;
    }
    out
};

impl Default for SweepKind {
    /// All-reduce, as `rank` sweeps without `--collective`.
    fn default() -> Self {
        SweepKind(CollectiveKind::AllReduce)
    }
}

impl SweepKind {
    /// Every kind a sweep runs, in the kind table's order.
    pub fn all() -> &'static [SweepKind] {
        &SWEPT
    }

    /// The sweep of `kind`, or `None` when its row has no bus-bandwidth factor.
    pub fn of(kind: CollectiveKind) -> Option<SweepKind> {
        kind.row().bus_bw.is_some().then_some(SweepKind(kind))
    }

    /// The collective kind it sweeps.
    pub fn kind(self) -> CollectiveKind {
        self.0
    }

    /// Snake-case name, as on the command line and in the shard's events.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Whether it reduces (and so has a `redop`).
    pub fn reduces(self) -> bool {
        self.0.row().reduces
    }

    /// The root, for the rooted kinds (nccl-tests' default `-r 0`).
    pub fn root(self) -> Option<u32> {
        self.0.is_rooted().then_some(0)
    }

    /// Whether a size is split evenly over the ranks (nccl-tests rounds its
    /// element count down to a multiple of the rank count): every buffer
    /// rule but "in equals out".
    pub fn splits(self) -> bool {
        self.0.row().buffers != Buffers::Same
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
        self.0.row().bus_bw.map_or(1.0, |b| b.factor(n))
    }

    /// nccl-tests' size (bytes) of an event of this kind whose shard `bytes`
    /// (one member's input) is `event_bytes`, over `n` ranks: the gathered
    /// buffer where the output is n times the input, else the input.
    pub fn size_bytes(self, event_bytes: u64, n: u32) -> u64 {
        match self.0.row().buffers {
            Buffers::OutIsNTimesIn => event_bytes * n as u64,
            _ => event_bytes,
        }
    }

    /// What nccl-tests' size is of this kind, in words (the sweep table's
    /// heading).
    pub fn size_is(self) -> &'static str {
        match self.0.row().buffers {
            Buffers::OutIsNTimesIn => "the gathered receive buffer",
            Buffers::InIsNTimesOut => "the whole send buffer",
            Buffers::Splits => "one rank's send buffer",
            Buffers::Same | Buffers::Free => "the buffer",
            // never swept (no bus-bandwidth factor): named for completeness
            Buffers::GatherToRoot => "the root's gathered receive buffer",
            Buffers::ScatterFromRoot => "the root's send buffer",
        }
    }

    /// One rank's (send, receive) element counts for a step of `count`
    /// elements ([`SweepKind::count`]) over `n` ranks.
    pub fn elements(self, count: u64, n: u32) -> (u64, u64) {
        let per = count / u64::from(n.max(1));
        match self.0.row().buffers {
            Buffers::OutIsNTimesIn => (per, count),
            Buffers::InIsNTimesOut => (count, per),
            _ => (count, count),
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

impl clap::ValueEnum for SweepKind {
    fn value_variants<'a>() -> &'a [Self] {
        &SWEPT
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = self.0.row().sweep_help.unwrap_or_default();
        Some(clap::builder::PossibleValue::new(self.name()).help(help))
    }
}

impl Serialize for SweepKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SweepKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let kind = CollectiveKind::deserialize(d)?;
        SweepKind::of(kind).ok_or_else(|| {
            let names: Vec<&str> = SWEPT.iter().map(|k| k.name()).collect();
            serde::de::Error::custom(format!(
                "{} is not swept (no bus-bandwidth factor): the sweep runs {}",
                kind.name(),
                names.join(", ")
            ))
        })
    }
}

impl schemars::JsonSchema for SweepKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SweepKind".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<serde_json::Value> = SWEPT
            .iter()
            .map(|k| {
                serde_json::json!({
                    "description": format!("{}.", k.0.row().sweep_help.unwrap_or_default()),
                    "type": "string",
                    "const": k.name()
                })
            })
            .collect();
        schemars::json_schema!({"description": sweep_kind_doc!(), "oneOf": one_of})
    }
}

/// The sizes nccl-tests sweeps for `-b MIN -e MAX -f FACTOR`: MIN, then
/// multiplied by FACTOR while it stays at most MAX.
pub(crate) fn size_sweep(min_bytes: u64, max_bytes: u64, factor: u64) -> Result<Vec<u64>> {
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

    /// The sweep runs exactly the kinds whose bus-bandwidth factor the kind
    /// table defines, and spells, serializes and describes them as the table.
    #[test]
    fn the_sweep_runs_every_kind_with_a_bus_bandwidth_factor() {
        use clap::ValueEnum;
        let swept: Vec<_> = SweepKind::value_variants().iter().map(|k| k.kind()).collect();
        let defined: Vec<_> = KINDS.iter().filter(|r| r.bus_bw.is_some()).map(|r| r.kind).collect();
        assert_eq!(swept, defined);
        for row in &KINDS {
            assert_eq!(
                row.sweep_help.is_some(),
                row.bus_bw.is_some(),
                "{}: a swept kind is described, and only one",
                row.name
            );
            let json = format!("\"{}\"", row.name);
            match SweepKind::of(row.kind) {
                Some(k) => {
                    assert_eq!(
                        k.to_possible_value().unwrap().get_name(),
                        k.name(),
                        "the command line spells the kind as the table does"
                    );
                    assert_eq!(serde_json::to_string(&k).unwrap(), json);
                    assert_eq!(serde_json::from_str::<SweepKind>(&json).unwrap(), k);
                    assert_eq!(SweepKind::from_str(row.name, false), Ok(k));
                }
                None => {
                    let e = serde_json::from_str::<SweepKind>(&json).unwrap_err().to_string();
                    assert!(e.contains("not swept") && e.contains("all_reduce"), "{e}");
                    assert!(SweepKind::from_str(row.name, false).is_err());
                }
            }
        }
        let schema = serde_json::to_value(schemars::schema_for!(SweepKind)).unwrap();
        let consts: Vec<_> = schema["oneOf"].as_array().unwrap().iter().map(|v| v["const"].as_str().unwrap()).collect();
        assert_eq!(consts, SweepKind::all().iter().map(|k| k.name()).collect::<Vec<_>>(), "{schema}");
        assert_eq!(SweepKind::default().kind(), CollectiveKind::AllReduce);
    }

    /// nccl-tests' `doc/PERFORMANCE.md` "Summary" factors, and its size and
    /// count conventions (split kinds rounded down to a multiple of n).
    #[test]
    fn bus_bandwidth_factors_and_sizes_follow_nccl_tests() {
        use CollectiveKind::*;
        let k = |c| SweepKind::of(c).unwrap();
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
            assert_eq!(k(kind).busbw_factor(n), want, "{kind:?} over {n}");
        }
        assert_eq!(k(AllGather).size_bytes(16, 4), 64);
        assert_eq!(k(ReduceScatter).size_bytes(64, 4), 64);
        assert_eq!(k(AllGather).count(8, 4, 2), Some(2));
        assert_eq!(k(AllGather).count(8, 4, 3), None);
        assert_eq!(k(AllToAll).count(40, 4, 3), Some(9));
        assert_eq!(k(Broadcast).count(8, 4, 3), Some(2));
        assert_eq!(
            (k(AllGather).elements(8, 4), k(ReduceScatter).elements(8, 4), k(AllToAll).elements(8, 4)),
            ((2, 8), (8, 2), (8, 8))
        );
        assert_eq!(k(Reduce).root(), Some(0));
        assert_eq!(k(AllGather).root(), None);
        assert!(k(ReduceScatter).reduces() && !k(AllToAll).reduces());
        assert!(SweepKind::of(Barrier).is_none() && SweepKind::of(Send).is_none());
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

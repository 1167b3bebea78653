//! The collective vocabulary every layer shares: the kinds of collective
//! ([`CollectiveKind`]) with one row each in [`KINDS`] (our, PyTorch's and
//! PARAM's names, root, peer, reduction, buffer rule, bus-bandwidth factor,
//! where the result lands), and the element types of a trace's buffers
//! ([`TraceDtype`]).
//!
//! Consumes names as PyTorch's `record_param_comms` writes them (`allreduce`,
//! `_allgather_base`, `BFloat16`); produces the kind or dtype, or refuses an
//! unknown name listing the known ones. Shards, the trace import and export,
//! the replay executors and the reports name collectives through these types,
//! so that a kind is spelled one way everywhere.
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The kind of a collective, in shards, imported traces, sweeps and
/// reports alike. Variants are only ever appended: a shard's body is
/// bincode, which numbers them in order. A shard event's `bytes` is one
/// member's input (an all-gather's block, a reduce-scatter's or an
/// all-to-all's whole input).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// All-reduce.
    AllReduce,
    /// All-gather (input on every member, concatenated output).
    AllGather,
    /// Reduce-scatter (reduced input, one block per member).
    ReduceScatter,
    /// Broadcast from `root`.
    Broadcast,
    /// Reduce to `root`.
    Reduce,
    /// All-to-all, equal or explicit (`*_split_elems`) splits.
    AllToAll,
    /// Barrier.
    Barrier,
    /// Point-to-point send to `peer`.
    Send,
    /// Point-to-point receive from `peer`.
    Recv,
    /// Gather to `root` (every member's input, concatenated on the root;
    /// explicit `out_split_elems` on the root for a gather-v).
    Gather,
    /// Scatter from `root` (one block of the root's input per member;
    /// explicit `in_split_elems` on the root for a scatter-v).
    Scatter,
    /// Inclusive prefix reduction (`MPI_Scan`): member k gets members 0..=k reduced.
    Scan,
    /// Exclusive prefix reduction (`MPI_Exscan`): member k gets members 0..k
    /// reduced (member 0's result is undefined).
    Exscan,
}

/// nccl-tests' bus-bandwidth factor for `n` ranks: what turns a kind's
/// algorithm bandwidth (bytes / time) into the per-link traffic of an
/// optimal ring, comparable across kinds (nccl-tests, doc/PERFORMANCE.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusBw {
    /// 2(n − 1)/n: all-reduce (a reduce-scatter then an all-gather).
    TwiceShare,
    /// (n − 1)/n: all-gather, reduce-scatter, all-to-all.
    Share,
    /// 1: broadcast and reduce (each byte crosses each link once).
    One,
}

impl BusBw {
    /// The factor for `n` ranks (0 for the shared kinds at one rank, as nccl-tests prints).
    pub fn factor(self, n: u32) -> f64 {
        let n = f64::from(n);
        match self {
            BusBw::TwiceShare => 2.0 * (n - 1.0) / n,
            BusBw::Share => (n - 1.0) / n,
            BusBw::One => 1.0,
        }
    }
}

/// How one rank's input and output element counts relate, on a group of n.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffers {
    /// In equals out (all-reduce, broadcast, reduce).
    Same,
    /// Out is n times in (all-gather).
    OutIsNTimesIn,
    /// In is n times out (reduce-scatter).
    InIsNTimesOut,
    /// Per-member splits summing to in and out, or without splits an even
    /// split with in equal to out (all-to-all).
    Splits,
    /// No relation (barrier, send, receive).
    Free,
    /// On the root, out is n times in (or the sum of the root's
    /// `out_split_elems`); elsewhere out is 0 (gather).
    GatherToRoot,
    /// On the root, in is n times out (or the sum of the root's
    /// `in_split_elems`); elsewhere in is 0 (scatter).
    ScatterFromRoot,
}

/// Where a kind's result lands, and so which ranks check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lands {
    /// On every member (all-reduce, all-gather, reduce-scatter, broadcast, all-to-all).
    Everywhere,
    /// On the root only (reduce).
    OnRoot,
    /// At the peer: a send's data is checked by the receive it matches.
    AtPeer,
    /// Here, from the peer (receive).
    Here,
    /// Nowhere: nothing moves (barrier).
    Nowhere,
}

/// One row of the kind table: everything a layer needs to know of a kind
/// besides how a backend runs it.
#[derive(Clone, Copy, Debug)]
pub struct KindRow {
    /// The kind.
    pub kind: CollectiveKind,
    /// Our name, as serialized (`all_reduce`).
    pub name: &'static str,
    /// The name PyTorch records, written by the exports when the source name
    /// is not one of this kind's.
    pub pytorch: &'static str,
    /// PARAM's name (its `paramToCommName` vocabulary).
    pub param: &'static str,
    /// Has a root rank.
    pub rooted: bool,
    /// Point-to-point (matched per peer pair, not per group).
    pub p2p: bool,
    /// Reduces (has a reduction operator).
    pub reduces: bool,
    /// The element counts one rank's record must have.
    pub buffers: Buffers,
    /// The bus-bandwidth factor, for the kinds a size sweep runs (a send
    /// needs its receive, a barrier moves nothing: neither is swept).
    pub bus_bw: Option<BusBw>,
    /// How `rank --collective` describes the kind: the nccl-tests program
    /// that sweeps it; set exactly where `bus_bw` is.
    pub sweep_help: Option<&'static str>,
    /// Where its result lands and is checked.
    pub lands: Lands,
    /// Only `replay-trace --backend cpu` runs it (MPI's gather, scatter and
    /// scans): NCCL has no operation for it, and the own path (sweeps, the
    /// world collectives of the phases) and the phases' shards do not hold it.
    pub replay_only: bool,
}

/// The kind table, in [`CollectiveKind`]'s order. Adding a kind is a variant, a
/// row here, and one arm in each backend's library call (the cpu backend's
/// `mpi_call`, the cuda backend's `nccl_calls`).
pub const KINDS: [KindRow; 13] = [
    KindRow {
        kind: CollectiveKind::AllReduce,
        name: "all_reduce",
        pytorch: "allreduce",
        param: "all_reduce",
        rooted: false,
        p2p: false,
        reduces: true,
        buffers: Buffers::Same,
        bus_bw: Some(BusBw::TwiceShare),
        sweep_help: Some("All-reduce (`all_reduce_perf`)"),
        lands: Lands::Everywhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::AllGather,
        name: "all_gather",
        pytorch: "_allgather_base",
        param: "all_gather_base",
        rooted: false,
        p2p: false,
        reduces: false,
        buffers: Buffers::OutIsNTimesIn,
        bus_bw: Some(BusBw::Share),
        sweep_help: Some("All-gather (`all_gather_perf`)"),
        lands: Lands::Everywhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::ReduceScatter,
        name: "reduce_scatter",
        pytorch: "_reduce_scatter_base",
        param: "reduce_scatter_base",
        rooted: false,
        p2p: false,
        reduces: true,
        buffers: Buffers::InIsNTimesOut,
        bus_bw: Some(BusBw::Share),
        sweep_help: Some("Reduce-scatter (`reduce_scatter_perf`)"),
        lands: Lands::Everywhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Broadcast,
        name: "broadcast",
        pytorch: "broadcast",
        param: "broadcast",
        rooted: true,
        p2p: false,
        reduces: false,
        buffers: Buffers::Same,
        bus_bw: Some(BusBw::One),
        sweep_help: Some("Broadcast from rank 0 (`broadcast_perf -r 0`)"),
        lands: Lands::Everywhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Reduce,
        name: "reduce",
        pytorch: "reduce",
        param: "reduce",
        rooted: true,
        p2p: false,
        reduces: true,
        buffers: Buffers::Same,
        bus_bw: Some(BusBw::One),
        sweep_help: Some("Reduce to rank 0 (`reduce_perf -r 0`)"),
        lands: Lands::OnRoot,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::AllToAll,
        name: "all_to_all",
        pytorch: "all_to_allv",
        param: "all_to_allv",
        rooted: false,
        p2p: false,
        reduces: false,
        buffers: Buffers::Splits,
        bus_bw: Some(BusBw::Share),
        sweep_help: Some("All-to-all, an even split (`alltoall_perf`)"),
        lands: Lands::Everywhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Barrier,
        name: "barrier",
        pytorch: "barrier",
        param: "barrier",
        rooted: false,
        p2p: false,
        reduces: false,
        buffers: Buffers::Free,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::Nowhere,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Send,
        name: "send",
        pytorch: "send",
        param: "send",
        rooted: false,
        p2p: true,
        reduces: false,
        buffers: Buffers::Free,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::AtPeer,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Recv,
        name: "recv",
        pytorch: "recv",
        param: "recv",
        rooted: false,
        p2p: true,
        reduces: false,
        buffers: Buffers::Free,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::Here,
        replay_only: false,
    },
    KindRow {
        kind: CollectiveKind::Gather,
        name: "gather",
        pytorch: "gather",
        param: "gather",
        rooted: true,
        p2p: false,
        reduces: false,
        buffers: Buffers::GatherToRoot,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::OnRoot,
        replay_only: true,
    },
    KindRow {
        kind: CollectiveKind::Scatter,
        name: "scatter",
        pytorch: "scatter",
        param: "scatter",
        rooted: true,
        p2p: false,
        reduces: false,
        buffers: Buffers::ScatterFromRoot,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::Everywhere,
        replay_only: true,
    },
    KindRow {
        kind: CollectiveKind::Scan,
        name: "scan",
        pytorch: "scan",
        param: "scan",
        rooted: false,
        p2p: false,
        reduces: true,
        buffers: Buffers::Same,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::Everywhere,
        replay_only: true,
    },
    KindRow {
        kind: CollectiveKind::Exscan,
        name: "exscan",
        pytorch: "exscan",
        param: "exscan",
        rooted: false,
        p2p: false,
        reduces: true,
        buffers: Buffers::Same,
        bus_bw: None,
        sweep_help: None,
        lands: Lands::Everywhere,
        replay_only: true,
    },
];

impl CollectiveKind {
    /// This kind's row of [`KINDS`].
    pub fn row(self) -> &'static KindRow {
        &KINDS[self as usize]
    }
    /// Point-to-point (matched per peer pair, not per group).
    pub fn is_p2p(self) -> bool {
        self.row().p2p
    }
    /// Has a root rank.
    pub fn is_rooted(self) -> bool {
        self.row().rooted
    }
    /// The name PyTorch records for it (what the exports write when the
    /// source name is not one of this kind's).
    pub fn pytorch_name(self) -> &'static str {
        self.row().pytorch
    }
    /// PARAM's name for it.
    pub fn param_name(self) -> &'static str {
        self.row().param
    }
    /// Snake-case name as serialized.
    pub fn name(self) -> &'static str {
        self.row().name
    }
    /// The name as prose writes it (`all-reduce`), for messages.
    pub fn label(self) -> String {
        self.name().replace('_', "-")
    }
}

/// Collective names PyTorch's `record_param_comms` writes, and their kinds.
/// `wait` and `init` are bookkeeping records, not communication, and are skipped.
pub(crate) const KNOWN_COLLECTIVES: [(&str, CollectiveKind); 21] = [
    ("allreduce", CollectiveKind::AllReduce),
    ("all_reduce", CollectiveKind::AllReduce),
    ("allgather", CollectiveKind::AllGather),
    ("all_gather", CollectiveKind::AllGather),
    ("_allgather_base", CollectiveKind::AllGather),
    ("all_gather_into_tensor", CollectiveKind::AllGather),
    ("reduce_scatter", CollectiveKind::ReduceScatter),
    ("_reduce_scatter_base", CollectiveKind::ReduceScatter),
    ("reduce_scatter_tensor", CollectiveKind::ReduceScatter),
    ("broadcast", CollectiveKind::Broadcast),
    ("reduce", CollectiveKind::Reduce),
    ("all_to_all", CollectiveKind::AllToAll),
    ("all_to_allv", CollectiveKind::AllToAll),
    ("alltoall_base", CollectiveKind::AllToAll),
    ("barrier", CollectiveKind::Barrier),
    ("send", CollectiveKind::Send),
    ("recv", CollectiveKind::Recv),
    ("gather", CollectiveKind::Gather),
    ("scatter", CollectiveKind::Scatter),
    // PyTorch has no scans: the names our exports write for an MPI capture's
    ("scan", CollectiveKind::Scan),
    ("exscan", CollectiveKind::Exscan),
];

/// Bookkeeping records of `record_param_comms` that carry no communication.
pub(crate) const SKIPPED_RECORDS: [&str; 2] = ["wait", "init"];

/// What a recorded collective name means: a kind, a record to skip, or a refusal listing the known names.
pub fn classify_name(name: &str) -> Result<Option<CollectiveKind>> {
    if SKIPPED_RECORDS.contains(&name) {
        return Ok(None);
    }
    match KNOWN_COLLECTIVES.iter().find(|(n, _)| *n == name) {
        Some((_, k)) => Ok(Some(*k)),
        None => {
            let known: Vec<&str> = KNOWN_COLLECTIVES.iter().map(|(n, _)| *n).collect();
            bail!(
                "unknown collective name {name:?} (known: {}; skipped as bookkeeping: {})",
                known.join(", "),
                SKIPPED_RECORDS.join(", ")
            )
        }
    }
}

/// The reduction a trace records for one collective (`import mpi`: the
/// application's `MPI_Op`); absent in a trace means sum. MPI's predefined
/// operations that reduce element by element; `MPI_MAXLOC`/`MPI_MINLOC`
/// (pair types) and user-defined operations have none and are left out at import.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum TraceReduceOp {
    /// `MPI_SUM`.
    Sum,
    /// `MPI_PROD`.
    Prod,
    /// `MPI_MAX`.
    Max,
    /// `MPI_MIN`.
    Min,
    /// `MPI_LAND`: logical and (non-zero is true, the result 0 or 1).
    Land,
    /// `MPI_LOR`: logical or.
    Lor,
    /// `MPI_LXOR`: logical exclusive or.
    Lxor,
    /// `MPI_BAND`: bitwise and (integer types).
    Band,
    /// `MPI_BOR`: bitwise or (integer types).
    Bor,
    /// `MPI_BXOR`: bitwise exclusive or (integer types).
    Bxor,
}

impl TraceReduceOp {
    /// Every operation, in variant order.
    pub const ALL: [TraceReduceOp; 10] = [
        TraceReduceOp::Sum,
        TraceReduceOp::Prod,
        TraceReduceOp::Max,
        TraceReduceOp::Min,
        TraceReduceOp::Land,
        TraceReduceOp::Lor,
        TraceReduceOp::Lxor,
        TraceReduceOp::Band,
        TraceReduceOp::Bor,
        TraceReduceOp::Bxor,
    ];
    /// The name as serialized (`max`), which is also the capture library's name of the `MPI_Op`.
    pub fn name(self) -> &'static str {
        match self {
            TraceReduceOp::Sum => "sum",
            TraceReduceOp::Prod => "prod",
            TraceReduceOp::Max => "max",
            TraceReduceOp::Min => "min",
            TraceReduceOp::Land => "land",
            TraceReduceOp::Lor => "lor",
            TraceReduceOp::Lxor => "lxor",
            TraceReduceOp::Band => "band",
            TraceReduceOp::Bor => "bor",
            TraceReduceOp::Bxor => "bxor",
        }
    }
    /// From its name; `None` for any other.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }
    /// Whether NCCL has it (`ncclSum`, `ncclProd`, `ncclMax`, `ncclMin`).
    pub fn in_nccl(self) -> bool {
        matches!(self, TraceReduceOp::Sum | TraceReduceOp::Prod | TraceReduceOp::Max | TraceReduceOp::Min)
    }
}

/// Element type of a collective buffer.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum TraceDtype {
    /// 32-bit float (PyTorch `Float`).
    F32,
    /// bfloat16 (PyTorch `BFloat16`).
    Bf16,
    /// IEEE half (PyTorch `Half`).
    F16,
    /// 64-bit float (PyTorch `Double`).
    F64,
    /// Signed 8-bit (PyTorch `Char`).
    I8,
    /// Unsigned 8-bit (PyTorch `Byte`).
    U8,
    /// Signed 32-bit (PyTorch `Int`).
    I32,
    /// Signed 64-bit (PyTorch `Long`).
    I64,
    /// Boolean, one byte (PyTorch `Bool`).
    Bool,
}

/// PyTorch `c10::ScalarType` names and their dtypes.
const DTYPE_NAMES: [(&str, TraceDtype); 9] = [
    ("Float", TraceDtype::F32),
    ("BFloat16", TraceDtype::Bf16),
    ("Half", TraceDtype::F16),
    ("Double", TraceDtype::F64),
    ("Char", TraceDtype::I8),
    ("Byte", TraceDtype::U8),
    ("Int", TraceDtype::I32),
    ("Long", TraceDtype::I64),
    ("Bool", TraceDtype::Bool),
];

impl TraceDtype {
    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            TraceDtype::I8 | TraceDtype::U8 | TraceDtype::Bool => 1,
            TraceDtype::Bf16 | TraceDtype::F16 => 2,
            TraceDtype::F32 | TraceDtype::I32 => 4,
            TraceDtype::F64 | TraceDtype::I64 => 8,
        }
    }
    /// From a PyTorch scalar-type name (`BFloat16`); refuses others, listing the known ones.
    pub fn from_pytorch(name: &str) -> Result<Self> {
        match DTYPE_NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, d)) => Ok(*d),
            None => {
                let known: Vec<&str> = DTYPE_NAMES.iter().map(|(n, _)| *n).collect();
                bail!("unknown dtype {name:?} (known: {})", known.join(", "))
            }
        }
    }
    /// Lowercase name as serialized (`bf16`).
    pub fn name(self) -> &'static str {
        match self {
            TraceDtype::F32 => "f32",
            TraceDtype::Bf16 => "bf16",
            TraceDtype::F16 => "f16",
            TraceDtype::F64 => "f64",
            TraceDtype::I8 => "i8",
            TraceDtype::U8 => "u8",
            TraceDtype::I32 => "i32",
            TraceDtype::I64 => "i64",
            TraceDtype::Bool => "bool",
        }
    }
    /// The PyTorch scalar-type name.
    pub fn pytorch_name(self) -> &'static str {
        DTYPE_NAMES.iter().find(|(_, d)| *d == self).map(|(n, _)| *n).unwrap_or("Byte")
    }
}

impl TraceDtype {
    /// Every element type, in serde's variant order (a shard body numbers them so).
    pub const ALL: [TraceDtype; 9] = [
        TraceDtype::F32,
        TraceDtype::Bf16,
        TraceDtype::F16,
        TraceDtype::F64,
        TraceDtype::I8,
        TraceDtype::U8,
        TraceDtype::I32,
        TraceDtype::I64,
        TraceDtype::Bool,
    ];
}

/// The user-facing name, as the trace's JSON spells it (`bf16`, `f32`).
impl std::fmt::Display for TraceDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_kind_order_and_names_as_serde_and_the_import_do() {
        for (i, row) in KINDS.iter().enumerate() {
            let k = &row.kind;
            assert_eq!(*k as usize, i, "row {i} holds {k:?}: rows are in variant order, so that row() finds them");
            assert_eq!(serde_json::to_string(k).unwrap(), format!("\"{}\"", k.name()));
            // the name the exports write is one the import reads back as this kind
            assert_eq!(classify_name(k.pytorch_name()).unwrap(), Some(*k));
            assert!(!(k.is_p2p() && k.is_rooted()));
        }
        // every variant the schema knows has a row (schemars writes documented unit variants as oneOf consts)
        let schema = serde_json::to_value(schemars::schema_for!(CollectiveKind)).unwrap();
        let variants = schema["enum"].as_array().or(schema["oneOf"].as_array()).map_or(0, Vec::len);
        assert_eq!(variants, KINDS.len(), "a variant without a row: {schema}");
    }

    #[test]
    fn dtypes_are_listed_in_variant_order() {
        // a shard body (bincode) numbers a dtype by its variant index: ALL is that order
        for (i, d) in TraceDtype::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i, "{d:?}");
            assert_eq!(serde_json::to_string(d).unwrap(), format!("\"{}\"", d.name()));
        }
    }

    #[test]
    fn bus_bandwidth_factors_are_nccl_tests() {
        assert_eq!(CollectiveKind::AllReduce.row().bus_bw.unwrap().factor(4), 1.5);
        assert_eq!(CollectiveKind::AllGather.row().bus_bw.unwrap().factor(4), 0.75);
        assert_eq!(CollectiveKind::Broadcast.row().bus_bw.unwrap().factor(8), 1.0);
        assert!(CollectiveKind::Send.row().bus_bw.is_none() && CollectiveKind::Barrier.row().bus_bw.is_none());
    }

    #[test]
    fn reduce_ops_name_as_serde_does_and_read_back() {
        for o in TraceReduceOp::ALL {
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("\"{}\"", o.name()));
            assert_eq!(TraceReduceOp::from_name(o.name()), Some(o));
        }
        assert_eq!(TraceReduceOp::from_name("maxloc"), None);
        assert!(TraceReduceOp::Max.in_nccl() && !TraceReduceOp::Band.in_nccl());
    }
}

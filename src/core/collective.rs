//! The collective vocabulary every layer shares: the kinds of collective a
//! workload's trace records ([`TraceKind`], with PyTorch's names for them) and
//! the element types of their buffers ([`TraceDtype`]).
//!
//! Consumes names as PyTorch's `record_param_comms` writes them (`allreduce`,
//! `_allgather_base`, `BFloat16`); produces the kind or dtype, or refuses an
//! unknown name listing the known ones. Shards, the trace import and export,
//! the replay executors and the reports name collectives through these types,
//! so that a kind is spelled one way everywhere.
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Collective kind of an imported collective.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum TraceKind {
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
}

impl TraceKind {
    /// Point-to-point (matched per peer pair, not per group).
    pub fn is_p2p(self) -> bool {
        matches!(self, TraceKind::Send | TraceKind::Recv)
    }
    /// Has a root rank.
    pub fn is_rooted(self) -> bool {
        matches!(self, TraceKind::Broadcast | TraceKind::Reduce)
    }
    /// The name PyTorch records for it (what the exports write when the
    /// source name is not one of this kind's).
    pub fn pytorch_name(self) -> &'static str {
        match self {
            TraceKind::AllReduce => "allreduce",
            TraceKind::AllGather => "_allgather_base",
            TraceKind::ReduceScatter => "_reduce_scatter_base",
            TraceKind::Broadcast => "broadcast",
            TraceKind::Reduce => "reduce",
            TraceKind::AllToAll => "all_to_allv",
            TraceKind::Barrier => "barrier",
            TraceKind::Send => "send",
            TraceKind::Recv => "recv",
        }
    }
    /// Snake-case name as serialized.
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::AllReduce => "all_reduce",
            TraceKind::AllGather => "all_gather",
            TraceKind::ReduceScatter => "reduce_scatter",
            TraceKind::Broadcast => "broadcast",
            TraceKind::Reduce => "reduce",
            TraceKind::AllToAll => "all_to_all",
            TraceKind::Barrier => "barrier",
            TraceKind::Send => "send",
            TraceKind::Recv => "recv",
        }
    }
}

/// Collective names PyTorch's `record_param_comms` writes, and their kinds.
/// `wait` and `init` are bookkeeping records, not communication, and are skipped.
pub const KNOWN_COLLECTIVES: [(&str, TraceKind); 17] = [
    ("allreduce", TraceKind::AllReduce),
    ("all_reduce", TraceKind::AllReduce),
    ("allgather", TraceKind::AllGather),
    ("all_gather", TraceKind::AllGather),
    ("_allgather_base", TraceKind::AllGather),
    ("all_gather_into_tensor", TraceKind::AllGather),
    ("reduce_scatter", TraceKind::ReduceScatter),
    ("_reduce_scatter_base", TraceKind::ReduceScatter),
    ("reduce_scatter_tensor", TraceKind::ReduceScatter),
    ("broadcast", TraceKind::Broadcast),
    ("reduce", TraceKind::Reduce),
    ("all_to_all", TraceKind::AllToAll),
    ("all_to_allv", TraceKind::AllToAll),
    ("alltoall_base", TraceKind::AllToAll),
    ("barrier", TraceKind::Barrier),
    ("send", TraceKind::Send),
    ("recv", TraceKind::Recv),
];

/// Bookkeeping records of `record_param_comms` that carry no communication.
pub const SKIPPED_RECORDS: [&str; 2] = ["wait", "init"];

/// What a recorded collective name means: a kind, a record to skip, or a refusal listing the known names.
pub fn classify_name(name: &str) -> Result<Option<TraceKind>> {
    if SKIPPED_RECORDS.contains(&name) {
        return Ok(None);
    }
    match KNOWN_COLLECTIVES.iter().find(|(n, _)| *n == name) {
        Some((_, k)) => Ok(Some(*k)),
        None => {
            let known: Vec<&str> = KNOWN_COLLECTIVES.iter().map(|(n, _)| *n).collect();
            bail!("unknown collective name {name:?} (known: {}; skipped as bookkeeping: {})", known.join(", "), SKIPPED_RECORDS.join(", "))
        }
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

/// The user-facing name, as the trace's JSON spells it (`bf16`, `f32`).
impl std::fmt::Display for TraceDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

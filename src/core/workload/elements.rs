//! Element types and reductions: what a collective's buffer or a GEMM's
//! operands hold ([`Dtype`]) and how a reducing collective combines them
//! ([`ReduceOp`]). Both parse from the command line (clap) and from files
//! (serde) by the names their `name()` prints; any other name is refused.
use serde::{Deserialize, Serialize};

/// Element type of a collective buffer or of a matrix product's operands.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// bfloat16: 8 exponent bits, 8 significand bits (7 stored).
    Bf16,
}

impl Dtype {
    /// Size of one element in bytes.
    pub fn size_bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }

    /// Name as on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// Reduction applied by reducing collectives (all-reduce, reduce,
/// reduce-scatter): `replay-trace --op` and the isolated sweep's `--op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Average (sum, then divided by the group size).
    Avg,
    /// Maximum.
    Max,
    /// Product (`MPI_PROD`, `ncclProd`).
    Prod,
    /// Minimum (`MPI_MIN`, `ncclMin`).
    Min,
}

impl ReduceOp {
    /// The name as spelled on the command line and in nccl-tests' `redop` column.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
        }
    }
}

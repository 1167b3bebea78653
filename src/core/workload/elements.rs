//! Element types and reductions: what a collective's buffer or a GEMM's
//! operands hold ([`Dtype`]) and how a reducing collective combines them
//! ([`ReduceOp`]). Both parse from the command line (clap) and from files
//! (serde) by the names their `name()` prints; any other name is refused.
use crate::core::collective;
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

/// A run's element type is one of a trace's: shards record every
/// collective's element type in the trace's vocabulary (format 8).
impl From<Dtype> for collective::TraceDtype {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => collective::TraceDtype::F32,
            Dtype::Bf16 => collective::TraceDtype::Bf16,
        }
    }
}

impl collective::TraceDtype {
    /// The run's element type (`--dtype`: f32 or bf16) this is, if any: the
    /// backend's own buffers and world all-reduce hold only those.
    pub fn workload(self) -> Option<Dtype> {
        match self {
            collective::TraceDtype::F32 => Some(Dtype::F32),
            collective::TraceDtype::Bf16 => Some(Dtype::Bf16),
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::Dtype;
    use crate::core::collective::TraceDtype;

    #[test]
    fn a_run_dtype_is_the_trace_dtype_of_the_same_variant_index() {
        // formats 1 to 7 wrote the run's Dtype into a shard body: F32 = 0 and Bf16 = 1 decode unchanged as TraceDtype
        for w in [Dtype::F32, Dtype::Bf16] {
            assert_eq!(TraceDtype::from(w) as usize, w as usize);
            assert_eq!(TraceDtype::from(w).workload(), Some(w));
        }
        assert_eq!(TraceDtype::F64.workload(), None);
    }
}

//! Element types and reductions: what a collective's buffer or a GEMM's
//! operands hold ([`Dtype`]) and how a reducing collective combines them
//! ([`ReduceOp`]). Both parse from the command line (clap) and from files
//! (serde) by the names their `name()` prints; any other name is refused.
//! A run's [`Dtype`] is a checked subset of a trace's element types
//! ([`TraceDtype`]): `From` one way, `TryFrom` the other, refusing (with
//! [`NotARunDtype`]) a trace dtype that no run's buffers hold.
use crate::core::collective::TraceDtype;
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
    /// Every element type a run can hold, in variant order (a shard body numbers them so).
    pub const ALL: [Dtype; 2] = [Dtype::F32, Dtype::Bf16];

    /// Size of one element in bytes (the trace dtype's).
    pub fn size_bytes(self) -> u64 {
        TraceDtype::from(self).size_bytes()
    }

    /// Name as on the command line and in files (the trace dtype's).
    pub fn name(self) -> &'static str {
        TraceDtype::from(self).name()
    }
}

/// A run's element type is one of a trace's: shards record every
/// collective's element type in the trace's vocabulary (format 8).
impl From<Dtype> for TraceDtype {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => TraceDtype::F32,
            Dtype::Bf16 => TraceDtype::Bf16,
        }
    }
}

/// A trace element type that is not a run's (`--dtype`): the backends' own
/// buffers, the isolated sweep and the phases' world all-reduces hold only
/// [`Dtype::ALL`]; the others run through the trace executors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotARunDtype(pub TraceDtype);

impl std::fmt::Display for NotARunDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let allowed: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
        write!(f, "element type {} is not a run's (--dtype is one of {})", self.0, allowed.join(", "))
    }
}

impl std::error::Error for NotARunDtype {}

/// The one place that says which trace element types a run can hold.
impl TryFrom<TraceDtype> for Dtype {
    type Error = NotARunDtype;
    fn try_from(d: TraceDtype) -> Result<Self, NotARunDtype> {
        Dtype::ALL.into_iter().find(|w| TraceDtype::from(*w) == d).ok_or(NotARunDtype(d))
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
    use super::{Dtype, NotARunDtype};
    use crate::core::collective::TraceDtype;

    #[test]
    fn a_run_dtype_is_the_trace_dtype_of_the_same_variant_index() {
        // formats 1 to 7 wrote the run's Dtype into a shard body: F32 = 0 and Bf16 = 1 decode unchanged as TraceDtype
        for (i, w) in Dtype::ALL.into_iter().enumerate() {
            assert_eq!(w as usize, i);
            assert_eq!(TraceDtype::from(w) as usize, w as usize);
            assert_eq!(Dtype::try_from(TraceDtype::from(w)), Ok(w));
            // clap and serde spell it as the trace does
            assert_eq!(serde_json::to_string(&w).unwrap(), serde_json::to_string(&TraceDtype::from(w)).unwrap());
            assert_eq!(clap::ValueEnum::to_possible_value(&w).unwrap().get_name(), w.name());
        }
        assert_eq!(<Dtype as clap::ValueEnum>::value_variants(), &Dtype::ALL[..]);
        // every other trace dtype is refused, naming it and what a run holds
        for d in TraceDtype::ALL.into_iter().skip(Dtype::ALL.len()) {
            assert_eq!(Dtype::try_from(d), Err(NotARunDtype(d)));
        }
        let e = Dtype::try_from(TraceDtype::F64).unwrap_err().to_string();
        assert!(e.contains("f64") && e.contains("f32, bf16"), "{e}");
    }
}

//! The workload's knobs beside its phases and model: the fill residual policy,
//! the blocking collective's stream, the arrival-delay control
//! ([`DelayInjection::parse`], `--inject-delay`) and the unit GEMM shape
//! (`--gemm`, parsed by `FromStr`). Refuses a delay period of 0, a delay
//! above 10 s and GEMM dimensions that are not positive integers.
use crate::core::cli_kv;
use crate::core::refusal::Code;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Residual handling for fill quantization.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FillResidual {
    /// Carry the rounding error into the next gap so errors do not accumulate.
    Carry,
    /// Round each gap independently.
    Drop,
}

/// Which stream a blocking collective runs on (cuda backend).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CommStream {
    /// The compute stream itself: stream order alone makes the collective
    /// wait for the tensor and the next GEMM wait for the result, with no
    /// event or cross-stream dependency. What PyTorch's ProcessGroupNCCL does
    /// for a synchronous collective (`async_op=False`) since PyTorch 2.8
    /// (pytorch/pytorch pull request 150398).
    Current,
    /// A communication stream of its own, joined to the compute stream by
    /// events both ways: what PyTorch does for `async_op=True`, and did for
    /// every collective before 2.8. Records written before this field
    /// existed ran this way.
    #[default]
    Separate,
}

/// Arrival-delay negative control: rank `rank` sleeps at least `delay_ns`
/// before every collective whose per-group sequence number is a multiple of
/// `every` (the achieved delay is recorded per event).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct DelayInjection {
    /// Delayed rank.
    pub rank: u32,
    /// Period in sequence numbers.
    pub every: u64,
    /// Delay in ns.
    pub delay_ns: u64,
}

impl DelayInjection {
    /// Parse `rank=R,every=K,us=D`.
    pub fn parse(s: &str) -> Result<Self> {
        let kv = cli_kv::parse_kv(s, &["rank", "every", "us"])?;
        let rank = cli_kv::req_u32(&kv, "rank", s)?;
        let every = cli_kv::req_u32(&kv, "every", s)? as u64;
        let us = cli_kv::opt_f64(&kv, "us", s)?.ok_or_else(|| anyhow::anyhow!("{s:?}: missing us="))?;
        if every == 0 {
            crate::refuse!(Code::OutOfRange, "--inject-delay {s:?}: every must be at least 1");
        }
        if !(0.0..=10_000_000.0).contains(&us) {
            crate::refuse!(
                Code::OutOfRange,
                "--inject-delay {s:?}: us must be between 0 and 10 s (it is a bounded delay)"
            );
        }
        Ok(Self { rank, every, delay_ns: (us * 1e3).round() as u64 })
    }

    /// Delay for `rank` before the collective with sequence `seq`, if any.
    pub fn delay_for(&self, rank: u32, seq: u64) -> Option<u64> {
        (rank == self.rank && seq % self.every == 0).then_some(self.delay_ns)
    }
}

/// Matrix product shape `m x n x k`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
}

impl FromStr for GemmShape {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let parts: Vec<&str> = s.split(['x', 'X']).collect();
        let nums: Vec<u32> = parts
            .iter()
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| anyhow::anyhow!("--gemm {s:?}: expected N or MxNxK with positive integers"))?;
        let shape = match nums.as_slice() {
            [n] => GemmShape { m: *n, n: *n, k: *n },
            [m, n, k] => GemmShape { m: *m, n: *n, k: *k },
            _ => bail!("--gemm {s:?}: expected N or MxNxK"),
        };
        if shape.m == 0 || shape.n == 0 || shape.k == 0 {
            bail!("--gemm {s:?}: dimensions must be positive");
        }
        Ok(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_rule() {
        let d = DelayInjection::parse("rank=3,every=10,us=2000").unwrap();
        assert_eq!(d.delay_for(3, 20), Some(2_000_000));
        assert_eq!(d.delay_for(3, 21), None);
        assert_eq!(d.delay_for(2, 20), None);
        assert!(DelayInjection::parse("rank=3,every=0,us=1").is_err());
        assert!(DelayInjection::parse("rank=3,every=2,bogus=1").is_err());
    }

    #[test]
    fn gemm_parse() {
        assert_eq!("64".parse::<GemmShape>().unwrap(), GemmShape { m: 64, n: 64, k: 64 });
        assert_eq!("8x16x32".parse::<GemmShape>().unwrap(), GemmShape { m: 8, n: 16, k: 32 });
        assert!("0".parse::<GemmShape>().is_err());
        assert!("axb".parse::<GemmShape>().is_err());
    }
}

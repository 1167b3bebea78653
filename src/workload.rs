//! What a rank runs: the phase vocabulary of SPEC §2 and the workload knobs.
//!
//! Consumes command-line values; produces a validated [`WorkloadSpec`] that is
//! recorded verbatim in every shard. Refuses unknown phases, repeated phases,
//! sizes that are not whole elements, and empty workloads.
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A phase: one way of executing the collectives (SPEC §2).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// All-reduce alone per size: the microbenchmark proxy.
    Isolated,
    /// GEMM then all-reduce; the next GEMM waits on the collective (PyTorch's synchronous semantics).
    Blocking,
    /// Issue the all-reduce, run the next layer's GEMM, then wait.
    Async,
    /// Collectives only, paced by the source trace's gaps.
    Replay,
    /// Each gap filled with round(gap/quantum) GEMMs run before the collective.
    Fill,
    /// Async issue; the gap's GEMMs placed between issue and wait (a stress proxy).
    Overlap,
    /// Ablation: fill's GEMMs, then async issue with an immediate wait.
    AsyncWaitImmediate,
    /// Ablation: async issue, host-only busy work for the gap, then wait.
    HostDelay,
    /// Ablation: fill with a memory-bound kernel instead of a GEMM.
    MemboundFill,
}

impl Phase {
    /// Every phase, in the canonical order.
    pub const ALL: [Phase; 9] = [
        Phase::Isolated,
        Phase::Blocking,
        Phase::Async,
        Phase::Replay,
        Phase::Fill,
        Phase::Overlap,
        Phase::AsyncWaitImmediate,
        Phase::HostDelay,
        Phase::MemboundFill,
    ];

    /// Name as used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Isolated => "isolated",
            Phase::Blocking => "blocking",
            Phase::Async => "async",
            Phase::Replay => "replay",
            Phase::Fill => "fill",
            Phase::Overlap => "overlap",
            Phase::AsyncWaitImmediate => "async-wait-immediate",
            Phase::HostDelay => "host-delay",
            Phase::MemboundFill => "membound-fill",
        }
    }

    /// Whether the phase consumes a source trace of gaps.
    pub fn needs_trace(self) -> bool {
        matches!(
            self,
            Phase::Replay | Phase::Fill | Phase::Overlap | Phase::AsyncWaitImmediate | Phase::HostDelay | Phase::MemboundFill
        )
    }

    /// Whether the phase has tokens (per-token latency is meaningful).
    pub fn has_tokens(self) -> bool {
        self != Phase::Isolated
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Phase {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = Phase::ALL.iter().map(|p| p.name()).collect();
                anyhow::anyhow!("unknown phase {s:?} (known: {})", names.join(", "))
            })
    }
}

/// Parse a comma-separated phase list; `all` expands to the six main phases.
pub fn parse_phases(s: &str) -> Result<Vec<Phase>> {
    let mut out: Vec<Phase> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<Phase> = if part == "all" {
            Phase::ALL[..6].to_vec()
        } else {
            vec![part.parse()?]
        };
        for p in add {
            if out.contains(&p) {
                bail!("--phases: {p} is listed twice");
            }
            out.push(p);
        }
    }
    if out.is_empty() {
        bail!("--phases: at least one phase is required");
    }
    Ok(out)
}

/// Residual handling for fill quantization.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FillResidual {
    /// Carry the rounding error into the next gap so errors do not accumulate.
    Carry,
    /// Round each gap independently.
    Drop,
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
        let kv = crate::cli_kv::parse_kv(s, &["rank", "every", "us"])?;
        let rank = crate::cli_kv::req_u32(&kv, "rank", s)?;
        let every = crate::cli_kv::req_u32(&kv, "every", s)? as u64;
        let us = crate::cli_kv::opt_f64(&kv, "us", s)?.ok_or_else(|| anyhow::anyhow!("{s:?}: missing us="))?;
        if every == 0 {
            bail!("--inject-delay {s:?}: every must be at least 1");
        }
        if !(0.0..=10_000_000.0).contains(&us) {
            bail!("--inject-delay {s:?}: us must be between 0 and 10 s (it is a bounded delay)");
        }
        Ok(Self { rank, every, delay_ns: (us * 1e3).round() as u64 })
    }

    /// Delay for `rank` before the collective with sequence `seq`, if any.
    pub fn delay_for(&self, rank: u32, seq: u64) -> Option<u64> {
        (rank == self.rank && seq % self.every == 0).then_some(self.delay_ns)
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
        let nums: Vec<u32> = parts.iter().map(|p| p.trim().parse::<u32>()).collect::<Result<_, _>>()
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

/// The workload as run; recorded in every shard.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Phases in execution order.
    pub phases: Vec<Phase>,
    /// Timed tokens per workload phase.
    pub tokens: u32,
    /// Warm-up tokens run (and recorded, flagged) before the timed ones.
    pub warmup_tokens: u32,
    /// Layers per token (one GEMM and one all-reduce each).
    pub layers: u32,
    /// Message sizes cycled per collective, in bytes.
    pub sizes_bytes: Vec<u64>,
    /// Sizes swept by `isolated` (`--min-bytes/--max-bytes/--step-factor`);
    /// empty: `isolated` uses `sizes_bytes`. Absent in older records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolated_sizes_bytes: Vec<u64>,
    /// CUDA-graph mode (`--graph`): the isolated phase captures each size's
    /// timed iterations into one CUDA graph and launches it once. Absent in older records.
    #[serde(default)]
    pub graph: bool,
    /// GEMM shape.
    pub gemm: GemmShape,
    /// Timed iterations per size in `isolated`.
    pub iters: u32,
    /// Warm-up iterations per size in `isolated`.
    pub warmup_iters: u32,
    /// Validate the reduced result on this many collectives per phase.
    pub check: u32,
    /// Fill residual policy.
    pub fill_residual: FillResidual,
    /// Bytes moved by one memory-bound fill unit.
    pub membound_bytes: u64,
}

impl WorkloadSpec {
    /// The isolated phase alone at one size, no warm-up, no checks (benchmarks).
    pub fn isolated_only(bytes: u64, iters: u32, gemm: GemmShape) -> Self {
        Self {
            phases: vec![Phase::Isolated],
            tokens: 1,
            warmup_tokens: 0,
            layers: 1,
            sizes_bytes: vec![bytes],
            isolated_sizes_bytes: Vec::new(),
            graph: false,
            gemm,
            iters,
            warmup_iters: 0,
            check: 0,
            fill_residual: FillResidual::Carry,
            membound_bytes: 4096,
        }
    }

    /// Check internal consistency.
    pub fn validate(&self) -> Result<()> {
        if self.tokens == 0 || self.layers == 0 {
            bail!("--tokens and --layers must be at least 1");
        }
        if self.phases.contains(&Phase::Isolated) && self.iters == 0 {
            bail!("--iters must be at least 1 when isolated runs");
        }
        for &b in self.sizes_bytes.iter().chain(&self.isolated_sizes_bytes) {
            if b == 0 || b % 4 != 0 {
                bail!("--sizes: {b} bytes is not a whole number of f32 elements");
            }
        }
        Ok(())
    }

    /// Message size of the `index`-th collective of a workload phase.
    pub fn size_at(&self, index: u64) -> u64 {
        self.sizes_bytes[(index % self.sizes_bytes.len() as u64) as usize]
    }

    /// Upper estimate of device timing events one pass needs (4 per
    /// collective: its interval and the compute stream's wait; 2 per compute
    /// interval; 2 per token; plus the anchor), so none is created mid-pass.
    pub fn device_events_per_pass(&self) -> usize {
        let tokens = (self.tokens + self.warmup_tokens) as usize;
        let workload = tokens * self.layers as usize * 6 + tokens * 2;
        let isolated = self.isolated_sizes().len() * ((self.iters + self.warmup_iters) as usize + 1);
        workload.max(isolated) + 64
    }

    /// The sizes the isolated phase runs.
    pub fn isolated_sizes(&self) -> &[u64] {
        if self.isolated_sizes_bytes.is_empty() {
            &self.sizes_bytes
        } else {
            &self.isolated_sizes_bytes
        }
    }

    /// Largest message size of any phase.
    pub fn max_bytes(&self) -> u64 {
        self.sizes_bytes.iter().chain(&self.isolated_sizes_bytes).copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sweep_follows_nccl_tests() {
        assert_eq!(size_sweep(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(size_sweep(8, 100, 4).unwrap(), vec![8, 32]);
        assert!(size_sweep(8, 4, 2).unwrap_err().to_string().contains("--max-bytes"));
        assert!(size_sweep(8, 64, 1).unwrap_err().to_string().contains("--step-factor"));
        assert!(size_sweep(6, 64, 2).unwrap_err().to_string().contains("multiple of 4"));
    }

    #[test]
    fn phases_parse() {
        assert_eq!(parse_phases("blocking,async").unwrap(), vec![Phase::Blocking, Phase::Async]);
        assert_eq!(parse_phases("all").unwrap().len(), 6);
        assert!(parse_phases("blocking,blocking").is_err());
        let e = parse_phases("warp").unwrap_err().to_string();
        assert!(e.contains("unknown phase") && e.contains("membound-fill"), "{e}");
    }
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

//! What a rank runs: the phase vocabulary and the workload knobs.
//!
//! Consumes command-line values; produces a validated [`WorkloadSpec`] that is
//! recorded verbatim in every shard. Refuses unknown phases, repeated phases,
//! sizes that are not whole elements, empty workloads, and model shapes that
//! do not split evenly over the tensor-parallel degree.
//!
//! The two workload shapes: docs/METHODS.md, "Workload shapes".
mod elements;
mod knobs;
mod model;
mod phase;
mod sweep;

pub use elements::{Dtype, NotARunDtype, ReduceOp};
pub use knobs::{CommStream, DelayInjection, FillResidual, GemmShape};
pub use model::{ModelGemm, ModelRequest, ModelShape, ModelWorkload};
pub(crate) use phase::parse_phases;
pub use phase::Phase;
pub(crate) use sweep::size_sweep;
pub use sweep::SweepKind;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// One step of a workload phase: GEMMs, then one all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Layer index.
    pub layer: u32,
    /// GEMMs run before the collective (indices into [`WorkloadSpec::gemm_shapes`]).
    pub gemms: &'static [usize],
    /// All-reduce size in bytes.
    pub bytes: u64,
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
    /// Layers per token (synthetic: one GEMM and one all-reduce each; model: see [`ModelWorkload`]).
    pub layers: u32,
    /// Message sizes cycled per collective, in bytes (a model has one: `m x hidden` elements).
    pub sizes_bytes: Vec<u64>,
    /// Sizes swept by `isolated` (`--min-bytes/--max-bytes/--step-factor`);
    /// empty: `isolated` uses `sizes_bytes`. Absent in older records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolated_sizes_bytes: Vec<u64>,
    /// CUDA-graph mode (`--graph`): the isolated phase captures each size's
    /// timed iterations into one CUDA graph and launches it once; `blocking`
    /// and `async` capture one token's work and launch it per token. Absent
    /// in older records.
    #[serde(default)]
    pub graph: bool,
    /// Stream of the blocking phase's collectives (cuda backend; `async`,
    /// `overlap` and the traced phases always use a stream of their own, as
    /// an asynchronous collective does). Absent in older records, which ran
    /// on a separate stream.
    #[serde(default)]
    pub comm_stream: CommStream,
    /// Unit GEMM shape: the synthetic layer's product and the fill quantum.
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
    /// The collective the isolated phase sweeps (`--collective`); absent: all-reduce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated_collective: Option<SweepKind>,
    /// The isolated sweep's reduction (`--op`), for a reducing kind; absent: sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated_op: Option<ReduceOp>,
    /// Element type of the all-reduces (f32 in shards before format 4).
    #[serde(default = "dtype_f32")]
    pub dtype: Dtype,
    /// Element type of the GEMMs' inputs and outputs; absent in shards before format 4.
    #[serde(default)]
    pub gemm_dtype: Option<Dtype>,
    /// Element type the GEMMs accumulate in; absent in shards before format 4.
    #[serde(default)]
    pub gemm_accumulate_dtype: Option<Dtype>,
    /// The model shape run; `None` is the synthetic loop (and every shard before format 4).
    #[serde(default)]
    pub model: Option<ModelWorkload>,
}

fn dtype_f32() -> Dtype {
    Dtype::F32
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
            comm_stream: CommStream::Separate,
            gemm,
            iters,
            warmup_iters: 0,
            check: 0,
            fill_residual: FillResidual::Carry,
            membound_bytes: 4096,
            isolated_collective: None,
            isolated_op: None,
            dtype: Dtype::F32,
            gemm_dtype: None,
            gemm_accumulate_dtype: None,
            model: None,
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
        let e = self.dtype.size_bytes();
        for &b in self.sizes_bytes.iter().chain(&self.isolated_sizes_bytes) {
            if b == 0 || b % e != 0 {
                bail!("--sizes: {b} bytes is not a whole number of {} elements", self.dtype.name());
            }
        }
        if self.sizes_bytes.is_empty() {
            bail!("internal: a workload without collective sizes");
        }
        if self.graph {
            // fill, overlap and membound-fill capture a token of the trace's work; the others pace by host time
            if let Some(p) = self.phases.iter().find(|p| p.needs_trace() && !p.runs_in_a_graph()) {
                bail!(
                    "--graph: phase {p} paces collectives by host time, which a graph cannot hold (run it without \
                        --graph; fill, overlap and membound-fill run as graphs)"
                );
            }
        }
        Ok(())
    }

    /// Collectives per layer: two for a model (attention, MLP), one for the synthetic loop.
    pub fn collectives_per_layer(&self) -> u64 {
        if self.model.is_some() {
            2
        } else {
            1
        }
    }

    /// Collectives per token.
    pub fn collectives_per_token(&self) -> u64 {
        self.layers as u64 * self.collectives_per_layer()
    }

    /// The `index`-th step of a workload phase (counted over the whole phase,
    /// warm-up tokens included): the GEMMs (indices into [`Self::gemm_shapes`])
    /// that produce the tensor, then the all-reduce of `bytes`.
    pub fn step(&self, index: u64) -> Step {
        let per_layer = self.collectives_per_layer();
        let layer = ((index / per_layer) % self.layers as u64) as u32;
        let gemms: &'static [usize] = match (&self.model, index % per_layer) {
            (None, _) => &[0],
            (Some(_), 0) => &[1, 2],
            (Some(_), _) => &[3, 4],
        };
        let bytes = self.sizes_bytes[(index % self.sizes_bytes.len() as u64) as usize];
        Step { layer, gemms, bytes }
    }

    /// Every matrix product a backend prepares: index 0 is the unit GEMM
    /// (`--gemm`: the synthetic layer and the fill quantum), then the model's
    /// per-rank QKV, output, gate/up and down products.
    pub fn gemm_shapes(&self) -> Vec<GemmShape> {
        let mut v = vec![self.gemm];
        if let Some(m) = &self.model {
            v.extend(m.gemms.iter().map(|g| g.shape));
        }
        v
    }

    /// Distinct weight sets per model GEMM (a real model streams different
    /// weights in every layer; 1 reuses one set).
    pub fn weight_sets(&self) -> u32 {
        self.model.as_ref().map(|m| m.weight_sets).unwrap_or(1)
    }

    /// Upper estimate of device timing events one pass needs (4 per
    /// collective: its interval and the compute stream's wait; 2 per compute
    /// interval; 2 per token; plus the anchor), so none is created mid-pass.
    pub fn device_events_per_pass(&self) -> usize {
        let tokens = (self.tokens + self.warmup_tokens) as usize;
        let workload = tokens * self.collectives_per_token() as usize * 6 + tokens * 2;
        let isolated = self.isolated_sizes().len() * ((self.iters + self.warmup_iters) as usize + 1);
        workload.max(isolated) + 64
    }

    /// The collective the isolated phase sweeps.
    pub fn sweep_kind(&self) -> SweepKind {
        self.isolated_collective.unwrap_or_default()
    }

    /// The reduction of the isolated sweep (sum unless `--op` said otherwise).
    pub fn sweep_op(&self) -> ReduceOp {
        self.isolated_op.unwrap_or(ReduceOp::Sum)
    }

    /// Whether the isolated sweep is recorded on a world group of its own
    /// (every sweep but the sum all-reduce, which is group 0's); another
    /// reduction than the sum runs through the trace executor.
    pub fn sweep_has_own_group(&self) -> bool {
        self.sweep_kind() != SweepKind::default() || self.sweep_op() != ReduceOp::Sum
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

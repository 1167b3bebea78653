//! What a rank runs: the phase vocabulary and the workload knobs.
//!
//! Consumes command-line values; produces a validated [`WorkloadSpec`] that is
//! recorded verbatim in every shard. Refuses unknown phases, repeated phases,
//! sizes that are not whole elements, empty workloads, and model shapes that
//! do not split evenly over the tensor-parallel degree.
//!
//! Two workload shapes exist. The *model* shape (the default) is one decode
//! (or prefill) step of a Megatron-style tensor-parallel transformer
//! (Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language
//! Models Using Model Parallelism", arXiv:1909.08053, §3): per layer, the
//! attention block's QKV projection is split by columns and its output
//! projection by rows, then one all-reduce of the block's output; the MLP's
//! gate/up projection is split by columns and its down projection by rows,
//! then a second all-reduce. Each all-reduce carries `m x hidden` elements
//! (`m` = batch for decode, batch x prompt tokens for prefill). The attention
//! core, norms and activation functions are not run: only the GEMMs and the
//! collectives are. The *synthetic* shape is the earlier loop: one square
//! GEMM and one all-reduce per layer, sizes cycling through `--sizes`.
use crate::core::ranges;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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
    pub fn kind(self) -> crate::core::collective::TraceKind {
        use crate::core::collective::TraceKind as T;
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

/// A phase: one way of executing the collectives (docs/ARCHITECTURE.md §4).
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
        matches!(self, Phase::Replay | Phase::Fill | Phase::Overlap | Phase::AsyncWaitImmediate | Phase::HostDelay | Phase::MemboundFill)
    }

    /// Whether the phase runs as one captured token per launch under `--graph`.
    pub fn runs_in_a_graph(self) -> bool {
        matches!(self, Phase::Isolated | Phase::Blocking | Phase::Async | Phase::Fill | Phase::Overlap | Phase::MemboundFill)
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
        Phase::ALL.into_iter().find(|p| p.name() == s.trim()).ok_or_else(|| {
            let names: Vec<_> = Phase::ALL.iter().map(|p| p.name()).collect();
            anyhow::anyhow!("unknown phase {s:?} (known: {})", names.join(", "))
        })
    }
}

/// Parse a comma-separated phase list; `all` expands to the six main phases.
pub fn parse_phases(s: &str) -> Result<Vec<Phase>> {
    let mut out: Vec<Phase> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<Phase> = if part == "all" { Phase::ALL[..6].to_vec() } else { vec![part.parse()?] };
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
        let kv = crate::core::cli_kv::parse_kv(s, &["rank", "every", "us"])?;
        let rank = crate::core::cli_kv::req_u32(&kv, "rank", s)?;
        let every = crate::core::cli_kv::req_u32(&kv, "every", s)? as u64;
        let us = crate::core::cli_kv::opt_f64(&kv, "us", s)?.ok_or_else(|| anyhow::anyhow!("{s:?}: missing us="))?;
        if every == 0 {
            crate::refuse!(crate::core::refusal::Code::OutOfRange, "--inject-delay {s:?}: every must be at least 1");
        }
        if !(0.0..=10_000_000.0).contains(&us) {
            crate::refuse!(crate::core::refusal::Code::OutOfRange, "--inject-delay {s:?}: us must be between 0 and 10 s (it is a bounded delay)");
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

/// Published dimensions of a transformer (whole model, before any split).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ModelShape {
    /// Preset name, or `custom` for `--model-dims`.
    pub name: String,
    /// Hidden size.
    pub hidden: u32,
    /// FFN (intermediate) size.
    pub ffn: u32,
    /// Layers of the published model.
    pub layers: u32,
    /// Query width: attention heads x head dimension.
    pub q_dim: u32,
    /// Key (and value) width: key/value heads x head dimension; below `q_dim`
    /// under grouped-query attention (Ainslie et al., "GQA: Training
    /// Generalized Multi-Query Transformer Models from Multi-Head
    /// Checkpoints", arXiv:2305.13245), so the fused QKV projection's output
    /// is `q_dim + 2 x kv_dim`.
    pub kv_dim: u32,
    /// Where the dimensions come from.
    pub source: String,
}

/// Model presets. Llama 3 dimensions from the models' published
/// `config.json` (huggingface.co/meta-llama/Meta-Llama-3-8B and
/// Meta-Llama-3-70B): `hidden_size`, `intermediate_size`,
/// `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`; head
/// dimension = hidden / heads = 128.
pub const MODEL_PRESETS: [&str; 3] = ["llama3-8b", "llama3-70b", "tiny"];

impl ModelShape {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let llama = "Meta-Llama-3 config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads)";
        let (hidden, ffn, layers, heads, kv_heads, source) = match name {
            // 32 heads, 8 key/value heads, head dimension 128
            "llama3-8b" => (4096, 14336, 32, 32, 8, llama),
            // 64 heads, 8 key/value heads, head dimension 128
            "llama3-70b" => (8192, 28672, 80, 64, 8, llama),
            // not a published model: a Llama-proportioned shape small enough for CPU tests
            "tiny" => (512, 1792, 4, 8, 2, "test shape with Llama 3 proportions (FFN 3.5 x hidden, 4 query heads per key/value head); not a published model"),
            other => bail!("--model {other:?}: unknown (known: {}, synthetic)", MODEL_PRESETS.join(", ")),
        };
        let head_dim = hidden / heads;
        Ok(Self { name: name.into(), hidden, ffn, layers, q_dim: heads * head_dim, kv_dim: kv_heads * head_dim, source: source.into() })
    }

    /// `H,F,LAYERS` (multi-head attention: key/value width = H) or `H,F,LAYERS,KV_DIM`.
    pub fn parse_dims(s: &str) -> Result<Self> {
        let nums: Vec<u32> = s
            .split(',')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| anyhow::anyhow!("--model-dims {s:?}: expected H,F,LAYERS or H,F,LAYERS,KV_DIM (positive integers)"))?;
        let (hidden, ffn, layers, kv_dim) = match nums.as_slice() {
            [h, f, l] => (*h, *f, *l, *h),
            [h, f, l, kv] => (*h, *f, *l, *kv),
            _ => bail!("--model-dims {s:?}: expected H,F,LAYERS or H,F,LAYERS,KV_DIM"),
        };
        if nums.contains(&0) {
            bail!("--model-dims {s:?}: dimensions must be positive");
        }
        Ok(Self { name: "custom".into(), hidden, ffn, layers, q_dim: hidden, kv_dim, source: format!("--model-dims {s}") })
    }
}

/// One per-rank matrix product of a model layer.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ModelGemm {
    /// `qkv`, `out`, `gate_up` or `down`.
    pub name: String,
    /// `column` (output split by TP) or `row` (input split by TP, followed by the all-reduce).
    pub split: String,
    /// Per-rank shape: m = tokens in flight, k = input width, n = output width.
    pub shape: GemmShape,
}

/// A model shape as run on this job's ranks.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ModelWorkload {
    /// The whole model's dimensions.
    pub shape: ModelShape,
    /// Tensor-parallel degree (= the world size).
    pub tensor_parallel: u32,
    /// Sequences in the batch.
    pub batch: u32,
    /// Prompt tokens per sequence when every step is a prefill; `None` = decode (one token per sequence).
    pub prefill_tokens: Option<u32>,
    /// Distinct weight sets per GEMM: the layer count where the device holds
    /// them (each layer streams its own weights from memory, as a real model
    /// does), else 1 (every layer reuses one set).
    pub weight_sets: u32,
    /// Per-rank GEMMs of one layer in execution order: qkv, out (then all-reduce), gate_up, down (then all-reduce).
    pub gemms: Vec<ModelGemm>,
}

/// A model shape asked for on the command line, before the rank count is known.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// Dimensions.
    pub shape: ModelShape,
    /// `--batch`.
    pub batch: u32,
    /// `--prefill-tokens`.
    pub prefill_tokens: Option<u32>,
    /// `--layers`, overriding the model's own layer count.
    pub layers: Option<u32>,
    /// Whether the backend holds one weight set per layer (see [`ModelWorkload::weight_sets`]).
    pub per_layer_weights: bool,
}

impl WorkloadSpec {
    /// Make this the model workload of `req` split over `tp` ranks: layers,
    /// the one all-reduce size (`m x hidden` of [`WorkloadSpec::dtype`]) and
    /// the per-rank GEMMs. Refuses shapes that do not split evenly.
    pub fn bind_model(&mut self, req: &ModelRequest, tp: u32) -> Result<()> {
        let layers = req.layers.unwrap_or(req.shape.layers);
        let sets = if req.per_layer_weights { layers } else { 1 };
        let mw = ModelWorkload::new(req.shape.clone(), tp, req.batch, req.prefill_tokens, sets)?;
        self.layers = layers;
        self.sizes_bytes = vec![mw.allreduce_bytes(self.dtype)];
        self.model = Some(mw);
        self.check_model_ranges()?;
        self.validate()
    }

    /// A model shape's sizes once bound to the world size (`spec.model` set):
    /// tokens in flight, the all-reduce, every per-rank GEMM matrix and the
    /// collectives of one phase.
    fn check_model_ranges(&self) -> Result<()> {
        let spec = self;
        let Some(m) = &spec.model else { return Ok(()) };
        ranges::int("--batch x --prefill-tokens", m.tokens_in_flight(), 1, ranges::MAX_TOKENS_IN_FLIGHT)?;
        let bytes = m.allreduce_bytes(spec.dtype);
        if bytes > ranges::MAX_MESSAGE_BYTES {
            return Err(ranges::out(&format!("model {} all-reduce of tokens x hidden (bytes)", m.shape.name), bytes, "at most 1 GiB"));
        }
        for g in &m.gemms {
            let s = g.shape;
            for (what, elems) in [("m x k", s.m as u64 * s.k as u64), ("k x n", s.k as u64 * s.n as u64), ("m x n", s.m as u64 * s.n as u64)] {
                if elems > ranges::MAX_MATRIX_ELEMS {
                    return Err(ranges::out(&format!("model {} per-rank GEMM {} {what} (elements)", m.shape.name, g.name), elems, "at most 2^28"));
                }
            }
        }
        ranges::int("layers", spec.layers, 1, 10_000)?;
        let per_phase = (spec.tokens as u64 + spec.warmup_tokens as u64) * spec.layers as u64 * spec.collectives_per_layer();
        ranges::int("(--tokens + --warmup-tokens) x layers x collectives per layer", per_phase, 1, ranges::MAX_PHASE_COLLECTIVES)
    }
}

impl ModelWorkload {
    /// Split `shape` over `tp` ranks; refuses widths that do not divide.
    pub fn new(shape: ModelShape, tp: u32, batch: u32, prefill_tokens: Option<u32>, weight_sets: u32) -> Result<Self> {
        if tp == 0 || batch == 0 || prefill_tokens == Some(0) {
            bail!("--batch and --prefill-tokens must be at least 1");
        }
        for (what, v) in [("query width", shape.q_dim), ("key/value width", shape.kv_dim), ("FFN size", shape.ffn)] {
            if v % tp != 0 {
                bail!("model {}: {what} {v} does not split over tensor-parallel degree {tp} (the rank count)", shape.name);
            }
        }
        let m64 = batch as u64 * prefill_tokens.unwrap_or(1) as u64;
        let m = u32::try_from(m64)
            .ok()
            .filter(|m| *m <= i32::MAX as u32)
            .ok_or_else(|| anyhow::anyhow!("--batch x --prefill-tokens = {m64} tokens is too large"))?;
        let h = shape.hidden;
        let g = |name: &str, split: &str, n: u32, k: u32| ModelGemm { name: name.into(), split: split.into(), shape: GemmShape { m, n, k } };
        let gemms = vec![
            g("qkv", "column", (shape.q_dim + 2 * shape.kv_dim) / tp, h),
            g("out", "row", h, shape.q_dim / tp),
            g("gate_up", "column", 2 * shape.ffn / tp, h),
            g("down", "row", h, shape.ffn / tp),
        ];
        Ok(Self { shape, tensor_parallel: tp, batch, prefill_tokens, weight_sets: weight_sets.max(1), gemms })
    }

    /// Tokens in flight per step (the GEMMs' m).
    pub fn tokens_in_flight(&self) -> u64 {
        self.batch as u64 * self.prefill_tokens.unwrap_or(1) as u64
    }

    /// All-reduce size: tokens in flight x hidden elements of `dtype`.
    pub fn allreduce_bytes(&self, dtype: Dtype) -> u64 {
        self.tokens_in_flight() * self.shape.hidden as u64 * dtype.size_bytes()
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
                bail!("--graph: phase {p} paces collectives by host time, which a graph cannot hold (run it without --graph; fill, overlap and membound-fill run as graphs)");
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

    /// Whether the isolated phase runs through the trace executor (every
    /// sweep but the sum all-reduce, which the backend's own path runs).
    pub fn sweep_uses_executor(&self) -> bool {
        self.sweep_kind() != SweepKind::AllReduce || self.sweep_op() != ReduceOp::Sum
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
    fn model_spec(req: &ModelRequest, tp: u32) -> Result<WorkloadSpec> {
        let mut s = WorkloadSpec::isolated_only(4, 1, GemmShape { m: 8, n: 8, k: 8 });
        s.dtype = Dtype::Bf16;
        s.bind_model(req, tp)?;
        Ok(s)
    }

    fn request(name: &str) -> ModelRequest {
        ModelRequest { shape: ModelShape::preset(name).unwrap(), batch: 1, prefill_tokens: None, layers: None, per_layer_weights: true }
    }

    #[test]
    fn llama3_8b_splits_over_two_ranks_as_megatron_does() {
        let s = model_spec(&request("llama3-8b"), 2).unwrap();
        let m = s.model.as_ref().unwrap();
        // QKV output under GQA: 4096 query + 2 x (8 heads x 128) key/value = 6144, split by columns
        let shapes: Vec<(&str, u32, u32, u32)> = m.gemms.iter().map(|g| (g.name.as_str(), g.shape.m, g.shape.n, g.shape.k)).collect();
        assert_eq!(shapes, vec![("qkv", 1, 3072, 4096), ("out", 1, 4096, 2048), ("gate_up", 1, 14336, 4096), ("down", 1, 4096, 7168)]);
        assert_eq!(s.layers, 32);
        assert_eq!(m.weight_sets, 32);
        assert_eq!(s.sizes_bytes, vec![4096 * 2], "one token x hidden in bf16");
        assert_eq!(s.collectives_per_token(), 64);
        assert_eq!(s.gemm_shapes().len(), 5);
    }

    #[test]
    fn llama3_70b_and_prefill_batch_shapes() {
        let mut req = request("llama3-70b");
        req.batch = 4;
        req.prefill_tokens = Some(128);
        req.layers = Some(2);
        let s = model_spec(&req, 8).unwrap();
        let m = s.model.as_ref().unwrap();
        assert_eq!(m.gemms[0].shape, GemmShape { m: 512, n: (8192 + 2048) / 8, k: 8192 });
        assert_eq!(m.gemms[3].shape, GemmShape { m: 512, n: 8192, k: 28672 / 8 });
        assert_eq!(s.layers, 2);
        assert_eq!(s.sizes_bytes, vec![512 * 8192 * 2]);
        assert_eq!(s.model.as_ref().unwrap().shape.layers, 80, "the published layer count is kept beside the override");
    }

    #[test]
    fn steps_alternate_attention_and_mlp_then_advance_the_layer() {
        let mut req = request("tiny");
        req.per_layer_weights = false;
        let s = model_spec(&req, 4).unwrap();
        let steps: Vec<(u32, &[usize])> = (0..10).map(|i| s.step(i)).map(|st| (st.layer, st.gemms)).collect();
        assert_eq!(&steps[..4], &[(0, &[1usize, 2][..]), (0, &[3, 4][..]), (1, &[1, 2][..]), (1, &[3, 4][..])]);
        // tiny has 4 layers: the ninth step is layer 0 of the next token
        assert_eq!(steps[8].0, 0);
        assert_eq!(s.weight_sets(), 1);
        let synth = WorkloadSpec { sizes_bytes: vec![4, 8, 12], layers: 2, ..WorkloadSpec::isolated_only(4, 1, GemmShape { m: 1, n: 1, k: 1 }) };
        let st: Vec<(u32, u64)> = (0..4).map(|i| synth.step(i)).map(|x| (x.layer, x.bytes)).collect();
        assert_eq!(st, vec![(0, 4), (1, 8), (0, 12), (1, 4)]);
    }

    #[test]
    fn shapes_that_do_not_split_are_refused() {
        let e = model_spec(&request("tiny"), 3).unwrap_err().to_string();
        assert!(e.contains("does not split over tensor-parallel degree 3"), "{e}");
        assert!(ModelShape::preset("gpt-9").unwrap_err().to_string().contains("unknown"));
        let d = ModelShape::parse_dims("256,512,2,64").unwrap();
        assert_eq!((d.hidden, d.ffn, d.layers, d.q_dim, d.kv_dim), (256, 512, 2, 256, 64));
        assert_eq!(ModelShape::parse_dims("256,512,2").unwrap().kv_dim, 256, "no KV_DIM: multi-head attention");
        assert!(ModelShape::parse_dims("256,512").is_err());
        assert!(ModelShape::parse_dims("256,0,2").is_err());
        let mut req = request("tiny");
        req.batch = 0;
        assert!(model_spec(&req, 1).is_err());
    }

    #[test]
    fn graph_mode_refuses_the_phases_that_pace_by_host_time() {
        let mut s = model_spec(&request("tiny"), 2).unwrap();
        s.graph = true;
        s.phases = vec![Phase::Blocking, Phase::Async, Phase::Fill, Phase::Overlap, Phase::MemboundFill];
        assert!(s.validate().is_ok());
        for p in [Phase::Replay, Phase::HostDelay, Phase::AsyncWaitImmediate] {
            s.phases = vec![Phase::Fill, p];
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("--graph: phase {p}")) && e.contains("host time"), "{e}");
        }
    }

    #[test]
    fn gemm_parse() {
        assert_eq!("64".parse::<GemmShape>().unwrap(), GemmShape { m: 64, n: 64, k: 64 });
        assert_eq!("8x16x32".parse::<GemmShape>().unwrap(), GemmShape { m: 8, n: 16, k: 32 });
        assert!("0".parse::<GemmShape>().is_err());
        assert!("axb".parse::<GemmShape>().is_err());
    }
}

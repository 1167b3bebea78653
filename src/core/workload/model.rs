//! The model workload shape: a transformer's published dimensions
//! ([`ModelShape`]: a preset or `--model-dims`), the request before the rank
//! count is known ([`ModelRequest`]) and its per-rank split ([`ModelWorkload`]),
//! bound into a spec by [`WorkloadSpec::bind_model`]. Refuses unknown presets,
//! widths that do not split over the tensor-parallel degree, and sizes out of range.
use super::elements::Dtype;
use super::knobs::GemmShape;
use super::WorkloadSpec;
use crate::core::ranges;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

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
pub(crate) const MODEL_PRESETS: [&str; 3] = ["llama3-8b", "llama3-70b", "tiny"];

impl ModelShape {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let llama =
            "Meta-Llama-3 config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, \
                num_key_value_heads)";
        let (hidden, ffn, layers, heads, kv_heads, source) = match name {
            // 32 heads, 8 key/value heads, head dimension 128
            "llama3-8b" => (4096, 14336, 32, 32, 8, llama),
            // 64 heads, 8 key/value heads, head dimension 128
            "llama3-70b" => (8192, 28672, 80, 64, 8, llama),
            // not a published model: a Llama-proportioned shape small enough for CPU tests
            "tiny" => (
                512,
                1792,
                4,
                8,
                2,
                "test shape with Llama 3 proportions (FFN 3.5 x hidden, 4 query heads per key/value head); not a \
                    published model",
            ),
            other => bail!("--model {other:?}: unknown (known: {}, synthetic)", MODEL_PRESETS.join(", ")),
        };
        let head_dim = hidden / heads;
        Ok(Self {
            name: name.into(),
            hidden,
            ffn,
            layers,
            q_dim: heads * head_dim,
            kv_dim: kv_heads * head_dim,
            source: source.into(),
        })
    }

    /// `H,F,LAYERS` (multi-head attention: key/value width = H) or `H,F,LAYERS,KV_DIM`.
    pub fn parse_dims(s: &str) -> Result<Self> {
        let nums: Vec<u32> = s.split(',').map(|p| p.trim().parse::<u32>()).collect::<Result<_, _>>().map_err(|_| {
            anyhow::anyhow!("--model-dims {s:?}: expected H,F,LAYERS or H,F,LAYERS,KV_DIM (positive integers)")
        })?;
        let (hidden, ffn, layers, kv_dim) = match nums.as_slice() {
            [h, f, l] => (*h, *f, *l, *h),
            [h, f, l, kv] => (*h, *f, *l, *kv),
            _ => bail!("--model-dims {s:?}: expected H,F,LAYERS or H,F,LAYERS,KV_DIM"),
        };
        if nums.contains(&0) {
            bail!("--model-dims {s:?}: dimensions must be positive");
        }
        Ok(Self {
            name: "custom".into(),
            hidden,
            ffn,
            layers,
            q_dim: hidden,
            kv_dim,
            source: format!("--model-dims {s}"),
        })
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
            return Err(ranges::out(
                &format!("model {} all-reduce of tokens x hidden (bytes)", m.shape.name),
                bytes,
                "at most 1 GiB",
            ));
        }
        for g in &m.gemms {
            let s = g.shape;
            for (what, elems) in [
                ("m x k", s.m as u64 * s.k as u64),
                ("k x n", s.k as u64 * s.n as u64),
                ("m x n", s.m as u64 * s.n as u64),
            ] {
                if elems > ranges::MAX_MATRIX_ELEMS {
                    return Err(ranges::out(
                        &format!("model {} per-rank GEMM {} {what} (elements)", m.shape.name, g.name),
                        elems,
                        "at most 2^28",
                    ));
                }
            }
        }
        ranges::int("layers", spec.layers, 1, 10_000)?;
        let per_phase =
            (spec.tokens as u64 + spec.warmup_tokens as u64) * spec.layers as u64 * spec.collectives_per_layer();
        ranges::int(
            "(--tokens + --warmup-tokens) x layers x collectives per layer",
            per_phase,
            1,
            ranges::MAX_PHASE_COLLECTIVES,
        )
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
                bail!(
                    "model {}: {what} {v} does not split over tensor-parallel degree {tp} (the rank count)",
                    shape.name
                );
            }
        }
        let m64 = batch as u64 * prefill_tokens.unwrap_or(1) as u64;
        let m = u32::try_from(m64)
            .ok()
            .filter(|m| *m <= i32::MAX as u32)
            .ok_or_else(|| anyhow::anyhow!("--batch x --prefill-tokens = {m64} tokens is too large"))?;
        let h = shape.hidden;
        let g = |name: &str, split: &str, n: u32, k: u32| ModelGemm {
            name: name.into(),
            split: split.into(),
            shape: GemmShape { m, n, k },
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::workload::Phase;

    fn model_spec(req: &ModelRequest, tp: u32) -> Result<WorkloadSpec> {
        let mut s = WorkloadSpec::isolated_only(4, 1, GemmShape { m: 8, n: 8, k: 8 });
        s.dtype = Dtype::Bf16;
        s.bind_model(req, tp)?;
        Ok(s)
    }

    fn request(name: &str) -> ModelRequest {
        ModelRequest {
            shape: ModelShape::preset(name).unwrap(),
            batch: 1,
            prefill_tokens: None,
            layers: None,
            per_layer_weights: true,
        }
    }

    #[test]
    fn llama3_8b_splits_over_two_ranks_as_megatron_does() {
        let s = model_spec(&request("llama3-8b"), 2).unwrap();
        let m = s.model.as_ref().unwrap();
        // QKV output under GQA: 4096 query + 2 x (8 heads x 128) key/value = 6144, split by columns
        let shapes: Vec<(&str, u32, u32, u32)> =
            m.gemms.iter().map(|g| (g.name.as_str(), g.shape.m, g.shape.n, g.shape.k)).collect();
        assert_eq!(
            shapes,
            vec![("qkv", 1, 3072, 4096), ("out", 1, 4096, 2048), ("gate_up", 1, 14336, 4096), ("down", 1, 4096, 7168)]
        );
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
        let synth = WorkloadSpec {
            sizes_bytes: vec![4, 8, 12],
            layers: 2,
            ..WorkloadSpec::isolated_only(4, 1, GemmShape { m: 1, n: 1, k: 1 })
        };
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
}

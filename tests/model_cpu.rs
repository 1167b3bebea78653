//! Model-shaped workloads on the CPU backend under real mpirun: tensor-parallel
//! GEMM shapes, bf16 (emulated) all-reduces with checked sums, prefill and batch.
mod common;
use commcanary::core::workload::{GemmShape, Phase};
use commcanary::evidence::shard::{ComputeKind, Dtype, Shard, TraceDtype};
use common::*;

#[test]
fn four_ranks_run_the_default_model_shape_in_bf16() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(
        4,
        d.path(),
        &["--phases", "isolated,blocking,async,fill", "--tokens", "4", "--iters", "3", "--check", "4"],
    );
    let s = join_json(&run);
    // tiny: 4 layers, two all-reduces per layer
    assert_eq!(phase(&s, "blocking")["collectives_per_rank"], 4 * 4 * 2);
    assert_eq!(phase(&s, "isolated")["collectives_per_rank"], 3, "one size: batch x hidden");
    for r in 0..4u32 {
        let shard = Shard::read(&run.join(format!("rank-{r:05}.shard"))).unwrap();
        let w = &shard.header.workload;
        let m = w.model.as_ref().expect("the default workload is a model shape");
        assert_eq!((m.shape.name.as_str(), m.tensor_parallel, m.batch, m.prefill_tokens), ("tiny", 4, 1, None));
        let shapes: Vec<GemmShape> = m.gemms.iter().map(|g| g.shape).collect();
        // hidden 512, FFN 1792, query 512, key/value 128, split over 4 ranks
        assert_eq!(
            shapes,
            vec![
                GemmShape { m: 1, n: (512 + 2 * 128) / 4, k: 512 },
                GemmShape { m: 1, n: 512, k: 512 / 4 },
                GemmShape { m: 1, n: 2 * 1792 / 4, k: 512 },
                GemmShape { m: 1, n: 512, k: 1792 / 4 },
            ]
        );
        assert_eq!((w.dtype, w.gemm_dtype, w.gemm_accumulate_dtype), (Dtype::Bf16, Some(Dtype::F32), Some(Dtype::F32)));
        for e in &shard.body.collectives {
            assert_eq!((e.bytes, e.dtype), (512 * 2, TraceDtype::Bf16));
        }
        let blocking: Vec<_> = shard.body.collectives.iter().filter(|e| e.phase == Phase::Blocking).collect();
        assert_eq!(blocking.iter().filter(|e| e.checked).count(), 4, "--check validates bf16 sums");
        // each layer's two all-reduces carry its index; each follows two GEMMs
        let layers: Vec<u32> = blocking.iter().filter(|e| e.token == Some(3)).map(|e| e.layer.unwrap()).collect();
        assert_eq!(layers, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert!(shard
            .body
            .compute
            .iter()
            .filter(|c| c.phase == Phase::Blocking)
            .all(|c| c.kind == ComputeKind::Gemm && c.units == 2));
        assert!(shard.header.unmeasured.iter().any(|u| u.field == "dtype" && u.reason.contains("MPI_UINT16_T")));
        assert!(shard.header.device.facts.iter().any(|(k, v)| k == "collective" && v.contains("bf16 emulated")));
    }
}

#[test]
fn prefill_batch_and_custom_dims_set_the_sizes() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(
        2,
        d.path(),
        &[
            "--phases",
            "blocking",
            "--tokens",
            "2",
            "--model-dims",
            "256,512,2,64",
            "--batch",
            "2",
            "--prefill-tokens",
            "8",
            "--dtype",
            "f32",
            "--check",
            "2",
        ],
    );
    let shard = Shard::read(&run.join("rank-00001.shard")).unwrap();
    let m = shard.header.workload.model.as_ref().unwrap();
    assert_eq!((m.shape.name.as_str(), m.prefill_tokens), ("custom", Some(8)));
    assert_eq!(m.gemms[0].shape, GemmShape { m: 16, n: (256 + 2 * 64) / 2, k: 256 });
    assert!(shard.body.collectives.iter().all(|e| e.bytes == 16 * 256 * 4 && e.dtype == TraceDtype::F32));
    assert_eq!(shard.body.collectives.iter().filter(|e| !e.warmup).count(), 2 * 2 * 2);
}

#[test]
fn a_wrong_bf16_sum_fails_the_run() {
    let d = tempfile::tempdir().unwrap();
    let o = mpirun(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "blocking",
            "--tokens",
            "1",
            "--check",
            "1",
            "--fault",
            "wrong-sum:0",
            "--out",
            d.path().to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("result check failed on rank 0, phase blocking") && err.contains("of bf16"), "{err}");
}

#[test]
fn model_arguments_are_refused_clearly() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().to_str().unwrap();
    let o = mpirun(3, &["rank", "-q", "--backend", "cpu", "--phases", "blocking", "--out", out]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("does not split over tensor-parallel degree 3"), "{err}");
    for (args, needle) in [
        (vec!["rank", "--backend", "cpu", "--sizes", "64KiB"], "--sizes applies to --model synthetic"),
        (vec!["rank", "--backend", "cpu", "--model", "gpt-9"], "unknown"),
        (vec!["rank", "--backend", "cpu", "--model-dims", "4096,14336"], "H,F,LAYERS"),
        (vec!["rank", "--backend", "cpu", "--model", "synthetic", "--batch", "4"], "apply to model shapes"),
        (vec!["rank", "--backend", "cpu", "--graph"], "--graph needs the cuda backend"),
    ] {
        let o = cc(&args);
        let err = assert_refused(&o, "BAD_ARGUMENT");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

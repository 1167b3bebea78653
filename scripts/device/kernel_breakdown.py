#!/usr/bin/env python3
"""Per-token GPU kernel breakdown of a tensor-parallel decode, PyTorch against CommCanary.

Diagnostic for the workload-fidelity gap (CommCanary's graph-mode token slower than
PyTorch's for the same model shape). On a GPU host with PyTorch:

  python3 scripts/device/kernel_breakdown.py torch [--model llama3-8b] [--tokens 16]
  torchrun --standalone --nproc-per-node=2 scripts/device/kernel_breakdown.py torch ...
      the same layer as scripts/device/validate_pytorch.py (its GEMM shapes split over the
      ranks, bf16, distinct weights per layer, the two all-reduces per layer when
      there is more than one rank), captured in a CUDA graph and replayed under
      torch.profiler; rank 0 prints, per kernel name, the count and device time per
      token.
  python3 scripts/device/kernel_breakdown.py commcanary SHARD_JSON [--tokens N]
      the same table from `commcanary inspect rank-00000.shard` of a
      `rank --cupti` run (CUPTI kernel records of its blocking phase).

Device time per token = the kernels' summed durations / tokens; the table's total
is compute time, not token latency (gaps between kernels are not counted).
"""
import argparse
import json
import sys
from collections import defaultdict

sys.path.insert(0, __import__("os").path.dirname(__file__))
from validate_pytorch import MODELS, capture_token, decode_token  # noqa: E402


def table(rows, tokens):
    total = sum(t for _, t in rows.values())
    print(f"{'kernel':<70} {'n/token':>8} {'us/token':>10}")
    for name, (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:70]:<70} {n / tokens:>8.1f} {t / tokens / 1e3:>10.1f}")
    print(f"{'total compute':<70} {'':>8} {total / tokens / 1e3:>10.1f}")


def torch_side(a):
    import torch
    from torch.profiler import ProfilerActivity, profile

    import os

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl", device_id=dev)
        all_reduce = dist.all_reduce
    else:
        def all_reduce(_x):
            pass
    token, x0 = decode_token(a.model, MODELS[a.model][2], world, rank, dev, 1, all_reduce)
    g = capture_token(token, x0)
    for _ in range(8):
        g.replay()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.tokens)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for s, e in ev:
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
    lat = sorted(s.elapsed_time(e) * 1000.0 for s, e in ev)
    rows = defaultdict(lambda: [0, 0])
    for k in prof.events():
        if k.device_type.name == "CUDA" and "Memcpy" not in k.name and "Memset" not in k.name:
            rows[k.name][0] += 1
            rows[k.name][1] += k.device_time * 1e3  # us -> ns
    if rank == 0:
        print(f"torch {torch.__version__}, {a.model}, {world} rank(s), graph mode, token latency median {lat[len(lat) // 2]:.1f} us over {a.tokens} (rank 0)")
        table(rows, a.tokens)
    sys.stdout.flush()
    # destroying a process group after graph capture can hang at exit: leave without it
    os._exit(0)


def commcanary_side(a):
    d = json.load(open(a.shard_json))
    body = d["body"]
    names = body["kernel_names"]
    ks = [k for k in body["kernels"] if k["phase"] == "blocking"]
    tokens = [t for t in body["tokens"] if t["phase"] == "blocking" and not t["warmup"]]
    if tokens:
        t0, t1 = min(t["start_ns"] for t in tokens), max(t["end_ns"] for t in tokens)
        ks = [k for k in ks if t0 <= k["start_ns"] <= t1]
        n = len(tokens)
    else:
        n = a.tokens
    rows = defaultdict(lambda: [0, 0])
    for k in ks:
        rows[names[k["name"]]][0] += 1
        rows[names[k["name"]]][1] += k["end_ns"] - k["start_ns"]
    print(f"commcanary: {len(ks)} kernels over {n} timed tokens")
    table(rows, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("side", choices=["torch", "commcanary"])
    ap.add_argument("shard_json", nargs="?")
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    torch_side(a) if a.side == "torch" else commcanary_side(a)


if __name__ == "__main__":
    main()

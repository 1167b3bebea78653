"""A tensor-parallel decode step loop: the truth job of examples/gpu-truth-pytorch.toml.

Each rank holds a column shard of every layer's projection (hidden x hidden/world),
so every layer ends with an all-reduce of one token's activations over NCCL, as a
tensor-parallel decoder does per token. Writes metrics.json with the median step
time (ms) over the timed steps; prints it too. Started by torchrun (one process per GPU).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default="metrics.json")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    shard = max(1, a.hidden // world)
    w_in = [torch.randn(a.hidden, shard, device=dev, dtype=torch.bfloat16, generator=g) / a.hidden**0.5 for _ in range(a.layers)]
    w_out = [torch.randn(shard, a.hidden, device=dev, dtype=torch.bfloat16, generator=g) / shard**0.5 for _ in range(a.layers)]
    x = torch.randn(a.batch, a.hidden, device=dev, dtype=torch.bfloat16, generator=g)
    times_ms = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        h = x
        for i in range(a.layers):
            y = torch.relu(h @ w_in[i]) @ w_out[i]
            dist.all_reduce(y)
            h = torch.nn.functional.layer_norm(h + y, (a.hidden,))
        torch.cuda.synchronize()
        if step >= a.warmup:
            times_ms.append((time.perf_counter() - t0) * 1e3)
    # every rank's median; the job's step time is the slowest rank's
    med = torch.tensor([statistics.median(times_ms)], device=dev, dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if rank == 0:
        m = {"step_time_ms": med.item(), "steps": a.steps, "layers": a.layers, "hidden": a.hidden, "batch": a.batch, "world": world,
             "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))}
        with open(a.out + ".tmp", "w") as f:
            json.dump(m, f)
        os.replace(a.out + ".tmp", a.out)
        print(f"decode step time {m['step_time_ms']:.4f} ms (median of {a.steps} steps, slowest rank)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

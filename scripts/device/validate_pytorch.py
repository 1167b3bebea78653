#!/usr/bin/env python3
"""Validate CommCanary's `blocking` phase against a real PyTorch tensor-parallel decode.

Runs on a GPU host with PyTorch (torchrun) and the staged binary (.stage/bin/commcanary):

  python3 scripts/device/validate_pytorch.py run  [--model llama3-8b] [--rounds 3] [--tokens 64] ...
  python3 scripts/device/validate_pytorch.py plan  (print the schedule and planned duration only)
  python3 scripts/device/validate_pytorch.py rescore --out DIR   (an earlier run's table, today's statistics)
  python3 scripts/device/validate_pytorch.py --self-test   (pure functions; no GPU, no torch)

For each NCCL configuration (default, Ring/LL, Ring/LL128, Ring/Simple, Tree/LL,
Tree/Simple) and round, one fresh `torchrun` runs the PyTorch decode (eager and
CUDA-graph, in a seeded order inside the process), and one fresh `mpirun` per mode
runs CommCanary's `blocking` phase with the same model shape; every job of the
schedule is placed in one seeded shuffled order. The PyTorch decode is what a
Megatron-style tensor-parallel layer does (Shoeybi et al., arXiv:1909.08053): per
layer, the column-parallel QKV GEMM, the row-parallel output GEMM, an all-reduce of
batch x hidden bf16, the column-parallel gate/up GEMM, the row-parallel down GEMM,
a second all-reduce; the attention core, norms and activation are left out, as in
CommCanary's model shape, so the two run the same kernels. Per-token time is taken
from CUDA events at token boundaries on the compute stream (PyTorch's
torch.cuda.Event.elapsed_time), no host synchronisation inside the timed tokens;
CUDA-graph mode captures one token (every layer, GEMMs and NCCL all-reduces) with
torch.cuda.graph and replays it per token (PyTorch docs, "CUDA Graphs").

Writes OUT/table.md and OUT/results.json: per mode and configuration, PyTorch and
CommCanary per-token median and p99 (median over rounds of each round's pooled
per-token statistics), their ratio, round-to-round variation, both rankings by
median, Kendall's tau-b (Kendall 1945, "The treatment of ties in ranking problems",
Biometrika 33(3)) and every pair the two order differently. A second tau-b counts a
pair as tied in a tool unless that tool's per-round medians separate completely
(the ordering its own replication resolves); the issue's criterion is the first.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

CONFIGS = [
    ("default", {}),
    ("ring-ll", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}),
    ("ring-ll128", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}),
    ("ring-simple", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}),
    ("tree-ll", {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}),
    ("tree-simple", {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}),
]
# Kept in every child's environment: no NVLink SHARP / multicast paths (see the issue and KINDS.md).
FIXED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Same presets as src/core/workload.rs (hidden, ffn, layers, q_dim, kv_dim); Llama 3 values from the
# models' config.json (hidden_size, intermediate_size, num_hidden_layers, heads x 128, kv heads x 128).
MODELS = {
    "llama3-8b": (4096, 14336, 32, 4096, 1024),
    "llama3-70b": (8192, 28672, 80, 8192, 1024),
    "tiny": (512, 1792, 4, 512, 128),
}
MODES = ("eager", "graph")


# ---------------------------------------------------------------- pure functions (self-tested)

def tp_gemms(model, tp, m):
    """Per-rank (name, m, n, k) of one layer, as src/core/workload.rs splits them."""
    h, f, _layers, q, kv = MODELS[model]
    for what, v in (("query width", q), ("key/value width", kv), ("FFN size", f)):
        if v % tp:
            raise ValueError(f"{model}: {what} {v} does not split over {tp} ranks")
    return [("qkv", m, (q + 2 * kv) // tp, h), ("out", m, h, q // tp), ("gate_up", m, 2 * f // tp, h), ("down", m, h, f // tp)]


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def p99(xs):
    """Nearest-rank 99th percentile (as CommCanary's join reports)."""
    s = sorted(xs)
    if not s:
        return None
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]


def kendall_tau_b(x, y):
    """Kendall's tau-b of paired samples; None when either side is constant."""
    n = len(x)
    sign = lambda v, i, j: (v[i] > v[j]) - (v[i] < v[j])
    return tau_b_of_signs([(sign(x, i, j), sign(y, i, j)) for i in range(n) for j in range(i + 1, n)])


# A pair counts as resolved only where complete separation could arise by chance with
# probability at most this (two-sided): 3 rounds a side is the least that qualifies.
RESOLVE_ALPHA = 0.1


def separated_sign(a_rounds, b_rounds):
    """+1 when every round of a is above every round of b, -1 when below, 0 (a tie: not
    resolved by the rounds) otherwise. Complete separation is Mann-Whitney's U = 0 (Mann and
    Whitney 1947, Ann. Math. Stat. 18(1)), whose exact two-sided p-value under no difference
    (exchangeable rounds, no ties) is 2 / C(n + m, n): 0.1 for 3 rounds a side, 0.008 for 5.
    Fewer rounds, where even complete separation has p > RESOLVE_ALPHA (2 against 2: 1/3),
    resolve nothing."""
    a = [v for v in a_rounds if v is not None]
    b = [v for v in b_rounds if v is not None]
    if not a or not b or 2 / math.comb(len(a) + len(b), len(a)) > RESOLVE_ALPHA:
        return 0
    return 1 if min(a) > max(b) else -1 if max(a) < min(b) else 0


def kendall_tau_b_resolved(x_rounds, y_rounds):
    """tau-b where each tool's pair is a tie unless its per-round medians separate completely
    (separated_sign): the ranking each tool's own replication supports."""
    n = len(x_rounds)
    return tau_b_of_signs([(separated_sign(x_rounds[i], x_rounds[j]), separated_sign(y_rounds[i], y_rounds[j])) for i in range(n) for j in range(i + 1, n)])


def tau_b_of_signs(pairs):
    """tau-b from every pair's (sign in x, sign in y); None when either side is all ties."""
    n0 = len(pairs)
    conc = disc = tx = ty = 0
    for a, b in pairs:
        if a == 0 and b == 0:
            tx += 1
            ty += 1
        elif a == 0:
            tx += 1
        elif b == 0:
            ty += 1
        elif a == b:
            conc += 1
        else:
            disc += 1
    den = math.sqrt((n0 - tx) * (n0 - ty))
    return None if den == 0 else (conc - disc) / den


def ranking(values):
    """Labels ordered best (lowest) first; labels without a value are left out."""
    return [k for k, v in sorted(((k, v) for k, v in values.items() if v is not None), key=lambda kv: (kv[1], kv[0]))]


def disagreements(truth, proxy, min_gap_pct=0.0):
    """Pairs that truth and proxy order differently: (a, b, truth gap %, proxy gap %), gap = b over a."""
    labels = sorted(k for k in truth if truth[k] is not None and proxy.get(k) is not None)
    out = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            t = truth[b] - truth[a]
            p = proxy[b] - proxy[a]
            gap = 100.0 * t / truth[a]
            if (t > 0) != (p > 0) or (t == 0) != (p == 0):
                if abs(gap) >= min_gap_pct:
                    out.append((a, b, gap, 100.0 * p / proxy[a]))
    return out


def variation_pct(per_round):
    """Round-to-round variation: (max - min) / median of the per-round medians, percent."""
    v = [x for x in per_round if x is not None]
    if len(v) < 2:
        return None
    return 100.0 * (max(v) - min(v)) / median(v)


def schedule(configs, rounds, modes, seed):
    """Every job, in one seeded shuffled order: one PyTorch job per (config, round), one CommCanary job per (config, round, mode)."""
    jobs = [("pytorch", c, r, None) for c in configs for r in range(rounds)]
    jobs += [("commcanary", c, r, m) for c in configs for r in range(rounds) for m in modes]
    random.Random(seed).shuffle(jobs)
    return jobs


def summarize(pt_rounds, cc_rounds, modes, configs):
    """pt_rounds[mode][config] and cc_rounds[mode][config]: lists of (median_us, p99_us) per round (None when a round failed)."""
    out = {}
    for mode in modes:
        rows = {}
        for c in configs:
            pt = [x for x in pt_rounds.get(mode, {}).get(c, []) if x]
            cc = [x for x in cc_rounds.get(mode, {}).get(c, []) if x]
            row = {
                "pytorch_median_us": median([a for a, _ in pt]),
                "pytorch_p99_us": median([b for _, b in pt]),
                "pytorch_rounds": len(pt),
                "pytorch_variation_pct": variation_pct([a for a, _ in pt]),
                "commcanary_median_us": median([a for a, _ in cc]),
                "commcanary_p99_us": median([b for _, b in cc]),
                "commcanary_rounds": len(cc),
                "commcanary_variation_pct": variation_pct([a for a, _ in cc]),
            }
            pm, cm = row["pytorch_median_us"], row["commcanary_median_us"]
            row["ratio"] = cm / pm if pm and cm else None
            rows[c] = row
        truth = {c: r["pytorch_median_us"] for c, r in rows.items()}
        proxy = {c: r["commcanary_median_us"] for c, r in rows.items()}
        both = [c for c in configs if truth[c] is not None and proxy[c] is not None]
        out[mode] = {
            "rows": rows,
            "pytorch_ranking": ranking(truth),
            "commcanary_ranking": ranking(proxy),
            "kendall_tau_b": kendall_tau_b([truth[c] for c in both], [proxy[c] for c in both]) if len(both) >= 2 else None,
            "kendall_tau_b_resolved": kendall_tau_b_resolved(
                [[x[0] if x else None for x in pt_rounds.get(mode, {}).get(c, [])] for c in both],
                [[x[0] if x else None for x in cc_rounds.get(mode, {}).get(c, [])] for c in both],
            ) if len(both) >= 2 else None,
            "configs_compared": len(both),
            "disagreeing_pairs": [
                {"a": a, "b": b, "pytorch_gap_pct": g, "commcanary_gap_pct": p, "pytorch_gap_ge_2pct": abs(g) >= 2.0}
                for a, b, g, p in disagreements(truth, proxy)
            ],
        }
    return out


def render(summary, header):
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
    lines = [f"# CommCanary blocking vs PyTorch tensor-parallel decode", "", header, ""]
    for mode, s in summary.items():
        lines += [f"## {mode}", "", "| configuration | PyTorch p50 µs | PyTorch p99 µs | PyTorch var % | CommCanary p50 µs | CommCanary p99 µs | CommCanary var % | ratio CC/PT |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c, r in s["rows"].items():
            lines.append(f"| {c} | {f(r['pytorch_median_us'])} | {f(r['pytorch_p99_us'])} | {f(r['pytorch_variation_pct'], 2)} | {f(r['commcanary_median_us'])} | {f(r['commcanary_p99_us'])} | {f(r['commcanary_variation_pct'], 2)} | {f(r['ratio'], 3)} |")
        lines += ["", f"PyTorch ranking (best first): {', '.join(s['pytorch_ranking']) or '-'}", f"CommCanary ranking: {', '.join(s['commcanary_ranking']) or '-'}",
                  f"Kendall tau-b on medians: {f(s['kendall_tau_b'], 3)} over {s['configs_compared']} configurations",
                  f"Kendall tau-b on what each tool's rounds resolve (a pair is a tie in a tool unless its per-round medians separate completely): {f(s.get('kendall_tau_b_resolved'), 3)}", ""]
        if s["disagreeing_pairs"]:
            lines.append("Disagreeing pairs (gap = second over first):")
            for d in s["disagreeing_pairs"]:
                lines.append(f"- {d['a']} vs {d['b']}: PyTorch {d['pytorch_gap_pct']:+.2f} %, CommCanary {d['commcanary_gap_pct']:+.2f} %{' (PyTorch gap >= 2 %)' if d['pytorch_gap_ge_2pct'] else ''}")
        else:
            lines.append("Disagreeing pairs: none")
        lines.append("")
    return "\n".join(lines)


def self_test():
    # scipy.stats.kendalltau's documented example (tau-b with ties): -0.47140452079103173
    t = kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0])
    assert abs(t - (-0.47140452079103173)) < 1e-12, t
    assert kendall_tau_b([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None
    assert median([3, 1, 2]) == 2 and median([4, 1, 2, 3]) == 2.5 and median([]) is None
    assert p99(list(range(1, 101))) == 99 and p99([5]) == 5
    assert tp_gemms("llama3-8b", 2, 1) == [("qkv", 1, 3072, 4096), ("out", 1, 4096, 2048), ("gate_up", 1, 14336, 4096), ("down", 1, 4096, 7168)]
    try:
        tp_gemms("tiny", 3, 1)
        raise AssertionError("tiny over 3 ranks must be refused")
    except ValueError:
        pass
    d = disagreements({"a": 100, "b": 110, "c": 120}, {"a": 100, "b": 90, "c": 130})
    assert [(x[0], x[1]) for x in d] == [("a", "b")] and abs(d[0][2] - 10.0) < 1e-9, d
    assert variation_pct([100, 101, 99]) == 2.0 and variation_pct([100]) is None
    jobs = schedule(["x", "y"], 3, MODES, 7)
    assert len(jobs) == 2 * 3 + 2 * 3 * 2 and jobs == schedule(["x", "y"], 3, MODES, 7) and jobs != schedule(["x", "y"], 3, MODES, 8)
    pt = {"graph": {"x": [(100, 110), (101, 111), None], "y": [(120, 130), (121, 131), (119, 129)]}}
    cc = {"graph": {"x": [(200, 210), (202, 212), (201, 211)], "y": [(190, 200), (191, 201), (189, 199)]}}
    s = summarize(pt, cc, ["graph"], ["x", "y"])["graph"]
    assert s["rows"]["x"]["pytorch_rounds"] == 2 and s["rows"]["x"]["pytorch_median_us"] == 100.5
    assert s["pytorch_ranking"] == ["x", "y"] and s["commcanary_ranking"] == ["y", "x"] and s["kendall_tau_b"] == -1.0
    assert len(s["disagreeing_pairs"]) == 1 and s["disagreeing_pairs"][0]["pytorch_gap_ge_2pct"]
    assert "| x |" in render({"graph": s}, "h")
    # a partial table: a configuration without CommCanary results yet is left out of both rankings' comparison
    part = summarize(pt, {"graph": {"x": [None, None, None], "y": [(190, 200), None, None]}}, ["graph"], ["x", "y"])["graph"]
    assert part["commcanary_ranking"] == ["y"] and part["kendall_tau_b"] is None and part["configs_compared"] == 1
    assert ranking({"a": None, "b": 2.0, "c": 1.0}) == ["c", "b"]
    # resolution: overlapping rounds are a tie, complete separation a sign; too few rounds a tie
    assert separated_sign([10, 11, 12], [13, 14, 15]) == -1 and separated_sign([13, 14, 16], [10, 12, 9]) == 1
    assert separated_sign([10, 13, 11], [12, 14, 15]) == 0 and separated_sign([10], [20, 21]) == 0
    # 2 rounds against 2 (p = 1/3) or 3 (p = 0.2) resolve nothing, 3 against 3 (p = 0.1) does
    assert separated_sign([10, None, 11], [20, 21]) == 0 and separated_sign([10, 11], [20, 21, 22]) == 0 and separated_sign([10, 11, 12], [20, 21, 22]) == -1
    # pairs a tool does not resolve count as its ties, not as discordance
    xr = [[1, 2, 3], [1.5, 2.5, 3.5], [10, 11, 12]]   # x: first two overlap (tie), third above both
    yr = [[5, 6, 7], [1, 2, 3], [20, 21, 22]]         # y: second below first (resolved), third above both
    # pairs (0,1): x tie, y +1; (0,2): -1, -1; (1,2): -1, -1 -> conc 2, disc 0, tx 1, ty 0
    assert abs(kendall_tau_b_resolved(xr, yr) - 2 / math.sqrt(2 * 3)) < 1e-12
    assert kendall_tau_b_resolved([[1, 2, 3], [1, 2, 3]], [[1, 2, 3], [4, 5, 6]]) is None
    print("self-test: ok")


# ---------------------------------------------------------------- PyTorch child (under torchrun)

def decode_token(model, layers, world, rank, dev, m, all_reduce):
    """One decode token of `model`'s tensor-parallel layer on this rank: (token(x), x0).

    Per layer, as src/core/workload.rs splits it: the column-parallel QKV GEMM, the
    row-parallel output GEMM, an all-reduce, the column-parallel gate/up GEMM, the
    row-parallel down GEMM, an all-reduce; bf16, distinct weights per layer, as in a
    real model (and CommCanary's cuda backend).
    """
    import torch

    h, f, _layers, q, _kv = MODELS[model]
    shapes = tp_gemms(model, world, m)
    torch.manual_seed(1234 + rank)
    weights = [[(torch.randn(k, n, device=dev, dtype=torch.bfloat16) / math.sqrt(k)) for (_name, _m, n, k) in shapes] for _ in range(layers)]
    q_tp, f_tp = q // world, f // world
    x0 = torch.randn(m, h, device=dev, dtype=torch.bfloat16)

    def token(x):
        for wqkv, wo, wgu, wd in weights:
            qkv = x @ wqkv
            o = qkv[:, :q_tp] @ wo  # attention core not modelled: the query slice feeds the output projection
            all_reduce(o)
            gu = o @ wgu
            x = gu[:, :f_tp] @ wd  # activation not modelled
            all_reduce(x)
        return x

    return token, x0


def capture_token(token, static_x):
    """One token captured into a CUDA graph after three warm-up runs on a side stream (PyTorch docs, "CUDA Graphs")."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            token(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    # thread-local: NCCL's and PyTorch's watchdog threads may call CUDA while this thread captures
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        token(static_x)
    return g


def child(a):
    import torch
    import torch.distributed as dist

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    layers = a.layers or MODELS[a.model][2]
    m = a.batch
    token, x0 = decode_token(a.model, layers, world, rank, dev, m, dist.all_reduce)

    def timed(step, n):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for s, e in ev:
            s.record()
            step()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in ev]

    token(x0)
    torch.cuda.synchronize()
    result = {"rank": rank, "world": world, "model": a.model, "layers": layers, "batch": m, "torch": torch.__version__,
              "nccl": ".".join(map(str, torch.cuda.nccl.version())), "env": {k: os.environ.get(k) for k in ["NCCL_ALGO", "NCCL_PROTO", *FIXED_ENV]}, "modes": {}}
    order = list(a.modes.split(","))
    random.Random(a.seed).shuffle(order)
    result["mode_order"] = order
    for mode in order:
        if mode == "eager":
            timed(lambda: token(x0), a.warmup)
            result["modes"]["eager"] = timed(lambda: token(x0), a.tokens)
        else:
            g = capture_token(token, x0.clone())
            timed(g.replay, a.warmup)
            result["modes"]["graph"] = timed(g.replay, a.tokens)
    dist.barrier()
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
        fh.flush()
        os.fsync(fh.fileno())
    sys.stdout.flush()
    sys.stderr.flush()
    # Destroying a process group after graph capture can hang at exit: leave without it.
    os._exit(0)


# ---------------------------------------------------------------- orchestration

def torch_nccl_lib():
    """The libnccl.so.2 of PyTorch's NCCL wheel, so that CommCanary runs the same library."""
    for p in sys.path:
        cand = os.path.join(p, "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.isfile(cand):
            return cand
    return None


def child_env(cfg_env):
    env = {k: v for k, v in os.environ.items() if k not in ("NCCL_ALGO", "NCCL_PROTO")}
    env.update(FIXED_ENV)
    env.update(cfg_env)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    return env


def run_job(job, a, work, nccl_lib, log):
    tool, cfg, rnd, mode = job
    cfg_env = dict(CONFIGS)[cfg]
    env = child_env(cfg_env)
    tag = f"{tool}-{cfg}-r{rnd}" + (f"-{mode}" if mode else "")
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    if tool == "pytorch":
        cmd = ["timeout", str(a.child_timeout_s), "torchrun", "--standalone", f"--nproc-per-node={a.nproc}", os.path.abspath(__file__), "child",
               "--model", a.model, "--tokens", str(a.tokens), "--warmup", str(a.warmup), "--batch", str(a.batch), "--modes", ",".join(a.modes),
               "--seed", str(a.seed * 1000 + rnd), "--out", d] + (["--layers", str(a.layers)] if a.layers else [])
    else:
        xs = []
        for k in list(FIXED_ENV) + list(cfg_env) + ["LD_LIBRARY_PATH"]:
            if k in env:  # mpirun -x exports a variable by name; an unset one is left out
                xs += ["-x", k]
        cmd = ["timeout", str(a.child_timeout_s), "mpirun", "--bind-to", "none", *xs, "-n", str(a.nproc), a.commcanary, "rank", "-q", "--backend", "cuda",
               "--phases", "blocking", "--model", a.model, "--batch", str(a.batch), "--tokens", str(a.tokens), "--warmup-tokens", str(a.warmup),
               "--check", "1", "--run-id", "run", "--out", d, "--comm-stream", a.comm_stream] + (["--graph"] if mode == "graph" else []) + (["--layers", str(a.layers)] if a.layers else []) \
            + (["--nccl-lib", nccl_lib] if nccl_lib else [])
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.time() - t0
    with open(os.path.join(d, "log.txt"), "w") as fh:
        fh.write(" ".join(cmd) + f"\nrc={p.returncode} after {dt:.1f} s\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    log(f"{tag}: rc={p.returncode} {dt:.1f} s")
    if p.returncode != 0:
        return None
    if tool == "pytorch":
        per_mode = {}
        for r in range(a.nproc):
            with open(os.path.join(d, f"rank{r}.json")) as fh:
                res = json.load(fh)
            for mm, toks in res["modes"].items():
                per_mode.setdefault(mm, []).extend(toks)
        return {mm: (median(v), p99(v)) for mm, v in per_mode.items()}
    q = subprocess.run([a.commcanary, "join", "--json", os.path.join(d, "run")], capture_output=True, text=True)
    if q.returncode != 0:
        log(f"{tag}: join failed: {q.stderr.strip()[:300]}")
        return None
    ph = [x for x in json.loads(q.stdout)["phases"] if x["phase"] == "blocking"][0]
    return {mode: (ph["token_median_us"], ph["token_p99_us"])}


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["run", "plan", "child", "rescore"],
                    help="rescore: print the table of an earlier run's --out (its results.json) with this script's statistics")
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--layers", type=int, default=0, help="override the model's layer count (0: the model's)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64, help="timed tokens per mode and job")
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--configs", default=",".join(c for c, _ in CONFIGS))
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--commcanary", default=".stage/bin/commcanary")
    ap.add_argument("--comm-stream", default="current", choices=["current", "separate"],
                    help="CommCanary's blocking collectives on the compute stream (as PyTorch >= 2.8 runs async_op=False) or on their own")
    ap.add_argument("--out", default="out/validate-pytorch")
    ap.add_argument("--child-timeout-s", type=int, default=120)
    ap.add_argument("--est-pytorch-s", type=float, default=15.0, help="planning estimate per torchrun job")
    ap.add_argument("--est-commcanary-s", type=float, default=5.0, help="planning estimate per mpirun job")
    a = ap.parse_args()
    if a.command == "child":
        return child(a)
    if a.command == "rescore":
        return rescore(os.path.join(a.out, "results.json"))
    a.modes = [m for m in a.modes.split(",") if m]
    configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in configs if c not in dict(CONFIGS)] + [m for m in a.modes if m not in MODES]
    if unknown:
        sys.exit(f"unknown configuration or mode: {unknown}")
    tp_gemms(a.model, a.nproc, a.batch)
    jobs = schedule(configs, a.rounds, a.modes, a.seed)
    n_pt = sum(1 for j in jobs if j[0] == "pytorch")
    planned = n_pt * a.est_pytorch_s + (len(jobs) - n_pt) * a.est_commcanary_s
    print(f"plan: {len(jobs)} jobs ({n_pt} torchrun, {len(jobs) - n_pt} mpirun), model {a.model}, {a.nproc} ranks, "
          f"{a.tokens} timed tokens after {a.warmup} warm-up; planned duration ~{planned / 60:.1f} min "
          f"(estimates {a.est_pytorch_s:.0f} s / {a.est_commcanary_s:.0f} s per job; each job limited to {a.child_timeout_s} s)", flush=True)
    if a.command == "plan":
        for j in jobs:
            print("  ", j)
        return
    if not os.access(a.commcanary, os.X_OK):
        sys.exit(f"{a.commcanary}: no staged binary (run scripts/device-stage.sh where cargo exists)")
    if not shutil.which("torchrun"):
        sys.exit("torchrun not found: this script needs PyTorch")
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "jobs")
    os.makedirs(work, exist_ok=True)
    nccl_lib = torch_nccl_lib()
    logf = open(os.path.join(a.out, "session.log"), "a")

    def log(s):
        line = f"{time.strftime('%H:%M:%S')} {s}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    log(f"PyTorch's NCCL for CommCanary: {nccl_lib or 'not found; CommCanary uses the system libnccl.so.2'}")
    t0 = time.time()
    pt = {m: {c: [None] * a.rounds for c in configs} for m in a.modes}
    cc = {m: {c: [None] * a.rounds for c in configs} for m in a.modes}
    table = ""
    for i, job in enumerate(jobs):
        res = run_job(job, a, work, nccl_lib, log)
        tool, cfg, rnd, mode = job
        for mm, v in (res or {}).items():
            (pt if tool == "pytorch" else cc)[mm][cfg][rnd] = v
        # rewritten after every job, so that a run stopped by its time limit still leaves its table
        done = i + 1 == len(jobs)
        summary = summarize(pt, cc, a.modes, configs)
        header = (f"Model {a.model} ({a.layers or MODELS[a.model][2]} layers), batch {a.batch}, {a.nproc} ranks (TP={a.nproc}), bf16; "
                  f"{a.rounds} rounds, {a.tokens} timed tokens after {a.warmup} warm-up per job; seed {a.seed}; "
                  f"environment {' '.join(f'{k}={v}' for k, v in FIXED_ENV.items())}; CommCanary NCCL {nccl_lib or 'system libnccl.so.2'}; "
                  f"{i + 1} of {len(jobs)} jobs{'' if done else ' (PARTIAL)'} in {(time.time() - t0) / 60:.1f} min. Eager mode is host-bound: per-token time "
                  f"includes the host's launch gaps (PyTorch's Python dispatch vs CommCanary's Rust loop), so eager medians compare the two hosts' "
                  f"launch paths as much as the configurations; graph mode takes the host out of the token.")
        write_atomic(os.path.join(a.out, "results.json"), json.dumps({"header": header, "complete": done, "per_round": {"pytorch": pt, "commcanary": cc}, "summary": summary}, indent=1))
        table = render(summary, header)
        write_atomic(os.path.join(a.out, "table.md"), table)
    print(table)


def rescore(path):
    """The table of a stored run, from its per-round results, with today's summary."""
    try:
        d = json.load(open(path))
        per_round = d["per_round"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{path}: not a validate_pytorch results.json ({e})")
    modes = [m for m in MODES if m in per_round["pytorch"]]
    configs = [c for c, _ in CONFIGS if c in per_round["pytorch"][modes[0]]] if modes else []
    dropped = sorted({f"{tool}/{m}/{c}" for tool in per_round for m in per_round[tool] for c in per_round[tool][m] if m not in modes or c not in configs})
    if dropped:
        print(f"rescore: left out (unknown mode or configuration, or absent from the first mode): {', '.join(dropped)}", file=sys.stderr)
    print(render(summarize(per_round["pytorch"], per_round["commcanary"], modes, configs), d.get("header", "") + " (rescored from results.json)"))


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

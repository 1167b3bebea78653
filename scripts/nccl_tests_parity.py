#!/usr/bin/env python3
"""Side-by-side table of nccl-tests and CommCanary's isolated phase.

Consumes the raw files that scripts/bench-vs-nccl-tests.sh keeps:
  nt-CONFIG-REP.json       nccl-tests `-J` output (per-iteration times from `-I 1`)
  cc-CONFIG-REP.iters.csv  CommCanary per-iteration device intervals (size,iter,rank,us)
Produces one row per (configuration, size): both tools' per-iteration median
and p99 (each the median over repetitions, with the range), and the ratios
CommCanary / nccl-tests, with the issue's goals (median within 3%, p99 within
10%) checked per row. Statistics as nccl-tests computes them: an iteration's
time is the largest over ranks; p50 = sorted[n/2], p99 = sorted[ceil(0.99 n)-1].

Usage: nccl_tests_parity.py RAW_DIR [--json OUT.json]     (--self-test: unit checks)
"""
import csv, glob, json, math, os, re, statistics, sys
from collections import defaultdict


def nearest_rank(sorted_v, p):
    n = len(sorted_v)
    if p == 50:
        return sorted_v[n // 2]
    return sorted_v[min(n - 1, max(0, (n * p + 99) // 100 - 1))]


def nccl_tests_rows(doc):
    """Yield (size_bytes, [per-iteration µs]) from an nccl-tests JSON document (out-of-place)."""
    def walk(x):
        if isinstance(x, dict):
            if "size" in x and isinstance(x.get("out_of_place_per_iter"), dict):
                yield x
            for v in x.values():
                yield from walk(v)
        elif isinstance(x, list):
            for v in x:
                yield from walk(v)
    for r in walk(doc):
        t = r["out_of_place_per_iter"].get("times_us")
        skip = r["out_of_place_per_iter"].get("skipped_iterations", 0) or 0
        if t:
            yield int(r["size"]), [float(v) for v in t[skip:]]


def commcanary_rows(path):
    """Yield (size_bytes, [per-iteration µs, largest over ranks]) from the CSV."""
    per = defaultdict(lambda: defaultdict(float))
    with open(path) as f:
        for row in csv.DictReader(f):
            k = (int(row["size"]), int(row["iter"]))
            per[k[0]][k[1]] = max(per[k[0]][k[1]], float(row["us"]))
    for size in sorted(per):
        yield size, [per[size][i] for i in sorted(per[size])]


def stats(v):
    s = sorted(v)
    return nearest_rank(s, 50), nearest_rank(s, 99)


def table(raw_dir):
    data = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # cfg -> size -> key -> [per rep]
    for p in sorted(glob.glob(os.path.join(raw_dir, "nt-*.json"))):
        m = re.match(r"nt-(.+)-(\d+)\.json$", os.path.basename(p))
        try:
            doc = json.load(open(p))
        except (OSError, ValueError) as e:
            print(f"warning: {p}: unreadable nccl-tests JSON ({e}); skipped", file=sys.stderr)
            continue
        for size, t in nccl_tests_rows(doc):
            p50, p99 = stats(t)
            data[m.group(1)][size]["nt_p50"].append(p50)
            data[m.group(1)][size]["nt_p99"].append(p99)
    for p in sorted(glob.glob(os.path.join(raw_dir, "cc-*.iters.csv"))):
        m = re.match(r"cc-(.+)-(\d+)\.iters\.csv$", os.path.basename(p))
        for size, t in commcanary_rows(p):
            p50, p99 = stats(t)
            data[m.group(1)][size]["cc_p50"].append(p50)
            data[m.group(1)][size]["cc_p99"].append(p99)
    rows = []
    for cfg in sorted(data):
        for size in sorted(data[cfg]):
            d = data[cfg][size]
            if not (d["nt_p50"] and d["cc_p50"]):
                continue
            med = lambda k: statistics.median(d[k])
            r = {
                "config": cfg, "bytes": size, "reps": min(len(d["nt_p50"]), len(d["cc_p50"])),
                "nt_p50_us": med("nt_p50"), "nt_p99_us": med("nt_p99"),
                "cc_p50_us": med("cc_p50"), "cc_p99_us": med("cc_p99"),
                "nt_p50_range": [min(d["nt_p50"]), max(d["nt_p50"])], "cc_p50_range": [min(d["cc_p50"]), max(d["cc_p50"])],
            }
            r["p50_ratio"] = r["cc_p50_us"] / r["nt_p50_us"]
            r["p99_ratio"] = r["cc_p99_us"] / r["nt_p99_us"]
            r["p50_goal_met"] = abs(r["p50_ratio"] - 1) <= 0.03
            r["p99_goal_met"] = abs(r["p99_ratio"] - 1) <= 0.10
            rows.append(r)
    return rows


def render(rows):
    out = ["config        size(B)  reps  nt p50us  cc p50us  ratio   nt p99us  cc p99us  ratio   goals(p50<=3%,p99<=10%)"]
    for r in rows:
        goals = ("ok" if r["p50_goal_met"] else "P50-MISS") + "/" + ("ok" if r["p99_goal_met"] else "P99-MISS")
        out.append(f"{r['config']:<12} {r['bytes']:>9} {r['reps']:>5} {r['nt_p50_us']:>9.2f} {r['cc_p50_us']:>9.2f} {r['p50_ratio']:>6.3f} "
                   f"{r['nt_p99_us']:>9.2f} {r['cc_p99_us']:>9.2f} {r['p99_ratio']:>6.3f}   {goals}")
    n = len(rows)
    out.append(f"rows {n}: median within 3% in {sum(r['p50_goal_met'] for r in rows)}/{n}, p99 within 10% in {sum(r['p99_goal_met'] for r in rows)}/{n}")
    return "\n".join(out)


def self_test():
    assert nearest_rank(list(range(100)), 99) == 98 and nearest_rank(list(range(100)), 50) == 50
    doc = {"results": [{"size": 8, "out_of_place_per_iter": {"skipped_iterations": 1, "times_us": [99.0, 1.0, 2.0, 3.0]}}]}
    assert list(nccl_tests_rows(doc)) == [(8, [1.0, 2.0, 3.0])]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        json.dump(doc, open(os.path.join(d, "nt-x-1.json"), "w"))
        with open(os.path.join(d, "cc-x-1.iters.csv"), "w") as f:
            f.write("size,iter,rank,us\n8,0,0,1.0\n8,0,1,1.1\n8,1,0,2.0\n8,2,0,3.3\n")
        rows = table(d)
        assert len(rows) == 1 and rows[0]["cc_p50_us"] == 2.0 and abs(rows[0]["p99_ratio"] - 1.1) < 1e-9, rows
    print("self-test passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    if not sys.argv[1:]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    rows = table(sys.argv[1])
    print(render(rows))
    if "--json" in sys.argv:
        json.dump(rows, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)

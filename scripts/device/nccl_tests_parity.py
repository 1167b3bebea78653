#!/usr/bin/env python3
"""Side-by-side table of nccl-tests and CommCanary's isolated phase.

Consumes the raw files that scripts/device/bench-vs-nccl-tests.sh keeps:
  nt-CONFIG-REP.json       nccl-tests `-J` output (per-iteration times from `-I 1`)
  cc-CONFIG-REP.iters.csv  CommCanary per-iteration device intervals (size,iter,rank,us)
Produces one row per (configuration, size): both tools' per-iteration median
and p99 (each the median over repetitions, with the range), and the ratios
CommCanary / nccl-tests, with the issue's goals (median within 3%, p99 within
10%) checked per row. Statistics as nccl-tests computes them: an iteration's
time is the largest over ranks; p50 = sorted[n/2], p99 = sorted[ceil(0.99 n)-1].

Where the host sets the pace, a tool's per-run median moves between runs by more
than the goal (on one H200 at one rank, 2026-12-01, binary of commit 183183e,
the same command moved a tool's p50 by up to 45% from one run to the next), so
each row also gives the Hodges-Lehmann estimate of the ratio of per-run medians
(the median of all CommCanary/nccl-tests ratios across runs) with its distribution-free
confidence interval from the exact Mann-Whitney null distribution (Hollander and
Wolfe, "Nonparametric Statistical Methods", 3rd ed., section 4.3), and says whether
that interval lies within 3% ("within"), outside it ("outside") or across its edge
("unresolved": more repetitions needed).

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


def mann_whitney_null(n, m):
    """Exact null distribution of U (pairs x > y) for n x's and m y's without ties: counts
    of the C(n + m, n) equally likely orders per U = 0..nm (c(n, m, u) = c(n-1, m, u-m) + c(n, m-1, u))."""
    memo = {}
    def c(a, b):
        if (a, b) not in memo:
            if a == 0 or b == 0:
                memo[(a, b)] = [1] + [0] * (a * b)
            else:
                x, y = c(a - 1, b), c(a, b - 1)
                memo[(a, b)] = [(x[u - b] if 0 <= u - b < len(x) else 0) + (y[u] if u < len(y) else 0) for u in range(a * b + 1)]
        return memo[(a, b)]
    return c(n, m)


def hodges_lehmann_ratio(cc, nt, confidence=0.9):
    """Hodges-Lehmann estimate of cc/nt from per-run values, with the widest order-statistic
    interval of the pairwise log-ratios whose exact coverage is at least `confidence`, or, when
    even [min, max] falls short, that interval with its coverage: (ratio, lo, hi, coverage)."""
    d = sorted(math.log(a / b) for a in cc for b in nt)
    n, m = len(cc), len(nt)
    counts = mann_whitney_null(n, m)
    total = sum(counts)
    mid = len(d) // 2
    est = d[mid] if len(d) % 2 else (d[mid - 1] + d[mid]) / 2
    k, cum = 1, counts[0]  # interval [d_(k), d_(nm+1-k)] has coverage 1 - 2 P(U <= k-1)
    while k < (n * m + 1) // 2 and 1 - 2 * (cum + counts[k]) / total >= confidence:
        cum += counts[k]
        k += 1
    return math.exp(est), math.exp(d[k - 1]), math.exp(d[n * m - k]), 1 - 2 * cum / total


def parity_verdict(lo, hi, tol=0.03):
    if 1 - tol <= lo and hi <= 1 + tol:
        return "within"
    if hi < 1 - tol or lo > 1 + tol:
        return "outside"
    return "unresolved"


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
            hl, lo, hi, cov = hodges_lehmann_ratio(d["cc_p50"], d["nt_p50"])
            r.update({"hl_p50_ratio": hl, "hl_p50_ci": [lo, hi], "hl_p50_ci_coverage": cov, "hl_p50_verdict": parity_verdict(lo, hi)})
            rows.append(r)
    return rows


def render(rows):
    out = ["config        size(B)  reps  nt p50us  cc p50us  ratio   nt p99us  cc p99us  ratio   goals(p50<=3%,p99<=10%)   HL p50 ratio [CI, coverage] vs 3%"]
    for r in rows:
        goals = ("ok" if r["p50_goal_met"] else "P50-MISS") + "/" + ("ok" if r["p99_goal_met"] else "P99-MISS")
        lo, hi = r["hl_p50_ci"]
        out.append(f"{r['config']:<12} {r['bytes']:>9} {r['reps']:>5} {r['nt_p50_us']:>9.2f} {r['cc_p50_us']:>9.2f} {r['p50_ratio']:>6.3f} "
                   f"{r['nt_p99_us']:>9.2f} {r['cc_p99_us']:>9.2f} {r['p99_ratio']:>6.3f}   {goals:<17}   "
                   f"{r['hl_p50_ratio']:.3f} [{lo:.3f}, {hi:.3f}, {r['hl_p50_ci_coverage']:.2f}] {r['hl_p50_verdict']}")
    n = len(rows)
    out.append(f"rows {n}: median within 3% in {sum(r['p50_goal_met'] for r in rows)}/{n}, p99 within 10% in {sum(r['p99_goal_met'] for r in rows)}/{n}")
    verdicts = [r["hl_p50_verdict"] for r in rows]
    out.append(f"Hodges-Lehmann p50 ratio against 3%: within {verdicts.count('within')}, outside {verdicts.count('outside')}, unresolved {verdicts.count('unresolved')} (of {n})")
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
    # exact null of U: n = m = 3 has C(6, 3) = 20 orders, one with U = 0; 2 x 1: U in {0, 1, 2} once each
    u = mann_whitney_null(3, 3)
    assert sum(u) == 20 and u[0] == 1 and u[9] == 1 and u == u[::-1], u
    assert mann_whitney_null(2, 1) == [1, 1, 1]
    # 3 runs a side: [min, max] of the 9 ratios is the widest interval, coverage 1 - 2/20 = 0.9
    hl, lo, hi, cov = hodges_lehmann_ratio([1.0, 1.01, 1.02], [1.0, 1.0, 1.0])
    assert abs(hl - 1.01) < 1e-12 and abs(lo - 1.0) < 1e-12 and abs(hi - 1.02) < 1e-12 and abs(cov - 0.9) < 1e-12
    assert parity_verdict(lo, hi) == "within"
    # bimodal runs of one distribution in both tools: unresolved, never a false "outside"
    hl, lo, hi, cov = hodges_lehmann_ratio([5.5, 7.4, 7.5], [5.9, 7.7, 7.8])
    assert parity_verdict(lo, hi) == "unresolved", (lo, hi)
    assert parity_verdict(1.05, 1.10) == "outside" and parity_verdict(0.80, 0.90) == "outside"
    # 2 runs a side cannot reach 90%: the widest interval, with its coverage 1 - 2/6
    _, _, _, cov = hodges_lehmann_ratio([1.0, 1.1], [1.0, 1.2])
    assert abs(cov - (1 - 2 / 6)) < 1e-12
    # 6 runs a side: a narrower interval than [min, max], coverage still >= 90%
    _, lo, hi, cov = hodges_lehmann_ratio([1.0 + i / 100 for i in range(6)], [1.0] * 6)
    assert cov >= 0.9 and lo > 1.0 and hi < 1.05, (lo, hi, cov)
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

#!/usr/bin/env python3
"""Where a skew job's replay skew comes from, from the slim events that
scripts/device/device-instrument.sh keeps (`join --events-out`, replay rows).

For each timed replay collective: the skew (max minus min arrival offset),
the part the replay designed (difference of the ranks' paced gaps, each from
when its host saw the previous collective complete to the end of its pacing)
and what is left beyond it (arrival less paced gap, max minus min). Prints
the distributions for delayed and undelayed collectives, the count of each
above the control's line (skew >= delay/2 - bound), and the undelayed
collectives with the largest skew, split into the two parts.

Usage: python3 scripts/device/skew_sources.py EVENTS.jsonl [--delay-us 20] [--top 8]
"""
import argparse
import json


def quantiles(v):
    if not v:
        return "none"
    v = sorted(v)
    q = lambda p: v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]
    return f"p50 {q(0.5):.1f}  p90 {q(0.9):.1f}  p99 {q(0.99):.1f}  max {v[-1]:.1f}  (n={len(v)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("events")
    ap.add_argument("--delay-us", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    rows = []
    for line in open(a.events):
        c = json.loads(line)
        if c.get("phase") != "replay" or c.get("warmup") or c.get("arrival_offsets_us") is None:
            continue
        gaps = [r.get("replay_gap_ns") for r in c["ranks"]]
        if any(g is None for g in gaps):
            continue
        off = c["arrival_offsets_us"]
        res = [o - g / 1e3 for o, g in zip(off, gaps)]
        g_us = [g / 1e3 for g in gaps]
        # the line's bound: the two ranks that set each spread (join's rule), where kept
        per = c.get("arrival_bounds_us")
        pair = lambda v: (v.index(max(v)), v.index(min(v)))
        bound = lambda v: (per[pair(v)[0]] + per[pair(v)[1]] if pair(v)[0] != pair(v)[1] else 0.0) if per else (c.get("arrival_bound_us") or 0.0)
        rows.append({
            "seq": c["seq"],
            "delayed": any(r.get("injected_delay_ns") for r in c["ranks"]),
            "skew": c.get("arrival_skew_us") or (max(off) - min(off)),
            "designed": max(g_us) - min(g_us),
            "beyond": max(res) - min(res),
            "bound": {"skew": bound(off), "beyond": bound(res)},
            "offsets": off,
            "gaps": g_us,
        })
    if not rows:
        raise SystemExit(f"{a.events}: no timed replay collective with paced gaps on every rank")
    line = lambda r, k: r[k] >= a.delay_us / 2 - r["bound"][k]
    for name, sel in (("delayed", True), ("undelayed", False)):
        rs = [r for r in rows if r["delayed"] == sel]
        print(f"{name}: skew {quantiles([r['skew'] for r in rs])}")
        print(f"{' ' * len(name)}  designed {quantiles([r['designed'] for r in rs])}")
        print(f"{' ' * len(name)}  beyond design {quantiles([r['beyond'] for r in rs])}")
        print(f"{' ' * len(name)}  above the line: skew {sum(line(r, 'skew') for r in rs)}/{len(rs)}, beyond design {sum(line(r, 'beyond') for r in rs)}/{len(rs)}")
    print(f"undelayed collectives with the largest skew (µs): seq, skew = designed part + the rest")
    for r in sorted((r for r in rows if not r["delayed"]), key=lambda r: -r["skew"])[: a.top]:
        print(f"  {r['seq']:>6}  {r['skew']:7.1f}  designed {r['designed']:7.1f}  beyond {r['beyond']:7.1f}  offsets {[round(x, 1) for x in r['offsets']]}  gaps {[round(x, 1) for x in r['gaps']]}")


if __name__ == "__main__":
    main()

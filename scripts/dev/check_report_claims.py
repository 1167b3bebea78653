#!/usr/bin/env python3
"""Check a campaign report's claims against its own printed intervals.

    python3 scripts/dev/check_report_claims.py REPORT_JSON [A/A labels, comma-separated]

Prints, and exits 1 if any fails: every pair row's relation equals the
decision rule applied to its printed interval (decided only beyond the
minimum effect), the canary's verdict equals the rule on its interval, and
no pair of the named A/A labels (copies of one configuration) is decided.
"""
import itertools
import json
import sys

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
r = json.load(open(sys.argv[1]))
aa = set(sys.argv[2].split(",")) if len(sys.argv) == 3 else set()
m = r["policy"]["min_effect_pct"]


def rule(lo, hi):
    return "a_faster" if hi < -m else "b_faster" if lo > m else "not_distinguished"


failed = 0
rows = 0
aa_decided = []
for p in r["phases"]:
    for key in ("pairs", "pairs_p99"):
        for q in p[key]:
            rows += 1
            if q["relation"] != rule(q["ci_low_pct"], q["ci_high_pct"]):
                failed += 1
                print("MISMATCH", p["phase"], key, q)
            if q["a"] in aa and q["b"] in aa and q["relation"] != "not_distinguished":
                aa_decided.append((p["phase"], key, q))
print(f"report format {r['format_version']}; {rows} pair rows, {failed} differ from the rule applied to their printed interval")
print(f"A/A labels {sorted(aa)}: {len(aa_decided)} decided pair rows")
for a in aa_decided:
    print("  DECIDED", a)
c = r.get("canary")
if c:
    i = c["result"]["interval"]
    lo, hi = i["ci_low_pct"], i["ci_high_pct"]
    want = "pass" if hi < -m else "fail" if lo > m else "tied" if (lo >= -m and hi <= m) else "insufficient-evidence"
    ok = c["result"]["verdict"] == want
    failed += not ok
    print(f"canary {c['candidate']} vs {c['baseline']}: {c['result']['verdict']} (rule on its interval: {want})")
for ctl in r["controls"]:
    if ctl["kind"] != "injected-skew":
        level = f" at {ctl['level'] * 100:.3f}%" if ctl.get("level") is not None else ""
        print(f"control {ctl['kind']} [{ctl.get('phase')}]{level} {ctl['outcome']}: {ctl['observed']}")
sys.exit(1 if failed or aa_decided else 0)

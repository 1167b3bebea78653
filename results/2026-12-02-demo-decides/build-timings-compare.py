#!/usr/bin/env python3
"""Compare two `cargo build --timings` reports side by side.

    python3 results/2026-12-02-demo-decides/build-timings-compare.py BEFORE/cargo-timing.html AFTER/cargo-timing.html [N=12]

Prints, for the N crates with the longest build in BEFORE, each build's wall
time (frontend + codegen, as cargo's report splits them) and the ratio
after/before, then the sum over every unit. Wall times of a loaded machine
vary with the load: read them with the CPU time (user + sys) of the whole
build, which /usr/bin/time reports beside them.
"""
import json
import re
import sys


def units(path):
    html = open(path, encoding="utf-8").read()
    m = re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S)
    if not m:
        sys.exit(f"{path}: no UNIT_DATA (not a cargo --timings report)")
    out = {}
    data = json.loads(m.group(1))
    for u in data:
        key = (u["name"], u.get("target", "").strip())
        split = {s[0]: s[1]["end"] - s[1]["start"] for s in (u.get("sections") or [])}
        out[key] = (u["duration"], split.get("frontend"), split.get("codegen"))
    return out, sum(u["duration"] for u in data)


def fmt(x):
    return "-" if x is None else f"{x:8.1f}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    (before, sb), (after, sa) = units(sys.argv[1]), units(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    print(f"{'crate':32} {'before s':>8} {'(front':>8} {'codegen)':>8} {'after s':>8} {'(front':>8} {'codegen)':>8} {'after/before':>12}")
    for key in sorted(before, key=lambda k: -before[k][0])[:n]:
        b = before[key]
        a = after.get(key)
        ratio = f"{a[0] / b[0]:12.2f}" if a and b[0] > 0 else f"{'absent':>12}"
        name = (key[0] + " " + key[1]).strip()
        print(f"{name:32} {fmt(b[0])} {fmt(b[1])} {fmt(b[2])} {fmt(a[0] if a else None)} {fmt(a[1] if a else None)} {fmt(a[2] if a else None)} {ratio}")
    print(f"{'sum over all units':32} {sb:8.1f} {'':17} {sa:8.1f} {'':17} {sa / sb:12.2f}")


if __name__ == "__main__":
    main()

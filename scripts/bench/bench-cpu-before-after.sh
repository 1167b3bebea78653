#!/usr/bin/env bash
# CPU backend, before vs after, side by side in one run (issue 11's "nothing gets slower on the CPU
# backend"): alternates two builds of commcanary REPS times on the same machine and prints, per build,
# every repetition's bare issue+wait loop and instrumented runner (µs per collective, from
# `bench-overhead`, mpirun -n 2, 64 KiB) and the join throughput of a 4-rank all-phase run, then
# the after/before ratios of the medians.
#   usage: scripts/bench/bench-cpu-before-after.sh BEFORE_BIN AFTER_BIN [REPS]
# Build BEFORE_BIN from the older commit (git worktree add /tmp/before <commit>; cargo build --release
# there). A benchmark: it prints numbers and asserts nothing. Run it on a quiet machine.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN [REPS]" >&2; exit 2; }
BEFORE=$1 AFTER=$2 REPS=${3:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
for i in $(seq 1 "$REPS"); do
  for v in before after; do
    bin=$BEFORE; [ $v = after ] && bin=$AFTER
    line=$(timeout 300 mpirun -n 2 "$bin" bench-overhead --iters 2000 --size 64KiB --reps 5 </dev/null 2>/dev/null | tail -1)
    rm -rf "$TMP/run" "$TMP/ev.jsonl"; mkdir -p "$TMP/run"
    timeout 300 mpirun -n 4 "$bin" rank -q --backend cpu --phases all --tokens 256 --layers 32 --iters 50 \
      $([ $v = after ] && echo --model synthetic) --run-id big --out "$TMP/run" </dev/null >/dev/null 2>&1 || { echo "$v rank failed" >&2; continue; }
    t0=$(date +%s%N); "$bin" join "$TMP/run/big" --events-out "$TMP/ev.jsonl" >/dev/null; t1=$(date +%s%N)
    ev=$(( $(wc -l <"$TMP/ev.jsonl") * 4 ))
    python3 - "$v" "$i" "$line" "$ev" "$t0" "$t1" <<'PY'
import json, sys
v, i, line, ev, t0, t1 = sys.argv[1:]
d = json.loads(line)
print(f"{v} rep {i}: bare {d['bare_ns_per_collective_median']/1e3:.2f} us, instrumented {d['instrumented_ns_per_collective_median']/1e3:.2f} us, "
      f"join {int(ev)/((int(t1)-int(t0))/1e9):.0f} rank-events/s")
PY
  done
done | tee "$TMP/lines.txt"
python3 - "$TMP/lines.txt" <<'PY'
import re, statistics, sys
rows = {}
for l in open(sys.argv[1]):
    m = re.match(r"(\w+) rep \d+: bare ([\d.]+) us, instrumented ([\d.]+) us, join (\d+)", l)
    if m:
        rows.setdefault(m[1], []).append(tuple(float(x) for x in m.groups()[1:]))
if set(rows) != {"before", "after"}:
    sys.exit("missing repetitions of one build")
for k, name in enumerate(["bare us/collective", "instrumented us/collective", "join rank-events/s"]):
    b = statistics.median(r[k] for r in rows["before"]); a = statistics.median(r[k] for r in rows["after"])
    print(f"{name}: before median {b:.2f} [{min(r[k] for r in rows['before']):.2f}, {max(r[k] for r in rows['before']):.2f}], "
          f"after median {a:.2f} [{min(r[k] for r in rows['after']):.2f}, {max(r[k] for r in rows['after']):.2f}], after/before {a/b:.3f}")
PY

#!/usr/bin/env bash
# Where does an injected arrival delay show up besides the delayed collective?
# One GPU job (isolated, blocking, replay) with rank R sleeping US before every EVERY-th
# collective; for each phase, the delay-control line of join and, for the
# undelayed collectives above the detection line, per phase, how far they are
# from the last delayed collective and which rank arrived last (from the
# joined trace). Run from the repository root on a GPU host
# with the staged binary (scripts/device-stage.sh). Usage:
#   bash scripts/device/device-skew-diagnostic.sh [RANKS] [R] [EVERY] [US]
set -uo pipefail
N=${1:-4}; R=${2:-3}; EVERY=${3:-10}; US=${4:-200}
B=$PWD/.stage/bin/commcanary
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=${WORK:-/tmp/skewdiag}; mkdir -p "$W"
for ph in isolated,blocking,replay; do id=diag
  timeout 120 mpirun ${MPIRUN_EXTRA:-} --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -n "$N" "$B" rank -q --backend "${BACKEND:-cuda}" \
    --phases "$ph" --tokens 64 --model synthetic --layers 32 --iters 100 --inject-delay "rank=$R,every=$EVERY,us=$US" --run-id "$id" --out "$W" >/dev/null || exit 1
  "$B" join "$W/$id" --events-out "$W/$id.jsonl" | grep -E "^delay control"
  python3 - "$W/$id.jsonl" "$US" <<'PY'
import json, sys, collections
ev = [json.loads(l) for l in open(sys.argv[1])]
us = float(sys.argv[2])
for phase in sorted({e["phase"] for e in ev}):
  pev = [e for e in ev if not e["warmup"] and e["phase"] == phase]
  delayed = {e["seq"] for e in pev if any(t.get("injected_delay_ns") for t in e["ranks"])}
  def above(e): return e["arrival_skew_us"] is not None and e["arrival_skew_us"] >= us - (e["arrival_bound_us"] or 0)
  by_offset = collections.Counter()
  last_rank = collections.Counter()
  for e in pev:
      if e["seq"] in delayed or not above(e): continue
      k = min((e["seq"] - d for d in delayed if d < e["seq"]), default=None)
      by_offset[k] += 1
      offs = e["arrival_offsets_us"]; last_rank[e["members"][offs.index(max(offs))]] += 1
  print(f"{phase}: undelayed above the line: {sum(by_offset.values())} of {len(pev) - len(delayed)}; by distance to the last delayed collective: {dict(sorted(by_offset.items(), key=lambda x: (x[0] is None, x[0])))}; last to arrive: {dict(last_rank)}")
PY
done

#!/usr/bin/env bash
# Side by side on one GPU host: CommCanary's blocking phase with its
# collectives on the compute stream (--comm-stream current) and on their own
# stream (separate), eager and CUDA-graph, ROUNDS rounds in a seeded shuffled
# order, one fresh mpirun each; prints per-token medians and their ratio.
# Usage: bash scripts/device/device-comm-stream-ab.sh OUT [NPROC] [ROUNDS] [MODEL]
set -uo pipefail
OUT=${1:?OUT}; NPROC=${2:-1}; ROUNDS=${3:-3}; MODEL=${4:-llama3-8b}
B=$PWD/.stage/bin/commcanary
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
jobs=$(python3 - "$ROUNDS" <<'P'
import random, sys
r = random.Random(20261201)
for rnd in range(1, int(sys.argv[1]) + 1):
    js = [(m, s) for m in ("graph", "eager") for s in ("current", "separate")]
    r.shuffle(js)
    for m, s in js:
        print(f"{rnd}:{m}:{s}")
P
)
for j in $jobs; do
  IFS=: read -r rnd mode cs <<< "$j"
  d="$OUT/$mode-$cs-$rnd"
  g=(); [ "$mode" = graph ] && g=(--graph)
  timeout 150 mpirun --bind-to none -x NCCL_NVLS_ENABLE -n "$NPROC" "$B" rank -q --backend cuda --phases blocking --model "$MODEL" \
    --tokens 64 --warmup-tokens 16 --check 1 --comm-stream "$cs" "${g[@]}" --run-id run --out "$d" > "$d.log" 2>&1
  rc=$?
  med=NA
  [ $rc = 0 ] && med=$("$B" join --json "$d/run" | python3 -c 'import json,sys; print([p for p in json.load(sys.stdin)["phases"] if p["phase"]=="blocking"][0]["token_median_us"])')
  echo "$rnd $mode $cs rc=$rc token_median_us=$med" | tee -a "$OUT/ab.txt"
done
python3 - "$OUT/ab.txt" <<'P'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
v = {}
for rnd, mode, cs, rc, med in rows:
    m = med.split("=")[1]
    if m != "NA":
        v.setdefault((mode, cs), []).append(float(m))
for mode in ("graph", "eager"):
    c, s = v.get((mode, "current"), []), v.get((mode, "separate"), [])
    if c and s:
        print(f"{mode}: current median of rounds {st.median(c):.1f} us {sorted(c)}; separate {st.median(s):.1f} us {sorted(s)}; separate/current {st.median(s)/st.median(c):.4f}")
P

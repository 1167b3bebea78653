#!/usr/bin/env bash
# Diagnostic (not a test): why the isolated phase's per-iteration time differs
# from nccl-tests' in the host-bound regime. On a GPU host, alternates REPS
# times, in one order, nccl-tests `all_reduce_perf -I 1` and CommCanary's
# isolated phase at one small size, each under its VARIANTs (extra flags,
# mpirun placement), and prints every run's per-iteration median and p99
# (µs; nccl-tests from its JSON, CommCanary from `join --json`).
#
#   bash results/2026-12-01-h200-one-gpu-parity-host-bound/device-isolated-ab.sh OUT_DIR
#
# Environment: NP (ranks, 1), SIZE (bytes, 8), N (2000), W (200), REPS (3).
# Needs .stage/bin/commcanary and .stage/all_reduce_perf (scripts/device-stage.sh).
set -uo pipefail
OUTD=${1:?output directory}
NP=${NP:-1}; SIZE=${SIZE:-8}; N=${N:-2000}; W=${W:-200}; REPS=${REPS:-3}
CC=$PWD/.stage/bin/commcanary; NT=$PWD/.stage/all_reduce_perf
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUTD"
# tool | name | mpirun binding | extra flags (rank's for cc, all_reduce_perf's for nt);
# VARIANTS_FILE names a file of such lines to run instead
VARIANTS=(
  "nt|nccl-tests|none|"
  "cc|plain|none|"
  "cc|check|none|--check 1"
  "cc|sweep-to-256M|none|-e 256M -f 4"
  "cc|bound-core|core|"
)
[ -n "${VARIANTS_FILE:-}" ] && mapfile -t VARIANTS < <(grep -v '^#' "$VARIANTS_FILE")
cc_run() { # name bind flags rep
  local d="$OUTD/cc-$1-$4"
  timeout 120 mpirun < /dev/null --bind-to "$2" -n "$NP" -x NCCL_NVLS_ENABLE "$CC" rank -q --backend cuda --phases isolated \
    --model synthetic --dtype f32 -b "$SIZE" -e "$SIZE" -n "$N" -w "$W" $3 --out "$OUTD/runs" --run-id "cc-$1-$4" > "$d.log" 2>&1 || { echo "$1 rep $4: rank failed"; return; }
  "$CC" join --json "$OUTD/runs/cc-$1-$4" > "$d.json" 2>>"$d.log"
  python3 - "$d.json" "$SIZE" "$1" "$4" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); size = int(sys.argv[2])
r = next(x for x in d["isolated_sizes"] if x["bytes"] == size)
print(f"cc {sys.argv[3]:<14} rep {sys.argv[4]}: p50 {r['p50_us']:.2f} us  p99 {r['p99_us']:.2f} us")
PY
}
nt_run() { # name bind flags rep
  local d="$OUTD/nt-$1-$4"
  timeout 120 mpirun < /dev/null --bind-to "$2" -n "$NP" -x NCCL_NVLS_ENABLE "$NT" -b "$SIZE" -e "$SIZE" -g 1 -n "$N" -w "$W" -c 1 -I 1 $3 \
    -J "$d.json" > "$d.log" 2>&1 || { echo "$1 rep $4: nccl-tests failed"; return; }
  # nccl-tests' rows and statistics as the parity script reads them
  PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)/scripts/device" python3 - "$d.json" "$1" "$4" <<'PY'
import json, sys
from nccl_tests_parity import nccl_tests_rows, stats
_, t = next(nccl_tests_rows(json.load(open(sys.argv[1]))))
p50, p99 = stats(t)
print(f"nt {sys.argv[2]:<14} rep {sys.argv[3]}: p50 {p50:.2f} us  p99 {p99:.2f} us")
PY
}
{
  echo "== $(date -u +%FT%TZ) ranks $NP size $SIZE iters $N warm-ups $W reps $REPS; commcanary $("$CC" --version)"
  for rep in $(seq 1 "$REPS"); do
    for v in "${VARIANTS[@]}"; do
      IFS='|' read -r tool name bind flags <<<"$v"
      if [ "$tool" = nt ]; then nt_run "$name" "$bind" "$flags" "$rep"; else cc_run "$name" "$bind" "$flags" "$rep"; fi
    done
  done
} 2>&1 | tee "$OUTD/summary.txt"

#!/usr/bin/env bash
# Benchmark (not a test) of the clock estimator: 20 runs without injection (truth 0)
# and 20 with rank 2 shifted by 250 us and 50 ppm; prints, per run and rank, the
# estimate, the truth, the error and the bound, and whether the error lies within it.
# --clock pingpong-only: the estimate itself, also for ranks that read rank 0's
# kernel clock (whose default model is exactly 0 and would show nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
. scripts/env.sh
BIN=target/release/commcanary
RUNS=${RUNS:-20}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
printf '%-9s %4s %4s %12s %12s %10s %10s %9s %10s %10s %7s\n' case run rank offset_us truth_us err_us bound_us drift_ppm truth_ppm dbound_ppm within
for case in none injected; do
  for i in $(seq 1 "$RUNS"); do
    extra=(); [ "$case" = injected ] && extra=(--inject-clock rank=2,offset_us=250,drift_ppm=50)
    mpirun -n 4 "$BIN" rank -q --backend cpu --phases blocking --tokens 16 --model synthetic --layers 8 --clock pingpong-only "${extra[@]}" --run-id "$case-$i" --out "$TMP" >/dev/null
    "$BIN" join --json "$TMP/$case-$i" | tr -d ' \n' | grep -o '"clocks":\[[^]]*\]' | grep -o '{[^}]*}' | while read -r c; do
      g() { echo "$c" | grep -o "\"$1\":[^,}]*" | cut -d: -f2; }
      off=$(g offset_us); b=$(g bound_us); d=$(g drift_ppm); db=$(g drift_bound_ppm); r=$(g rank)
      t=$(g injected_offset_us); tp=$(g injected_drift_ppm); [ "$t" = null ] && t=0; [ "$tp" = null ] && tp=0
      w=$(g offset_within_bound)
      awk -v cs="$case" -v i="$i" -v r="$r" -v o="$off" -v t="$t" -v b="$b" -v d="$d" -v tp="$tp" -v db="$db" -v w="$w" \
        'BEGIN{printf "%-9s %4d %4d %12.3f %12.3f %10.3f %10.3f %9.2f %10.2f %10.2f %7s\n", cs,i,r,o,t,o-t,b,d,tp,db,w}'
    done
  done
done

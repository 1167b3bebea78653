#!/usr/bin/env bash
# On a 2-GPU host: import the PyTorch fixture's Kineto traces and replay them
# through NCCL (`replay-trace --backend cuda`), every collective checked:
# paced by the trace's gaps with the recorded reductions, again with CUPTI
# recording the kernels, then with the gaps spun on the device (--pace
# device-gaps: host scheduling cannot move them), then back to back with avg and with max, then once
# with rank 1's results corrupted (the check must fail). Compares what ran
# with the trace (kind, group, dtype, counts per collective, NCCL kernel
# family per collective) and prints the replay gap error.
#
#   bash scripts/device/device-trace-replay.sh OUT_DIR
#
# DEVICE_REPEATS=N runs the device-gaps replay N times (default 1).
#
# Run from the repository root with the binary staged by
# scripts/device-stage.sh (B overrides it). Needs jq.
set -uo pipefail
OUTD=${1:?output directory}
B=${B:-$PWD/.stage/bin/commcanary}
F=tests/data/pytorch-2.11-tp2-h200
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$OUTD"
fails=0
step() { # NAME EXPECT(0|fail) ARGS...
  local name=$1 expect=$2; shift 2
  echo "== $name: replay-trace $*"
  timeout 90 mpirun < /dev/null --bind-to none -n 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$B" replay-trace "$@" > "$OUTD/$name.out" 2> "$OUTD/$name.err"
  local rc=$?
  cat "$OUTD/$name.out"; tail -3 "$OUTD/$name.err"
  if { [ "$expect" = 0 ] && [ $rc -ne 0 ]; } || { [ "$expect" = fail ] && [ $rc -eq 0 ]; }; then
    echo "!! $name: exit $rc, expected $expect"; fails=$((fails + 1))
  else
    echo "ok $name: exit $rc"
  fi
}
"$B" --version
"$B" import kineto "$F/kineto.rank-0.json.gz" "$F/kineto.rank-1.json.gz" -o "$OUTD/kineto.json" || exit 1
step gaps 0 "$OUTD/kineto.json" --backend cuda --check --out "$OUTD/gaps"
step kernels 0 "$OUTD/kineto.json" --backend cuda --check --cupti --out "$OUTD/kernels"
for r in 0 1; do
  line=$(grep "^rank $r: CUPTI kernel family" "$OUTD/kernels.out")
  echo "$line"
  n=$(jq '.records | length' "$OUTD/kernels/replay-trace.rank-$r.json" 2>/dev/null)
  grep -q "matches the trace in $n of $n collectives (0 with no replay kernel)$" <<< "$line" || { echo "!! rank $r: kernel families differ from the trace"; fails=$((fails + 1)); }
done
device_runs=""
for k in $(seq 1 "${DEVICE_REPEATS:-1}"); do
  d=device; [ "$k" -gt 1 ] && d=device$k
  step "$d" 0 "$OUTD/kineto.json" --backend cuda --check --pace device-gaps --out "$OUTD/$d"
  device_runs="$device_runs $d"
done
step avg 0 "$OUTD/kineto.json" --backend cuda --check --pace none --op avg --out "$OUTD/avg"
step max 0 "$OUTD/kineto.json" --backend cuda --check --pace none --op max --out "$OUTD/max"
step corrupt fail "$OUTD/kineto.json" --backend cuda --check --pace none --corrupt-rank 1 --out "$OUTD/corrupt"
grep -q -- "--check:" "$OUTD/corrupt.err" || { echo "!! corrupt: no --check failure in its stderr"; fails=$((fails + 1)); }
# what ran against what the trace recorded, per rank and collective
for r in 0 1; do
  want=$(jq -c "[.ranks[$r].collectives[] | [.kind, .group, .dtype, .in_elems, .out_elems]]" "$OUTD/kineto.json")
  got=$(jq -c '[.records[] | [.kind, .group, .dtype, .in_elems, .out_elems]]' "$OUTD/gaps/replay-trace.rank-$r.json" 2>/dev/null)
  n=$(jq length <<< "$want")
  if [ "$want" = "$got" ]; then echo "rank $r: all $n collectives match the trace (kind, group, dtype, counts)"; else echo "!! rank $r: replay differs from the trace"; fails=$((fails + 1)); fi
  for s in gaps kernels $device_runs; do
    jq -r '[.records[] | select(.index > 0 and .target_gap_ns != null) | (.actual_gap_ns - .target_gap_ns)] | sort | "rank '$r' '$s' gap error (actual - target) ns: min \(.[0]) p50 \(.[length/2|floor]) p99 \(.[(length*0.99|ceil)-1]) max \(.[-1]) over \(length)"' "$OUTD/$s/replay-trace.rank-$r.json" 2>/dev/null
    # where the largest error was, to tell a systematic gap from a stray one
    jq -r '[.records[] | select(.index > 0 and .target_gap_ns != null) | {index, kind, target_gap_ns, e: (.actual_gap_ns - .target_gap_ns)}] | max_by(.e | fabs) | "rank '$r' '$s' largest error: collective \(.index) (\(.kind)), target \(.target_gap_ns) ns, error \(.e) ns"' "$OUTD/$s/replay-trace.rank-$r.json" 2>/dev/null
  done
  for s in gaps $device_runs; do
    jq -r '[.records[] | select(.index > 0 and .target_gap_ns != null) | (.actual_gap_ns - .target_gap_ns | fabs)] | sort | if .[(length*0.99|ceil)-1] > 5000 then "!! rank '$r' '$s': gap error p99 above 5 µs" else "rank '$r' '$s': gap error p99 within 5 µs" end' "$OUTD/$s/replay-trace.rank-$r.json" 2>/dev/null
  done
done
echo "failures: $fails"
exit $((fails > 0))

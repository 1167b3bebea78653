#!/usr/bin/env bash
# nccl-tests parity, side by side, on a GPU host: interleaves REPS repetitions
# of nccl-tests' `all_reduce_perf -I 1 -J FILE` and `commcanary rank --phases
# isolated` with the same sizes, iterations and warm-ups, per NCCL
# configuration, in a seeded shuffled order, then prints per size both tools'
# per-iteration median and p99 and their ratios (scripts/device/nccl_tests_parity.py).
#
#   bash scripts/device/bench-vs-nccl-tests.sh [RESULT_DIR]
#
# Run from the repository root with .stage/bin/commcanary (scripts/device-stage.sh)
# and .stage/all_reduce_perf (copied from nccl-tests 2.19.6). Both load the same
# libnccl.so.2 through the system loader unless NCCL_LIB names a file (then
# LD_LIBRARY_PATH is pointed at its directory for nccl-tests too).
# Environment: NP (ranks, 2), REPS (3), N (iterations, 500), W (warm-ups, 50),
# B/E/F (sizes, 8/256M/2), CONFIGS (names from the list below), SEED, TIMEOUT_S (per job).
# The raw per-iteration data of both tools is kept in RESULT_DIR/raw.tgz.
set -uo pipefail
RES=${1:-${OUT:-out}/nccl-tests-parity}
NP=${NP:-2}; REPS=${REPS:-3}; N=${N:-500}; W=${W:-50}; B=${B:-8}; E=${E:-256M}; F=${F:-2}
SEED=${SEED:-20261130}; TIMEOUT_S=${TIMEOUT_S:-150}
CC=$PWD/.stage/bin/commcanary; NT=$PWD/.stage/all_reduce_perf
[ -x "$CC" ] && [ -x "$NT" ] || { echo "need .stage/bin/commcanary and .stage/all_reduce_perf" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A ENV=(
  [default]=""
  [ring-ll]="NCCL_ALGO=Ring NCCL_PROTO=LL"
  [ring-simple]="NCCL_ALGO=Ring NCCL_PROTO=Simple"
  [tree-ll]="NCCL_ALGO=Tree NCCL_PROTO=LL"
)
CONFIGS=${CONFIGS:-default ring-ll ring-simple tree-ll}
RAW=$RES/raw; WORK=$(mktemp -d); mkdir -p "$RAW"
NCCL_ARGS=(); [ -n "${NCCL_LIB:-}" ] && { NCCL_ARGS=(--nccl-lib "$NCCL_LIB"); export LD_LIBRARY_PATH=$(dirname "$NCCL_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; }
# one job per (rep, config, tool), in a seeded shuffled order
plan=$(python3 -c "
import random, sys
r = random.Random($SEED); jobs = [(rep, c, t) for rep in range(1, $REPS + 1) for c in '$CONFIGS'.split() for t in ('nt', 'cc')]
# interleave: shuffle within each repetition so every rep runs every cell once
for rep in range(1, $REPS + 1):
    js = [j for j in jobs if j[0] == rep]; r.shuffle(js)
    for j in js: print(*j)
")
{
echo "== $(date -u +%FT%TZ) host $(hostname); ranks $NP; sizes $B..$E x$F; iters $N warm-ups $W; reps $REPS; seed $SEED"
nvidia-smi -L; echo "commcanary $("$CC" --version)"; echo "nccl-tests: $(sha256sum "$NT" | cut -c1-16)"
while read -r rep cfg tool; do
  envs=(); for kv in ${ENV[$cfg]}; do envs+=(-x "$kv"); done
  t0=$(date +%s.%N)
  if [ "$tool" = nt ]; then
    timeout "$TIMEOUT_S" mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "${envs[@]}" \
      "$NT" -b "$B" -e "$E" -f "$F" -g 1 -n "$N" -w "$W" -c 1 -I 1 -J "$RAW/nt-$cfg-$rep.json" > "$RAW/nt-$cfg-$rep.log" 2>&1
    rc=$?
  else
    timeout "$TIMEOUT_S" mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "${envs[@]}" \
      "$CC" rank -q --backend cuda "${NCCL_ARGS[@]}" --phases isolated --model synthetic --dtype f32 -b "$B" -e "$E" -f "$F" -n "$N" -w "$W" --check 1 \
      --out "$WORK" --run-id "cc-$cfg-$rep" > "$RAW/cc-$cfg-$rep.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      "$CC" join "$WORK/cc-$cfg-$rep" --events-out "$WORK/cc-$cfg-$rep.jsonl" > "$RAW/cc-$cfg-$rep.join.txt" 2>&1
      python3 - "$WORK/cc-$cfg-$rep.jsonl" > "$RAW/cc-$cfg-$rep.iters.csv" <<'PY'
import json, sys
print("size,iter,rank,us")
for line in open(sys.argv[1]):
    c = json.loads(line)
    if c["phase"] != "isolated" or c["warmup"]:
        continue
    for t in c["ranks"]:
        if t.get("device_start_ns") is not None and t.get("device_end_ns") is not None:
            print(f'{c["bytes"]},{c["iter"]},{t["rank"]},{(t["device_end_ns"] - t["device_start_ns"]) / 1e3:.4f}')
PY
    fi
  fi
  printf "%s rep %s %-12s %s rc=%s %ss\n" "$(date -u +%T)" "$rep" "$cfg" "$tool" "$rc" "$(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b-a}")"
done <<< "$plan"
echo "== table"
python3 "$(dirname "$0")/nccl_tests_parity.py" "$RAW" --json "$RES/parity.json"
} 2>&1 | tee "$RES/session.log"
tar czf "$RES/raw.tgz" -C "$RES" raw && rm -rf "$RAW" "$WORK"

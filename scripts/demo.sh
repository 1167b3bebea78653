#!/usr/bin/env bash
# README command 1: set up, then a small CPU campaign under mpirun -n 4 and a printed ranking.
#
# Three configurations of OpenMPI's non-blocking all-reduce (libnbc: ring,
# binomial, recursive doubling; MPI_Iallreduce is served by libnbc, not by
# coll_tuned) x ROUNDS rounds, each round in a freshly shuffled order (seeded),
# one mpirun job per cell, all six phases. Every run is verified by `join`
# before it is summarised.
# Environment: ROUNDS (3), TOKENS (32), LAYERS (8), RANKS (4), SEED (1), OUT (out/demo-<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
BIN=target/release/commcanary
ROUNDS=${ROUNDS:-3} TOKENS=${TOKENS:-32} LAYERS=${LAYERS:-8} RANKS=${RANKS:-4} SEED=${SEED:-1}
OUT=${OUT:-out/demo-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
declare -A ALGO=([nbc-ring]=1 [nbc-binomial]=2 [nbc-recursive-doubling]=4)
RANDOM=$SEED
labels=()
for round in $(seq 1 "$ROUNDS"); do
  order=$(printf '%s\n' "${!ALGO[@]}" | sort | while read -r c; do echo "$RANDOM $c"; done | sort -n | cut -d' ' -f2)
  for cfg in $order; do
    id="r${round}-${cfg}"
    echo "demo: round $round/$ROUNDS  $cfg  (OMPI_MCA_coll_libnbc_iallreduce_algorithm=${ALGO[$cfg]})" >&2
    OMPI_MCA_coll_libnbc_iallreduce_algorithm=${ALGO[$cfg]} \
      mpirun -n "$RANKS" "$BIN" rank -q --backend cpu --phases all \
        --tokens "$TOKENS" --layers "$LAYERS" --iters 20 --check 2 --run-id "$id" --out "$OUT" >/dev/null
    labels+=("$cfg=$OUT/$id")
  done
done
echo
echo "== one run in detail ($OUT/r1-nbc-ring), verified by join:"
"$BIN" join "$OUT/r1-nbc-ring"
echo
echo "== ranking per phase over $ROUNDS jobs per configuration (workload phases: per-token latency; isolated: per-collective):"
"$BIN" summarize "${labels[@]}"
echo
echo "Shards and run records are in $OUT. Inspect one with: $BIN inspect $OUT/r1-nbc-ring/rank-00000.shard"

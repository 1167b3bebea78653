#!/usr/bin/env bash
# Benchmarks (not tests) for the CPU backend:
#  1. per-collective instrumentation overhead: bare issue+wait loop vs the instrumented phase runner;
#  2. join throughput in events/s on a 4-rank, all-phase, 256 tokens x 32 layers run.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
. scripts/env.sh
BIN=target/release/commcanary
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
echo "== instrumentation overhead (mpirun -n 2, 64 KiB, median of 5 alternating reps of 2000 collectives)"
mpirun -n 2 "$BIN" bench-overhead --iters 2000 --size 64KiB --reps 5
echo "== join throughput: 4 ranks, all phases, 256 x 32"
mpirun -n 4 "$BIN" rank -q --backend cpu --phases all --tokens 256 --model synthetic --layers 32 --iters 50 --run-id big --out "$TMP" >/dev/null
t0=$(date +%s%N)
"$BIN" join "$TMP/big" --events-out "$TMP/ev.jsonl" >/dev/null
t1=$(date +%s%N)
lines=$(wc -l <"$TMP/ev.jsonl")
per_rank_events=$((lines * 4))
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b-a)/1e9}')
echo "joined $lines collectives x 4 ranks = $per_rank_events rank-events in ${secs}s (verify + match + write JSONL)"
awk -v n="$per_rank_events" -v s="$secs" 'BEGIN{printf "join throughput: %.0f rank-events/s, %.0f joined collectives/s\n", n/s, n/4/s}'
ls -l "$TMP/big" | awk 'NR>1{s+=$5} END{printf "shard bytes on disk: %d\n", s}'

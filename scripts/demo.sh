#!/usr/bin/env bash
# README command 1: set up, then a small CPU campaign under mpirun -n 4 and a printed ranking.
#
# examples/cpu-demo.toml: three settings of OpenMPI's non-blocking all-reduce
# (libnbc: ring, binomial, recursive doubling; MPI_Iallreduce is served by
# libnbc, not coll_tuned) and the two controls x 6 rounds in seeded shuffled order, one fresh
# mpirun job per cell, all six phases. The chain: plan (frozen manifest),
# exec (append-only attempts), select, verify (completeness), analyze.
# Environment: OUT (out/demo-<time>), SPEC (examples/cpu-demo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
. scripts/env.sh
BIN=target/demo/commcanary
SPEC=${SPEC:-examples/cpu-demo.toml}
OUT=${OUT:-out/demo-$(date -u +%Y%m%dT%H%M%SZ)}
"$BIN" campaign plan "$SPEC" -o "$OUT"
"$BIN" campaign exec "$OUT"
"$BIN" campaign select "$OUT"
"$BIN" campaign verify "$OUT"
first=$(ls "$OUT/runs" | head -1)
echo
echo "== one job in detail ($first), verified by join:"
"$BIN" join "$OUT/runs/$first"
echo
echo "== the campaign's ranking (verified complete first):"
"$BIN" campaign analyze "$OUT"
echo
echo "Everything is in $OUT (manifest, attempts.jsonl, selection.json, runs/)."
echo "Archive it with: $BIN campaign archive $OUT -o $OUT.tar"

#!/usr/bin/env bash
# A 64-rank run end to end under real mpirun (oversubscribed), CPU backend, tiny workload:
#
#   bash results/2026-12-02-join-scale/run-64-ranks.sh [BIN] [OUT_DIR]
#
# BIN defaults to target/release/commcanary. Runs `mpirun -n 64 --oversubscribe
# BIN rank --backend cpu` (the blocking phase, 4 tokens after 1 warm-up, 2
# layers, 4 KiB all-reduces, a 16x16x16 GEMM), then `join --json`, and checks:
# every rank's shard exists and run.json lists 64, and the join reports
# world_size 64 with the expected collectives ((4 + 1) x 2 = 10 per rank). Exits
# non-zero on any fault (the failing step is named). Not part of CI: 64 ranks
# on 2 cores take about a minute or more (the time is printed).
set -euo pipefail
BIN=$(realpath "${1:-target/release/commcanary}")
OUT=${2:-$(mktemp -d /tmp/run-64.XXXXXX)}
N=64
cd "$(dirname "$0")/../.."
. scripts/env.sh
mkdir -p "$OUT"
fail() { echo "FAIL: $*" >&2; exit 1; }
echo "load before: $(cat /proc/loadavg); cores: $(nproc)"
t0=$(date +%s.%N)
mpirun -n "$N" --oversubscribe "$BIN" rank -q --backend cpu --phases blocking --tokens 4 --warmup-tokens 1 \
  --model synthetic --layers 2 --sizes 4KiB --gemm 16 --check 0 --out "$OUT" > "$OUT/rank.log" 2>&1 || fail "mpirun exited $? (see $OUT/rank.log)"
t1=$(date +%s.%N)
RUN=$(find "$OUT" -mindepth 2 -maxdepth 2 -name run.json -printf '%h\n')
[ "$(echo "$RUN" | grep -c .)" = 1 ] || fail "expected one run directory under $OUT, found: $RUN"
for r in $(seq 0 $((N - 1))); do
  f=$(printf '%s/rank-%05d.shard' "$RUN" "$r")
  [ -s "$f" ] || fail "rank $r shard missing: $f"
done
listed=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["shards"]))' "$RUN/run.json")
[ "$listed" = "$N" ] || fail "run.json lists $listed shards, not $N"
"$BIN" join --json "$RUN" > "$OUT/join.json" 2> "$OUT/join.err" || fail "join exited $? ($(cat "$OUT/join.err"))"
t2=$(date +%s.%N)
python3 - "$OUT/join.json" "$N" <<'EOF' || fail "the join summary does not report what the run did"
import json, sys
s = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert s["world_size"] == n, s["world_size"]
assert len(s["shards"]) == n and sorted(x["rank"] for x in s["shards"]) == list(range(n))
p = {x["phase"]: x for x in s["phases"]}["blocking"]
assert (p["collectives_per_rank"], p["warmup_collectives_per_rank"]) == (8, 2), (p["collectives_per_rank"], p["warmup_collectives_per_rank"])
assert s["collectives"] == 10, s["collectives"]
assert len(s["clocks"]) == n
print(f"join: {s['world_size']} ranks, {s['collectives']} joined collectives, blocking completion p50 {p['completion_median_us']} us, skew p50 {p['skew_median_us']} us")
EOF
printf 'run %s: %d shards (%s bytes); mpirun %.1f s, join %.2f s; load after: %s\n' "$(basename "$RUN")" "$N" \
  "$(find "$RUN" -name '*.shard' -printf '%s\n' | awk '{s+=$1} END {print s}')" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$(cat /proc/loadavg)"
echo "PASS: 64 ranks under mpirun, every shard present, join reports 64 ranks"

#!/usr/bin/env bash
# Benchmark of the analysis (issue #6 acceptance 5); prints timings, asserts nothing.
#  1. the analysis statistics at full size from synthetic jobs (all phases);
#  2. unless FULL=0: a real CPU campaign of 8 configurations x 5 rounds x 4
#     ranks x all six phases at 256 tokens x 32 layers (40 jobs, ~10 s each
#     on 2 cores), then `campaign analyze` on it, timed: joining and
#     verifying every shard, the statistics, report and plots.
# The 8 configurations cycle over libnbc's three all-reduce algorithms: this
# measures the analysis, not a ranking.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
cargo build --release --locked >&2
cargo bench --locked --bench analysis 2>/dev/null | grep -E "^analysis"
[ "${FULL:-1}" = 1 ] || exit 0
W=${WORK:-$(mktemp -d)}
mkdir -p "$W"
spec=$W/bench-full.toml
{
  cat <<'TOML'
name = "bench-full"
backend = "cpu"
ranks = 4
repetitions = 5
seed = 1
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "isolated,blocking,async,replay,fill,overlap"
tokens = 256
layers = 32
sizes = "64KiB,128KiB,256KiB"
iters = 100
[analysis]
tie_policy = "interval"
min_effect_pct = 2.0
bootstrap_resamples = 10000
bootstrap_seed = 1
TOML
  algs=(1 2 4)
  for i in 1 2 3 4 5 6 7 8; do
    printf '[[configs]]\nname = "c%d"\nenv = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "%s" }\n' "$i" "${algs[$(( (i - 1) % 3 ))]}"
  done
} > "$spec"
B=target/release/commcanary
"$B" campaign plan "$spec" -o "$W/c" >/dev/null
t0=$(date +%s.%N)
"$B" campaign exec "$W/c" >/dev/null
t1=$(date +%s.%N)
"$B" campaign select "$W/c" >/dev/null
t2=$(date +%s.%N)
"$B" campaign verify "$W/c" >/dev/null
t3=$(date +%s.%N)
"$B" campaign analyze "$W/c" >/dev/null
t4=$(date +%s.%N)
shards=$(du -sh "$W/c/runs" | cut -f1)
python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$shards" <<'PY'
import sys
t0, t1, t2, t3, t4 = map(float, sys.argv[1:6])
print(f"full campaign (8 configs x 5 rounds x 4 ranks x 6 phases, 256x32; shards {sys.argv[6]}): "
      f"exec {t1 - t0:.0f} s ({(t1 - t0) / 40:.1f} s per job); verify {t3 - t2:.1f} s; "
      f"analyze {t4 - t3:.1f} s (join and verify every shard, statistics, report, plots), {(t4 - t3) / (t1 - t0) * 100:.1f}% of the execution time")
PY
echo "campaign left in $W/c"

#!/usr/bin/env bash
# Join throughput and peak memory, BEFORE binary against AFTER binary, side by side.
#
#   bash scripts/bench/bench-join.sh BEFORE_BIN AFTER_BIN [WORK_DIR]
#
# BEFORE_BIN: e.g. main at the branch point built in release
#   (git worktree add --detach /tmp/before <commit>; cd /tmp/before; cargo build --release).
# Inputs: synthetic runs written by AFTER_BIN's `synth-shards` (the real shard
# and run record writers; every header marked synthetic) at RANKS (default
# "8 64 1024") x COLLECTIVES (default 10000) per rank, as shard format 6 so
# that BEFORE_BIN (which reads formats 1 to 6) reads the very same bytes (a
# format-6 reader ignores the header's synthetic mark). Disk: about 70 bytes
# per rank-event (1024 x 10000: about 0.7 GB); checked before writing.
# Each size is joined (`join --json RUN`) REPS times (default 3) by each
# binary, interleaved (before, after; then after, before; ...), under
# /usr/bin/time -v, each under `timeout TIMEOUT_S` (default 600) and an
# address-space cap of MEM_CAP_GB (default 12; ulimit -v): a join that is
# killed or fails is reported as such (its exit code, wall time and peak RSS
# at that point), never as a throughput. The two binaries' JSON summaries
# must be byte-identical (the script exits 1 otherwise).
# Printed per size and binary: median wall time, rank-events/s per core
# (rank-events / wall / cores the join may use: `nproc`), median CPU time
# (user + sys) and rank-events per CPU-second (on a loaded machine the wall
# time counts waiting for a core; CPU time does not), median peak RSS, peak
# RSS / total shard bytes; then after/before ratios (wall, CPU, RSS).
# Raw rows go to WORK/rows.tsv; SUMMARY_ONLY=1 prints the summary of an
# existing WORK/rows.tsv without running anything.
set -euo pipefail
BEFORE=$(realpath "${1:?BEFORE_BIN}")
AFTER=$(realpath "${2:?AFTER_BIN}")
WORK=${3:-/tmp/bench-join}
RANKS=${RANKS:-8 64 1024}
COLLECTIVES=${COLLECTIVES:-10000}
REPS=${REPS:-3}
TIMEOUT_S=${TIMEOUT_S:-600}
MEM_CAP_GB=${MEM_CAP_GB:-12}
cd "$(dirname "$0")/../.."
mkdir -p "$WORK"
CORES=$(nproc)
echo "cores: $CORES ($(lscpu | sed -n 's/^Model name: *//p' | head -1)); load before: $(cat /proc/loadavg)"
echo "before: $BEFORE ($(sha256sum < "$BEFORE" | cut -c1-12)); after: $AFTER ($(sha256sum < "$AFTER" | cut -c1-12))"
need=0; for n in $RANKS; do need=$((need + n * COLLECTIVES * 80)); done
free=$(df --output=avail -B1 "$WORK" | tail -1)
if [ "$need" -gt "$free" ]; then echo "need about $need bytes for the shards, $free free under $WORK" >&2; exit 1; fi
for n in $RANKS; do
  R="$WORK/run-$n"
  if [ ! -f "$R/run.json" ]; then
    rm -rf "$R"
    "$AFTER" synth-shards --ranks "$n" --collectives "$COLLECTIVES" --format-version 6 -o "$R" > /dev/null
    written=1
  fi
done
# a join hashes again, in its second pass, any shard whose times are within
# 3 s of its first read (core::limits::RACY_WINDOW_NS): let fresh runs age past that
[ -z "${written:-}" ] || sleep 4
if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
printf 'ranks\tbinary\trep\trc\twall_s\tuser_s\tsys_s\tmaxrss_kb\n' > "$WORK/rows.tsv"
one() { # RANKS WHICH BIN REP
  local n=$1 which=$2 bin=$3 rep=$4 R="$WORK/run-$1" t="$WORK/time.txt" rc=0
  ( ulimit -v $((MEM_CAP_GB * 1024 * 1024)); /usr/bin/time -v -o "$t" timeout "$TIMEOUT_S" "$bin" join --json "$R" > "$WORK/out-$n-$which.json" 2> "$WORK/err-$n-$which.txt" ) || rc=$?
  local wall user sys rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$t")
  user=$(awk -F': ' '/User time/ {print $2}' "$t"); sys=$(awk -F': ' '/System time/ {print $2}' "$t")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$t")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$which" "$rep" "$rc" "$wall" "$user" "$sys" "$rss" >> "$WORK/rows.tsv"
  echo "  ranks $n $which rep $rep: rc $rc, wall ${wall}s, peak RSS ${rss} kB"
}
for n in $RANKS; do
  for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) -eq 1 ]; then one "$n" before "$BEFORE" "$rep"; one "$n" after "$AFTER" "$rep"
    else one "$n" after "$AFTER" "$rep"; one "$n" before "$BEFORE" "$rep"; fi
  done
  if [ -s "$WORK/out-$n-before.json" ] && ! cmp -s "$WORK/out-$n-before.json" "$WORK/out-$n-after.json"; then
    echo "ranks $n: the two summaries DIFFER"; diff "$WORK/out-$n-before.json" "$WORK/out-$n-after.json" | head -20; exit 1
  fi
done
echo "load after: $(cat /proc/loadavg)"
fi
for n in $RANKS; do
  bytes=$(find "$WORK/run-$n" -name '*.shard' -printf '%s\n' | awk '{s+=$1} END {print s}')
  echo "ranks $n x $COLLECTIVES collectives = $((n * COLLECTIVES)) rank-events; shard bytes $bytes"
  awk -F'\t' -v n="$n" -v ev=$((n * COLLECTIVES)) -v cores="$CORES" -v bytes="$bytes" '
    function median(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
    $1 == n { k[$2]++; w[$2, k[$2]] = $5; r[$2, k[$2]] = $8; u[$2, k[$2]] = $6 + $7; if ($4 != 0) bad[$2] = bad[$2] " rep " $3 ": exit " $4 " after " $5 " s at " $8 " kB RSS;" }
    END {
      for (b = 0; b < 2; b++) { x = b ? "after" : "before"
        if (bad[x] != "") { printf "  %-6s FAILED:%s (no throughput reported)\n", x, bad[x]; continue }
        for (i = 1; i <= k[x]; i++) { ww[i] = w[x, i]; rr[i] = r[x, i]; uu[i] = u[x, i] }
        mw[x] = median(ww, k[x]); mr[x] = median(rr, k[x]); mu[x] = median(uu, k[x])
        printf "  %-6s wall %.3f s (median of %d), %.3f M rank-events/s per core (%d cores); CPU %.2f s, %.3f M rank-events per CPU-second; peak RSS %.1f MB, RSS / shard bytes %.3f\n",
          x, mw[x], k[x], ev / mw[x] / cores / 1e6, cores, mu[x], ev / mu[x] / 1e6, mr[x] / 1024, mr[x] * 1024 / bytes }
      if (bad["before"] == "" && bad["after"] == "")
        printf "  after/before: wall %.3f, CPU %.3f, peak RSS %.3f\n", mw["after"] / mw["before"], mu["after"] / mu["before"], mr["after"] / mr["before"] }
  ' "$WORK/rows.tsv"
done

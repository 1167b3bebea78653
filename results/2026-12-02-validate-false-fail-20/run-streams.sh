#!/usr/bin/env bash
# The false-FAIL table of `validate` in one device call: S independent streams
# of scripts/dev/validate-false-fail.sh, each pinned to its own two CPUs (an
# emulated 2-CPU node; the load condition's busy loops share those two CPUs),
# some idle, the others loaded, then one table over every completed pair.
#
#   bash results/2026-12-02-validate-false-fail-20/run-streams.sh BIN OUT [STREAMS=8] [IDLE=4] [PAIRS=8] [SECONDS=480]
#
# Streams 0 .. IDLE-1 run the idle condition, the others the load condition.
#
# Each stream stops at PAIRS pairs or when SECONDS run out (a pair cut short
# is not in pairs.tsv: only completed pairs are counted). Needs the host to
# have at least 2*STREAMS CPUs.
set -uo pipefail
BIN=$(realpath "$1"); OUT=$2; S=${3:-8}; I=${4:-4}; P=${5:-8}; T=${6:-480}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
{ date -u +%FT%TZ; hostname; nproc; lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA node\(s\)'; lscpu -e; } > "$OUT/host.txt" 2>&1
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_oversubscribe=1
# CPUs ordered by physical core, so that a stream's two CPUs are one core's
# hyperthreads when the host has them (streams then share no core), else two cores
mapfile -t ORDER < <(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | cut -d, -f1)
[ "${#ORDER[@]}" -ge $((2 * S)) ] || { echo "need $((2 * S)) CPUs, have ${#ORDER[@]}" >&2; exit 3; }
pids=()
for s in $(seq 0 $((S - 1))); do
  cond=idle; [ "$s" -ge "$I" ] && cond=load
  cpus="${ORDER[$((2 * s))]},${ORDER[$((2 * s + 1))]}"
  echo "stream $s: $cond on CPUs $cpus" >> "$OUT/host.txt"
  timeout -s TERM "$T" bash scripts/dev/validate-false-fail.sh --bin "$BIN" --pairs "$P" --cpus "$cpus" \
    --conditions "$cond" --out "$OUT/stream-$s-$cond" > "$OUT/stream-$s.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
# a stream stopped by its timeout can leave its last job's ranks and loops behind
pkill -f "$BIN validate" 2>/dev/null; pkill -x yes 2>/dev/null; sleep 1
# one table over every stream's completed pairs (the header once)
{ grep -h '^condition' "$OUT"/stream-*/pairs.tsv | head -1; for f in "$OUT"/stream-*/pairs.tsv; do grep -v '^#\|^condition' "$f"; done; } > "$OUT/pairs-all.tsv"
bash scripts/dev/validate-false-fail.sh --table "$OUT/pairs-all.tsv" | tee "$OUT/table.txt"

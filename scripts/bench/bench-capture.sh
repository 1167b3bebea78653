#!/usr/bin/env bash
# Overhead of `commcanary capture` (issue #46), measured side by side in one run:
#  1. per call: a cheap MPI call (MPI_Barrier on MPI_COMM_SELF) plain and captured,
#     runs alternated REPS times; prints the medians of the per-call p50 and
#     the captured-minus-plain difference (goal: at most 0.3 us);
#  2. memory: the process's peak resident memory after CALLS (default 10 M)
#     captured calls against the same run plain (goal: the capture library
#     adds under 100 MB);
#  3. an application's wall time: LAMMPS melt (where `lmp` is installed) on 2
#     ranks, plain and captured alternated REPS times, median ratio (goal: within 2%).
# A benchmark, not a test: it prints numbers and asserts nothing.
# Usage: bash scripts/bench/bench-capture.sh [REPS] [CALLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
REPS=${1:-5}
CALLS=${2:-10000000}
cargo build --release --locked -p commcanary -p commcanary-capture >&2
BIN=$PWD/target/release/commcanary
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/callbench" scripts/bench/capture/callbench.c
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { tr ' ' '\n' | awk -v k="$1" 'prev==k {print; exit} {prev=$0}'; }

echo "== per call: MPI_Barrier(MPI_COMM_SELF), 1 rank, 1 M calls per run, $REPS runs each, alternated"
: >"$work/plain"; : >"$work/capt"
for r in $(seq "$REPS"); do
  mpirun -n 1 "$work/callbench" 1000000 10000 | field p50_ns >>"$work/plain"
  rm -rf "$work/cap"
  mpirun -n 1 "$BIN" capture -o "$work/cap" -- "$work/callbench" 1000000 10000 | field p50_ns >>"$work/capt"
done
p=$(median <"$work/plain"); c=$(median <"$work/capt")
echo "plain p50 per call: $p ns; captured: $c ns; added: $(awk -v a="$c" -v b="$p" 'BEGIN{printf "%.1f", a-b}') ns; ratio $(awk -v a="$c" -v b="$p" 'BEGIN{printf "%.2f", a/b}')"

echo "== memory: $CALLS captured calls, 1 rank, peak resident memory of the process"
pl=$(mpirun -n 1 "$work/callbench" "$CALLS" 100000)
rm -rf "$work/cap"
ca=$(mpirun -n 1 "$BIN" capture -o "$work/cap" -- "$work/callbench" "$CALLS" 100000)
hp=$(echo "$pl" | field hwm_kb); hc=$(echo "$ca" | field hwm_kb)
echo "plain VmHWM: $hp kB; captured: $hc kB; added by the capture: $(( hc - hp )) kB; capture file: $(du -m "$work/cap"/rank-00000.mpicap | cut -f1) MiB"

melt=/usr/share/lammps/examples/melt/in.melt
if command -v lmp >/dev/null && [ -f "$melt" ]; then
  echo "== LAMMPS melt, 2 ranks, wall time, $REPS runs each, alternated"
  : >"$work/lp"; : >"$work/lc"
  for r in $(seq "$REPS"); do
    s=$(date +%s.%N); mpirun -n 2 lmp -in "$melt" -log none -screen none; e=$(date +%s.%N)
    echo "$e - $s" | bc >>"$work/lp"
    rm -rf "$work/cap"
    s=$(date +%s.%N); mpirun -n 2 "$BIN" capture -o "$work/cap" -- lmp -in "$melt" -log none -screen none; e=$(date +%s.%N)
    echo "$e - $s" | bc >>"$work/lc"
  done
  lp=$(median <"$work/lp"); lc=$(median <"$work/lc")
  echo "plain median: $lp s; captured median: $lc s; ratio $(awk -v a="$lc" -v b="$lp" 'BEGIN{printf "%.3f", a/b}') (mpirun start-up included in both)"
else
  echo "== LAMMPS: not installed (bash scripts/setup.sh); skipped"
fi

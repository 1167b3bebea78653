#!/usr/bin/env bash
# Overhead of `commcanary capture` (issue #46), measured side by side in one run:
#  1. per call: a cheap MPI call (MPI_Barrier on MPI_COMM_SELF) plain and captured,
#     runs alternated REPS times; prints the medians of the per-call p50 and
#     the captured-minus-plain difference (goal: at most 0.3 us);
#  2. memory: the process's peak resident memory after CALLS (default 10 M)
#     captured calls against the same run plain (goal: the capture library
#     adds under 100 MB);
#  3. an application's wall time: LAMMPS's melt (examples/lammps/in.lj-melt,
#     LAMMPS_STEPS steps, default 600) on 2 ranks, PAIRS pairs of one plain
#     and one captured run, the order inside each pair alternated (ABBA);
#     per pair the ratio captured/plain of LAMMPS's own "Loop time" and of
#     the whole mpirun wall time; prints the geometric mean ratio of each with
#     its 95% Student-t interval over the pairs (goal: within 2%).
# A benchmark, not a test: it prints numbers and asserts nothing.
# Usage: bash scripts/bench/bench-capture.sh [REPS] [CALLS] [PAIRS]
# PARTS=call,memory,lammps picks the parts (default all); PAIRS_OUT=FILE keeps
# LAMMPS's pairs; CALLBENCH names a prebuilt callbench; COMMCANARY_BIN names a
# built binary (the capture library beside it) instead of building release.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
REPS=${1:-5}
CALLS=${2:-10000000}
PAIRS=${3:-20}
PARTS=${PARTS:-call,memory,lammps}
if [ -n "${COMMCANARY_BIN:-}" ]; then
  BIN=$(realpath "$COMMCANARY_BIN")
else
  cargo build --release --locked -p commcanary -p commcanary-capture >&2
  BIN=$PWD/target/release/commcanary
fi
echo "binary: $BIN ($(sha256sum "$BIN" | cut -c1-12)); capture library: $(dirname "$BIN")/libcommcanary_capture.so"
part() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# CALLBENCH=FILE: a callbench built elsewhere (a host without mpicc)
if [ -n "${CALLBENCH:-}" ]; then cp "$CALLBENCH" "$work/callbench"; else mpicc -O2 -o "$work/callbench" scripts/bench/capture/callbench.c; fi
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { tr ' ' '\n' | awk -v k="$1" 'prev==k {print; exit} {prev=$0}'; }

if part call; then
echo "== per call: MPI_Barrier(MPI_COMM_SELF), 1 rank, 1 M calls per run, $REPS runs each, alternated"
: >"$work/plain"; : >"$work/capt"
for r in $(seq "$REPS"); do
  mpirun -n 1 "$work/callbench" 1000000 10000 | field p50_ns >>"$work/plain"
  rm -rf "$work/cap"
  mpirun -n 1 "$BIN" capture -o "$work/cap" -- "$work/callbench" 1000000 10000 | field p50_ns >>"$work/capt"
done
p=$(median <"$work/plain"); c=$(median <"$work/capt")
echo "plain p50 per call: $p ns; captured: $c ns; added: $(awk -v a="$c" -v b="$p" 'BEGIN{printf "%.1f", a-b}') ns; ratio $(awk -v a="$c" -v b="$p" 'BEGIN{printf "%.2f", a/b}')"
fi

if part memory; then
echo "== memory: $CALLS captured calls, 1 rank, peak resident memory of the process"
pl=$(mpirun -n 1 "$work/callbench" "$CALLS" 100000)
rm -rf "$work/cap"
ca=$(mpirun -n 1 "$BIN" capture -o "$work/cap" -- "$work/callbench" "$CALLS" 100000)
hp=$(echo "$pl" | field hwm_kb); hc=$(echo "$ca" | field hwm_kb)
echo "plain VmHWM: $hp kB; captured: $hc kB; added by the capture: $(( hc - hp )) kB; capture file: $(du -m "$work/cap"/rank-00000.mpicap | cut -f1) MiB"
fi

# one LAMMPS run, plain or captured: prints "LOOP_S WALL_S"
lammps_run() {
  local out s e
  rm -rf "$work/cap"
  s=$(date +%s.%N)
  if [ "$1" = plain ]; then
    out=$(cd "$work" && mpirun -n 2 lmp -in "$input" -var steps "$steps" -log none)
  else
    out=$(cd "$work" && mpirun -n 2 "$BIN" capture -o "$work/cap" -- lmp -in "$input" -var steps "$steps" -log none)
  fi
  e=$(date +%s.%N)
  echo "$(echo "$out" | sed -n 's/^Loop time of \([0-9.eE+-]*\) on.*/\1/p' | head -1) $(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.3f", e - s}')"
}
input=$PWD/examples/lammps/in.lj-melt
steps=${LAMMPS_STEPS:-600}
if part lammps && command -v lmp >/dev/null; then
  echo "== LAMMPS melt ($input, $steps steps), 2 ranks: $PAIRS pairs of a plain and a captured run, order alternated (ABBA)"
  lammps_run plain >/dev/null # warm the page cache
  : >"$work/pairs"
  for k in $(seq "$PAIRS"); do
    if [ $((k % 2)) -eq 1 ]; then p=$(lammps_run plain); c=$(lammps_run captured); else c=$(lammps_run captured); p=$(lammps_run plain); fi
    echo "$p $c" >>"$work/pairs"
  done
  # PAIRS_OUT=FILE keeps the pairs (plain loop s, plain wall s, captured loop s, captured wall s)
  if [ -n "${PAIRS_OUT:-}" ]; then cp "$work/pairs" "$PAIRS_OUT"; fi
  python3 - "$work/pairs" <<'PY'
import math, statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
# two-sided 95% Student-t quantiles by degrees of freedom (normal beyond 30)
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145,
     15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}
def line(what, plain, capt):
    logs = [math.log(c / p) for p, c in zip(plain, capt)]
    n = len(logs)
    m = statistics.mean(logs)
    half = T.get(n - 1, 1.96) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else float("nan")
    lo, hi = math.exp(m - half), math.exp(m + half)
    verdict = "within 2%" if hi <= 1.02 else ("over 2%" if lo > 1.02 else "not resolved at 2% (the interval straddles 1.02)")
    print(f"{what}: plain median {statistics.median(plain):.3f} s, captured median {statistics.median(capt):.3f} s; "
          f"ratio captured/plain {math.exp(m):.4f}, 95% CI [{lo:.4f}, {hi:.4f}] over {n} pairs; {verdict}")
line("LAMMPS loop time", [r[0] for r in rows], [r[2] for r in rows])
line("mpirun wall time", [r[1] for r in rows], [r[3] for r in rows])
PY
elif part lammps; then
  echo "== LAMMPS: not installed (bash scripts/setup.sh); skipped"
fi

#!/usr/bin/env bash
# Where would the capture's cost on LAMMPS come from? Four arms, ROUNDS rounds,
# order shuffled per round: plain; the capture library preloaded directly (no
# commcanary parent); commcanary capture with a no-op library (the parent
# process alone); the full capture. Prints per arm the median LAMMPS loop time
# and its ratio to plain. A benchmark: it asserts nothing.
#   bash scripts/bench/capture-overhead-arms.sh BIN [ROUNDS] [STEPS]
# BIN: a commcanary binary with libcommcanary_capture.so beside it; `lmp` on PATH;
# NOOP_SO: a no-op shared library (else built with cc); ROWS_OUT=FILE keeps the runs.
set -uo pipefail
BIN=$(realpath "$1"); PAIRS=${2:-10}; STEPS=${3:-600}
LIB=$(dirname "$BIN")/libcommcanary_capture.so; IN=$PWD/examples/lammps/in.lj-melt
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
NOOP=${NOOP_SO:-$w/noop.so}
[ -f "$NOOP" ] || { echo 'void commcanary_noop(void) {}' > "$w/noop.c" && cc -shared -fPIC -o "$NOOP" "$w/noop.c"; }
cd "$w"
run() {
  rm -rf "$w/cap"; mkdir -p "$w/cap"
  case $1 in
    plain) o=$(mpirun -n 2 lmp -in "$IN" -var steps $STEPS -log none) ;;
    preload) o=$(mpirun -n 2 -x LD_PRELOAD="$LIB" -x COMMCANARY_CAPTURE_DIR="$w/cap" lmp -in "$IN" -var steps $STEPS -log none) ;;
    parent) o=$(mpirun -n 2 "$BIN" capture --lib "$NOOP" -o "$w/cap" -- lmp -in "$IN" -var steps $STEPS -log none 2>/dev/null) ;;
    capture) o=$(mpirun -n 2 "$BIN" capture -o "$w/cap" -- lmp -in "$IN" -var steps $STEPS -log none) ;;
  esac
  echo "$1 $(echo "$o" | sed -n 's/^Loop time of \([0-9.eE+-]*\) on.*/\1/p' | head -1) $(ls "$w/cap" | wc -l)"
}
for i in $(seq 1 "$PAIRS"); do for a in $(printf 'plain\npreload\nparent\ncapture\n' | shuf); do run $a; done; done > "$w/rows"
cat "$w/rows" > "${ROWS_OUT:-/dev/null}"
python3 - "$w/rows" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) >= 2]
by = {}
for r in rows: by.setdefault(r[0], []).append(float(r[1]))
p = st.median(by['plain'])
for a in ('plain', 'preload', 'parent', 'capture'):
    v = by.get(a, [])
    if v: print(f"{a:8s} n={len(v)} median {st.median(v):.3f} s  ratio to plain {st.median(v)/p:.4f}")
PY

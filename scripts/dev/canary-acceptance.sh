#!/usr/bin/env bash
# The canary acceptance runs on CPUs, each printed and kept under OUT:
#   synth    synth --events 100 --seed 7 -> lossless canary -> verify with baselines
#            and a 2-event sample under mpirun -n 4 -> reduce -> verify the reduced one
#   run256   a verified 256-token x 32-layer CPU run (mpirun -n 2) -> import run -> compile
#            -> verify (events ratio and decision cost printed)
#   fixture  the PyTorch fixture (2 H200s) -> import kineto -> compile -> verify (mpirun -n 2)
#   compile  compile time and peak memory of a 1,000,000-collective trace (a benchmark)
# Usage: bash scripts/dev/canary-acceptance.sh OUT [synth] [run256] [fixture] [compile]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT directory}; shift
steps=${*:-synth run256 fixture compile}
mkdir -p "$OUT"
. scripts/env.sh
cargo build --release --locked >&2 || exit 1
B=$PWD/target/release/commcanary
{ date -u; git rev-parse HEAD; git status --porcelain | head -5; nproc; uptime; mpirun --version | head -1; } > "$OUT/env.txt" 2>&1
step() { echo "== $*" | tee -a "$OUT/steps.txt"; }
# a verify's states, sizes, costs and what failed or was not judged (the hardware checks aside)
shown() { grep -E "^[a-z0-9-]+ \[|size:|decision cost|FAILED|not judged|    ranking:" "$1" | grep -v "hardware\.\|source.unknowns" | tee -a "$OUT/steps.txt"; }
for s in $steps; do case $s in
synth)
  d=$OUT/synth; mkdir -p "$d"
  step "synth: lossless canary, baselines, 2-event sample (mpirun -n 4)"
  $B synth --events 100 --seed 7 -o "$d/synth.json" > "$d/synth.out"
  $B canary compile "$d/synth.json" --lossless -o "$d/synth.canary.json" > "$d/compile.out"
  /usr/bin/time -v $B canary verify "$d/synth.json" "$d/synth.canary.json" --configs examples/canary-cpu.toml \
      --baselines --head-sample 2 -o "$d/verify" > "$d/verify.out" 2> "$d/verify.err"
  echo "verify exit $?" | tee -a "$OUT/steps.txt"
  grep -E "^[a-z0-9-]+ \[|decision cost|canary (beats|does NOT)" "$d/verify.out" | tee -a "$OUT/steps.txt"
  $B canary reduce "$d/synth.json" -o "$d/reduced.json" --budget 200 --from "$d/verify" | tee "$d/reduce.out" | tee -a "$OUT/steps.txt"
  $B canary verify "$d/synth.json" "$d/reduced.json" --configs examples/canary-cpu.toml -o "$d/verify-reduced" > "$d/verify-reduced.out" 2> "$d/verify-reduced.err"
  echo "verify of the reduced trace: exit $?" | tee -a "$OUT/steps.txt"
  grep -E "^[a-z0-9-]+ \[" "$d/verify-reduced.out" | tee -a "$OUT/steps.txt" ;;
run256)
  d=$OUT/run256; mkdir -p "$d"
  step "run256: a 256-token x 32-layer verified CPU run, imported, compiled, verified (mpirun -n 2)"
  mpirun -n 2 $B rank -q --backend cpu --phases blocking --model synthetic --tokens 256 --layers 32 \
      --sizes 64KiB,128KiB,256KiB --out "$d/runs" > "$d/rank.out" 2>&1
  run=$(ls -d "$d"/runs/*/ | head -1)
  $B join "$run" > "$d/join.out" && echo "join: $(head -1 "$d/join.out")" | tee -a "$OUT/steps.txt"
  $B import run "$run" -o "$d/run.comm.json" > "$d/import.out"
  $B canary compile "$d/run.comm.json" -o "$d/run.canary.json" | tee "$d/compile.out" | head -2 | tee -a "$OUT/steps.txt"
  /usr/bin/time -v $B canary verify "$d/run.comm.json" "$d/run.canary.json" --configs examples/canary-cpu-long.toml \
      -o "$d/verify" > "$d/verify.out" 2> "$d/verify.err"
  echo "verify exit $?" | tee -a "$OUT/steps.txt"
  shown "$d/verify.out" ;;
fixture)
  d=$OUT/fixture; mkdir -p "$d"
  step "fixture: the PyTorch TP2 fixture, imported, compiled, verified (mpirun -n 2)"
  F=tests/data/pytorch-2.11-tp2-h200
  $B import kineto $F/kineto.rank-0.json.gz $F/kineto.rank-1.json.gz -o "$d/tp2.comm.json" > "$d/import.out"
  $B canary compile "$d/tp2.comm.json" -o "$d/tp2.canary.json" | tee "$d/compile.out" | head -2 | tee -a "$OUT/steps.txt"
  $B canary verify "$d/tp2.comm.json" "$d/tp2.canary.json" --configs examples/canary-cpu.toml --baselines \
      -o "$d/verify" > "$d/verify.out" 2> "$d/verify.err"
  echo "verify exit $?" | tee -a "$OUT/steps.txt"
  shown "$d/verify.out" ;;
compile)
  d=$OUT/compile; mkdir -p "$d"
  step "compile: 1,000,000 collectives (2 ranks x 500,000), release build"
  $B synth --events 500000 --ranks 2 --seed 11 -o "$d/big.json" > "$d/synth.out"
  ls -l "$d/big.json" | tee -a "$OUT/steps.txt"
  /usr/bin/time -v $B canary compile "$d/big.json" -o "$d/big.canary.json" > "$d/compile.out" 2> "$d/compile.time"
  echo "compile exit $?" | tee -a "$OUT/steps.txt"
  grep -E "Elapsed|Maximum resident" "$d/compile.time" | tee -a "$OUT/steps.txt"
  head -2 "$d/compile.out" | tee -a "$OUT/steps.txt"
  rm -f "$d/big.json" ;;
*) echo "unknown step $s" >&2; exit 2 ;;
esac; done

#!/usr/bin/env bash
# Behaviour check for refactors: the same evidence, read by two binaries, must
# give byte-identical reports.
#
#   bash scripts/dev/check-byte-identical.sh BEFORE_BIN AFTER_BIN [WORK_DIR]
#
# No campaign shards are committed (results/ holds reports only), so the input
# is made here, once, with BEFORE_BIN: a small seeded CPU campaign (the README
# demo's five configurations x 3 rounds, 4 ranks under mpirun, all six phases,
# at 16 tokens x 4 layers) planned, executed, selected. Both binaries then read
# that one campaign and its runs; every output below goes to WORK/before/ or
# WORK/after/ and the two trees are compared with `diff -r` (any difference is
# printed and the script exits 1):
#   join (text, --json, --events-out), inspect (a shard, run.json),
#   export chrome, overlap (text, --json), summarize (text, --json),
#   campaign verify --json, campaign analyze (text, --json, report.json and
#   every SVG plot), campaign power, compare (campaign proxy vs truth, text and
#   --json), queue (closed loop over the campaign), capacity, and every schema.
# Exit codes are recorded too (WORK/*/exit-codes). One field is masked before
# the comparison because it names the binary itself, not the evidence: the
# report's "producer" (tool version and commit) and the page's "(commit ...)"
# line; the count of masked files is printed. Needs OpenMPI (see scripts/env.sh).
# Records: each binary also runs `rank` itself (4 ranks under mpirun, cpu:
# every phase; then the isolated sweeps of all-gather, and of all-reduce
# with --op max) and every shard and run.json, printed by `inspect`, is
# compared after scripts/dev/mask_timings.py masks what differs between two
# runs of one binary (clock readings and what follows from them, ids, hosts):
# what ran, in which order, with which sizes, groups, sequence numbers,
# checks and measured-or-not device intervals must be the same; then the
# trace phases (2 ranks) over an imported PyTorch trace and, where mpicc and
# the capture library are there, an MPI capture with point-to-point
# operations. Timings themselves are never compared.
set -euo pipefail
BEFORE=$(realpath "${1:?BEFORE_BIN}")
AFTER=$(realpath "${2:?AFTER_BIN}")
WORK=${3:-$(mktemp -d /tmp/byte-identical.XXXXXX)}
cd "$(dirname "$0")/../.."
. scripts/env.sh
mkdir -p "$WORK"
C="$WORK/campaign"
if [ ! -f "$C/selection.json" ]; then
  rm -rf "$C"
  sed -e 's/^tokens = .*/tokens = 16/' -e 's/^layers = .*/layers = 4/' -e 's/^iters = .*/iters = 10/' \
    examples/cpu-demo.toml > "$WORK/spec.toml"
  "$BEFORE" campaign plan "$WORK/spec.toml" -o "$C" > /dev/null
  "$BEFORE" campaign exec "$C" > /dev/null
  "$BEFORE" campaign select "$C" > /dev/null
fi
RUN="$C/runs/$(ls "$C/runs" | head -1)"
SHARD=$(ls "$RUN"/*.shard* 2>/dev/null | head -1 || true)
[ -n "$SHARD" ] || SHARD="$RUN/$(ls "$RUN" | grep -v '^run.json$' | head -1)"
RUNS=(); for r in $(ls "$C/runs" | head -3); do RUNS+=("job-$r=$C/runs/$r"); done

outputs() { # BIN DIR: every output is written under one fixed path (paths appear in some outputs), then moved to DIR
  local B=$1 O="$WORK/out"
  rm -rf "$O" "$2"; mkdir -p "$O"
  # run NAME ARGS...: stdout to NAME.out, exit code to exit-codes (stderr names temp paths: not compared)
  run() { local n=$1; shift; local rc=0; "$B" "$@" > "$O/$n.out" 2> "$O/$n.err" || rc=$?; echo "$n $rc" >> "$O/exit-codes"; }
  run join join "$RUN"
  run join-json join --json "$RUN" --events-out "$O/joined.jsonl"
  run inspect-shard inspect "$SHARD"
  run inspect-run inspect "$RUN/run.json"
  run export-chrome export chrome "$RUN" -o "$O/chrome.json"
  run overlap overlap "$RUN"
  run overlap-json overlap --json "$RUN"
  run summarize summarize "${RUNS[@]}"
  run summarize-json summarize --json "${RUNS[@]}"
  run verify campaign verify --json "$C"
  run analyze campaign analyze "$C" --report-dir "$O/report-text"
  run analyze-json campaign analyze --json "$C" --report-dir "$O/report"
  run power campaign power "$C"
  run compare compare --proxy "$C:isolated" --truth "$C:blocking"
  run compare-json compare --json --proxy "$C:isolated" --truth "$C:blocking"
  run queue queue --campaign "$C" --phase blocking --mode closed --clients 4 --think-ms 1
  run capacity capacity --demand 1000 --throughput-per-gpu 37.5 --gpu-hour-cost 2.5
  for s in shard run joined-collective join-summary summary campaign-manifest campaign-attempt \
           campaign-selection campaign-report campaign-archive-descriptor comparison comm-trace; do
    run "schema-$s" schema "$s"
  done
  # records this binary writes itself, masked (see the header): job K on N ranks, its options
  local k=0
  record() {
    k=$((k + 1))
    local n=$1; shift
    mpirun --oversubscribe -n "$n" "$B" rank -q --backend cpu --out "$WORK/rank-$k" "$@" > /dev/null 2>&1 \
      || echo "rank-job-$k failed" >> "$O/exit-codes"
    local rd; rd=$(ls -d "$WORK/rank-$k"/*/ | head -1)
    for f in "$rd"/*.shard "$rd/run.json"; do
      "$B" inspect "$f" | python3 scripts/dev/mask_timings.py > "$O/record-$k-$(basename "$f").json"
    done
    rm -rf "$WORK/rank-$k"
  }
  record 4 --phases isolated,blocking,async,replay,fill,overlap --tokens 4 --layers 2 --iters 3 --check 2
  record 4 --phases isolated --collective all_gather --iters 3 --check 1
  record 4 --phases isolated --op max --iters 3 --check 1
  # the trace phases over imported traces (2 ranks): a PyTorch trace (every kind on its groups) and, where
  # mpicc and the capture library are there, an MPI capture (its point-to-point program between the collectives)
  for t in "$WORK"/traces/*.json; do
    record 2 --trace "$t" --dtype bf16 --phases replay,fill,overlap,host-delay --tokens 2 --check 1
  done
  rm -f "$O"/*.err
  # the producer names the binary (version, commit): mask it, count it
  grep -rlE '"producer": "[^"]*"|\(commit [0-9a-f]{40}, tree [a-z]+ at build\)' "$O" | while read -r f; do
    sed -i -E -e 's/"producer": "[^"]*"/"producer": "<masked>"/' \
      -e 's/\(commit [0-9a-f]{40}, tree [a-z]+ at build\)/(commit <masked>)/' "$f"; echo "$f" >> "$O.masked"
  done
  mv "$O" "$2"
}
# imported traces for the trace phases, made once: the PyTorch one with BEFORE, the MPI capture imported with
# AFTER (an import leaves out what the phases cannot run, and a newer one may know more of it), so that both
# binaries run the same file
mkdir -p "$WORK/traces"
if [ ! -f "$WORK/traces/pytorch.json" ]; then
  "$BEFORE" import kineto tests/data/pytorch-2.11-tp2-h200/kineto.rank-{0,1}.json.gz -o "$WORK/traces/pytorch.json" \
    > /dev/null
fi
if [ ! -f "$WORK/traces/mpi.json" ] && command -v mpicc > /dev/null \
  && [ -f "$(dirname "$BEFORE")/libcommcanary_capture.so" ]; then
  mpicc -O1 -o "$WORK/traces/app" tests/data/mpi_capture/app.c
  mpirun --oversubscribe -n 2 "$BEFORE" capture -o "$WORK/traces/cap" -- "$WORK/traces/app" 4 > /dev/null
  "$AFTER" import mpi "$WORK/traces/cap" -o "$WORK/traces/mpi.json" --for-phases > /dev/null
fi
echo "imported traces for the trace phases: $(ls "$WORK"/traces/*.json | wc -l)"
rm -f "$WORK/out.masked"
outputs "$BEFORE" "$WORK/before"
outputs "$AFTER" "$WORK/after"
echo "masked the producer field in $(sort -u "$WORK/out.masked" 2>/dev/null | wc -l) file(s) per binary"
echo "inputs: $C ($(ls "$C/runs" | wc -l) runs); outputs: $WORK/before, $WORK/after"
echo "before: $BEFORE ($(sha256sum < "$BEFORE" | cut -c1-12)); after: $AFTER ($(sha256sum < "$AFTER" | cut -c1-12))"
if diff -r "$WORK/before" "$WORK/after"; then
  echo "byte-identical: $(find "$WORK/before" -type f | wc -l) files ($(cat "$WORK/before"/exit-codes | awk '$2!=0' | wc -l) commands exited non-zero in both, identically)"
else
  echo "DIFFERENT (see above)"; exit 1
fi

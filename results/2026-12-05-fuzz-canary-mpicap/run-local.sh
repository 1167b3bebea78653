#!/usr/bin/env bash
# Run as: bash results/2026-12-05-fuzz-canary-mpicap/run-local.sh, from a checkout whose
# .stage/fuzz/bin/ holds the two targets built as the README says (stripped copies).
# One target after another, each in its own working folder (libFuzzer's -jobs=1 writes fuzz-0.log into the working folder)
W=$(git rev-parse --show-toplevel)
for t in canary_artifact mpicap; do
  mkdir -p $W/fuzz/corpus/$t $W/fuzz/artifacts/$t ${FUZZ_WORK:-/tmp/fuzz-work}/$t
  cd ${FUZZ_WORK:-/tmp/fuzz-work}/$t
  start=$(date +%s)
  $W/.stage/fuzz/bin/$t $W/fuzz/corpus/$t $W/fuzz/seeds/$t -jobs=1 -max_total_time=600 -rss_limit_mb=2048 -timeout=4 -max_len=65536 \
     -print_final_stats=1 -artifact_prefix=$W/fuzz/artifacts/$t/ > ${FUZZ_WORK:-/tmp/fuzz-work}/$t.log 2>&1
  echo "exit $? after $(( $(date +%s) - start )) s" >> ${FUZZ_WORK:-/tmp/fuzz-work}/$t.log
done
echo alldone >> ${FUZZ_WORK:-/tmp/fuzz-work}/done

#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for SECONDS each (default 600), one
# after another, and print a line per target: its run time, executions and
# whether it found a crash, OOM or timeout (artifacts in fuzz/artifacts/TARGET/).
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
# Usage: scripts/dev/fuzz.sh [SECONDS] [TARGET...]
# (several targets side by side: build once, then FUZZ_NO_BUILD=1 scripts/dev/fuzz.sh 600 T &)
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
secs="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
# FUZZ_NO_BUILD=1: the targets are already built (several runs of this script started side by side)
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
    cargo +nightly fuzz build --fuzz-dir fuzz -O || exit 2
fi
status=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    seeds=()
    [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    log="fuzz/artifacts/$t/run.log"
    start=$(date +%s)
    # 2 GiB RSS and 4 s per input: an OOM or a hang is a finding, like a crash
    cargo +nightly fuzz run --fuzz-dir fuzz -O "$t" "fuzz/corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=4 -max_len=65536 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    end=$(date +%s)
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    if [ $rc -eq 0 ]; then verdict="no crash, OOM or timeout"; else verdict="FINDING (exit $rc): see $log and fuzz/artifacts/$t/"; status=1; fi
    echo "fuzz $t: $((end - start)) s, ${execs:-?} executions, $verdict"
done
exit $status

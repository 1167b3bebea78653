#!/usr/bin/env bash
# The README demo campaign N times back to back while a CPU hog keeps every
# core busy (issue 12's "loaded 2-core machine" check), keeping each run's
# terminal report and report.json, and printing one summary line per run:
# the A/A judgements, the known-bad control, the canary, and any A/A pair the
# pair table decides.
#
#   bash scripts/dev/demo-under-load.sh OUT_DIR [RUNS=5]
#
# SPEC names the spec (default examples/cpu-demo.toml). HOG=0 runs without
# the hog (another load may already be there). BIN names the binary
# (default target/demo/commcanary, which scripts/demo.sh builds); it is
# copied into OUT_DIR first, so a rebuild during the runs cannot change it.
# The summary line needs jq; without it the runs' files are kept and the
# summary is left to a machine that has it (rerun the jq filter there).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?output directory}; RUNS=${2:-5}; SPEC=${SPEC:-examples/cpu-demo.toml}
. scripts/env.sh
SRC_BIN=${BIN:-target/demo/commcanary}
[ -x "$SRC_BIN" ] || { echo "no $SRC_BIN: run scripts/demo.sh (or cargo build --profile demo) first" >&2; exit 1; }
have_jq=1; command -v jq >/dev/null || { have_jq=0; echo "no jq: summary lines skipped (apt-get install jq)" >&2; }
mkdir -p "$OUT"
cp "$SRC_BIN" "$OUT/commcanary"
BIN=$OUT/commcanary
hogs=()
stop() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
if [ "${HOG:-1}" = 1 ]; then
  for _ in $(seq "$(nproc)"); do (while :; do :; done) & hogs+=($!); done
fi
echo "binary: $($BIN --version)" | tee "$OUT/summary.txt"
for i in $(seq "$RUNS"); do
  C="$OUT/run$i"
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s)
  "$BIN" campaign plan "$SPEC" -o "$C" >/dev/null
  "$BIN" campaign exec "$C" > "$OUT/run$i.exec.log" 2>&1
  "$BIN" campaign select "$C" >/dev/null
  "$BIN" campaign verify "$C" >/dev/null
  "$BIN" campaign analyze "$C" > "$OUT/run$i.analyze.txt"
  cp "$C/report/report.json" "$OUT/run$i.report.json"
  echo "run $i: $(( $(date +%s) - t0 )) s, load at start $load" >> "$OUT/times.txt"
  [ "$have_jq" = 1 ] || { rm -rf "$C"; continue; }
  jq -r --arg run "$i" --arg load "$load" --arg secs "$(( $(date +%s) - t0 ))" '
    . as $r
    | ([.controls[] | select(.kind == "a-a") | .outcome] | group_by(.) | map("\(length) \(.[0])") | join(", ")) as $aa
    | ([.controls[] | select(.kind == "known-bad") | "\(.outcome): \(.observed)"] | join("; ")) as $kb
    | ([.phases[] | .phase as $p | .pairs[], .pairs_p99[]
        | select(((.a == "nbc-ring" and .b == "nbc-ring-again") or (.a == "nbc-ring-again" and .b == "nbc-ring")) and .relation != "not_distinguished")
        | "\($p) \(.relation)"] | length) as $aa_decided
    | "run \($run) (load \($load), \($secs) s): A/A \($aa); A/A pair rows decided: \($aa_decided); known-bad \($kb); canary \(.canary.result.verdict)"
  ' "$OUT/run$i.report.json" | tee -a "$OUT/summary.txt"
  rm -rf "$C"
done

#!/usr/bin/env bash
# Validate every node of a Slurm partition against one reference, then print
# the fleet table (node, verdict, failing checks).
#
#   bash scripts/validate-partition.sh PARTITION REF_DIR [SBATCH_OPTION ...] [-- VALIDATE_ARG ...]
#   e.g. bash scripts/validate-partition.sh h200 /shared/ref-h200 --ntasks-per-node=8 --gpus-per-node=8 -- --site site.toml
#
# The nodes come from `sinfo -N -p PARTITION`. The issue asked for a job
# array; Slurm applies sbatch options such as --nodelist to every task of an
# array, so an array cannot put task i on node i. This script therefore
# submits one single-node job per node, all at once
# (`sbatch --nodelist=NODE slurm/validate-node.sbatch`), and
# waits for them; the jobs share the job name commcanary-validate and one
# output directory. Exit code: 0 when every node passed, 1 when any failed,
# 2 when none failed but some were inconclusive, 3 when some could not run.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:?partition}; REF=${2:?reference directory}; shift 2
SB=(); VA=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; VA=("$@"); break; fi
  SB+=("$1"); shift
done
OUT=${VALIDATE_OUT:-$PWD/out/validate-$PART-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
mapfile -t NODES < <(sinfo -N -h -p "$PART" -o %N | sort -u)
[ "${#NODES[@]}" -gt 0 ] || { echo "validate-partition: partition $PART has no nodes" >&2; exit 3; }
echo "validate-partition: ${#NODES[@]} nodes of $PART against $REF; evidence under $OUT"
pids=()
for n in "${NODES[@]}"; do
  VALIDATE_OUT=$OUT sbatch --wait --nodelist="$n" --chdir="$PWD" --output="$OUT/$n-%j.out" "${SB[@]}" \
    slurm/validate-node.sbatch --reference "$REF" "${VA[@]}" > "$OUT/$n.sbatch.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
worst=0
printf '%-20s %-14s %s\n' node verdict "failing checks"
for n in "${NODES[@]}"; do
  ex=$(ls "$OUT"/"$n"-*.exit 2>/dev/null | head -1)
  dir=${ex%.exit}
  code=$( [ -n "$ex" ] && cat "$ex" || echo 3)
  if [ -f "$dir/report.json" ]; then
    line=$(python3 - "$dir/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [c["check"] for c in r["checks"] if c["verdict"] == "fail"]
unsure = [c["check"] for c in r["checks"] if c["verdict"] == "inconclusive"]
print(r["verdict"], ", ".join(bad) or ("(inconclusive: " + ", ".join(unsure) + ")" if unsure else "-"))
PY
)
  else
    line="could-not-run see $(ls "$OUT"/"$n"-*.out 2>/dev/null | head -1)"
  fi
  printf '%-20s %-14s %s\n' "$n" "${line%% *}" "${line#* }"
  # fleet exit code: 3 (could not run) > 1 (fail) > 2 (inconclusive) > 0
  case "$code" in
    3) worst=3 ;;
    1) [ "$worst" != 3 ] && worst=1 ;;
    2) [ "$worst" = 0 ] && worst=2 ;;
  esac
done
exit "$worst"

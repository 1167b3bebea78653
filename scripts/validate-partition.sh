#!/usr/bin/env bash
# Validate every node of a Slurm partition against one reference, then print
# the fleet table (node, verdict, failing checks).
#
#   bash scripts/validate-partition.sh PARTITION REF_DIR [SBATCH_OPTION ...] [-- VALIDATE_ARG ...]
#   e.g. bash scripts/validate-partition.sh h200 /shared/ref-h200 --ntasks-per-node=8 --gpus-per-node=8 -- --site site.toml
#
# The nodes come from `sinfo -N -p PARTITION`. Slurm applies sbatch options
# such as --nodelist to every task of an array, so an array cannot put task
# i on node i. This script therefore submits one single-node job per node,
# all at once (`sbatch --nodelist=NODE slurm/validate-node.sbatch`), and
# waits for them; the jobs share the job name commcanary-validate and one
# output directory. Exit code: 0 when every node passed, 1 when any failed,
# 2 when none failed but some were inconclusive, 3 when some could not run.
#
# Drained nodes: a job sent to a drained (or draining, down) node pends for
# ever, so such nodes are listed as skipped unless a reservation is given.
# To validate repaired nodes that are drained, put them in a maintenance
# reservation and pass it through:
#   scontrol create reservation reservationname=validate users=$USER \
#            nodes=gpu[017-018] starttime=now duration=02:00:00 flags=maint,ignore_jobs
#   bash scripts/validate-partition.sh h200 /shared/ref-h200 --reservation=validate ...
# Every job is waited for at most VALIDATE_TIMEOUT_S seconds (default 7200,
# queueing included); a job still pending or running then is cancelled and
# its node reported as could-not-run. Nodes that passed are not resumed by
# this script: the table prints the `scontrol update ... state=resume` line
# for them, to run once the rest of the site's checks (`dcgmi diag`, which
# this validation complements) have passed too.
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
TIMEOUT_S=${VALIDATE_TIMEOUT_S:-7200}
RESERVED=0
# "${A[@]+"${A[@]}"}": an empty array under `set -u` on bash before 4.4
for o in ${SB[@]+"${SB[@]}"}; do case "$o" in --reservation*) RESERVED=1 ;; esac; done
NODES=(); SKIPPED=()
while read -r n state; do
  case "$state" in
    drain*|drng*|down*|fail*|maint*) [ "$RESERVED" = 1 ] && NODES+=("$n") || SKIPPED+=("$n $state") ;;
    *) NODES+=("$n") ;;
  esac
done < <(sinfo -N -h -p "$PART" -o '%N %t' | sort -u)
[ "${#NODES[@]}" -gt 0 ] || [ "${#SKIPPED[@]}" -gt 0 ] || { echo "validate-partition: partition $PART has no nodes" >&2; exit 3; }
echo "validate-partition: ${#NODES[@]} nodes of $PART against $REF (each waited for at most ${TIMEOUT_S} s); evidence under $OUT"
for s in ${SKIPPED[@]+"${SKIPPED[@]}"}; do
  echo "validate-partition: skipped ${s%% *} (${s#* }): a job would pend for ever; pass --reservation=NAME of a maintenance reservation on it" >&2
done
pids=()
for n in ${NODES[@]+"${NODES[@]}"}; do
  (
    VALIDATE_OUT=$OUT timeout "$TIMEOUT_S" sbatch --wait --nodelist="$n" --chdir="$PWD" --output="$OUT/$n-%j.out" ${SB[@]+"${SB[@]}"} \
      slurm/validate-node.sbatch --reference "$REF" ${VA[@]+"${VA[@]}"} > "$OUT/$n.sbatch.log" 2>&1
    if [ $? -eq 124 ]; then
      job=$(grep -o 'Submitted batch job [0-9]*' "$OUT/$n.sbatch.log" | grep -o '[0-9]*$')
      [ -n "$job" ] && scancel "$job"
      echo "validate-partition: $n: no verdict within ${TIMEOUT_S} s; job ${job:-?} cancelled" >> "$OUT/$n.sbatch.log"
    fi
  ) &
  pids+=($!)
done
for p in ${pids[@]+"${pids[@]}"}; do wait "$p"; done
# The result file (exit or out) of node $1's own job: $OUT/NODE-JOBID.EXT,
# where JOBID is the job sbatch submitted for that node, or a file named
# NODE-DIGITS.EXT (never NODE-OTHER-DIGITS.EXT); nothing when there is none.
node_result() {
  local n=$1 ext=$2 job f rest
  job=$(grep -o 'Submitted batch job [0-9]*' "$OUT/$n.sbatch.log" 2>/dev/null | grep -o '[0-9]*$' | tail -1)
  if [ -n "$job" ]; then
    [ -f "$OUT/$n-$job.$ext" ] && echo "$OUT/$n-$job.$ext"
    return 0
  fi
  for f in "$OUT/$n"-*."$ext"; do
    [ -f "$f" ] || continue
    rest=${f#"$OUT/$n-"}
    if [[ $rest =~ ^[0-9]+\.$ext$ ]]; then echo "$f"; return 0; fi
  done
  return 0
}
worst=0; PASSED=()
printf '%-20s %-14s %s\n' node verdict "failing checks"
for n in ${NODES[@]+"${NODES[@]}"}; do
  # this node's own job, by exact name: NODE-JOBID.exit of the job submitted
  # for NODE (a glob NODE-*.exit would also take node NODE-2's result)
  ex=$(node_result "$n" exit)
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
    line="could-not-run see $(node_result "$n" out) $OUT/$n.sbatch.log"
  fi
  [ "$code" = 0 ] && PASSED+=("$n")
  printf '%-20s %-14s %s\n' "$n" "${line%% *}" "${line#* }"
  # fleet exit code: 3 (could not run) > 1 (fail) > 2 (inconclusive) > 0
  case "$code" in
    3) worst=3 ;;
    1) [ "$worst" != 3 ] && worst=1 ;;
    2) [ "$worst" = 0 ] && worst=2 ;;
  esac
done
for s in ${SKIPPED[@]+"${SKIPPED[@]}"}; do
  printf '%-20s %-14s %s\n' "${s%% *}" skipped "node is ${s#* }: no job can start there without a reservation"
  worst=3
done
if [ "${#PASSED[@]}" -gt 0 ]; then
  echo "passed: once the site's other checks pass too, return them to service with:"
  echo "  scontrol update nodename=$(IFS=,; echo "${PASSED[*]}") state=resume"
fi
exit "$worst"

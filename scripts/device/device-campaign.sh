#!/usr/bin/env bash
# Run a whole GPU campaign on a GPU host from the binary staged by
# scripts/device-stage.sh, and collect the small, publishable outputs.
#
#   bash scripts/device/device-campaign.sh SPEC NAME [EXEC_TIMEOUT_S]
#
# Run from the repository root on the GPU host. The campaign lives in
# $WORK/NAME (WORK defaults to /tmp/cc); what is worth bringing back (logs,
# verify/analyze/compare outputs, the archive descriptor, the per-job join
# summaries with tuner comparisons, report.json and its plots)
# goes to $WORK/NAME.collected/ and is packed into $COLLECT/NAME.tgz, with the
# session log beside it (COLLECT defaults to $OUT, else ./out/device). The
# archive itself (raw shards) stays on the host: its SHA-256 is in the
# descriptor. NCCL_NVLS_ENABLE=0 is forced. QUICK=1 skips the compare and the
# per-job joins (each re-reads every shard); NO_COMPARE=1 only the compare. CHROME_SMALL=1 adds a Chrome
# trace of a small job with the spec's ranks and backend (a campaign job at
# full size would make a trace of hundreds of MB).
set -uo pipefail
SPEC=${1:?spec}; NAME=${2:?name}; EXEC_TIMEOUT_S=${3:-480}
B=$PWD/.stage/bin/commcanary
[ -x "$B" ] || { echo "no staged binary: run scripts/device-stage.sh first" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
WORK=${WORK:-/tmp/cc}; COLLECT=${COLLECT:-${OUT:-out/device}}
C=$WORK/$NAME; R=$WORK/$NAME.collected
mkdir -p "$WORK" "$R" "$COLLECT"
log() { echo "== $(date -u +%H:%M:%S) $*"; }
{
  log "host: $(hostname), GPUs:"; nvidia-smi -L; nvidia-smi topo -m | head -8
  log "binary: $(sha256sum "$B" | cut -c1-16)…"
  [ -d "$C" ] || "$B" campaign plan "$SPEC" -o "$C" || exit 1
  log "exec (limit ${EXEC_TIMEOUT_S}s; resumable)"
  t0=$(date +%s)
  timeout "$EXEC_TIMEOUT_S" "$B" campaign exec "$C" --retries 1
  log "exec rc=$? after $(( $(date +%s) - t0 )) s"
  "$B" campaign select "$C"
  log "verify"; "$B" campaign verify "$C"; echo "verify rc=$?"
  log "analyze"; "$B" campaign analyze "$C" --reveal | tee "$R/analyze.txt"
  # report.json holds every proxy phase against blocking; one compare shows the command
  log "compare isolated vs blocking"
  [ "${QUICK:-0}" = 1 ] || [ "${NO_COMPARE:-0}" = 1 ] || "$B" compare --proxy "$C:isolated" --truth "$C:blocking" | tee "$R/compare-isolated-vs-blocking.txt"
  log "per-job join summaries (verification, clocks, tuner choices workload vs replay)"
  [ "${QUICK:-0}" = 1 ] || for d in "$C"/runs/*/; do echo "### $(basename "$d")"; "$B" join "$d"; done > "$R/joins.txt" 2>&1
  log "archive"
  "$B" campaign archive "$C" -o "$WORK/$NAME.tar" --descriptor "$R/archive.descriptor.json"
  "$B" campaign check-archive "$WORK/$NAME.tar" "$R/archive.descriptor.json"; echo "check-archive rc=$?"
  cp -r "$C/report" "$R/report"
  if [ "${CHROME_SMALL:-0}" = 1 ]; then
    n=$(sed -n 's/^ranks *= *\([0-9]*\).*/\1/p' "$SPEC")
    log "chrome trace of a small $n-rank all-phase job (4 tokens x 32 layers)"
    timeout 120 mpirun ${MPIRUN_EXTRA:-} --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -n "$n" "$B" rank -q --backend "$(sed -n 's/^backend *= *"\(.*\)".*/\1/p' "$SPEC")" \
      --phases all --tokens 4 --model synthetic --layers 32 --iters 5 --run-id chrome-small --out "$WORK/chrome" >/dev/null
    "$B" join "$WORK/chrome/chrome-small" | head -20
    "$B" export chrome "$WORK/chrome/chrome-small" -o "$R/trace-small.json"
  fi
  tar czf "$R/campaign-records.tgz" -C "$WORK" --exclude='*.shard' --exclude='nccl-debug*' "$NAME"
  log "done"
} 2>&1 | tee "$R/session.log"
cp "$R/session.log" "$COLLECT/$NAME.session.log"
tar czf "$COLLECT/$NAME.tgz" -C "$WORK" "$NAME.collected"

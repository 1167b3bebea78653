#!/usr/bin/env bash
# On a one-GPU host (after `STAGE_GPU_TESTS=1 bash scripts/device-stage.sh`
# here and a one-rank trace copied to .stage/one-rank-trace.json): the
# workload pace of replay-trace (3 replicates, beside the gap and device-gap
# paces, one device-gap run without warm-up, and a
# corrupted-result control that must fail), two one-off micro-experiments and
# the GPU tests. The micro-experiments are not part of scripts/: each is kept
# beside the evidence it produced, in its dated folder under results/ (whose
# README says how it was built), and runs only when its script is named:
# ANCHOR_SH=PATH of the anchor-method experiment's anchor-methods.sh (built
# with the host's nvcc), CUPTI_CLOCK_SH=PATH of the CUPTI clock experiment's
# cupti-clock.sh. A step whose script is not named is recorded as skipped.
# Usage: [ANCHOR_SH=PATH] [CUPTI_CLOCK_SH=PATH] bash scripts/device/device-one-gpu-workload.sh OUT \
#          [workload] [anchor] [cupti-clock] [tests]
set -uo pipefail
OUT=${1:?OUT directory}; shift
steps=${*:-workload anchor tests}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$PWD/.stage/bin/commcanary; T=$PWD/.stage/one-rank-trace.json
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; sha256sum "$B"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env.txt" 2>&1
# STEP VAR TIMEOUT LABEL: run the experiment script the variable VAR names, or record that it was skipped
optional() {
  if [ -n "${!2:-}" ]; then
    timeout "$3" bash "${!2}" "$OUT/$1" > "$OUT/$1.log" 2>&1
    echo "$4: exit $?" >> "$OUT/steps.txt"
  else
    echo "$4: skipped ($2 not set)" >> "$OUT/steps.txt"
  fi
}
for s in $steps; do case $s in
workload)
  for r in 1 2 3; do
    timeout 120 mpirun -n 1 "$B" replay-trace "$T" --backend cuda --check --pace workload --out "$OUT/workload-$r" > "$OUT/workload-$r.out" 2> "$OUT/workload-$r.err"
    echo "workload run $r: exit $?" >> "$OUT/steps.txt"
    timeout 120 mpirun -n 1 "$B" replay-trace "$T" --backend cuda --check --pace gaps --out "$OUT/gaps-$r" > "$OUT/gaps-$r.out" 2> "$OUT/gaps-$r.err"
    echo "gaps run $r: exit $?" >> "$OUT/steps.txt"
    timeout 120 mpirun -n 1 "$B" replay-trace "$T" --backend cuda --check --pace device-gaps --out "$OUT/device-gaps-$r" > "$OUT/device-gaps-$r.out" 2> "$OUT/device-gaps-$r.err"
    echo "device-gaps run $r: exit $?" >> "$OUT/steps.txt"
  done
  timeout 120 mpirun -n 1 "$B" replay-trace "$T" --backend cuda --check --pace device-gaps --no-warmup --out "$OUT/device-gaps-nowarmup" > "$OUT/device-gaps-nowarmup.out" 2> "$OUT/device-gaps-nowarmup.err"
  echo "device-gaps without warm-up (transition not corrected): exit $?" >> "$OUT/steps.txt"
  timeout 120 mpirun -n 1 "$B" replay-trace "$T" --backend cuda --check --pace workload --corrupt-rank 0 --out "$OUT/workload-corrupt" > "$OUT/workload-corrupt.out" 2> "$OUT/workload-corrupt.err"
  echo "workload corrupt run (must fail): exit $?" >> "$OUT/steps.txt" ;;
anchor) optional anchor ANCHOR_SH 200 "anchor experiment" ;;
cupti-clock) optional cupti-clock CUPTI_CLOCK_SH 150 "cupti clock experiment" ;;
tests)
  COMMCANARY_BIN=$B timeout 240 .stage/gpu_cuda --test-threads 1 --nocapture > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests: exit $?" >> "$OUT/steps.txt" ;;
esac; done
cat "$OUT/steps.txt"
# the device tool returns few files: one archive of everything
tar -C "$OUT" -czf "$OUT.tgz" . && echo "archive: $OUT.tgz"

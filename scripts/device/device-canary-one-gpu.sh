#!/usr/bin/env bash
# On a one-GPU host, after `bash scripts/device-stage.sh` here: a one-rank derivative of the
# PyTorch fixture (committed in tests/data/pytorch-one-rank-h200/one-rank-trace.json.gz)
# is compiled into a canary, the trace and its canary are verified as one campaign on the GPU
# under six NCCL configurations with an A/A pair and a known-bad control
# (examples/gpu-canary-one.toml), and the canary's expansion is replayed with
# `replay-trace --backend cuda --check`. Everything else lands in OUT/evidence.tgz.
# Usage: bash scripts/device/device-canary-one-gpu.sh OUT
set -uo pipefail
OUT=${1:?OUT directory}
W=$(mktemp -d)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$PWD/.stage/bin/commcanary
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; sha256sum "$B"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env.txt" 2>&1
gunzip -c tests/data/pytorch-one-rank-h200/one-rank-trace.json.gz > "$W/one-rank.json"
"$B" canary compile "$W/one-rank.json" -o "$W/one-rank.canary.json" > "$OUT/compile.out" 2>&1
echo "compile: exit $?" >> "$OUT/steps.txt"
timeout 420 "$B" canary verify "$W/one-rank.json" "$W/one-rank.canary.json" --configs examples/gpu-canary-one.toml \
  --backend cuda -o "$W/verify" > "$OUT/verify.out" 2> "$OUT/verify.err"
echo "verify: exit $?" >> "$OUT/steps.txt"
if [ -f "$W/verify/inputs/canary.json" ]; then
  timeout 120 mpirun -n 1 "$B" replay-trace "$W/verify/inputs/canary.json" --backend cuda --check --out "$W/replay-canary" > "$OUT/replay-canary.out" 2>&1
  echo "replay-trace of the canary's expansion (cuda, --check): exit $?" >> "$OUT/steps.txt"
fi
du -sh "$W/verify/campaign/runs" >> "$OUT/steps.txt" 2>&1
tar czf "$OUT/evidence.tgz" -C "$W" . 2>> "$OUT/steps.txt"
cat "$OUT/steps.txt"

#!/usr/bin/env bash
# CommCanary's blocking phase against a real PyTorch tensor-parallel decode, on a
# GPU host with PyTorch (torchrun) and the binary staged by scripts/device-stage.sh.
#
#   bash scripts/device/validate-pytorch.sh [ARGS for scripts/device/validate_pytorch.py run]
#   e.g. bash scripts/device/validate-pytorch.sh --model llama3-8b --rounds 3 --tokens 64
#
# Run from the repository root. Writes OUT_DIR (default $OUT/validate-pytorch, else
# out/validate-pytorch): table.md, results.json, session.log and jobs/*/log.txt.
# Every child runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NVSHMEM_DISABLE_NVLS=1 and its own timeout; the whole script has TOTAL_TIMEOUT_S
# (default 570 s). `python3 scripts/device/validate_pytorch.py --self-test` tests the
# table and tau-b code without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT_DIR=${OUT_DIR:-${OUT:-out}/validate-pytorch}
python3 scripts/device/validate_pytorch.py --self-test || exit 1
timeout "${TOTAL_TIMEOUT_S:-570}" python3 scripts/device/validate_pytorch.py run --out "$OUT_DIR" "$@"
rc=$?
[ $rc = 124 ] && echo "validate-pytorch: stopped at TOTAL_TIMEOUT_S=${TOTAL_TIMEOUT_S:-570} s; the per-job logs so far are in $OUT_DIR/jobs" >&2
exit $rc

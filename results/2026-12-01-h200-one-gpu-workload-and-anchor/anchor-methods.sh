#!/usr/bin/env bash
# Build and run the anchor-method micro-experiment (results/2026-12-01-h200-one-gpu-workload-and-anchor/anchor_methods.cu) on a
# GPU host with nvcc: which way of placing device timestamps on the host clock gives
# the narrowest bound. Usage: bash results/2026-12-01-h200-one-gpu-workload-and-anchor/anchor-methods.sh OUT_DIR
# Output: OUT_DIR/anchor_methods.txt (also echoed). The program's exit status is kept:
# 2 CUDA error, 3 a kernel may be hung, 4 a stream-memop method timed out.
set -euo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR}
SRC="$(cd "$(dirname "$0")" && pwd)/anchor_methods.cu"
mkdir -p "$OUT_DIR"
nvcc -O2 -arch=sm_90 -o "$OUT_DIR/anchor_methods" "$SRC" -lcuda
rc=0
timeout 120 "$OUT_DIR/anchor_methods" > "$OUT_DIR/anchor_methods.txt" || rc=$?
cat "$OUT_DIR/anchor_methods.txt"
exit "$rc"

#!/usr/bin/env bash
# Build and run results/2026-12-01-h200-one-gpu-record-cost/record_cost.cu on a GPU host with nvcc: the host cost
# per call of cuEventRecord, cuStreamWriteValue32 and an empty kernel launch
# (what a per-collective timestamp can cost the hot path on this machine).
# Usage: bash results/2026-12-01-h200-one-gpu-record-cost/record-cost.sh OUT_DIR. Output: OUT_DIR/record_cost.txt (also echoed).
set -euo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR}
SRC="$(cd "$(dirname "$0")" && pwd)/record_cost.cu"
mkdir -p "$OUT_DIR"
nvcc -O2 -arch=sm_90 -o "$OUT_DIR/record_cost" "$SRC" -lcuda > "$OUT_DIR/record_cost.build" 2>&1 || { cat "$OUT_DIR/record_cost.build"; exit 2; }
rc=0
timeout 120 "$OUT_DIR/record_cost" > "$OUT_DIR/record_cost.txt" 2>&1 || rc=$?
cat "$OUT_DIR/record_cost.txt"
exit "$rc"

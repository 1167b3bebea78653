#!/usr/bin/env bash
# Build and run results/2026-12-01-h200-one-gpu-kernel-anchor/cupti_clock.cu on a GPU host with nvcc: which clock CUPTI's
# kernel timestamps use (%globaltimer or not) and where %globaltimer and
# cuptiGetTimestamp lie against CLOCK_REALTIME and CLOCK_MONOTONIC.
# Usage: bash results/2026-12-01-h200-one-gpu-kernel-anchor/cupti-clock.sh OUT_DIR. Output: OUT_DIR/cupti_clock.txt (also echoed).
set -euo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR}
SRC="$(cd "$(dirname "$0")" && pwd)/cupti_clock.cu"
mkdir -p "$OUT_DIR"
inc=$(dirname "$( (find /usr/local/cuda*/ /usr/include /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages -name cupti.h 2>/dev/null || true) | head -1)")
lib=$(dirname "$( (find /usr/local/cuda*/ /usr/lib /usr/local/lib/python3*/dist-packages -name 'libcupti.so*' 2>/dev/null || true) | head -1)")
echo "cupti.h in $inc, libcupti in $lib" | tee "$OUT_DIR/cupti_clock.build"
libfile=$(ls "$lib"/libcupti.so* | head -1)
built=""
for v in 11 10 9 8 7 6 5; do
  if nvcc -O2 -arch=sm_90 -DKREC=CUpti_ActivityKernel$v -I"$inc" -o "$OUT_DIR/cupti_clock" "$SRC" -lcuda "$libfile" -Xlinker -rpath="$lib" >> "$OUT_DIR/cupti_clock.build" 2>&1; then
    built=$v; break
  fi
done
[ -n "$built" ] || { echo "cupti_clock did not build (see $OUT_DIR/cupti_clock.build)"; exit 2; }
echo "kernel record: CUpti_ActivityKernel$built" | tee -a "$OUT_DIR/cupti_clock.build"
rc=0
timeout 120 "$OUT_DIR/cupti_clock" > "$OUT_DIR/cupti_clock.txt" 2>&1 || rc=$?
cat "$OUT_DIR/cupti_clock.txt"
exit "$rc"

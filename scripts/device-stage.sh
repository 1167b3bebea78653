#!/usr/bin/env bash
# Build a release binary here and stage it in .stage/ (git-ignored) for a GPU
# host that has no Rust toolchain. Copy .stage/ to the host (or name it in a
# runner's carry list) and run .stage/bin/commcanary from the repository root.
# The binary loads CUDA and NCCL dynamically and links the host's libmpi.so.40
# (OpenMPI 4.x), so the host needs OpenMPI 4.x and the NVIDIA driver, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-build
. scripts/env.sh
cargo build --release --locked -p commcanary -p commcanary-capture >&2
mkdir -p .stage/bin
cp target/release/commcanary .stage/bin/commcanary
# the capture library `commcanary capture` preloads, next to the binary as it looks for it
cp target/release/libcommcanary_capture.so .stage/bin/
strip --strip-debug .stage/bin/commcanary 2>/dev/null || true
sha256sum .stage/bin/commcanary | tee .stage/bin/commcanary.sha256
# STAGE_GPU_TESTS=1: the GPU test binary too (run it there with COMMCANARY_BIN=.stage/bin/commcanary)
if [ "${STAGE_GPU_TESTS:-0}" = 1 ]; then
  t=$(cargo test --release --locked --no-run --test gpu_cuda --message-format=json 2>/dev/null \
      | sed -n 's/.*"executable":"\([^"]*gpu_cuda[^"]*\)".*/\1/p' | tail -1)
  [ -n "$t" ] && cp "$t" .stage/gpu_cuda && strip --strip-debug .stage/gpu_cuda && echo "staged: .stage/gpu_cuda" >&2
fi
# STAGE_NCCL_TESTS=DIR: a prebuilt nccl-tests all_reduce_perf (with its license) for scripts/device/bench-vs-nccl-tests.sh
if [ -n "${STAGE_NCCL_TESTS:-}" ]; then
  cp "$STAGE_NCCL_TESTS/all_reduce_perf" "$STAGE_NCCL_TESTS/LICENSE.txt" .stage/ && echo "staged: .stage/all_reduce_perf" >&2
fi
echo "staged: .stage/bin/commcanary ($(du -h .stage/bin/commcanary | cut -f1)); on the GPU host keep NCCL_NVLS_ENABLE=0" >&2

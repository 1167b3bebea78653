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
cargo build --release --locked >&2
mkdir -p .stage/bin
cp target/release/commcanary .stage/bin/commcanary
strip --strip-debug .stage/bin/commcanary 2>/dev/null || true
sha256sum .stage/bin/commcanary | tee .stage/bin/commcanary.sha256
echo "staged: .stage/bin/commcanary ($(du -h .stage/bin/commcanary | cut -f1)); on the GPU host keep NCCL_NVLS_ENABLE=0" >&2

#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (unit, property, integration under real mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-build
. scripts/env.sh
# lib, binaries and integration tests; benchmarks run with `cargo bench` (they print, they do not assert)
cargo test --locked --lib --bins --tests

#!/usr/bin/env bash
# README command 2: set up, check formatting and lints, then run the whole test
# suite (unit, property, integration under real mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
. scripts/env.sh
# rustup's minimal profile has neither rustfmt nor clippy
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
# Incremental caches double the target folder and help nothing on a clean clone.
export CARGO_INCREMENTAL=0
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
# lib, binaries and integration tests; benchmarks run with `cargo bench` (they print, they do not assert)
cargo test --locked --lib --bins --tests

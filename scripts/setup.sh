#!/usr/bin/env bash
# Install what CommCanary needs on Debian/Ubuntu (as root, or with sudo) and build it.
# Idempotent: installs only what is missing.
# Usage: bash scripts/setup.sh [--no-build | --demo | --tests]
#   (default: cargo build --release; --demo: cargo build --profile demo, the
#   README demo's binary target/demo/commcanary, see [profile.demo] in Cargo.toml;
#   --tests: no build, and also chromium, which tests/report_html.rs renders report.html in)
set -euo pipefail
cd "$(dirname "$0")/.."

# lammps, lammps-examples: the real application of examples/lammps-truth.toml (the
# README's truth example, run in CI) and the `melt` example tests/mpi_capture.rs
# captures; gfortran: the MPI capture tests build a Fortran twin with mpifort.
pkgs=(libopenmpi-dev openmpi-bin libclang-dev clang pkg-config gfortran lammps lammps-examples)
if [ "${1:-}" = --tests ]; then pkgs+=(chromium); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; installing the Rust toolchain with rustup (needs internet)" >&2
  command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl ca-certificates >/dev/null; }
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >&2
  export PATH="$HOME/.cargo/bin:$PATH"
fi

# OpenMPI refuses to run as root unless told; CommCanary's scripts run as root in CI.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

case "${1:-}" in
  --no-build | --tests) ;;
  --demo) cargo build --profile demo --locked >&2 ;;
  *) cargo build --release --locked >&2 ;;
esac

#!/usr/bin/env bash
# A LAMMPS campaign that sees the transport: capture LAMMPS's melt on 2
# ranks, import it, and run examples/lammps-p2p-transport.toml (its replay
# phase runs the point-to-point halo exchange) under shared memory and
# under TCP with 2 KiB buffers; prints the campaign's ranking (-v: every line).
# Usage: bash scripts/dev/lammps-p2p-transport.sh
# (COMMCANARY_BIN names the binary; default target/release/commcanary).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
bin=$(realpath "${COMMCANARY_BIN:-target/release/commcanary}")
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release, or set COMMCANARY_BIN" >&2; exit 2; }
command -v lmp >/dev/null || { echo "LAMMPS (lmp) is not installed: bash scripts/setup.sh installs it" >&2; exit 2; }
[ -e out/lammps-p2p.json ] && { echo "out/lammps-p2p.json exists: move it away first" >&2; exit 2; }
[ -e out/p2p-campaign ] && { echo "out/p2p-campaign exists: move it away first" >&2; exit 2; }
mkdir -p out
rm -rf out/lammps-p2p-cap
(cd out && mpirun -n 2 "$bin" capture -o lammps-p2p-cap -- lmp -in ../examples/lammps/in.lj-melt -var n 6 -var steps 100 -log none -screen none)
"$bin" import mpi out/lammps-p2p-cap -o out/lammps-p2p.json --for-phases
"$bin" campaign run examples/lammps-p2p-transport.toml -o out/p2p-campaign -v

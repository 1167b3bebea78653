#!/usr/bin/env bash
# A LAMMPS canary judged by LAMMPS itself: capture LAMMPS's melt on 2 ranks,
# import it, compile its canary, then `canary verify` with
# examples/lammps-canary-truth.toml, whose [truth] runs LAMMPS under each
# configuration in the same rounds: prints the source's and the canary's
# picks with their regret on LAMMPS and the canary's decision cost.
# Usage: bash scripts/dev/lammps-canary-truth.sh OUT [ROUNDS] [PASSES]
# (COMMCANARY_BIN names the binary; default target/release/commcanary).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
out=${1:?usage: lammps-canary-truth.sh OUT [ROUNDS]}
rounds=${2:-4}
passes=${3:-2}
bin=${COMMCANARY_BIN:-target/release/commcanary}
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release, or set COMMCANARY_BIN" >&2; exit 2; }
command -v lmp >/dev/null || { echo "LAMMPS (lmp) is not installed: bash scripts/setup.sh installs it" >&2; exit 2; }
[ -e "$out" ] && { echo "$out exists: choose another OUT" >&2; exit 2; }
mkdir -p "$out"
# the truth runs the same input and step count (examples/lammps-canary-truth.toml)
steps=$(sed -n 's/.*"steps", "\([0-9]*\)".*/\1/p' examples/lammps-canary-truth.toml)
(cd "$out" && mpirun -n 2 "$OLDPWD/$bin" capture -o cap -- lmp -in "$OLDPWD/examples/lammps/in.lj-melt" -var steps "$steps" -log none -screen none)
"$bin" import mpi "$out/cap" -o "$out/lammps.json" --for-phases
"$bin" canary compile "$out/lammps.json" -o "$out/lammps.canary.json"
"$bin" canary verify "$out/lammps.json" "$out/lammps.canary.json" --configs examples/lammps-canary-truth.toml --rounds "$rounds" --passes "$passes" -o "$out/verify" | tee "$out/verify.txt"

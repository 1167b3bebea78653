#!/usr/bin/env bash
# The simulated Slurm cluster on one machine: `up N`, `down`, `status`, `env`,
# `exec NODE CMD...`, `check-clean`. The implementation and what it does and
# does not simulate: scripts/dev/sim-cluster.sh and scripts/dev/sim-cluster.md.
exec bash "$(dirname "$0")/dev/sim-cluster.sh" "$@"

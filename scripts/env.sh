# Sourced by the other scripts: cargo on PATH, OpenMPI allowed as root, oversubscription allowed.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Small machines (2 cores) run 4 ranks: let OpenMPI place more ranks than cores.
export OMPI_MCA_rmaps_base_oversubscribe=1

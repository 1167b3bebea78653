#!/usr/bin/env bash
# `commcanary validate` on the 2-GPU host: record the node as a reference,
# validate it again (expected: pass), then validate it under two
# degradations an owner could cause by mistake, NCCL_P2P_DISABLE=1 and
# NCCL_PROTO=Simple (expected: fail, naming the busbw and workload checks).
#
#   bash scripts/device/device-validate.sh OUT_DIR
#
# From the repository root, with .stage/ made by scripts/device-stage.sh.
# NP ranks (default 2), ROUNDS rounds per step (default 6). Every step has a
# hard timeout (TIMEOUT_S, default 110 s; 4 steps: at most about 7.5 minutes).
# Logs, tables and the evidence directories (each with report.json) go under OUT_DIR;
# the summary is printed last (and kept in OUT_DIR/summary.txt).
# NCCL_NVLS_ENABLE=0 always. The site thresholds are the defaults
# (busbw_min_ratio 0.95, token_latency_max_ratio 1.05) unless SITE names a site
# TOML (e.g. SITE=slurm/site-h200-vm.toml), which every comparison step then uses.
set -uo pipefail
OUT=${1:?output dir}; mkdir -p "$OUT"
NP=${NP:-2}; ROUNDS=${ROUNDS:-6}; T=${TIMEOUT_S:-110}
CC=$PWD/.stage/bin/commcanary
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $(date -u +%H:%M:%S) $*"; }
# step NAME EXPECT ENV... -- ARGS...: one mpirun of validate, its exit code kept
step() {
  local name=$1 expect=$2; shift 2
  local envs=() xs=()
  while [ "$1" != "--" ]; do envs+=("$1"); xs+=(-x "${1%%=*}"); shift; done; shift
  log "$name (expect $expect): ${envs[*]:-no extra environment}"
  env "${envs[@]}" timeout "$T" mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "${xs[@]}" \
    "$CC" validate --backend cuda -q "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.log"
  local code=$?
  echo "$code" > "$OUT/$name.exit"
  cat "$OUT/$name.stdout"
  echo "$name: exit $code (expected $expect)" | tee -a "$OUT/summary.txt"
}
{
log "host $(hostname); commcanary $("$CC" --version)"; nvidia-smi -L; nvidia-smi topo -m | head -4
: > "$OUT/summary.txt"
step reference 0 -- --record-reference -o "$OUT/ref" --rounds "$ROUNDS"
step again 0 -- --reference "$OUT/ref" ${SITE:+--site "$SITE"} -o "$OUT/again" --rounds "$ROUNDS"
step p2p-disabled 1 NCCL_P2P_DISABLE=1 -- --reference "$OUT/ref" ${SITE:+--site "$SITE"} -o "$OUT/p2p-disabled" --rounds "$ROUNDS"
step proto-simple 1 NCCL_PROTO=Simple -- --reference "$OUT/ref" ${SITE:+--site "$SITE"} -o "$OUT/proto-simple" --rounds "$ROUNDS"
log "summary"
for s in again p2p-disabled proto-simple; do
  [ -f "$OUT/$s/report.json" ] || { echo "$s: no report (exit $(cat "$OUT/$s.exit"))"; continue; }
  python3 - "$OUT/$s/report.json" "$s" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: verdict {r['verdict']}; " + "; ".join(f"{c['check']} {c['verdict']} {c['interval']}" for c in r["checks"]))
PY
done
python3 - "$OUT/ref/health.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
h = json.load(open(sys.argv[1]))
for g in h.get("end", []):
    val = lambda k: g[k].get("value", "unavailable: " + str(g[k].get("unavailable")))
    print(f"GPU {g['index']} {val('name')}: ECC vol unc {val('ecc_volatile_uncorrected')}, remapped {val('remapped_rows')}, "
          f"PCIe gen {val('pcie_gen_current')}/{val('pcie_gen_max')} x{val('pcie_width_current')}/{val('pcie_width_max')}, "
          f"{val('temperature_c')} C, {val('power_w')} W, persistence {val('persistence_mode')}, throttle {val('throttle_reasons')}, "
          f"NVLinks active {sum(l['active'] for l in g['nvlinks'])}/{len(g['nvlinks'])}")
print("XID events:", h.get("xid_events"), "unwatched:", h.get("xid_unwatched"))
PY
} 2>&1 | tee "$OUT/device-validate.log"

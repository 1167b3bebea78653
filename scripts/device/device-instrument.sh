#!/usr/bin/env bash
# The GPU-instrument evidence on a GPU host (2 ranks, or NP): the GPU tests,
# bench-overhead (host overhead and device inflation, CUPTI and the NCCL
# tuning log measured separately), nccl-tests parity, and the injected-skew
# control at 20 us in JOBS full all-phase jobs (256 tokens x 32 layers).
#
#   bash scripts/device/device-instrument.sh RESULT_DIR
#
# From the repository root, with .stage/ made by scripts/device-stage.sh
# (STAGE_GPU_TESTS=1 STAGE_NCCL_TESTS=DIR add the GPU test binary and all_reduce_perf).
# STEPS picks steps (default "tests bench parity skew"); REPS, N, W, E, JOBS size them.
# SKEW_CUPTI=1 runs the skew jobs with --cupti: arrivals are then the NCCL kernels'
# starts, anchored through %globaltimer (phases[].kernel_anchor), where every member has one.
set -uo pipefail
RES=${1:?result dir}; mkdir -p "$RES"
NP=${NP:-2}; STEPS=${STEPS:-tests bench parity skew}; JOBS=${JOBS:-5}
CC=$PWD/.stage/bin/commcanary
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $(date -u +%H:%M:%S) $*"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
{
log "host $(hostname); commcanary $("$CC" --version)"; nvidia-smi -L; nvidia-smi topo -m | head -4
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null) (tsc or kvm-clock: clock_gettime stays in the vDSO)"
if has tests; then
  log "GPU tests (tests/gpu_cuda.rs, against the staged binary)"
  COMMCANARY_BIN=$CC timeout 300 .stage/gpu_cuda --test-threads 1 2>&1 | tail -25
fi
if has bench; then
  log "bench-overhead: bare vs instrumented vs instrumented+CUPTI, interleaved"
  timeout 240 mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$CC" bench-overhead --backend cuda \
    --sizes "${BENCH_SIZES:-8,64KiB,1MiB,16MiB}" --iters "${BENCH_ITERS:-500}" --reps "${BENCH_REPS:-9}" --cupti --json-out "$RES/bench-overhead.json"
  log "bench-overhead with NCCL's tuning log on (compare with the run above)"
  timeout 120 mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$CC" bench-overhead --backend cuda \
    --sizes 64KiB --iters "${BENCH_ITERS:-500}" --reps 5 --nccl-tuning --json-out "$RES/bench-overhead-nccl-tuning.json"
fi
if has parity; then
  log "nccl-tests parity"
  bash scripts/device/bench-vs-nccl-tests.sh "$RES/parity"
fi
if has skew; then
  cupti_flag=""; [ "${SKEW_CUPTI:-0}" = 1 ] && cupti_flag="--cupti"
  log "injected skew 20 us on rank 1 every 10th collective, $JOBS all-phase jobs of 256 x 32 ${cupti_flag:-(events)}"
  W=$(mktemp -d)
  for j in $(seq 1 "$JOBS"); do
    timeout 200 mpirun < /dev/null --bind-to none -n "$NP" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$CC" rank -q --backend cuda --phases all \
      --tokens 256 --model synthetic --layers 32 --iters 100 --inject-delay rank=1,every=10,us=20 $cupti_flag --out "$W" --run-id "skew-$j" >/dev/null || echo "job $j failed"
    "$CC" join "$W/skew-$j" --json > "$RES/skew-$j.join.json" && "$CC" join "$W/skew-$j" | sed -n "/delay control/,\$p"
    for r in 0 1; do "$CC" inspect --header-only "$W/skew-$j/rank-0000$r.shard" | python3 -c 'import json,sys; h=json.load(sys.stdin); print("rank", h["rank"], "anchor error ns per phase (events, kernels):", {p["phase"]: (p["device_anchor_error_ns"], (p.get("kernel_anchor") or {}).get("error_ns")) for p in h["phases"]})'; done
    rm -f "$W/e.jsonl"; "$CC" join "$W/skew-$j" --events-out "$W/e.jsonl" > /dev/null
    python3 - "$W/e.jsonl" <<'PY'
import json, sys
from collections import defaultdict
n = defaultdict(lambda: [0, 0, 0, 0])  # phase -> [skew > 3us, of those resolved, timed, arrivals from NCCL kernels]
for line in open(sys.argv[1]):
    c = json.loads(line)
    if c["warmup"] or c.get("arrival_skew_us") is None:
        continue
    k = n[c["phase"]]; k[2] += 1; k[3] += c.get("arrival_source") == "nccl-kernel"
    if c["arrival_skew_us"] > 3.0:
        k[0] += 1; k[1] += bool(c["skew_resolved"])
print("skew_resolved among collectives with skew > 3 us, per phase:", {p: f"{v[1]}/{v[0]} (of {v[2]} timed; {v[3]} arrivals from NCCL kernels)" for p, v in n.items()})
PY
    # the replay collectives (the judged phase), the fields a skew detector needs, kept for analysis
    python3 - "$W/e.jsonl" "$RES/skew-$j.events.jsonl" <<'PY'
import json, sys
keep = ("host_issue_ns", "wait_end_ns", "device_start_ns", "kernel_start_ns", "injected_delay_ns", "replay_error_ns", "replay_gap_ns")
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        c = json.loads(line)
        if c["phase"] != "replay":
            continue
        slim = {k: c.get(k) for k in ("phase", "seq", "token", "layer", "warmup", "arrival_skew_us", "arrival_bound_us", "arrival_bounds_us", "arrival_offsets_us", "arrival_source")}
        slim["ranks"] = [{k: r.get(k) for k in ("rank",) + keep} for r in c["ranks"]]
        out.write(json.dumps(slim, separators=(",", ":")) + "\n")
PY
    python3 scripts/device/skew_sources.py "$RES/skew-$j.events.jsonl" --delay-us 20 --top 5 || echo "job $j: no replay skew to split"
  done
  rm -rf "$W"
  tar czf "$RES/skew-joins.tgz" -C "$RES" $(cd "$RES" && ls skew-*.join.json skew-*.events.jsonl) && rm -f "$RES"/skew-*.join.json "$RES"/skew-*.events.jsonl
fi
log done
} 2>&1 | tee "$RES/session.log"

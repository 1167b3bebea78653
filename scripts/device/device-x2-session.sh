#!/usr/bin/env bash
# The two-GPU checks of issues 16 and 14 in one call, each step bounded by its
# own timeout, everything written under OUT_DIR:
#   tests      the staged GPU tests (--nocapture: skipped tests say so)
#   replay     scripts/device/device-trace-replay.sh (kinds, counts, groups, CUPTI kernel
#              families and gap error of the imported fixture; corrupted run fails)
#   campaign   import the fixture, then examples/gpu-trace-tp2.toml end to end
#   breakdown  per-token kernel tables at TP=2, graph mode: PyTorch (torchrun) and
#              CommCanary (rank --graph --cupti, PyTorch's NCCL library)
#   workload   replay-trace --pace workload of the fixture on 2 ranks, 3 runs, and
#              a corrupted-result run that must fail
#   streams    scripts/device/device-comm-stream-ab.sh at TP=2 (blocking on the compute
#              stream vs its own, eager and graph, 3 rounds)
#   skew       issue 11's 20 us injected-skew control, 5 all-phase jobs, twice:
#              arrivals from device events, then with --cupti from NCCL kernel
#              starts anchored through %globaltimer (not in the default list)
#
#   bash scripts/device/device-x2-session.sh OUT_DIR [STEP...]   (default: every step)
#
# Run from the repository root with the binary and tests staged by
# STAGE_GPU_TESTS=1 scripts/device-stage.sh.
set -uo pipefail
OUTD=${1:?output directory}; shift
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests replay workload campaign breakdown streams)
B=$PWD/.stage/bin/commcanary
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$OUTD"
(nvidia-smi -L; nvidia-smi topo -m | head -4; date -u; "$B" --version) > "$OUTD/env.txt" 2>&1
for s in "${steps[@]}"; do
  echo "== $(date -u +%H:%M:%S) $s"
  case $s in
    tests) COMMCANARY_BIN=$B timeout 240 .stage/gpu_cuda --test-threads 1 --nocapture > "$OUTD/gpu-tests.log" 2>&1; echo "rc $?" >> "$OUTD/gpu-tests.log"
           grep -E "^test |test result|rc " "$OUTD/gpu-tests.log" ;;
    replay) timeout 240 bash scripts/device/device-trace-replay.sh "$OUTD/trace-replay" > "$OUTD/trace-replay.log" 2>&1; echo "rc $?" >> "$OUTD/trace-replay.log"
            grep -E "^(ok|!!|rank|failures|rc)" "$OUTD/trace-replay.log" ;;
    campaign) mkdir -p out; F=tests/data/pytorch-2.11-tp2-h200
              [ -f out/tp2.comm.json ] || "$B" import kineto $F/kineto.rank-0.json.gz $F/kineto.rank-1.json.gz -o out/tp2.comm.json
              QUICK=1 COLLECT="$OUTD" timeout 300 bash scripts/device/device-campaign.sh examples/gpu-trace-tp2.toml gpu-trace-tp2 240 > "$OUTD/campaign.log" 2>&1; echo "rc $?" >> "$OUTD/campaign.log"
              tail -40 "$OUTD/campaign.log" ;;
    breakdown) lib=$(python3 -c 'import os,sys; print(next((os.path.join(p,"nvidia","nccl","lib","libnccl.so.2") for p in sys.path if os.path.isfile(os.path.join(p,"nvidia","nccl","lib","libnccl.so.2"))), "libnccl.so.2"))')
               timeout 150 torchrun --standalone --nproc-per-node=2 scripts/device/kernel_breakdown.py torch --tokens 16 > "$OUTD/torch-tp2.txt" 2>&1
               timeout 150 mpirun --bind-to none -n 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$B" rank -q --backend cuda --nccl-lib "$lib" --model llama3-8b --graph --phases blocking --tokens 16 --cupti --out /tmp/kb > "$OUTD/cc-tp2.out" 2>&1
               "$B" join /tmp/kb/* > "$OUTD/cc-tp2-join.txt" 2>&1
               "$B" inspect /tmp/kb/*/rank-00000.shard > /tmp/kb-s0.json && python3 scripts/device/kernel_breakdown.py commcanary /tmp/kb-s0.json > "$OUTD/cc-tp2.txt" 2>&1
               grep -v Warning "$OUTD/torch-tp2.txt" | head -14; head -14 "$OUTD/cc-tp2.txt"; sed -n 3,4p "$OUTD/cc-tp2-join.txt" ;;
    workload) mkdir -p out; F=tests/data/pytorch-2.11-tp2-h200
              [ -f out/tp2.comm.json ] || "$B" import kineto $F/kineto.rank-0.json.gz $F/kineto.rank-1.json.gz -o out/tp2.comm.json
              for r in 1 2 3; do
                timeout 120 mpirun --bind-to none -n 2 -x NCCL_NVLS_ENABLE "$B" replay-trace out/tp2.comm.json --backend cuda --check --pace workload --out "$OUTD/workload-$r" > "$OUTD/workload-$r.out" 2>&1
                echo "workload run $r: rc $?"; grep "rank 0" "$OUTD/workload-$r.out"
              done
              timeout 120 mpirun --bind-to none -n 2 -x NCCL_NVLS_ENABLE "$B" replay-trace out/tp2.comm.json --backend cuda --check --pace workload --corrupt-rank 1 --out "$OUTD/workload-corrupt" > "$OUTD/workload-corrupt.out" 2>&1
              echo "workload corrupted (must fail): rc $?"; grep -m1 -- "--check" "$OUTD/workload-corrupt.out" ;;
    skew) STEPS=skew JOBS=${JOBS:-5} timeout 280 bash scripts/device/device-instrument.sh "$OUTD/skew-events" > /dev/null 2>&1; echo "events: rc $?"; grep -E "delay control|beyond the replay|skew_resolved|anchor error|above the line" "$OUTD/skew-events/session.log" | head -30
          STEPS=skew JOBS=${JOBS:-5} SKEW_CUPTI=1 timeout 300 bash scripts/device/device-instrument.sh "$OUTD/skew-cupti" > /dev/null 2>&1; echo "cupti: rc $?"; grep -E "delay control|beyond the replay|skew_resolved|anchor error|above the line" "$OUTD/skew-cupti/session.log" | head -30 ;;
    streams) timeout 400 bash scripts/device/device-comm-stream-ab.sh "$OUTD/streams" 2 3 > "$OUTD/streams.log" 2>&1; echo "rc $?" >> "$OUTD/streams.log"; tail -4 "$OUTD/streams.log" ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done

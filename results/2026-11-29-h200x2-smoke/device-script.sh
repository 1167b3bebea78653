#!/usr/bin/env bash
# Device session 2b (nvidia-h200-x2): pooled events, 2 ranks over NVLink, both NCCLs,
# forced algo/proto isolated runs interleaved, one TUNING log. Smoke evidence, not a campaign.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/.stage/bin/commcanary
SYS=/usr/lib/x86_64-linux-gnu/libnccl.so.2
TORCH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
R=/tmp/runs; mkdir -p $R
nvidia-smi topo -m | head -5
MP="mpirun -n 2 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
for L in sys:$SYS torch:$TORCH; do
  name=${L%%:*}; lib=${L#*:}
  echo "== 2 ranks, all phases, 256x32, $name"
  timeout 200 $MP $B rank --backend cuda --nccl-lib "$lib" --phases all --tokens 256 --layers 32 --iters 100 --check 2 --run-id two-$name --out $R 2>&1 | tail -7
  $B join $R/two-$name 2>&1 | sed -n 2,10p
  $B overlap $R/two-$name 2>&1 | head -8
done
echo "== forced algo/proto, isolated only, 2 rounds interleaved"
for round in 1 2; do for cfg in RING:LL RING:SIMPLE TREE:LL TREE:SIMPLE RING:LL128 TREE:LL128; do
  a=${cfg%%:*}; p=${cfg#*:}
  NCCL_ALGO=$a NCCL_PROTO=$p timeout 60 $MP -x NCCL_ALGO -x NCCL_PROTO $B rank -q --backend cuda --nccl-lib $SYS --phases isolated,blocking --tokens 32 --layers 32 --iters 200 --run-id f$round-$a-$p --out $R >/dev/null 2>&1 || echo "FAILED $cfg"
done; done
$B summarize $(ls -d $R/f*-* | while read d; do b=$(basename $d); echo "${b#f?-}=$d"; done) 2>&1
echo "== TUNING log sample"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING NCCL_ALGO=TREE NCCL_PROTO=LL timeout 60 $MP -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_ALGO -x NCCL_PROTO $B rank -q --backend cuda --nccl-lib $SYS --phases isolated --iters 3 --warmup-iters 1 --run-id tuning --out $R > $OUT/tuning.log 2>&1
grep -m5 -i "bytes ->" $OUT/tuning.log; grep -ci "bytes ->" $OUT/tuning.log
tar czf $OUT/runs.tgz -C /tmp runs

#!/usr/bin/env bash
# Device session 3 (nvidia-h200-x2): issue 4 acceptance items on real GPUs. Not performance evidence.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/.stage/bin/commcanary
SYS=/usr/lib/x86_64-linux-gnu/libnccl.so.2
R=/tmp/runs; mkdir -p $R
MP="mpirun --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
echo "== item 1: one rank, all phases, default (bare-name) NCCL"
timeout 200 $MP -n 1 $B rank -q --backend cuda --phases all --tokens 128 --layers 32 --check 2 --run-id one --out $R 2>&1 | tail -3
$B join $R/one | sed -n 2,10p; $B overlap $R/one
$B inspect --header-only $R/one/rank-00000.shard | grep -A1 -E '"nccl_(requested|mapped)_path"' | tr -d ' \n'; echo
echo "== item 4: tuner choices under forced settings, 2 ranks"
for cfg in TREE:LL RING:SIMPLE DEFAULT:DEFAULT; do
  a=${cfg%%:*}; p=${cfg#*:}; envs=""
  [ "$a" != DEFAULT ] && envs="-x NCCL_ALGO=$a -x NCCL_PROTO=$p"
  timeout 120 $MP -n 2 $envs $B rank -q --backend cuda --nccl-lib $SYS --nccl-tuning --phases isolated,blocking,replay --tokens 16 --layers 32 --iters 20 --run-id tune-$a-$p --out $R 2>&1 | tail -2
  echo "-- $cfg"; $B join $R/tune-$a-$p | grep -E "tuner choices"
  $B inspect --header-only $R/tune-$a-$p/rank-00001.shard | grep -o '"unavailable": "[^"]*"'
done
echo "== item 6: overhead benchmark, 2 ranks"
timeout 200 $MP -n 2 $B bench-overhead --backend cuda --nccl-lib $SYS --iters 2000 --reps 5
echo "== item 5: chrome trace"
timeout 100 $MP -n 2 $B rank -q --backend cuda --nccl-lib $SYS --phases all --tokens 4 --layers 8 --iters 5 --run-id small --out $R >/dev/null 2>&1
$B export chrome $R/small -o $OUT/trace-small.json
python3 -c "
import json; t=json.load(open('$OUT/trace-small.json')); ev=t['traceEvents']
print('valid JSON,', len(ev), 'events; rows:', sorted({(e['pid'], e['args']['name']) for e in ev if e['ph']=='M' and e['name']=='thread_name'}))"
tar czf $OUT/runs.tgz -C /tmp runs

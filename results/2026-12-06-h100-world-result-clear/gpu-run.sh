#!/usr/bin/env bash
# One lent H100: the GPU tests with this build, and the sweep and phases with
# --check 1 against --check 0 interleaved (the check's result clearing).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p /work && ln -sfn "$PWD" /work/main
B=.stage/bin/commcanary  # staged by scripts/device-stage.sh
L=$OUT/logs; mkdir -p $L
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version --format=csv; sha256sum $B; } > $L/host.txt 2>&1
COMMCANARY_BIN=$B timeout 330 .stage/gpu_cuda --test-threads=1 --nocapture > $OUT/gpu_cuda.log 2>&1; echo "gpu_cuda rc=$?" >> $L/host.txt
R=/tmp/ab; mkdir -p $R
for round in 1 2 3; do
  for c in 0 1; do
    timeout 120 mpirun -n 1 $B rank --backend cuda --model synthetic --phases all --check $c --tokens 8 --sizes 64KiB,1MiB,16MiB \
      -J $R/sweep-c$c-r$round.json -o $R/c$c-r$round > $L/rank-c$c-r$round.log 2>&1
    echo "round $round check $c rc=$?" >> $L/host.txt
  done
done
timeout 120 mpirun -n 1 $B rank --backend cuda --model synthetic --phases isolated,blocking --graph --check 1 --tokens 4 -o $R/graph > $L/graph.log 2>&1; echo "graph rc=$?" >> $L/host.txt
timeout 120 mpirun -n 1 $B rank --backend cuda --model synthetic --phases blocking --fault wrong-sum:0 -o $R/neg > $L/neg.log 2>&1; echo "wrong-sum rc=$? (must fail)" >> $L/host.txt
tar czf $OUT/runs.tgz -C $R . && (cd $L && tar czf $OUT/logs.tgz .)
cat $L/host.txt

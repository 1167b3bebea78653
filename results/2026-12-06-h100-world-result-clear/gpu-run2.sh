#!/usr/bin/env bash
# The sweep with --check 1 and 0, in both orders (round 1-3: 1 then 0; 4-6: 0 then 1), and graph mode checked.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
B=.stage/bin/commcanary  # staged by scripts/device-stage.sh
R=/tmp/ab2; mkdir -p $R
for round in 1 2 3 4 5 6; do
  order="1 0"; [ $round -gt 3 ] && order="0 1"
  for c in $order; do
    timeout 60 mpirun -n 1 $B rank --backend cuda --model synthetic --phases isolated --check $c --sizes 64KiB,1MiB,16MiB \
      -J $R/sweep-c$c-r$round.json -o $R/c$c-r$round > $R/log-c$c-r$round.txt 2>&1
    echo "round $round check $c rc=$?"
  done
done
timeout 120 mpirun -n 1 $B rank --backend cuda --phases blocking,async --graph --check 1 --tokens 4 -o $R/graph > $R/graph.log 2>&1; echo "graph rc=$?"
tail -3 $R/graph.log
tar czf $OUT/runs2.tgz -C $R .

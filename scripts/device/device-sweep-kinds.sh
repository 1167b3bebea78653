#!/usr/bin/env bash
# On a one-GPU host: nccl-tests-style isolated sweeps of other collective
# kinds than all-reduce through NCCL (issue 29, item 7), one rank:
#
#   rank --backend cuda --phases isolated --collective KIND -b 8 -e 64M -f 4 -c 1 -J OUT/KIND.json
#
# for KIND in all_gather, reduce_scatter and broadcast, every size checked
# (#wrong must be 0 on every row, the job must succeed), then a negative
# control (rank 0's all-gather results spoiled: the job must fail and the
# table must count wrong elements). Logs, the run directories and the -J
# files land in OUT; the last lines say which steps held.
#
#   bash scripts/device-stage.sh            # here, once: .stage/bin/commcanary
#   bash scripts/device/device-sweep-kinds.sh OUT  # on the GPU host, from the repository root
#
# B overrides the binary; NCCL_LIB the NCCL library (default libnccl.so.2).
# One rank over one GPU: busbw factors are 1 for every kind (nccl-tests
# prints busbw = algbw on one rank too); what this shows is that the kinds
# run and check through NCCL, with nccl-tests' sizes and columns.
set -uo pipefail
OUTD=${1:?output directory}
B=${B:-$PWD/.stage/bin/commcanary}
NCCL_LIB=${NCCL_LIB:-libnccl.so.2}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$OUTD"
fails=0
sweep() { # NAME EXPECT(0|fail) KIND ARGS...
  local name=$1 expect=$2 kind=$3; shift 3
  echo "== $name: rank --backend cuda --phases isolated --collective $kind $*"
  timeout 300 mpirun < /dev/null --bind-to none -n 1 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$B" rank --backend cuda \
    --nccl-lib "$NCCL_LIB" --model synthetic -d f32 --phases isolated --collective "$kind" -o "$OUTD/runs-$name" "$@" \
    > "$OUTD/$name.out" 2> "$OUTD/$name.err"
  local rc=$?
  cat "$OUTD/$name.out"; tail -3 "$OUTD/$name.err"
  if { [ "$expect" = 0 ] && [ $rc -ne 0 ]; } || { [ "$expect" = fail ] && [ $rc -eq 0 ]; }; then
    echo "!! $name: exit $rc, expected $expect"; fails=$((fails + 1))
  else
    echo "ok $name: exit $rc"
  fi
  # the table's #wrong column (10th) on every row
  awk '/size\(B\)/{t=1; next} /^#/{t=0} t && NF >= 10 {print $10}' "$OUTD/$name.out" > "$OUTD/$name.wrong"
  if [ ! -s "$OUTD/$name.wrong" ]; then echo "!! $name: no per-size table"; fails=$((fails + 1)); fi
}
"$B" --version
"$B" doctor > "$OUTD/doctor.txt" 2>&1 || true
for kind in all_gather reduce_scatter broadcast; do
  sweep "$kind" 0 "$kind" -b 8 -e 64M -f 4 -c 1 -J "$OUTD/$kind.json"
  if grep -qv '^0$' "$OUTD/$kind.wrong"; then echo "!! $kind: a size has wrong elements"; fails=$((fails + 1)); fi
  grep -q '^# Avg bus bandwidth' "$OUTD/$kind.out" || { echo "!! $kind: no Avg bus bandwidth footer"; fails=$((fails + 1)); }
  [ -s "$OUTD/$kind.json" ] || { echo "!! $kind: no -J file"; fails=$((fails + 1)); }
done
# negative control: spoiled results must be counted on every size and fail the job
sweep corrupt fail all_gather -b 1K -e 64K -f 8 -c 1 --fault wrong-sum:0
if grep -q '^0$' "$OUTD/corrupt.wrong"; then echo "!! corrupt: a spoiled size counted no wrong element"; fails=$((fails + 1)); fi
echo "device-sweep-kinds: $fails step(s) failed; logs in $OUTD"
exit $((fails > 0))

#!/usr/bin/env bash
# Record real nccl-tests outputs on a GPU host, in every format `compare
# --proxy DIR` reads: per NCCL configuration the printed table, the table with
# `-I 1`'s per-iteration columns, and a `-J` JSON file; then read them back with
# `commcanary compare` (which must accept every one) and keep its answer.
#
#   bash scripts/device/record-nccl-tests-outputs.sh OUT_DIR
#
# Needs .stage/bin/commcanary and .stage/all_reduce_perf (scripts/device-stage.sh
# with STAGE_NCCL_TESTS=DIR). Environment: NGPUS (-g, 1), B/E/F sizes (8/64M/4),
# N/W iterations and warm-ups (20/5). Outputs: OUT_DIR/{text,iter,json}/CONFIG.*,
# OUT_DIR/compare-*.txt, OUT_DIR/env.txt.
set -uo pipefail
OUTD=${1:?usage: record-nccl-tests-outputs.sh OUT_DIR}
NGPUS=${NGPUS:-1}; B=${B:-8}; E=${E:-64M}; F=${F:-4}; N=${N:-20}; W=${W:-5}
CC=$PWD/.stage/bin/commcanary; NT=$PWD/.stage/all_reduce_perf
[ -x "$CC" ] && [ -x "$NT" ] || { echo "need .stage/bin/commcanary and .stage/all_reduce_perf" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
declare -A ENV=(
  [default]=""
  [ring-ll]="NCCL_ALGO=Ring NCCL_PROTO=LL"
  [ring-ll128]="NCCL_ALGO=Ring NCCL_PROTO=LL128"
  [ring-simple]="NCCL_ALGO=Ring NCCL_PROTO=Simple"
)
mkdir -p "$OUTD/text" "$OUTD/iter" "$OUTD/json"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$NT" -h 2>&1 | head -2; } > "$OUTD/env.txt" 2>&1
for c in default ring-ll ring-ll128 ring-simple; do
  args=(-b "$B" -e "$E" -f "$F" -g "$NGPUS" -n "$N" -w "$W" -c 1)
  env ${ENV[$c]} timeout 120 "$NT" "${args[@]}" > "$OUTD/text/$c.txt" 2> "$OUTD/text/$c.err"
  env ${ENV[$c]} timeout 120 "$NT" "${args[@]}" -I 1 > "$OUTD/iter/$c.txt" 2> "$OUTD/iter/$c.err"
  env ${ENV[$c]} timeout 120 "$NT" "${args[@]}" -J "$OUTD/json/$c.json" > "$OUTD/json/$c.stdout" 2> "$OUTD/json/$c.err"
  echo "$c: text rc=$? $(wc -l < "$OUTD/text/$c.txt") lines"
done
rm -f "$OUTD"/*/*.err "$OUTD"/json/*.stdout 2>/dev/null
for k in text iter json; do
  "$CC" compare --proxy "$OUTD/$k" --truth "$OUTD/text" > "$OUTD/compare-$k.txt" 2>&1; echo "compare $k vs text: rc=$?"
done

#!/usr/bin/env bash
# replay-trace on the cuda backend with two binaries side by side, on one GPU: the one-rank fixture
# (tests/data/pytorch-one-rank-h200) replayed by A then B in each round, in every mode (paced by the
# gaps, back to back, the workload pace, the negative control that must fail), all with --check.
# Prints per mode and binary the exit status and the p50 host time of the all-reduces (median over
# rounds), B/A, and whether the two binaries' records agree once their times are removed.
# Usage: scripts/device/replay-ab.sh A_BIN B_BIN OUT_DIR [ROUNDS]   (from the repository root;
# BACKEND=cpu runs the same on MPI, a dry run without a GPU)
set -uo pipefail
A=$(realpath "${1:?A_BIN}")
B=$(realpath "${2:?B_BIN}")
OUT=$(realpath -m "${3:?OUT_DIR}")
ROUNDS=${4:-3}
BACKEND=${BACKEND:-cuda}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
T=$OUT/one-rank.json
zcat tests/data/pytorch-one-rank-h200/one-rank-trace.json.gz > "$T"
sha256sum "$A" "$B" > "$OUT/bins.sha256"
for round in $(seq 1 "$ROUNDS"); do
  for w in A B; do
    bin=${!w}
    for mode in gaps none workload corrupt; do
      case $mode in
        gaps) args=(--check) ;;
        none) args=(--check --pace none) ;;
        workload) args=(--check --pace workload) ;;
        corrupt) args=(--check --corrupt-rank 0) ;;
      esac
      d=$OUT/$mode-$w-$round
      timeout 120 mpirun -n 1 "$bin" replay-trace "$T" --backend "$BACKEND" "${args[@]}" -o "$d" > "$d.log" 2>&1
      echo "rc=$?" >> "$d.log"
    done
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def p50(log):
    m = re.search(r"x all_reduce .*time p50 ([0-9.]+) µs", open(log).read())
    return float(m.group(1)) if m else None
def records(d):
    try:
        v = json.load(open(f"{d}/replay-trace.rank-0.json"))
    except OSError:
        return None
    for r in v["records"]:
        for k in ("actual_gap_ns", "elapsed_ns", "device_start_ns", "device_end_ns"):
            r.pop(k, None)
    return v["records"]
print(f"{'mode':<9} {'A rc':>5} {'B rc':>5} {'A p50 µs':>9} {'B p50 µs':>9} {'B/A':>6}  records")
for mode in ("gaps", "none", "workload", "corrupt"):
    rc = {w: sorted({open(f"{out}/{mode}-{w}-{r}.log").read().strip().splitlines()[-1] for r in range(1, rounds + 1)})
          for w in "AB"}
    t = {w: [x for r in range(1, rounds + 1) if (x := p50(f"{out}/{mode}-{w}-{r}.log")) is not None] for w in "AB"}
    med = {w: statistics.median(t[w]) if t[w] else None for w in "AB"}
    ratio = f"{med['B'] / med['A']:.2f}" if med["A"] and med["B"] else "-"
    a, b = records(f"{out}/{mode}-A-1"), records(f"{out}/{mode}-B-1")
    same = "none written" if a is None and b is None else ("identical" if a == b else "differ")
    fmt = lambda v: f"{v:.1f}" if v is not None else "-"
    print(f"{mode:<9} {','.join(rc['A']):>5} {','.join(rc['B']):>5} {fmt(med['A']):>9} {fmt(med['B']):>9} {ratio:>6}  {same}")
PY

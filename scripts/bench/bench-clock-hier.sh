#!/usr/bin/env bash
# Benchmark (not a test) of hierarchical against flat clock calibration on
# the simulated Slurm cluster (scripts/dev/sim-cluster.md; issue 27 item 3).
# Brings up 4 simulated nodes, then for each shape NODESxRANKS_PER_NODE of
# 1x2, 2x2, 4x2 (nodes grow, ranks per node fixed) and 4x1, 4x4 (ranks per
# node grow, nodes fixed) runs `commcanary rank` through `srun --mpi=pmix`
# with --clock-sync flat and hierarchical interleaved (the order alternating
# between repetitions), REPS times each, under both --clock pingpong-only
# (every leg a ping-pong estimate: the simulated nodes share one kernel
# clock, which the default would take as exact) and the default --clock
# pingpong. Prints each run's calibration wall time (join's
# calibration_wall_ns: both windows, slowest rank) and widest bound, then
# per shape the medians and the flat/hierarchical ratio of the medians and
# the median of the per-repetition ratios. Then one whole node (sim-n4,
# ranks 6 and 7 of 4x2) under --inject-clock, both topologies: the
# estimate, the truth, the error and the composed bound of each injected
# rank. Then down, checking nothing is left.
#
# With BIN_BEFORE set, every run is made by both binaries, BIN_BEFORE and
# BIN interleaved with the topologies (the order rotating between
# repetitions), and the summary adds each binary's time against the nodes
# (1x2, 2x2, 4x2) and against the ranks per node (4x1, 4x2, 4x4) as ratios
# to the smallest shape, and BIN's time over BIN_BEFORE's, paired.
#
# Usage, as root from the repository root: bash scripts/bench/bench-clock-hier.sh OUT
# (REPS=3 by default; BIN=target/debug/commcanary, which the dev profile
# optimises; BIN_BEFORE unset; SAMPLES=200 ping-pongs per window and rank,
# the default).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:?usage: bench-clock-hier.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/log.txt") 2>&1
SIM=$ROOT/scripts/dev/sim-cluster.sh
STATE=${SIM_STATE:-/run/sim-cluster}
BIN=${BIN:-$ROOT/target/debug/commcanary}
BIN_BEFORE=${BIN_BEFORE:-}
REPS=${REPS:-3}
SAMPLES=${SAMPLES:-200}
die() { echo "bench-clock-hier: FAILED: $*" >&2; exit 1; }
[ -e "$STATE" ] && die "$STATE exists: a simulated cluster is already up; bring it down first (bash scripts/dev/sim-cluster.sh down)"
[ -x "$BIN" ] || die "$BIN: build it first (cargo build)"
[ -z "$BIN_BEFORE" ] || [ -x "$BIN_BEFORE" ] || die "BIN_BEFORE=$BIN_BEFORE is not an executable"
. scripts/env.sh
{
  echo "commit $(git rev-parse HEAD) $(git status --porcelain | wc -l) uncommitted paths"
  echo "binary $BIN $("$BIN" --version)"
  [ -z "$BIN_BEFORE" ] || echo "binary before $BIN_BEFORE $("$BIN_BEFORE" --version)"
  echo "nproc $(nproc); $(lscpu | grep 'Model name' | sed 's/  */ /g')"
  echo "loadavg at start $(cat /proc/loadavg)"
  echo "REPS=$REPS SAMPLES=$SAMPLES"
} | tee "$OUT/machine.txt"

cleanup() {
  local rc=$?
  set +e
  if [ -d "$STATE" ]; then
    bash "$SIM" down || { echo "bench-clock-hier: FAILED: down left something behind"; rc=1; }
  fi
  echo "loadavg at end $(cat /proc/loadavg)" | tee -a "$OUT/machine.txt"
  exit "$rc"
}
trap cleanup EXIT

bash "$SIM" up 4
eval "$(bash "$SIM" env)"
RUNS=$OUT/runs
mkdir -p "$RUNS"

# run ID NODES PPN SYNC CLOCK [ARGS…]: one run by $RUN_BIN (default BIN, labelled after), its join, one line of results.tsv
run() {
  local id=$1 nodes=$2 ppn=$3 sync=$4 clock=$5
  local bin=${RUN_BIN:-$BIN} label=${RUN_LABEL:-after}
  shift 5
  # -n with block distribution: --ntasks-per-node above a simulated node's 2 CPUs is refused even with --overcommit
  timeout 300 srun --overcommit --mpi=pmix --kill-on-bad-exit=1 -N "$nodes" -n $((nodes * ppn)) -m block \
    "$bin" rank -q --backend cpu --phases blocking --tokens 2 --model synthetic --layers 2 --sizes 4KiB \
    --clock "$clock" --clock-sync "$sync" --clock-samples "$SAMPLES" --run-id "$id" --out "$RUNS" "$@" >/dev/null \
    || die "run $id failed"
  "$bin" join --json "$RUNS/$id" >"$RUNS/$id.join.json" || die "join $id refused"
  python3 - "$RUNS/$id.join.json" "$id" "$nodes" "$ppn" "$clock" "$label" <<'PY' | tee -a "$OUT/results.tsv"
import json, sys
s = json.load(open(sys.argv[1]))
id_, nodes, ppn, clock, label = sys.argv[2:]
hosts = {c["host"] for c in s["clocks"]}
assert len(hosts) == int(nodes), f"{id_}: {len(hosts)} hosts, not {nodes}"
per = [sum(c["host"] == h for c in s["clocks"]) for h in hosts]
assert per == [int(ppn)] * int(nodes), f"{id_}: ranks per host {per}, not {ppn}"
paths = sorted({c.get("path") for c in s["clocks"]})
print("\t".join(str(x) for x in [id_, label, nodes, ppn, s["world_size"], clock, s["clock_sync"], f'{s["calibration_wall_ns"] / 1e6:.3f}',
      f'{max(c["bound_us"] for c in s["clocks"]):.3f}', ",".join(paths)]))
PY
}

printf 'id\tbinary\tnodes\tppn\tranks\tclock\tsync\tcalib_ms\tmax_bound_us\tpaths\n' | tee "$OUT/results.tsv"
variants="after:flat after:hierarchical"
[ -z "$BIN_BEFORE" ] || variants="before:flat after:flat before:hierarchical after:hierarchical"
for shape in 1x2 2x2 4x2 4x1 4x4; do
  nodes=${shape%x*} ppn=${shape#*x}
  for clock in pingpong-only pingpong; do
    for rep in $(seq 1 "$REPS"); do
      # rotate the order of the variants by one place per repetition
      set -- $variants
      for _ in $(seq 2 "$rep"); do set -- "${@:2}" "$1"; done
      for v in "$@"; do
        label=${v%%:*} sync=${v#*:}
        bin=$BIN
        [ "$label" = before ] && bin=$BIN_BEFORE
        RUN_BIN=$bin RUN_LABEL=$label run "$shape-$clock-$label-$sync-$rep" "$nodes" "$ppn" "$sync" "$clock"
      done
    done
  done
done

echo
echo "== calibration wall time (ms, median of $REPS) and widest bound (us, median), flat vs hierarchical, measured interleaved"
python3 - "$OUT/results.tsv" <<'PY' | tee "$OUT/summary.txt"
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rep = lambda r: r["id"].rsplit("-", 1)[1]
labels = [l for l in ("before", "after") if any(r["binary"] == l for r in rows)]
med = lambda g, f: st.median([float(r[f]) for r in g]) if g else float("nan")
pick = lambda **k: [r for r in rows if all(r[a] == b for a, b in k.items())]
print(f'{"binary":>6} {"shape":>6} {"ranks":>5} {"clock":>13} {"flat ms":>9} {"hier ms":>9} {"flat/hier":>9} {"paired":>7} {"flat bnd":>9} {"hier bnd":>9}')
shapes = []
for r in rows:
    if (r["nodes"], r["ppn"], r["clock"]) not in shapes:
        shapes.append((r["nodes"], r["ppn"], r["clock"]))
for label in labels:
    for nodes, ppn, clock in shapes:
        f = pick(binary=label, nodes=nodes, ppn=ppn, clock=clock, sync="flat")
        h = pick(binary=label, nodes=nodes, ppn=ppn, clock=clock, sync="hierarchical")
        pairs = {}
        for r in f + h:
            pairs.setdefault(rep(r), {})[r["sync"]] = float(r["calib_ms"])
        paired = st.median([p["flat"] / p["hierarchical"] for p in pairs.values() if len(p) == 2])
        print(f'{label:>6} {nodes + "x" + ppn:>6} {f[0]["ranks"]:>5} {clock:>13} {med(f, "calib_ms"):9.2f} {med(h, "calib_ms"):9.2f} '
              f'{med(f, "calib_ms") / med(h, "calib_ms"):9.2f} {paired:7.2f} {med(f, "max_bound_us"):9.3f} {med(h, "max_bound_us"):9.3f}')
print()
print("growth: median calibration ms of each shape, and its ratio to the first shape of its series (nodes: 1x2 2x2 4x2; ranks per node: 4x1 4x2 4x4)")
for clock in ("pingpong-only", "pingpong"):
    for label in labels:
        for sync in ("flat", "hierarchical"):
            for series in (("1", "2"), ("2", "2"), ("4", "2")), (("4", "1"), ("4", "2"), ("4", "4")):
                ms = [med(pick(binary=label, nodes=n, ppn=p, clock=clock, sync=sync), "calib_ms") for n, p in series]
                name = "nodes" if series[0][0] == "1" else "ranks/node"
                shown = " ".join(f"{n}x{p} {m:8.1f} ms ({m / ms[0]:5.2f}x)" for (n, p), m in zip(series, ms))
                print(f"{clock:>13} {label:>6} {sync:>12} {name:>10}: {shown}")
if len(labels) == 2:
    print()
    print("after over before, paired by repetition (median of the per-repetition ratios)")
    for sync in ("flat", "hierarchical"):
        for nodes, ppn, clock in shapes:
            pairs = {}
            for r in pick(nodes=nodes, ppn=ppn, clock=clock, sync=sync):
                pairs.setdefault(rep(r), {})[r["binary"]] = float(r["calib_ms"])
            ratios = [p["after"] / p["before"] for p in pairs.values() if len(p) == 2]
            print(f'{sync:>12} {nodes + "x" + ppn:>6} {clock:>13}: after/before {st.median(ratios):6.3f}  (each: {", ".join(f"{x:.3f}" for x in ratios)})')
PY

echo
echo "== whole node sim-n4 (ranks 6, 7 of 4x2) offset 200 ms, 50 ppm: estimate against truth"
printf 'id\trank\tpath\tleader\testimate_us\ttruth_us\terror_us\tbound_us\tleg_bounds_us\twithin\n' | tee "$OUT/injection.tsv"
for rep in $(seq 1 "$REPS"); do
  for sync in flat hierarchical; do
    id=inject-$sync-$rep
    run "$id" 4 2 "$sync" pingpong --inject-clock rank=6,offset_us=200000,drift_ppm=50 --inject-clock rank=7,offset_us=200000,drift_ppm=50 >/dev/null
    python3 - "$RUNS/$id.join.json" "$id" <<'PY' | tee -a "$OUT/injection.tsv"
import json, sys
s = json.load(open(sys.argv[1]))
for c in s["clocks"]:
    assert c["offset_within_bound"] is True, c
    if c["rank"] in (6, 7):
        legs = f'{c["leader_leg_bound_us"]:.3f}+{c["leader_bound_us"]:.3f}' if c.get("path") == "via_leader" else "-"
        e = c["offset_us"] - c["injected_offset_us"]
        print("\t".join(str(x) for x in [sys.argv[2], c["rank"], c.get("path"), c.get("leader", "-"), f'{c["offset_us"]:.3f}', f'{c["injected_offset_us"]:.3f}',
              f"{e:.3f}", f'{c["bound_us"]:.3f}', legs, abs(e) <= c["bound_us"] + 0.004]))
PY
  done
done
echo
echo "bench-clock-hier: done ($OUT)"

#!/usr/bin/env bash
# Lossless canary of `synth --events 100 --seed 7` verified against its source
# (no baselines) with a canary spec, beside N busy loops for the first LOAD_S
# seconds; prints each variant's state and the per-round job medians (ms) of
# the replay pass, the statistic the ranking check pairs by round.
#   bash results/2026-12-03-canary-known-bad-under-load/rerun.sh SPEC OUT LOAD_S N
set -u
cd "$(dirname "$0")/../.."
. scripts/env.sh
B=${COMMCANARY:-target/debug/commcanary}; spec=$1; d=$2; load=$3; n=$4
rm -rf "$d"; mkdir -p "$d"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
$B synth --events 100 --seed 7 -o "$d/synth.json" > /dev/null
$B canary compile "$d/synth.json" --lossless -o "$d/synth.canary.json" > /dev/null
pids=""
for _ in $(seq "$n"); do timeout "$load" bash -c 'while :; do :; done' & pids="$pids $!"; done
s=$(date +%s)
$B canary verify "$d/synth.json" "$d/synth.canary.json" --configs "$spec" -o "$d/v" --json > "$d/v.json" 2> "$d/v.err"
echo "canary verify: exit $? after $(( $(date +%s) - s )) s"
for p in $pids; do kill "$p" 2> /dev/null; done
wait 2> /dev/null
python3 - "$B" "$d" <<'PY'
import glob, json, statistics, subprocess, sys
B, d = sys.argv[1], sys.argv[2]
r = json.load(open(f"{d}/v.json"))
for c in r["candidates"]:
    failed = [x["name"] for x in c["checks"] if not x["passed"]]
    print(c["variant"], c["state"], "failed:", failed)
def job_median_ms(run):
    v = []
    for s in sorted(glob.glob(run + "/rank-*.shard")):
        j = json.loads(subprocess.run([B, "inspect", s], capture_output=True, text=True).stdout)
        v += [(t["end_ns"] - t["start_ns"]) / 1e6 for t in j["body"]["tokens"] if t["phase"] == "replay" and not t["warmup"]]
    return statistics.median(v)
for var in ["source", "canary"]:
    for cfg in r["configs"]:
        runs = sorted(glob.glob(f"{d}/v/campaign/runs/r*-{var}.{cfg}-a1"))
        print(f"{var:7s} {cfg:18s}", " ".join(f"{job_median_ms(x):8.1f}" for x in runs))
PY

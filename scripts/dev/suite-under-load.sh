#!/usr/bin/env bash
# The whole test suite beside a background CPU load, several copies side by
# side on one host, each copy on its own 2 CPUs shared with its own busy loops
# (issue 31: "run the whole suite 5 times beside a background CPU load").
#
#   bash scripts/dev/suite-under-load.sh stage
#       here (needs cargo): build the debug test binaries and stage them,
#       stripped, with the binary under test, in .stage/suite/ (git-ignored).
#   bash scripts/dev/suite-under-load.sh start OUT COPIES [LOOPS]
#       on a host with OpenMPI 4.x and 2 x COPIES CPUs (no cargo needed), from
#       the repository root: start COPIES copies in the background (setsid),
#       copy k pinned to CPUs 2k and 2k+1 with LOOPS busy loops (default 1)
#       pinned to the same two; each copy runs every staged binary in turn
#       (SKIP="a b": leave out the binaries so named; ONLY="a b": run only
#       those).
#   bash scripts/dev/suite-under-load.sh run OUT COPIES [LOOPS]
#       `start`, then wait in the foreground until every copy is done or
#       BUDGET_S seconds (default 540) have passed, then `status`. For a
#       runner whose machine is given back soon after a command returns (the
#       copies would die with it): one self-contained command per group of
#       binaries, e.g. ONLY=canary, then SKIP=canary.
#   bash scripts/dev/suite-under-load.sh pool --out OUT [--copies 5]
#         [--slots 8] [--parts 2 --part K] [--budget-s 540]
#       the copies as one pool of jobs over 2-CPU slots, each slot with its
#       own busy loop, the slow binaries split one job per test, dealt into
#       parts that each fit one command (scripts/dev/suite_pool.py says how).
#       Estimates: IDLE_S below, seconds per binary on an idle 2-core VM.
#   bash scripts/dev/suite-under-load.sh pool-start OUT [pool options]
#   bash scripts/dev/suite-under-load.sh pool-wait OUT SECONDS
#       the pool in the background (setsid), so that one run can outlast one
#       command of a runner that keeps the machine while commands follow each
#       other closely: `pool-start` returns at once, `pool-wait` waits until
#       the pool has written OUT/summary.txt or SECONDS have passed, printing
#       the jobs done, those not passed and the load; exit 0 only when done.
#   bash scripts/dev/suite-under-load.sh pool-collect OUT DEST
#       copy the pool's results and the logs of the jobs that did not pass
#       into DEST (a runner's $OUT), as each command ends.
#   bash scripts/dev/suite-under-load.sh status OUT
#       one line per copy and binary: exit status and wall seconds, then a
#       summary. A copy is done when its `done` file exists.
#
# The test binaries were built with CARGO_MANIFEST_DIR set to the checkout
# they were built in; `start` links that path to this checkout when it is
# free. GPUs are hidden (CUDA_VISIBLE_DEVICES=) so the suite takes the CPU
# paths a CI machine takes, and Open MPI's binding is off so that ranks keep
# the copy's two CPUs.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Seconds per test binary in one fresh-clone `.ci/run` on the 2-core VM (idle).
IDLE_S=${IDLE_S:-'{"lib":5.1,"campaign":18.3,"canary":216,"cli_conventions":1.4,"clock_hier":1.4,"clock_skew":11.7,"commtrace":8.1,"doctor":1.1,"hardware_contract":2.6,"join_refusals":1.0,"model_cpu":2.5,"refusals_never_hang":18.2,"refusals_keep_data":30.1,"ranges":2.2,"rank_cpu":5.2,"readme":76.6,"report":51.4,"sweep_kinds":2.6,"validate_cpu":144.4,"canary.a_lossless_canary_verifies_behaviorally_and_simple_samples_do_not":214,"report.the_demo_campaign_report_and_its_plots":51}'}
cmd=${1:?stage, start or status}
# The test binaries find the checkout they were built in, and the binary
# under test in its target/debug.
prepare() {
  built=$(cat .stage/suite/MANIFEST_DIR)
  if [ "$built" != "$PWD" ]; then
    if [ -e "$built" ]; then
      [ "$(readlink -f "$built")" = "$PWD" ] || { echo "$built exists and is not this checkout" >&2; exit 1; }
    else
      mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"
    fi
  fi
  mkdir -p target/debug && cp .stage/suite/commcanary.bin target/debug/commcanary
}
case "$cmd" in
stage)
  . scripts/env.sh
  rm -rf .stage/suite && mkdir -p .stage/suite
  cargo test --locked --lib --bins --tests --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["target"]["kind"][0], m["executable"])' |
    while read -r name kind exe; do
      [ "$name" = gpu_cuda ] && continue
      [ "$kind" = bin ] && name="bin-$name"
      [ "$kind" = lib ] && name="lib"
      cp "$exe" ".stage/suite/$name" && strip --strip-debug ".stage/suite/$name"
    done
  cp target/debug/commcanary .stage/suite/commcanary.bin && strip --strip-debug .stage/suite/commcanary.bin
  pwd >.stage/suite/MANIFEST_DIR
  git rev-parse HEAD >.stage/suite/COMMIT
  git status --porcelain --untracked-files=no | grep -q . && echo dirty >>.stage/suite/COMMIT || true
  du -sh .stage/suite >&2
  ;;
start)
  out=${2:?OUT}
  copies=${3:?COPIES}
  loops=${4:-1}
  prepare
  mkdir -p "$out"
  for k in $(seq 0 $((copies - 1))); do
    cpus="$((2 * k)),$((2 * k + 1))"
    d="$out/copy$k"
    mkdir -p "$d"
    setsid bash -c '
      d=$1 cpus=$2 loops=$3
      for i in $(seq 1 "$loops"); do taskset -c "$cpus" bash -c "while :; do :; done" & done
      echo "cpus $cpus, $loops busy loop(s), started $(date -u +%FT%TZ)" >"$d/info"
      for t in .stage/suite/*; do
        n=$(basename "$t"); case "$n" in *.bin|MANIFEST_DIR|COMMIT) continue;; esac
        case " ${SKIP:-} " in *" $n "*) continue;; esac
        [ -z "${ONLY:-}" ] || case " $ONLY " in *" $n "*) ;; *) continue;; esac
        s=$(date +%s.%N)
        rc=0
        taskset -c "$cpus" env CUDA_VISIBLE_DEVICES= OMPI_MCA_hwloc_base_binding_policy=none \
          OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR="$d/tmp" \
          bash -c "mkdir -p \"$d/tmp\" && \"$t\"" >"$d/$n.log" 2>&1 || rc=$?
        e=$(date +%s.%N)
        printf "%s rc=%s wall_s=%.1f load=%s\n" "$n" "$rc" "$(awk "BEGIN{print $e - $s}")" "$(cut -d" " -f1 /proc/loadavg)" >>"$d/results"
        rm -rf "$d/tmp"
      done
      date -u +%FT%TZ >"$d/done"
      kill $(jobs -p) 2>/dev/null
    ' _ "$d" "$cpus" "$loops" </dev/null >"$d/driver.log" 2>&1 &
  done
  echo "started $copies copies in $out" >&2
  ;;
run)
  out=${2:?OUT}
  copies=${3:?COPIES}
  bash "$0" start "$out" "$copies" "${4:-1}"
  end=$(($(date +%s) + ${BUDGET_S:-540}))
  while [ "$(ls "$out"/copy*/done 2>/dev/null | wc -l)" -lt "$copies" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  bash "$0" status "$out"
  [ "$(ls "$out"/copy*/done 2>/dev/null | wc -l)" -eq "$copies" ] || { echo "not every copy finished within BUDGET_S=${BUDGET_S:-540}" >&2; exit 3; }
  ;;
pool)
  prepare
  shift
  exec python3 scripts/dev/suite_pool.py --estimates "$IDLE_S" "$@"
  ;;
pool-start)
  out=${2:?OUT}
  shift 2
  prepare
  mkdir -p "$out"
  setsid nohup python3 scripts/dev/suite_pool.py --estimates "$IDLE_S" --out "$out" "$@" </dev/null >"$out/pool.log" 2>&1 &
  echo "pool started in $out (pid $!)" >&2
  ;;
pool-wait)
  out=${2:?OUT}
  end=$(($(date +%s) + ${3:?SECONDS}))
  while [ ! -e "$out/summary.txt" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  head -1 "$out/pool.log" 2>/dev/null || true
  echo "$(wc -l <"$out/results.tsv" 2>/dev/null || echo 0) jobs done, load $(cut -d" " -f1-3 /proc/loadavg)"
  awk -F'\t' '$4 != "0"' "$out/results.tsv" 2>/dev/null | sed 's/^/NOT PASSED /' || true
  [ -e "$out/summary.txt" ] && cat "$out/summary.txt"
  ;;
pool-collect)
  out=${2:?OUT}
  dest=${3:?DEST}
  mkdir -p "$dest"
  cp "$out"/results.tsv "$out"/pool.log "$out"/summary.txt "$dest/" 2>/dev/null || true
  awk -F'\t' '$4 != "0" { n = $2; if ($3 != "-") n = n "." $3; print "copy" $1 "/" n ".log" }' "$out/results.tsv" 2>/dev/null |
    while read -r f; do mkdir -p "$dest/$(dirname "$f")" && cp "$out/$f" "$dest/$f" 2>/dev/null || true; done
  uptime >"$dest/uptime.txt"
  ;;
status)
  out=${2:?OUT}
  for d in "$out"/copy*; do
    echo "== $(basename "$d"): $(cat "$d/info" 2>/dev/null); done: $(cat "$d/done" 2>/dev/null || echo no)"
    cat "$d/results" 2>/dev/null || true
  done
  echo "== failed binaries (rc != 0):"
  cat "$out"/copy*/results 2>/dev/null | grep -v " rc=0 " || echo none
  ;;
*)
  echo "usage: $0 stage | start OUT COPIES [LOOPS] | run OUT COPIES [LOOPS] | pool --out OUT ... | pool-start OUT ... | pool-wait OUT SECONDS | status OUT" >&2
  exit 2
  ;;
esac

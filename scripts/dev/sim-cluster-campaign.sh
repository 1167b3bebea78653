#!/usr/bin/env bash
# Multi-node runs and campaigns on the simulated Slurm cluster (issue 27,
# items 1 and 2): brings up 4 nodes (scripts/dev/sim-cluster.sh up 4), then
#   1. slurm/rank.sbatch: one run of 4 nodes x 2 ranks with the ranks of one
#      whole node (sim-n4: ranks 6, 7) under --inject-clock; join must show 4
#      host names, 2 ranks each, and recover the injected offset within its bound;
#   2. slurm/campaign-allocation.sbatch: a whole campaign in one allocation
#      (4 nodes x 2 ranks, srun --mpi=pmix, CPU backend, tiny workload);
#   3. slurm/campaign-array.sbatch: the same spec as a job array, one cell per
#      task, then exec --resume (must launch nothing), select;
# and for both campaigns verify and analyze must pass, the injected-skew
# control (rank 6 delayed, on the node whose clock is offset) must behave,
# and `join` of a run must show 4 distinct host names. Then down, checking
# that nothing is left. Fails loudly (non-zero, with the reason) at the first
# check that does not hold.
#
# Usage, as root from the repository root: bash scripts/dev/sim-cluster-campaign.sh OUT
# OUT receives the log, timings, host names seen, both campaigns and the
# daemons' logs. Not part of CI (.ci/run, scripts/test.sh): it needs root for
# network namespaces, a bridge and system daemons, which CI lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:?usage: sim-cluster-campaign.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/log.txt") 2>&1
SIM=$ROOT/scripts/dev/sim-cluster.sh
STATE=${SIM_STATE:-/run/sim-cluster}
BIN=$ROOT/target/release/commcanary
T0=$SECONDS
: >"$OUT/timings.tsv"
die() { echo "sim-cluster-campaign: FAILED: $*" >&2; exit 1; }
step() { STEP=$1; STEP_T=$SECONDS; echo; echo "== $1 ($(date -u +%H:%M:%S))"; }
done_step() { printf '%s\t%d\n' "$STEP" $((SECONDS - STEP_T)) >>"$OUT/timings.tsv"; }

[ -e "$STATE" ] && die "$STATE exists: a simulated cluster is already up; bring it down first (bash scripts/dev/sim-cluster.sh down)"
step "build"
bash scripts/setup.sh
. scripts/env.sh
"$BIN" --version
git rev-parse HEAD >"$OUT/commit.txt"
git status --porcelain >>"$OUT/commit.txt"
done_step

cleanup() {
  local rc=$?
  set +e
  if [ -d "$STATE" ]; then
    mkdir -p "$OUT/daemon-logs"
    cp -r "$STATE/log/." "$OUT/daemon-logs/" 2>/dev/null
    cp "$STATE/etc/slurm.conf" "$OUT/daemon-logs/" 2>/dev/null
    step "down"
    bash "$SIM" down || { echo "sim-cluster-campaign: FAILED: down left something behind"; rc=1; }
    done_step
  fi
  printf 'total\t%d\n' $((SECONDS - T0)) >>"$OUT/timings.tsv"
  echo
  if [ "$rc" = 0 ]; then echo "sim-cluster-campaign: PASSED in $((SECONDS - T0)) s ($OUT)"; else echo "sim-cluster-campaign: FAILED (exit $rc) after $((SECONDS - T0)) s ($OUT)"; fi
  exit "$rc"
}
trap cleanup EXIT

step "up 4"
bash "$SIM" up 4
eval "$(bash "$SIM" env)"
bash "$SIM" status | tee "$OUT/cluster-status.txt"
srun --mpi=list >>"$OUT/cluster-status.txt" 2>&1
done_step

# join RUN_DIR: 4 distinct host names, 2 ranks each, in the shard headers
# (join prints one clock line per rank: "rank N HOST offset …").
check_hosts() {
  local run=$1 what=$2 joined hosts
  joined=$("$BIN" join "$run")
  hosts=$(echo "$joined" | awk '$1 == "rank" && $4 == "offset" {print $3}')
  echo "$what: ranks per host: $(echo "$hosts" | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')" | tee -a "$OUT/hosts-seen.txt"
  [ "$(echo "$hosts" | sort -u | wc -l)" = 4 ] || die "$what: join shows $(echo "$hosts" | sort -u | wc -l) host names, not 4"
  [ "$(echo "$hosts" | sort | uniq -c | awk '$1 != 2' | wc -l)" = 0 ] || die "$what: not 2 ranks on every host"
  [ "$(echo "$hosts" | sed -n 7,8p | sort -u)" = "sim-n4" ] || die "$what: ranks 6 and 7 are not on sim-n4"
}

# join RUN_DIR: ranks 6 and 7 carry the injected clock, and the calibrated
# offset lies within its bound of the injected one; every other rank reads
# rank 0's kernel clock (offset 0).
check_clock() {
  local run=$1 what=$2
  "$BIN" join "$run" | awk -v what="$what" '
    $1 == "rank" && $4 == "offset" {
      r = $2; est = $5; bound = $8; inj = ""
      for (i = 1; i <= NF; i++) if ($i == "injected") inj = $(i + 1)
      if (r == 6 || r == 7) {
        if (inj == "") { print what ": rank " r " shows no injected clock"; bad = 1; next }
        d = est - inj; if (d < 0) d = -d
        printf "%s: rank %d on %s: injected %s us, estimated %s us +- %s us (error %.3f us)\n", what, r, $3, inj, est, bound, d
        if (d > bound) { print what ": rank " r ": the injected offset is outside the bound"; bad = 1 }
      } else if (est + 0 != 0) { print what ": rank " r " offset " est " (expected 0, rank 0 kernel clock)"; bad = 1 }
      n++
    }
    END { if (n != 8) { print what ": " n " clock lines, not 8"; bad = 1 } exit bad }' | tee -a "$OUT/clock-check.txt"
}

step "rank.sbatch: one run, 4 nodes x 2 ranks, node sim-n4 clock offset 200 ms + 50 ppm"
mkdir -p "$OUT/rank"
COMMCANARY_BIN=$BIN COMMCANARY_OUT=$OUT/rank sbatch --wait --nodes=4 --ntasks-per-node=2 --cpus-per-task=1 \
  --output="$OUT/rank/slurm-%j.out" slurm/rank.sbatch --backend cpu --phases isolated,blocking --tokens 8 --layers 4 --iters 10 \
  --model synthetic --sizes 64KiB --inject-clock rank=6,offset_us=200000,drift_ppm=50 --inject-clock rank=7,offset_us=200000,drift_ppm=50
RUN=$(ls -d "$OUT"/rank/slurm-*/ | head -1)
check_hosts "$RUN" "rank.sbatch"
check_clock "$RUN" "rank.sbatch"
"$BIN" join "$RUN" >"$OUT/rank/join.txt"
done_step

cat >"$OUT/spec.toml" <<'SPEC'
# 4 simulated nodes x 2 ranks (scripts/dev/sim-cluster-campaign.sh). Ranks 6 and 7
# are node sim-n4 (srun's block distribution). nbc-ring-n4clock is nbc-ring
# with node sim-n4's clock offset by 200 ms and running 50 ppm fast: a pure
# measurement distortion that calibration must remove, so it is nbc-ring's
# A/A partner. nbc-ring-delayed also delays rank 6 (on that node) by 50 ms
# before every 2nd collective: the known-bad and injected-skew control, judged
# through the offset clock. The sizes make the control sharp: skew from this
# 2-core machine's scheduling stays below ~20 ms < 50 ms (no false alarm),
# and an offset left uncorrected (200 ms > 50 ms) would put every collective
# of node sim-n4 above the line. A delayed collective is missed when rank 6
# was ready earlier than every other rank by more than its sleep's overshoot
# (scheduling noise, a few % here): 32 tokens x 4 layers give ~69 delayed
# collectives per job, so that the control's 90% is judged on enough of them.
name = "sim-cluster"
backend = "cpu"
ranks = 8
repetitions = 3
seed = 20261202
blind = false

[launcher]
kind = "srun"
args = ["--mpi=pmix", "--kill-on-bad-exit=1"]

[workload]
phases = "isolated,blocking"
tokens = 32
layers = 4
sizes = "64KiB"
iters = 10
extra_args = ["--check", "2"]

[analysis]
tie_policy = "interval"

[controls]
aa = [["nbc-ring", "nbc-ring-n4clock"]]
known_bad = ["nbc-ring-delayed"]

[[configs]]
name = "nbc-ring"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }

[[configs]]
name = "nbc-binomial"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }

[[configs]]
name = "nbc-ring-n4clock"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }
args = ["--inject-clock", "rank=6,offset_us=200000,drift_ppm=50", "--inject-clock", "rank=7,offset_us=200000,drift_ppm=50"]

[[configs]]
name = "nbc-ring-delayed"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }
args = ["--inject-delay", "rank=6,every=2,us=50000", "--inject-clock", "rank=6,offset_us=200000,drift_ppm=50", "--inject-clock", "rank=7,offset_us=200000,drift_ppm=50"]
SPEC

# verify, analyze, then the checks common to both campaigns
finish_campaign() {
  local dir=$1 what=$2 analysis run
  "$BIN" campaign verify "$dir" | tee "$dir.verify.txt" || die "$what: verify refused"
  analysis=$("$BIN" campaign analyze "$dir") || { echo "$analysis"; die "$what: analyze failed"; }
  echo "$analysis" | tee "$dir.analyze.txt"
  # one injected-skew control per delayed job: every one must behave
  [ "$(echo "$analysis" | grep -c "^control injected-skew behaved")" = 3 ] || die "$what: not every injected-skew control (3 jobs) behaved"
  echo "$analysis" | grep -q "^control a-a behaved \[blocking\]" || die "$what: the A/A control (nbc-ring vs nbc-ring-n4clock) did not behave"
  echo "$analysis" | grep -E "^control " | sed "s|^|$what: |" >>"$OUT/controls.txt"
  for run in "$dir"/runs/*/; do check_hosts "$run" "$what $(basename "$run")"; done
  run=$(ls -d "$dir"/runs/*nbc-ring-n4clock*/ | head -1)
  check_clock "$run" "$what $(basename "$run")"
  "$BIN" join "$run" >"$dir.join-n4clock.txt"
}

step "campaign-allocation.sbatch: the whole campaign in one allocation"
"$BIN" campaign plan "$OUT/spec.toml" -o "$OUT/a"
COMMCANARY_BIN=$BIN sbatch --wait --nodes=4 --ntasks-per-node=2 --output="$OUT/a.slurm.out" \
  slurm/campaign-allocation.sbatch "$OUT/a" || { cat "$OUT/a.slurm.out"; die "campaign-allocation.sbatch failed"; }
cat "$OUT/a.slurm.out"
finish_campaign "$OUT/a" "allocation"
done_step

step "campaign-array.sbatch: one cell per array task"
"$BIN" campaign plan "$OUT/spec.toml" -o "$OUT/b"
N=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["schedule"]))' "$OUT/b/manifest.json")
COMMCANARY_BIN=$BIN sbatch --wait --array="1-$N%1" --nodes=4 --ntasks-per-node=2 --output="$OUT/b.slurm-%a.out" \
  slurm/campaign-array.sbatch "$OUT/b" || { tail -n 5 "$OUT"/b.slurm-*.out; die "campaign-array.sbatch failed"; }
before=$(wc -l <"$OUT/b/attempts.jsonl")
"$BIN" campaign exec "$OUT/b" --resume
[ "$(wc -l <"$OUT/b/attempts.jsonl")" = "$before" ] || die "array: exec --resume had to rerun cells the array left"
[ "$before" = "$N" ] || die "array: $before attempts for $N cells"
"$BIN" campaign select "$OUT/b"
finish_campaign "$OUT/b" "array"
done_step

echo
echo "host names seen (join of every run):"
sed "s/.*ranks per host: //" "$OUT/hosts-seen.txt" | sort | uniq -c
cat "$OUT/timings.tsv"

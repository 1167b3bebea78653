#!/usr/bin/env bash
# Times `campaign analyze` on one CPU campaign of 8 configurations x 5 rounds x 4 ranks x all six
# phases (issue 27 item 6: under 3 s on 2 cores), for one binary, or two side by side in one run.
#
#   AFTER=BIN [BEFORE=BIN] [REPS=7] [WORK=DIR] [TOKENS=16] [LAYERS=4] [ITERS=10] bash scripts/bench/bench-analyze.sh
#
# AFTER defaults to target/release/commcanary (build it first: cargo build --release --locked).
# The campaign is planned, executed and selected once, by BEFORE when given, else AFTER, into
# WORK/campaign (tokens x layers per job as given; the 8 configurations cycle over libnbc's three
# all-reduce algorithms: this measures the analysis, not a ranking). A WORK that already holds a
# selected campaign is reused as it is. Each repetition then runs `campaign analyze` once per
# binary, BEFORE first, each into a fresh --report-dir, so load that drifts during the run falls on
# both. Printed: every repetition's wall and CPU (user + system) seconds, the medians, and
# after/before ratios of the medians; the load average before and after; and whether the two
# binaries' report.json (its "producer" field masked: it names the binary), plots and printed
# tables are byte-identical. A benchmark: it prints numbers and asserts nothing. Needs OpenMPI
# (scripts/env.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
AFTER=$(realpath "${AFTER:-target/release/commcanary}")
BEFORE=${BEFORE:+$(realpath "$BEFORE")}
REPS=${REPS:-7}
TOKENS=${TOKENS:-16} LAYERS=${LAYERS:-4} ITERS=${ITERS:-10}
WORK=${WORK:-$(mktemp -d /tmp/bench-analyze.XXXXXX)}
mkdir -p "$WORK"
C="$WORK/campaign"
MAKER=${BEFORE:-$AFTER}
if [ ! -f "$C/selection.json" ]; then
  rm -rf "$C"
  {
    cat <<TOML
name = "bench-analyze"
backend = "cpu"
ranks = 4
repetitions = 5
seed = 1
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "isolated,blocking,async,replay,fill,overlap"
tokens = $TOKENS
layers = $LAYERS
sizes = "64KiB,128KiB,256KiB"
iters = $ITERS
[analysis]
tie_policy = "interval"
min_effect_pct = 2.0
TOML
    algs=(1 2 4)
    for i in 1 2 3 4 5 6 7 8; do
      printf '[[configs]]\nname = "c%d"\nenv = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "%s" }\n' "$i" "${algs[$(((i - 1) % 3))]}"
    done
  } > "$WORK/spec.toml"
  t0=$(date +%s)
  "$MAKER" campaign plan "$WORK/spec.toml" -o "$C" > /dev/null
  "$MAKER" campaign exec "$C" > /dev/null
  "$MAKER" campaign select "$C" > /dev/null
  echo "campaign made by $("$MAKER" --version) in $(($(date +%s) - t0)) s"
fi
# the workload as the campaign's manifest froze it (a reused WORK may hold another size than the defaults)
size=$(python3 - "$C/manifest.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["spec"]["workload"]
print(f"{w['tokens']} tokens x {w['layers']} layers, {w['iters']} isolated iterations, phases {w['phases']}")
PY
)
echo "campaign: $C ($(du -sh "$C/runs" | cut -f1) of runs, $(ls "$C/runs" | wc -l) jobs, $size)"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$BEFORE" ] && echo "before: $BEFORE: $("$BEFORE" --version)"
echo "after:  $AFTER: $("$AFTER" --version)"
python3 - "$WORK" "$C" "$REPS" "$AFTER" ${BEFORE:+"$BEFORE"} <<'PY'
import os, re, resource, statistics, subprocess, sys, time
work, camp, reps, after = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
bins = [("before", sys.argv[5])] if len(sys.argv) > 5 else []
bins.append(("after", after))
times = {name: [] for name, _ in bins}
for rep in range(1, reps + 1):
    for name, b in bins:
        out = os.path.join(work, f"report-{name}-{rep}")
        subprocess.run(["rm", "-rf", out], check=True)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([b, "campaign", "analyze", camp, "--report-dir", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if p.returncode != 0:
            sys.exit(f"{name}: campaign analyze exited {p.returncode}: {p.stderr.decode()[-2000:]}")
        with open(os.path.join(work, f"analyze-{name}-{rep}.txt"), "wb") as f:
            f.write(p.stdout)
        times[name].append((wall, cpu))
        print(f"{name} rep {rep}: wall {wall:.3f} s, cpu {cpu:.3f} s")
med = {}
for name, _ in bins:
    w = [t[0] for t in times[name]]; c = [t[1] for t in times[name]]
    med[name] = (statistics.median(w), statistics.median(c))
    print(f"{name}: median wall {med[name][0]:.3f} s [min {min(w):.3f}, max {max(w):.3f}], median cpu {med[name][1]:.3f} s, {reps} repetitions")
if "before" in med:
    print(f"after/before: wall {med['after'][0] / med['before'][0]:.3f}, cpu {med['after'][1] / med['before'][1]:.3f}")
    mask = lambda b: re.sub(rb'"producer": "[^"]*"', b'"producer": "<masked>"', b)
    def tree(d):
        return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}
    a, b = tree(os.path.join(work, "report-before-1")), tree(os.path.join(work, "report-after-1"))
    same = sorted(a) == sorted(b) and all(mask(a[f]) == mask(b[f]) for f in a)
    # the printed table names its report directory, which differs by design
    text = lambda n: mask(open(os.path.join(work, f"analyze-{n}-1.txt"), "rb").read()).replace(os.path.join(work, f"report-{n}-1").encode(), b"<report-dir>")
    print(f"report directory ({', '.join(sorted(a))}): {'byte-identical' if same else 'DIFFERS'} apart from the producer field; "
          f"printed table: {'byte-identical' if text('before') == text('after') else 'DIFFERS'}")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "work directory: $WORK"

#!/usr/bin/env bash
# How often does `validate` FAIL a node that did not change? Measures the
# false-FAIL rate of reference/validate pairs on the CPU backend under mpirun.
#
#   bash scripts/dev/validate-false-fail.sh [--bin PATH] [--pairs N] [--jobs K] [--ranks R]
#        [--cpus LIST] [--load-procs P] [--conditions idle,load] [--site FILE]
#        [--out DIR] [-- REFERENCE_ARG ...]
#   bash scripts/dev/validate-false-fail.sh --table OUT/pairs.tsv   # the table of a run (an interrupted one too)
#
# Each pair: K reference jobs (`validate --record-reference -o PAIR/ref/job-k`,
# K = --jobs, default 3; K = 1 records the old single-job reference), then one
# `validate --reference PAIR/ref`; the validation's exit code is its verdict
# (0 PASS, 1 FAIL, 2 INCONCLUSIVE, 3 could not run). Nothing changes between
# the reference and the validation, so every FAIL is a false FAIL.
# Conditions:
#   idle  nothing else started;
#   load  P busy loops (`yes >/dev/null`; P = --load-procs, default the CPU
#         count of --cpus, else nproc) started before the pair's first reference
#         job and stopped after its validation: present in BOTH.
# --cpus LIST pins the jobs and the loops with `taskset -c LIST` (and passes
# `--bind-to none` to mpirun so the ranks keep that mask): e.g. --cpus 0,1
# emulates a 2-core node on a bigger host.
# Needs only bash, awk, mpirun and the binary (--bin PATH; default
# target/release/commcanary, else target/debug/commcanary); no cargo.
# The table: condition, pairs, PASS/INCONCLUSIVE/FAIL/could-not-run counts,
# false-FAIL rate with its Clopper-Pearson 95% interval (Clopper and
# Pearson, Biometrika 26, 1934: the exact binomial interval, found here by
# bisection on the binomial tail). Per-pair lines (verdict line, likely cause,
# load average before and after, seconds) are in OUT/pairs.tsv; the evidence of
# every job stays under OUT.
set -uo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/../.."
[ -f scripts/env.sh ] && . scripts/env.sh
table() {
  awk -F'\t' '
    # Clopper-Pearson: binomial tail by summing terms in log space, bisection on p
    function lchoose(n, k,   i, s) { s = 0; for (i = 1; i <= k; i++) s += log(n - k + i) - log(i); return s }
    function cdf(x, n, p,   k, s) { if (p <= 0) return 1; if (p >= 1) return (x >= n) ? 1 : 0; s = 0; for (k = 0; k <= x; k++) s += exp(lchoose(n, k) + k * log(p) + (n - k) * log(1 - p)); return s }
    function upper(x, n,   lo, hi, mid, i) { if (x >= n) return 1; lo = 0; hi = 1; for (i = 0; i < 60; i++) { mid = (lo + hi) / 2; if (cdf(x, n, mid) > 0.025) lo = mid; else hi = mid }; return lo }
    function lower(x, n,   lo, hi, mid, i) { if (x <= 0) return 0; lo = 0; hi = 1; for (i = 0; i < 60; i++) { mid = (lo + hi) / 2; if (1 - cdf(x - 1, n, mid) < 0.025) lo = mid; else hi = mid }; return hi }
    /^#/ || $1 == "condition" { next }
    { n[$1]++; c[$1, $3]++; if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 } }
    END {
      printf "%-10s %6s %5s %13s %5s %14s %16s %22s\n", "condition", "pairs", "PASS", "INCONCLUSIVE", "FAIL", "could-not-run", "false-FAIL rate", "Clopper-Pearson 95%"
      for (j = 1; j <= m; j++) {
        k = order[j]; f = c[k, 1] + 0; runs = n[k] - c[k, 3]
        if (runs > 0) printf "%-10s %6d %5d %13d %5d %14d %16s %22s\n", k, n[k], c[k, 0], c[k, 2], f, c[k, 3], sprintf("%d/%d = %.3f", f, runs, f / runs), sprintf("[%.3f, %.3f]", lower(f, runs), upper(f, runs))
        else printf "%-10s %6d %5d %13d %5d %14d %16s %22s\n", k, n[k], 0, 0, 0, c[k, 3], "-", "-"
      }
    }' "$1"
}
if [ "${1:-}" = --table ]; then
  case "${2:-}" in /*) ;; ?*) set -- "$1" "$CALLER_PWD/$2" ;; esac
  [ -f "${2:-}" ] || { echo "validate-false-fail: --table needs a pairs.tsv file, got '${2:-}'" >&2; exit 3; }
  table "$2"; exit 0
fi
# paths given on the command line are relative to the caller's directory
abs() { case "$1" in /*|'') printf '%s' "$1" ;; *) printf '%s/%s' "$CALLER_PWD" "$1" ;; esac; }
BIN=""; PAIRS=20; JOBS=3; RANKS=4; CPUS=""; LOADP=""; CONDS="idle,load"; SITE=""; OUT=""
REFARGS=(--max-bytes 256KiB --iters 5 --warmup-iters 2 --tokens 12 --warmup-tokens 2 --rounds 6)
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$(abs "$2"); shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --load-procs) LOADP=$2; shift 2 ;;
    --conditions) CONDS=$2; shift 2 ;;
    --site) SITE=$(abs "$2"); shift 2 ;;
    --out) OUT=$(abs "$2"); shift 2 ;;
    --) shift; REFARGS=("$@"); break ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "validate-false-fail: unknown argument $1 (see --help)" >&2; exit 3 ;;
  esac
done
if [ -z "$BIN" ]; then
  for b in target/release/commcanary target/debug/commcanary; do [ -x "$b" ] && { BIN=$b; break; }; done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "validate-false-fail: no binary: pass --bin PATH (or build target/release/commcanary)" >&2; exit 3; }
command -v mpirun >/dev/null || { echo "validate-false-fail: mpirun not found" >&2; exit 3; }
for v in "$PAIRS" "$JOBS" "$RANKS"; do
  case "$v" in ''|*[!0-9]*) echo "validate-false-fail: --pairs, --jobs and --ranks take whole numbers, got '$v'" >&2; exit 3 ;; esac
done
[ "$PAIRS" -ge 1 ] && [ "$JOBS" -ge 1 ] && [ "$RANKS" -ge 2 ] || { echo "validate-false-fail: need --pairs >= 1, --jobs >= 1, --ranks >= 2" >&2; exit 3; }
OUT=${OUT:-out/validate-false-fail-$(date -u +%Y%m%dT%H%M%SZ)}
[ -e "$OUT" ] && { echo "validate-false-fail: $OUT exists (evidence is never written over)" >&2; exit 3; }
mkdir -p "$OUT"
PIN=(); MPIPIN=()
if [ -n "$CPUS" ]; then
  command -v taskset >/dev/null || { echo "validate-false-fail: --cpus needs taskset (util-linux)" >&2; exit 3; }
  PIN=(taskset -c "$CPUS"); MPIPIN=(--bind-to none)
  NCPU=$(taskset -c "$CPUS" nproc)
else
  NCPU=$(nproc)
fi
LOADP=${LOADP:-$NCPU}
SITEARG=(); [ -n "$SITE" ] && SITEARG=(--site "$SITE")
mpi() { "${PIN[@]}" mpirun --oversubscribe "${MPIPIN[@]}" -n "$RANKS" "$BIN" validate -q --backend cpu "$@"; }
LOADPIDS=()
start_load() { for _ in $(seq 1 "$LOADP"); do "${PIN[@]}" yes > /dev/null & LOADPIDS+=($!); done; }
stop_load() { for p in "${LOADPIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; LOADPIDS=(); }
trap 'stop_load' EXIT
trap 'stop_load; exit 130' INT TERM
la() { cut -d' ' -f1-4 /proc/loadavg 2>/dev/null || echo unmeasured; }
{
  echo "# validate-false-fail: $(date -u +%FT%TZ) host $(hostname) nproc $(nproc) cpus ${CPUS:-all} ($NCPU) ranks $RANKS jobs $JOBS pairs $PAIRS load-procs $LOADP"
  echo "# binary $BIN ($("$BIN" --version 2>/dev/null | head -1)); reference args: ${REFARGS[*]}; site: ${SITE:-defaults}"
  printf 'condition\tpair\texit\tseconds\tloadavg_before\tloadavg_after\tverdict_line\tlikely_cause\n'
} > "$OUT/pairs.tsv"
echo "validate-false-fail: $PAIRS pairs per condition ($CONDS), $JOBS reference jobs + 1 validation each, $RANKS ranks on ${CPUS:-all} CPUs; evidence under $OUT" >&2
for cond in ${CONDS//,/ }; do
  case "$cond" in idle|load) ;; *) echo "validate-false-fail: unknown condition $cond (idle, load)" >&2; exit 3 ;; esac
  for i in $(seq 1 "$PAIRS"); do
    P="$OUT/$cond/pair-$i"; mkdir -p "$P/ref"
    t0=$(date +%s.%N); before=$(la)
    [ "$cond" = load ] && start_load
    ok=1
    for k in $(seq 1 "$JOBS"); do
      if ! mpi --record-reference -o "$P/ref/job-$k" "${REFARGS[@]}" > "$P/ref-job-$k.log" 2>&1; then ok=0; break; fi
    done
    if [ "$ok" = 1 ]; then
      mpi --reference "$P/ref" "${SITEARG[@]}" -o "$P/validation" > "$P/validate.log" 2>&1
      code=$?
    else
      code=3
    fi
    [ "$cond" = load ] && stop_load
    after=$(la); t1=$(date +%s.%N)
    # mpirun may report a rank's non-zero exit as its own; the verdict line is the truth
    vline=$(grep -m1 '^verdict:' "$P/validate.log" 2>/dev/null || echo "no verdict (see $P)")
    case "$vline" in
      "verdict: PASS"*) code=0 ;; "verdict: FAIL"*) code=1 ;; "verdict: INCONCLUSIVE"*) code=2 ;; *) code=3 ;;
    esac
    cause=$(grep -m1 '^likely cause:' "$P/validate.log" 2>/dev/null | cut -c15- || true)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cond" "$i" "$code" "$secs" "$before" "$after" "$vline" "${cause:--}" >> "$OUT/pairs.tsv"
    echo "validate-false-fail: $cond pair $i/$PAIRS: exit $code in ${secs} s (loadavg $before -> $after)" >&2
  done
done
table "$OUT/pairs.tsv" | tee "$OUT/table.txt"
echo "(the rate is over pairs that ran; could-not-run pairs are excluded and counted; per-pair lines: $OUT/pairs.tsv)"

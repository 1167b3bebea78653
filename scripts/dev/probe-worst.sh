#!/usr/bin/env bash
# Re-run the adversarial probes' worst cases (issue 13 items 1, 2, 7 and 9;
# issue 31's bounded inputs, gaps, impossible groups, plan-time checks, site
# files, resealed references, refused joins and tampered archives) against a
# built binary: each must be refused with a named code (refused[CODE]), exit 1
# (validate's "could not run": 3), leave every file it was handed unchanged, and not crash.
# Usage: scripts/dev/probe-worst.sh [BINARY]   (default target/release/commcanary)
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
BIN="$(realpath "${1:-target/release/commcanary}")"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
snapshot() { (cd "$1" && find . -type f ! -name campaign.lock -print0 | sort -z | xargs -0 sha256sum) ; }
# expect CODE DIR-TO-KEEP-UNCHANGED COMMAND...   (exit code 1, or WANT_RC: validate's "could not run" is 3)
expect() {
    local code="$1" keep="$2"; shift 2
    local before after rc
    before=$(snapshot "$keep")
    "$@" >"$W/out" 2>"$W/err"; rc=$?
    after=$(snapshot "$keep")
    if [ $rc -eq "${WANT_RC:-1}" ] && grep -q "refused\[$code\]" "$W/err" "$W/out" && ! grep -qi "panicked" "$W/err" && [ "$before" = "$after" ]; then
        echo "ok   $code: $(grep -h -o "refused\[$code\].*" "$W/err" "$W/out" | head -1 | cut -c1-150)"
    else
        echo "FAIL $code (exit $rc, files unchanged: $([ "$before" = "$after" ] && echo yes || echo NO)): $*"; sed 's/^/     /' "$W/err" | head -5; fail=1
    fi
}
spec() { # name tokens layers reps
    cat >"$W/$1.toml" <<TOML
name = "$1"
backend = "cpu"
ranks = 2
repetitions = $4
$( [ "$4" -lt 2 ] && echo "join_part = true  # one round: plan refuses it unless declared a part for campaign join" )
seed = 1
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "blocking"
tokens = $2
layers = $3
iters = 3
[analysis]
tie_policy = "interval"
[[configs]]
name = "ring"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }
[[configs]]
name = "binomial"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }
TOML
    echo "$W/$1.toml"
}

echo "== item 1: a re-planned directory publishes old runs under a new manifest"
C="$W/c1"
"$BIN" campaign plan "$(spec small 16 4 2)" -o "$C" >/dev/null && "$BIN" campaign exec "$C" >/dev/null 2>&1 && "$BIN" campaign select "$C" >/dev/null || { echo "setup failed"; exit 1; }
cp "$C/selection.json" "$W/old-selection.json"
rm "$C/manifest.json" "$C/manifest.sha256" "$C/selection.json"
expect CAMPAIGN_STATE "$C" "$BIN" campaign plan "$(spec big 64 12 2)" -o "$C"
"$BIN" campaign plan "$W/big.toml" -o "$W/fresh" >/dev/null
cp "$W/fresh/manifest.json" "$W/fresh/manifest.sha256" "$C/"
python3 - "$W/old-selection.json" "$C" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["manifest_sha256"] = open(sys.argv[2] + "/manifest.sha256").read().strip()
json.dump(s, open(sys.argv[2] + "/selection.json", "w"))
PY
expect STALE_MANIFEST "$C" "$BIN" campaign verify "$C"

echo "== item 2: two execs on one campaign; SIGKILL of exec leaves its job running"
C="$W/c2"
"$BIN" campaign plan "$(spec lock 200 8 2)" -o "$C" >/dev/null
"$BIN" campaign exec "$C" >/dev/null 2>&1 &
first=$!
for _ in $(seq 100); do [ -d "$C/inflight" ] && ls "$C/inflight"/*.json >/dev/null 2>&1 && break; sleep 0.1; done
expect LOCKED "$C" "$BIN" campaign exec "$C"
expect LOCKED "$C" "$BIN" campaign select "$C"
expect LOCKED "$C" "$BIN" campaign archive "$C" -o "$W/c2.tar"
pgid=$(python3 -c 'import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1]+"/inflight/*.json")[0]))["pgid"])' "$C")
kill -9 "$first"; wait "$first" 2>/dev/null
for _ in $(seq 100); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
if kill -0 -- "-$pgid" 2>/dev/null; then echo "FAIL orphan: job group $pgid outlived its exec by 10 s"; fail=1; else echo "ok   the killed exec's job (process group $pgid) ended with it"; fi
"$BIN" campaign exec "$C" >/dev/null 2>"$W/err" && "$BIN" campaign select "$C" >/dev/null && "$BIN" campaign verify "$C" >/dev/null \
    && grep -q interrupted "$C/attempts.jsonl" && echo "ok   resume recorded the interrupted attempt; select and verify pass" || { echo "FAIL resume after SIGKILL"; cat "$W/err"; fail=1; }
dups=$(python3 -c 'import json,sys,collections; c=collections.Counter(json.loads(l)["attempt_id"] for l in open(sys.argv[1]) if l.strip()); print([k for k,v in c.items() if v>1])' "$C/attempts.jsonl")
[ "$dups" = "[]" ] && echo "ok   no attempt id used twice" || { echo "FAIL attempt ids reused: $dups"; fail=1; }

echo "== item 7: crafted shards, sealed with a recomputed trailer and run-record digest"
R=$(ls -d "$W"/c1/runs/*/ | head -1)
craft() { # name python-edit
    local d="$W/$1"; cp -r "$R" "$d"
    python3 - "$d" "$2" <<'PY'
import hashlib, json, struct, sys, glob, os
d, edit = sys.argv[1], sys.argv[2]
run = json.load(open(d + "/run.json"))
for f in sorted(glob.glob(d + "/rank-*.shard")):
    b = open(f, "rb").read()
    hl = struct.unpack("<Q", b[12:20])[0]; h = json.loads(b[20:20 + hl])
    bl = struct.unpack("<Q", b[20 + hl:28 + hl])[0]; body = b[28 + hl:28 + hl + bl]
    if edit == "members": h["groups"][0]["members"] = [0, 1, 7]
    if edit == "dup": h["groups"][0]["members"] = [0, 1, 1, 1]
    if edit == "hugestr" and h["rank"] == 1:
        # the body ends with two empty vectors (kernel names, device waits: 0x00 0x00);
        # make the kernel names one string claiming 2^40 bytes
        assert body[-2:] == b"\x00\x00"
        body = body[:-2] + b"\x01\xfd" + struct.pack("<Q", 1 << 40) + b"ZZ" + body[-1:]
    hb = json.dumps(h).encode()
    out = b[:8] + struct.pack("<I", h["format_version"]) + struct.pack("<Q", len(hb)) + hb + struct.pack("<Q", len(body)) + body
    out += b"CCSHA256" + hashlib.sha256(out).digest()
    open(f, "wb").write(out)
    for s in run["shards"]:
        if s["rank"] == h["rank"]: s["sha256"] = hashlib.sha256(out).hexdigest(); s["size_bytes"] = len(out)
if edit == "world0":
    run["world_size"] = 0; run["shards"] = []
    for f in glob.glob(d + "/rank-*.shard"): os.remove(f)
json.dump(run, open(d + "/run.json", "w"))
PY
    echo "$d"
}
D=$(craft hugestr hugestr); expect OVER_LIMIT "$D" "$BIN" join "$D"; expect OVER_LIMIT "$D" "$BIN" inspect "$D/rank-00001.shard"
D=$(craft members members); expect BAD_STRUCTURE "$D" "$BIN" join "$D"
D=$(craft dup dup); expect BAD_STRUCTURE "$D" "$BIN" join "$D"
D=$(craft world0 world0); for cmd in join overlap; do expect BAD_STRUCTURE "$D" "$BIN" $cmd "$D"; done
expect BAD_STRUCTURE "$D" "$BIN" summarize "a=$D"; expect BAD_STRUCTURE "$D" "$BIN" export chrome "$D" -o "$W/t.json"

echo "== item 9: archive of itself, through links and loops; hostile member names"
C="$W/c1b"; "$BIN" campaign plan "$(spec arc 4 2 2)" -o "$C" >/dev/null && "$BIN" campaign exec "$C" >/dev/null 2>&1 && "$BIN" campaign select "$C" >/dev/null
expect ARCHIVE_OUTPUT_INSIDE "$C" "$BIN" campaign archive "$C" -o "$C/self.tar"
echo secret >"$W/secret.txt"; ln -s "$W/secret.txt" "$C/notes.txt"
expect ARCHIVE_LINK "$C" "$BIN" campaign archive "$C" -o "$W/a.tar"; rm "$C/notes.txt"
ln -s "$C" "$C/loop"; expect ARCHIVE_LINK "$C" "$BIN" campaign archive "$C" -o "$W/a.tar"; rm "$C/loop"
[ ! -e "$W/a.tar" ] && [ ! -e "$C/self.tar" ] && echo "ok   no archive or temporary file was left" || { echo "FAIL leftovers"; fail=1; }
"$BIN" campaign archive "$C" -o "$W/a.tar" >/dev/null || { echo "FAIL clean archive"; fail=1; }
for name in "../x" "/abs" "c1b/link"; do
    python3 - "$W/evil.tar" "$name" <<'PY'
import io, sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT)
i = tarfile.TarInfo(sys.argv[2])
if sys.argv[2].endswith("link"): i.type = tarfile.SYMTYPE; i.linkname = "/etc/passwd"; t.addfile(i)
else: i.size = 3; t.addfile(i, io.BytesIO(b"abc"))
t.close()
PY
    python3 - "$W/a.tar.descriptor.json" "$W/evil.tar" "$W/evil.json" <<'PY'
import hashlib, json, os, sys
d = json.load(open(sys.argv[1])); b = open(sys.argv[2], "rb").read()
d["archive_size_bytes"] = len(b); d["archive_sha256"] = hashlib.sha256(b).hexdigest(); json.dump(d, open(sys.argv[3], "w"))
PY
    mkdir -p "$W/evil"; cp "$W/evil.tar" "$W/evil.json" "$W/evil/"
    expect ARCHIVE_MEMBER "$W/evil" "$BIN" campaign check-archive "$W/evil/evil.tar" "$W/evil/evil.json"
done
echo "== issue 31: FIFOs, devices and directories as inputs (each under a 60 s timeout: a hang fails)"
K="$W/keep31"; mkdir -p "$K"; mkfifo "$K/fifo.json"; ln -s /dev/zero "$K/zero.json"; mkdir "$K/dir.json"
for bad in "$K/fifo.json" /dev/zero "$K/zero.json" "$K/dir.json"; do
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" import kineto "$bad" -o "$W/imp.json"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" import et "$bad" -o "$W/imp.json"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" export param "$bad" -o "$W/exp"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" campaign plan "$bad" -o "$W/p31"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" queue --service-times "$bad" --mode closed --clients 2
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" compare --proxy "$bad" --truth "$bad"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" overlap --intervals "$bad"
    expect NOT_REGULAR_FILE "$K" timeout 60 "$BIN" inspect "$bad"
done
echo "== issue 31: a small gzip of more events than the limit, under a 3 GiB address-space limit"
python3 - "$K/many.json.gz" <<'PY'
import gzip, sys
with gzip.open(sys.argv[1], "wb", compresslevel=1) as f:
    f.write(b'{"traceEvents":[')
    chunk = b"{}," * (1 << 20)
    for _ in range(50_000_000 // (1 << 20)): f.write(chunk)
    f.write(b"{}," * (50_000_000 % (1 << 20)) + b"{}]}")
PY
expect OVER_LIMIT "$K" timeout 300 bash -c 'ulimit -v 3145728 && exec "$0" "$@"' "$BIN" import kineto "$K/many.json.gz" -o "$W/many.json"
echo "== issue 31: impossible groups, gaps and specs"
FIX=tests/data/pytorch-2.11-tp2-h200
"$BIN" import kineto $FIX/kineto.rank-0.json.gz $FIX/kineto.rank-1.json.gz -o "$K/tp2.comm.json" >/dev/null 2>&1
python3 - "$K/tp2.comm.json" "$K" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); d = sys.argv[2]
g = json.loads(json.dumps(t)); g["groups"][1]["members"] = [0, 1, 1]; json.dump(g, open(d + "/dup.comm.json", "w"))
g = json.loads(json.dumps(t))
for r in g["ranks"]:
    for c in r["collectives"][1:]:
        if c.get("host_start_ns") is not None: c["host_start_ns"] += 10**12
        if c.get("device"): c["device"]["start_ns"] += 10**12; c["device"]["end_ns"] += 10**12
json.dump(g, open(d + "/gap.comm.json", "w"))
PY
expect BAD_INPUT "$K" timeout 60 "$BIN" export param "$K/dup.comm.json" -o "$W/dup"
expect OUT_OF_RANGE "$K" timeout 120 mpirun --oversubscribe -n 2 "$BIN" replay-trace "$K/gap.comm.json" --out "$W/gap"
for edit in 's/tie_policy = "interval"/tie_policy = "strict"/' 's/args = \["--oversubscribe"\]/args = ["--oversubscribe", "-n", "1"]/'; do
    sed "$edit" "$(spec s31 4 2 2)" >"$K/s31.toml"
    expect BAD_SPEC "$K" timeout 60 "$BIN" campaign plan "$K/s31.toml" -o "$W/s31"
done

echo "== issue 31: site files and resealed validation references"
printf 'busbw_min_ratio = 1.5\n' >"$K/inverted.toml"
printf 'token_latency_max_ratio = 0.5\n' >"$K/inverted2.toml"
printf 'nvlink_crc_errors_max = -1\n' >"$K/negative.toml"
for f in inverted inverted2 negative; do
    WANT_RC=3 expect BAD_INPUT "$K" timeout 60 "$BIN" validate --backend cpu --reference /nonexistent/ref --site "$K/$f.toml" -o "$W/v-$f"
done
R="$W/ref"
timeout 300 mpirun --oversubscribe -n 2 "$BIN" validate -q --backend cpu --record-reference -o "$R" --max-bytes 64KiB --iters 3 \
    --warmup-iters 1 --tokens 4 --warmup-tokens 1 --rounds 2 >/dev/null 2>&1 || { echo "FAIL recording a reference"; fail=1; }
# reseal TAG FILE PYTHON-EDIT: a copy of the reference with FILE edited and its descriptor entry resealed
reseal() {
    local c="$K/ref-$1"; cp -r "$R" "$c"
    python3 - "$c" "$2" "$3" <<'PY'
import hashlib, json, sys
d, name, edit = sys.argv[1], sys.argv[2], sys.argv[3]
v = json.load(open(f"{d}/{name}")); exec(edit)
b = json.dumps(v, indent=2).encode(); open(f"{d}/{name}", "wb").write(b)
desc = json.load(open(f"{d}/descriptor.json"))
for f in desc["files"]:
    if f["name"] == name: f["size_bytes"] = len(b); f["sha256"] = hashlib.sha256(b).hexdigest()
json.dump(desc, open(f"{d}/descriptor.json", "w"), indent=2)
PY
    echo "$c"
}
if [ -d "$R" ]; then
    WANT_RC=3 expect OUT_OF_RANGE "$K" timeout 60 "$BIN" validate --backend cpu --reference "$(reseal iters0 manifest.json 'v["settings"]["iters"] = 0')" -o "$W/v1"
    WANT_RC=3 expect BAD_INPUT "$K" timeout 60 "$BIN" validate --backend cpu --reference "$(reseal fewer rounds.json 'v["rounds"][1]["all_reduce"].pop()')" -o "$W/v2"
    WANT_RC=3 expect BAD_INPUT "$K" timeout 60 "$BIN" validate --backend cpu --reference "$(reseal wrong rounds.json 'v["rounds"][0]["all_reduce"][0]["wrong_elements"] = 3')" -o "$W/v3"
    [ ! -e "$W/v1" ] && [ ! -e "$W/v2" ] && [ ! -e "$W/v3" ] && echo "ok   no validation directory was left by a refused reference" || { echo "FAIL a refused validation left a directory"; fail=1; }
fi
echo "== issue 31: a refused campaign join writes nothing; a tampered archive member is named"
J1="$W/j1"; J2="$W/j2"
"$BIN" campaign plan "$(spec ja 4 2 2)" -o "$J1" >/dev/null && "$BIN" campaign plan "$(sed 's/^seed = 1/seed = 2/' "$(spec jb 4 2 2)" >"$W/jb2.toml"; echo "$W/jb2.toml")" -o "$J2" >/dev/null \
    || { echo "FAIL planning the join inputs"; fail=1; }
python3 - "$J2" <<'PY'
import json, sys
c = sys.argv[1]; m = json.load(open(f"{c}/manifest.json")); cell = m["schedule"][0]
aid = cell["cell_id"] + "-a1"
import os; os.makedirs(f"{c}/runs/{aid}"); open(f"{c}/runs/{aid}/run.json", "w").write("{}")
rec = {"attempt_id": aid, "cell_id": cell["cell_id"], "label": cell["label"], "round": cell["round"],
       "manifest_sha256": open(f"{c}/manifest.sha256").read().strip(), "status": "failed", "exit_code": 1,
       "failure": "exit code 1", "argv": ["mpirun"], "started_unix_ms": 1, "finished_unix_ms": 2, "stdout_sha256": "",
       "stderr_sha256": "", "run_dir": f"runs/{aid}", "run_json_sha256": None, "shards": [], "identity_sha256": None, "host": "h"}
open(f"{c}/attempts.jsonl", "w").write((json.dumps(rec) + "\n") * 2)
PY
expect DUPLICATE_ATTEMPT "$J2" timeout 60 "$BIN" campaign join "$J1" "$J2" -o "$W/joined"
[ ! -e "$W/joined" ] && ! ls "$W" | grep -q 'joined.' && echo "ok   the refused join left no output or temporary" || { echo "FAIL the refused join left $(ls "$W" | grep joined)"; fail=1; }
if "$BIN" campaign exec "$J1" >/dev/null 2>&1 && "$BIN" campaign select "$J1" >/dev/null && "$BIN" campaign archive "$J1" -o "$W/j1.tar" >/dev/null; then
    mkdir -p "$W/tamper"
    python3 - "$W/j1.tar" "$W/j1.tar.descriptor.json" "$W/tamper" <<'PY'
import hashlib, io, json, sys, tarfile
src, desc, out = sys.argv[1:]
a = tarfile.open(src); b = io.BytesIO(); t = tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT); done = False
for m in a.getmembers():
    data = a.extractfile(m).read() if m.isfile() else None
    if data is not None and not done and m.name.endswith(".shard"):
        data = data[:-1] + bytes([data[-1] ^ 1]); done = True
    t.addfile(m, io.BytesIO(data) if data is not None else None)
t.close(); raw = b.getvalue(); open(f"{out}/t.tar", "wb").write(raw)
d = json.load(open(desc)); d["archive_size_bytes"] = len(raw); d["archive_sha256"] = hashlib.sha256(raw).hexdigest()
json.dump(d, open(f"{out}/t.json", "w"))
PY
    expect DIGEST_MISMATCH "$W/tamper" timeout 60 "$BIN" campaign check-archive "$W/tamper/t.tar" "$W/tamper/t.json"
else
    echo "FAIL running the campaign to archive"; fail=1
fi
echo "== issue 31: plan-time checks (a delay on a rank outside the world, a NUL in an environment value)"
{ cat "$(spec s31b 4 2 2)"; printf '[[configs]]\nname = "third"\nargs = ["--inject-delay", "rank=9,every=2,us=100"]\n'; } >"$K/s31b.toml"
{ cat "$(spec s31c 4 2 2)"; printf '[[configs]]\nname = "third"\nenv = { X = "a\\u0000b" }\n'; } >"$K/s31c.toml"
for f in s31b s31c; do expect BAD_SPEC "$K" timeout 60 "$BIN" campaign plan "$K/$f.toml" -o "$W/$f"; done

[ $fail -eq 0 ] && echo "all worst cases refused with a named code; nothing changed; no crash" || echo "SOME CASES FAILED"
exit $fail

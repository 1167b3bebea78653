#!/usr/bin/env python3
"""The staged test suite, COPIES times, as a pool of jobs over slots of a
few CPUs each, each slot shared with its own busy loop(s) for the whole run: the
"whole suite N times beside a background CPU load" of issue 31 on a host
with many CPUs and a short command limit.

Called by `scripts/dev/suite-under-load.sh pool`; see there for staging.

Every staged test binary is one job per copy, except those named in --split,
which become one job per test (`BIN --exact NAME`): one test at a time on the
slot's two CPUs, as the binaries' own tests would otherwise queue behind
their one-mpirun-job-at-a-time lock. Jobs are dealt into --parts parts of
equal estimated time (longest first, from --estimates: seconds per binary on
an idle 2-core machine, or per test as "binary.test"), so that each part fits one command; --part K runs
part K only. Or, with --done FILE (an earlier command's results.tsv), the
jobs it does not list run, longest first, as many as --budget-s allows: a job
starts only while the time left exceeds its estimate times the slowdown seen
so far (1.5 x the median of wall / estimate over the finished jobs, 4 before
any).
Within a part, --slots workers, worker w pinned to its own --slot-cpus CPUs
(w*N .. w*N+N-1, default N = 2) with --loops busy loops pinned there, take
the longest job left.

Writes OUT/results.tsv (copy, binary, test, rc, wall_s, load average at the
end), one log per job under OUT/copyC/, and OUT/summary.txt. A job still
running when --budget-s is spent is killed and recorded with rc=killed, so a
part that ran out of time says so instead of passing.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SKIP = {"MANIFEST_DIR", "COMMIT"}


def tests_of(binary):
    out = subprocess.run([binary, "--list", "--format", "terse"], capture_output=True, text=True, check=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return [l[: -len(": test")] for l in out.stdout.splitlines() if l.endswith(": test")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default=".stage/suite")
    ap.add_argument("--out", required=True)
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--loops", type=int, default=1)
    ap.add_argument("--slot-cpus", type=int, default=2, help="CPUs per slot, shared by its jobs and its busy loops")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--split", default="canary validate_cpu readme report campaign")
    ap.add_argument("--estimates", default="{}", help="JSON object: binary -> idle seconds")
    ap.add_argument("--done", help="results.tsv of earlier commands: the jobs it lists (killed aside) are not run again")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    stage, out = Path(a.stage), Path(a.out)
    est = json.loads(a.estimates)
    split = set(a.split.split())
    binaries = sorted(p.name for p in stage.iterdir() if p.is_file() and p.name not in SKIP and not p.name.endswith(".bin"))
    jobs = []
    for b in binaries:
        t = float(est.get(b, 5.0))
        if b in split:
            names = tests_of(str(stage / b))
            for n in names:
                for c in range(a.copies):
                    jobs.append((float(est.get(f"{b}.{n}", t / max(1, len(names)))), c, b, n))
        else:
            for c in range(a.copies):
                jobs.append((t, c, b, None))
    # deal into parts, longest first, each to the part with the least so far
    jobs.sort(key=lambda j: (-j[0], j[1], j[2], j[3] or ""))
    parts = [[] for _ in range(a.parts)]
    loads = [0.0] * a.parts
    for j in jobs:
        k = loads.index(min(loads))
        parts[k].append(j)
        loads[k] += j[0]
    mine = parts[a.part]
    if a.done:
        done = set()
        for l in open(a.done):
            r = l.rstrip("\n").split("\t")
            if len(r) >= 4 and r[3] != "killed":
                done.add((int(r[0]), r[1], None if r[2] == "-" else r[2]))
        mine = [j for j in jobs if (j[1], j[2], j[3]) not in done]
    print(f"{len(jobs)} jobs in {a.parts} part(s), estimated idle s per part {[round(l) for l in loads]}; part {a.part}: {len(mine)} jobs on {a.slots} slots of {a.slot_cpus} CPUs, {a.loops} busy loop(s) each", flush=True)
    if a.dry_run:
        for j in mine:
            print(j)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    results = open(out / "results.tsv", "a")
    lock = threading.Lock()
    queue = list(mine)
    deadline = time.monotonic() + a.budget_s
    running = {}
    ratios = []
    hogs = []
    def cpus_of(w):
        return ",".join(str(a.slot_cpus * w + i) for i in range(a.slot_cpus))

    if a.slots * a.slot_cpus > os.cpu_count():
        sys.exit(f"{a.slots} slots of {a.slot_cpus} CPUs need {a.slots * a.slot_cpus} CPUs; this host has {os.cpu_count()}")
    for w in range(a.slots):
        cpus = cpus_of(w)
        for _ in range(a.loops):
            hogs.append(subprocess.Popen(["taskset", "-c", cpus, "bash", "-c", "while :; do :; done"], start_new_session=True))

    def worker(w):
        cpus = cpus_of(w)
        while True:
            with lock:
                slow = 1.5 * sorted(ratios)[len(ratios) // 2] if ratios else 4.0
                left = deadline - time.monotonic()
                k = next((i for i, j in enumerate(queue) if j[0] * slow < left), None)
                if k is None:
                    return
                e, c, b, n = queue.pop(k)
            d = out / f"copy{c}"
            d.mkdir(exist_ok=True)
            tmp = d / f"tmp-{w}"
            tmp.mkdir(exist_ok=True)
            name = b if n is None else f"{b}.{n}"
            args = [str(stage / b)] + ([] if n is None else ["--exact", n])
            env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMPI_MCA_hwloc_base_binding_policy="none", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TMPDIR=str(tmp))
            s = time.monotonic()
            with open(d / f"{name}.log", "w") as log:
                p = subprocess.Popen(["taskset", "-c", cpus] + args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                with lock:
                    running[w] = p
                try:
                    rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    rc = "killed"
                with lock:
                    running.pop(w, None)
            wall = time.monotonic() - s
            subprocess.run(["rm", "-rf", str(tmp)])
            with lock:
                if rc == 0:
                    ratios.append(wall / max(e, 0.5))
                results.write(f"{c}\t{b}\t{n or '-'}\t{rc}\t{wall:.1f}\t{os.getloadavg()[0]:.1f}\n")
                results.flush()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h in hogs:
        os.killpg(h.pid, signal.SIGKILL)
    results.close()
    rows = [l.rstrip("\n").split("\t") for l in open(out / "results.tsv")]
    failed = [r for r in rows if r[3] != "0"]
    left = len(queue)
    with open(out / "summary.txt", "w") as f:
        print(f"part {a.part}/{a.parts}: {len(rows)} jobs ran, {len(failed)} not passed, {left} not started", file=f)
        for r in failed:
            print("NOT PASSED " + " ".join(r), file=f)
    print(open(out / "summary.txt").read(), end="")
    return 0 if not failed and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

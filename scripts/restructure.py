#!/usr/bin/env python3
"""Move the flat `src/` modules into folders by stage (docs/ARCHITECTURE.md §2)
and rewrite every `crate::` / `commcanary::` path to match.

Run from the repository root on a clean tree (it uses `git mv`), then build:

    python3 scripts/restructure.py && cargo build --locked

It is idempotent: a module already in its folder is left alone, so it can be
replayed after main gains new code. A top-level module it does not know stops
it (add it to MOVES first), so nothing lands in the wrong layer silently.
"""
import os
import re
import subprocess
import sys

# Layers in dependency order: each folder imports only from itself and earlier ones.
LAYERS = ["core", "evidence", "backend", "rank", "analysis", "campaign", "report", "validate", "cli"]

# old top-level module -> (target folder, new module path)
MOVES = {
    # core: vocabulary, atomic files, descriptive statistics, limits, refusals
    "units": "core", "cli_kv": "core", "clock": "core", "workload": "core", "identity": "core",
    "fsutil": "core", "stats": "core", "limits": "core", "ranges": "core", "refusal": "core",
    # evidence: the formats and their readers
    "shard": "evidence", "run": "evidence", "join": "evidence", "trace": "evidence",
    "inspect": "evidence", "tuning": "evidence", "commtrace": "evidence",
    # backend: CUDA's libraries under backend/cuda
    "cupti": "backend/cuda", "nccl": "backend/cuda",
    # MPI operations bounded by --collective-timeout-s (the backends, the phases and rank use them)
    "mpi_deadline": "backend",
    # rank: the per-rank program and what runs beside it
    "phases": "rank", "bench": "rank", "doctor": "rank",
    # analysis: statistics without I/O
    "policy": "analysis", "inference": "analysis", "bootstrap": "analysis", "calibration": "analysis",
    "ranking": "analysis", "summary": "analysis", "overlap": "analysis", "queue": "analysis",
    "capacity": "analysis",
    # report: files made from an analysis
    "plots": "report", "export": "report",
    # cli: clap, the command layer, and the schema index of every format
    "command": "cli", "schema": "cli",
}
# modules whose file becomes the mod.rs of a folder of the same name (paths unchanged)
OWNERS = {"rank": "rank", "analysis": "analysis", "cli": "cli", "backend/cuda": "backend/cuda"}
# top-level names that stay where they are
STAY = set(LAYERS)
# a module moved between folders: old path -> new path
RENAMES = {"campaign::report": "report::campaign"}

FOLDER_DOCS = {
    "core": """//! Layer 1: the vocabulary every stage shares, with no stage logic.
//!
//! Units and `key=value` parsing, the clock model, the workload vocabulary
//! (phases, shapes, element types), environment identity, atomic
//! never-overwriting files, descriptive statistics, the size limits of every
//! decoder, the documented ranges of every number, and the refusal codes.
//! Imports nothing from the crate outside `core` (docs/ARCHITECTURE.md §2).""",
    "evidence": """//! Layer 2: the evidence formats and their verified readers.
//!
//! Shards and run records (what `rank` writes), `join` (verification and
//! matching by operation identity), replay traces, `inspect`, NCCL tuning
//! records and imported communication traces. One decoding entry point per
//! format, each under the limits of `core::limits` (docs/ARCHITECTURE.md §6, §11).""",
    "report": """//! Layer 7: files made from an analysis.
//!
//! The campaign report (collect the verified campaign, analyze, write
//! `report.json` and the SVG plots) and exports of verified runs
//! (Chrome/Perfetto trace JSON) (docs/ARCHITECTURE.md §9, §11).""",
}

LIB_DOCS = """//! CommCanary: rank NCCL/MPI collective configurations for real workloads,
//! with a chain of evidence. See `README.md` for use and
//! `docs/ARCHITECTURE.md` for the design.
//!
//! One folder per stage, in dependency order; a module imports only from its
//! own folder and the ones before it (checked by `tests/layering.rs`):
//!
//! Layers, in dependency order: core → evidence → backend → rank → analysis → campaign → report → validate → cli
//!
//! 1. [`core`]: units, `key=value` parsing, clock model, workload vocabulary,
//!    identity, atomic files, descriptive statistics, limits, ranges, refusal codes.
//! 2. [`evidence`]: shard and run-record formats, `join`, replay traces,
//!    `inspect`, tuning records, imported communication traces.
//! 3. [`backend`]: the `Backend` trait, `cpu` (MPI) and `cuda` (NCCL, cuBLAS, CUPTI).
//! 4. [`rank`]: the per-rank program, its phases, `bench-overhead`, `doctor`.
//! 5. [`analysis`]: policy, inference, bootstrap, calibration, ranking,
//!    summary, overlap, queue, capacity, the report model (no I/O).
//! 6. [`campaign`]: spec, manifest, exec, attempts, select, verify, archive.
//! 7. [`report`]: the campaign report and its plots, exports.
//! 8. `validate`: node acceptance against a recorded reference (when present).
//! 9. [`cli`]: clap definitions and the command layer the binary calls.
"""


def sh(*args):
    subprocess.run(args, check=True)


def git_mv(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    sh("git", "mv", src, dst)


def top_level_modules():
    mods = []
    for name in sorted(os.listdir("src")):
        p = os.path.join("src", name)
        if name in ("lib.rs", "main.rs"):
            continue
        if name.endswith(".rs"):
            mods.append(name[:-3])
        elif os.path.isdir(p):
            mods.append(name)
    return mods


def new_path(mod):
    """Module path (after `crate::`) of a moved top-level module."""
    folder = MOVES[mod]
    return folder.replace("/", "::") + "::" + mod


def path_map():
    m = {}
    for mod in MOVES:
        m[mod] = new_path(mod)
    m.update(RENAMES)
    return m


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def rewrite(text, pm):
    roots = r"(\$crate|crate|commcanary)"
    # brace groups: crate::{a, b::c} -> crate::{core::a, evidence::b::c}
    def group(m):
        items = split_top(m.group(2))
        out = []
        for it in items:
            lead = len(it) - len(it.lstrip())
            body = it.strip()
            for old in sorted(pm, key=len, reverse=True):
                if body == old or body.startswith(old + "::") or body.startswith(old + " ") or body.startswith(old + ";"):
                    body = pm[old] + body[len(old):]
                    break
            out.append(it[:lead] + body)
        return m.group(1) + "::{" + ",".join(out) + "}"
    text = re.sub(roots + r"::\{((?:[^{}]|\{[^{}]*\})*)\}", group, text)
    for old in sorted(pm, key=len, reverse=True):
        text = re.sub(roots + "::" + re.escape(old) + r"(?![\w])", lambda m: m.group(1) + "::" + pm[old], text)
    return text


def insert_mods(path, mods):
    """Declare `pub mod` children right after the file's leading `//!` block."""
    with open(path) as f:
        lines = f.read().split("\n")
    have = {l.strip() for l in lines}
    decl = [f"pub mod {m};" for m in mods if f"pub mod {m};" not in have]
    if not decl:
        return
    i = 0
    while i < len(lines) and (lines[i].startswith("//!") or lines[i].startswith("#![")):
        i += 1
    lines[i:i] = decl
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    if subprocess.run(["git", "diff", "--quiet", "HEAD"]).returncode != 0:
        sys.exit("restructure: commit or stash changes first (it uses git mv)")
    unknown = [m for m in top_level_modules() if m not in MOVES and m not in STAY]
    if unknown:
        sys.exit(f"restructure: unplaced top-level modules {unknown}: add them to MOVES in {sys.argv[0]}")
    pm = path_map()
    # 1. folder owners: src/X.rs -> src/X/mod.rs
    for owner in OWNERS:
        f = f"src/{owner}.rs"
        if os.path.exists(f):
            git_mv(f, f"src/{owner}/mod.rs")
    # 2. moves
    children = {}
    for mod, folder in MOVES.items():
        if any(os.path.exists(p) for p in (f"src/{mod}.rs", f"src/{mod}", f"src/{folder}/{mod}.rs", f"src/{folder}/{mod}")):
            children.setdefault(folder, []).append(mod)
        if os.path.exists(f"src/{mod}.rs"):
            git_mv(f"src/{mod}.rs", f"src/{folder}/{mod}.rs")
        elif os.path.isdir(f"src/{mod}"):
            files = os.listdir(f"src/{mod}")
            if files == ["mod.rs"]:
                git_mv(f"src/{mod}/mod.rs", f"src/{folder}/{mod}.rs")
            else:
                git_mv(f"src/{mod}", f"src/{folder}/{mod}")
    # campaign::report -> report::campaign (its `super::` meant campaign)
    if os.path.exists("src/campaign/report.rs"):
        git_mv("src/campaign/report.rs", "src/report/campaign.rs")
        with open("src/report/campaign.rs") as f:
            t = f.read()
        t = re.sub(r"\bsuper::(?=[a-zA-Z_{])", "crate::campaign::", t)
        with open("src/report/campaign.rs", "w") as f:
            f.write(t)
        with open("src/campaign/mod.rs") as f:
            t = f.read()
        with open("src/campaign/mod.rs", "w") as f:
            f.write(t.replace("pub mod report;\n", ""))
    children.setdefault("report", []).append("campaign")
    # 3. folder mod.rs files
    for folder, mods in children.items():
        mod_rs = f"src/{folder}/mod.rs"
        if not os.path.exists(mod_rs):
            with open(mod_rs, "w") as f:
                f.write(FOLDER_DOCS[folder] + "\n")
            sh("git", "add", mod_rs)
        insert_mods(mod_rs, sorted(mods))
    # 4. lib.rs
    layers = [l for l in LAYERS if os.path.exists(f"src/{l}") or os.path.exists(f"src/{l}.rs")]
    with open("src/lib.rs", "w") as f:
        f.write(LIB_DOCS + "#![warn(missing_docs)]\n\n" + "".join(f"pub mod {l};\n" for l in layers))
    # 5. paths everywhere
    targets = []
    for root in ("src", "tests", "benches", "examples", "fuzz/fuzz_targets"):
        for dp, _, fs in os.walk(root):
            targets += [os.path.join(dp, x) for x in fs if x.endswith(".rs")]
    for p in targets:
        with open(p) as f:
            t = f.read()
        u = rewrite(t, pm)
        # `use crate::campaign::{self as cp, ...}` in the command layer
        u = u.replace("cp::report::", "crate::report::campaign::")
        if u != t:
            with open(p, "w") as f:
                f.write(u)
    # 6. a folder's mod.rs already has its children in scope: drop imports of them
    for folder, mods in children.items():
        mod_rs = f"src/{folder}/mod.rs"
        with open(mod_rs) as f:
            t = f.read()
        prefix = "crate::" + folder.replace("/", "::")
        for m in mods:
            t = re.sub(r"(use " + re.escape(prefix) + "::" + m + r"::\{)self, ", r"\1", t)
            t = re.sub(r"\nuse " + re.escape(prefix) + "::" + m + r";", "", t)
        with open(mod_rs, "w") as f:
            f.write(t)
    # 7. file paths named in the documentation
    docs = ["README.md"] + [os.path.join(d, f) for d in ("docs", "results-schema") if os.path.isdir(d) for f in os.listdir(d) if f.endswith(".md")]
    renames = {f"src/{o}.rs": f"src/{o}/mod.rs" for o in OWNERS}
    renames["src/campaign/report.rs"] = "src/report/campaign.rs"
    for mod, folder in MOVES.items():
        renames[f"src/{mod}.rs"] = f"src/{folder}/{mod}.rs"
        renames[f"src/{mod}/mod.rs"] = f"src/{folder}/{mod}/mod.rs" if os.path.isdir(f"src/{folder}/{mod}") else f"src/{folder}/{mod}.rs"
        renames[f"src/{mod}/"] = f"src/{folder}/{mod}/"
    for p in docs:
        with open(p) as f:
            t = f.read()
        u = re.sub(r"src/[a-z_/]+(?:\.rs|/)", lambda m: renames.get(m.group(0), m.group(0)), t)
        if u != t:
            with open(p, "w") as f:
                f.write(u)
    print("restructured; now: cargo build --locked && cargo test --locked --test layering")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Mask what differs between two runs of the same program on the same input:
clock readings, durations and what is derived from them, run ids, hosts,
pids, versions, the binary's own digest and commit, and the digests and sizes
of files whose bytes hold timings (run.json's shard list). Reads `commcanary inspect` JSON on stdin, writes it with every
such value replaced by "<masked>" (null stays null, so a field that is measured
in one run and absent in the other still differs). Keeps everything a record
says about what ran: phases, kinds, groups, sequence numbers, sizes, dtypes,
roots, peers, tokens, layers, iterations, warm-up flags, checks and what they
found, and which device intervals were measured. The compute events of the
phases that fill measured gaps (fill, overlap, membound-fill, host-delay) are
dropped: a gap quantized to 0 units records no event, so their number follows
the clock."""
import json
import re
import sys

# keys whose values are clock readings or derived from them
TIMED = re.compile(r"(_ns|_ms|_us|_s|_unix_ms|_ppm)$|^(units|quantum|offset|drift|error|windows?|samples|start|end|pid|host|hostname|run_id|tool|producer|commit|started|finished|git|version_long|env|argv|identity_sha256|binary_sha256|git_commit|git_tree"
    r"|rank0_identity_sha256|sha256|size_bytes)$")
GAP_FILLING = {"fill", "overlap", "membound_fill", "host_delay"}


def mask(v, key=""):
    if isinstance(v, dict):
        return {k: mask(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [mask(x, key) for x in v]
    if v is not None and TIMED.search(key):
        return "<masked>"
    return v


doc = mask(json.load(sys.stdin))
body = doc.get("body") if isinstance(doc, dict) else None
if isinstance(body, dict) and isinstance(body.get("compute"), list):
    body["compute"] = [c for c in body["compute"] if c.get("phase") not in GAP_FILLING]
json.dump(doc, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")

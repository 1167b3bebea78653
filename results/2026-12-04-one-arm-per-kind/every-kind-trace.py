"""Append to an imported tp2 trace (k.json) what it lacks of the kind table:
reduce (f32 root 1, bf16 root 0), a barrier, an uneven all-to-all (bf16),
an f16 reduce-scatter and all-gather, on group "1". Writes ek.json."""
import copy
import json

v = json.load(open('k.json'))
for rk in v['ranks']:
    r = rk['rank']
    colls = rk['collectives']
    t = copy.deepcopy(colls[-1])
    at = max(c['host_start_ns'] + c['host_duration_ns'] for c in colls) + 10000

    def add(kind, dtype, ins, outs, root=None, peer=None, si=None, so=None, group='1'):
        global at
        c = copy.deepcopy(t)
        c.update(kind=kind, source_name=kind, group=group, dtype=dtype, in_elems=ins, out_elems=outs, root=root, peer=peer,
                 in_split_elems=si, out_split_elems=so, host_start_ns=at, host_duration_ns=1000, device=None, compute_before=[])
        c['seq'] = sum(1 for x in colls if x['group'] == group and x['peer'] is None)
        colls.append(c)
        at += 10000

    add('reduce', 'f32', 1000, 1000, root=1)
    add('reduce', 'bf16', 1000, 1000, root=0)
    add('barrier', 'f32', 0, 0)
    # rank r sends r + 1 + 2k elements to rank k
    si = [r + 1 + 2 * k for k in range(2)]
    so = [s + 2 * r + 1 for s in range(2)]
    add('all_to_all', 'bf16', sum(si), sum(so), si=si, so=so)
    add('reduce_scatter', 'f16', 64, 32)
    add('all_gather', 'f16', 48, 96)
    rk['trailing_compute'] = []
json.dump(v, open('ek.json', 'w'))

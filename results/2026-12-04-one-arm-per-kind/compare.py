"""Compare BEFORE's and AFTER's replay-trace records (every field but the
times) and headers, for each --op; print what differs."""
import json
import sys

drop = {'actual_gap_ns', 'elapsed_ns', 'target_gap_ns'}
same = True
for op in sys.argv[1:] or ['sum', 'avg', 'max']:
    for r in [0, 1]:
        a = json.load(open(f'before-{op}/replay-trace.rank-{r}.json'))
        b = json.load(open(f'after-{op}/replay-trace.rank-{r}.json'))
        ra = [{k: v for k, v in x.items() if k not in drop} for x in a['records']]
        rb = [{k: v for k, v in x.items() if k not in drop} for x in b['records']]
        if ra != rb:
            same = False
        hd = sorted(k for k in set(a['header']) | set(b['header']) if a['header'].get(k) != b['header'].get(k))
        kinds = sorted({x['kind'] for x in ra})
        print(f"--op {op} rank {r}: {len(ra)} records, {sum(x['checked'] for x in ra)} checked, kinds {kinds}; "
              f"records {'identical' if ra == rb else 'DIFFER'} apart from times; header fields that differ: {hd}")
print('all records identical apart from times:', same)
sys.exit(0 if same else 1)

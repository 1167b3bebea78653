# Side by side on the same evidence: the verdict each pair's validation gets from the
# old method (paired rounds against reference job-1 alone, no cap) and from the new
# (prediction interval over the 3 reference jobs), default thresholds 0.95 / 1.05.
import json, math, sys, glob
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646}
def geo(rows): return math.exp(sum(math.log(r['busbw_gbps']) for r in rows) / len(rows))
def stats(d):
    rs = json.load(open(d + '/rounds.json'))['rounds']
    return {'all-reduce': [geo(r['all_reduce']) for r in rs], 'all-gather': [geo(r['all_gather']) for r in rs],
            'workload': [max(r['token_latency_median_us_per_rank']) for r in rs]}
thr = {'all-reduce': (0.95, 1), 'all-gather': (0.95, 1), 'workload': (1.05, -1)}
def verdict(lo, hi, t, sign):
    if sign > 0: return 'pass' if lo >= t else ('fail' if hi < t else 'inconclusive')
    return 'pass' if hi <= t else ('fail' if lo > t else 'inconclusive')
def worst(vs): return 'fail' if 'fail' in vs else ('inconclusive' if 'inconclusive' in vs else 'pass')
for p in sys.argv[1:]:
    v = stats(p + '/validation'); j1 = stats(p + '/ref/job-1')
    old = []
    for k, (t, s) in thr.items():
        n = min(len(v[k]), len(j1[k])); d = [math.log(a / b) for a, b in zip(v[k][:n], j1[k][:n])]
        m = sum(d) / n; sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1)); h = T975[n - 1] * sd / math.sqrt(n)
        old.append((k, verdict(math.exp(m - h), math.exp(m + h), t, s), math.exp(m)))
    new = json.load(open(p + '/validation/report.json'))['verdict']
    print(p, 'old (job-1 only, paired rounds):', worst([o[1] for o in old]), ' '.join(f"{k}={vv}({r:.2f})" for k, vv, r in old), '| new (3 jobs):', new)

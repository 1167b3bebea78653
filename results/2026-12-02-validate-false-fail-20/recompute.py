"""Recompute every validation's verdict of a validate-false-fail run from its
report.json files under four interval rules, to compare them on the same
evidence:
  A current       t(K-1, 0.975) * s_J * sqrt(1 + 1/K) per check (the binary's rule then)
  B bonferroni    each of the m ratio checks at 1 - 0.025/m (one family)
  C bonf+floor    B with s = max(s_J, s_w / sqrt(n)) (job variance component truncated at zero)
  D floor         A with that floor
Usage: python3 recompute.py RUN_DIR   (RUN_DIR holds [stream-*/]COND/pair-*/validation/report.json)
Only K = 3 reference jobs is handled (t with 2 degrees of freedom has a closed form)."""
import json, glob, math, sys
def t2(p): return (2*p-1)/math.sqrt(2*p*(1-p))   # Student t quantile, 2 df (closed form)
res = {}
for rep in sorted(glob.glob(sys.argv[1] + '/**/pair-*/validation/report.json', recursive=True)):
    cond = rep.split('/')[-4]
    r = json.load(open(rep))
    ratios = [c for c in r['checks'] if c.get('ratio')]
    m = len(ratios)
    out = {}
    for name, q, floor in [('A current', 0.975, False), ('B bonferroni', 1 - 0.025 / m, False), ('C bonf+floor', 1 - 0.025 / m, True), ('D floor', 0.975, True)]:
        v = 'pass'
        worst = 0
        for c in ratios:
            x = c['ratio']; k = x['reference_jobs']; n = x['pairs']
            assert k == 3
            s = x['sd_log']
            if floor and x.get('sd_log_within_jobs') is not None: s = max(s, x['sd_log_within_jobs'] / math.sqrt(n))
            half = t2(q) * s * math.sqrt(1 + 1 / k)
            d = math.log(x['ratio']); lo, hi = math.exp(d - half), math.exp(d + half); th = x['threshold']
            if x['direction'] == 'at-least': vv = 'pass' if lo >= th else ('fail' if hi < th else 'inc')
            else: vv = 'pass' if hi <= th else ('fail' if lo > th else 'inc')
            rank = {'pass': 0, 'inc': 1, 'fail': 2}
            worst = max(worst, rank[vv])
        out[name] = ['pass', 'inc', 'fail'][worst]
    res.setdefault(cond, []).append(out)
for cond, lst in res.items():
    for name in lst[0]:
        c = {v: sum(1 for o in lst if o[name] == v) for v in ['pass', 'inc', 'fail']}
        print(cond, name, len(lst), c)

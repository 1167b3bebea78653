#!/usr/bin/env python3
"""Recompute a format-2/3 report's pair intervals as format 4 prints them (simultaneous, Bonferroni-Dunn
over the phase's pairs) from the printed 95% intervals alone, for reports whose shards were not kept.

    python3 results/2026-11-30-h200x2-aa-ten-v4/derive_simultaneous.py REPORT_JSON AA_LABELS_COMMA_SEPARATED

Exact for Student-t intervals (symmetric on the log scale): se = half-width / t(0.975, n-1).
"""
import json, math, sys
def tpdf(x, df): return math.gamma((df+1)/2)/(math.sqrt(df*math.pi)*math.gamma(df/2))*(1+x*x/df)**(-(df+1)/2)
def tcdf(x, df, n=20000):
    # 0.5 + integral 0..x
    h=x/n; s=tpdf(0,df)+tpdf(x,df)
    for i in range(1,n): s+= (4 if i%2 else 2)*tpdf(i*h,df)
    return 0.5+s*h/3
def tq(p, df):
    lo,hi=0.0,100.0
    for _ in range(60):
        mid=(lo+hi)/2
        if tcdf(mid,df)<p: lo=mid
        else: hi=mid
    return (lo+hi)/2
r=json.load(open(sys.argv[1])); aa=set(sys.argv[2].split(','))
m=r['policy']['min_effect_pct']
for p in r['phases']:
    n=p['rounds']; k=len(p['rows']); P=k*(k-1)//2
    t95=tq(0.975,n-1); tadj=tq(1-0.05/(2*P),n-1)
    dec=0; aadec=0
    for q in p['pairs']:
        lo=math.log1p(q['ci_low_pct']/100); hi=math.log1p(q['ci_high_pct']/100)
        mid=(lo+hi)/2; se=(hi-lo)/2/t95
        L=math.expm1(mid-tadj*se)*100; H=math.expm1(mid+tadj*se)*100
        d = H < -m or L > m
        dec+=d
        if q['a'] in aa and q['b'] in aa:
            was = q['relation'] not in ('not_distinguished','tied')
            if was or d: print(p['phase'], q['a'], q['b'], f"printed {q['diff_pct']:+.2f}% [{q['ci_low_pct']:+.2f}, {q['ci_high_pct']:+.2f}]% -> simultaneous [{L:+.2f}, {H:+.2f}]%", 'decided' if d else 'not decided')
            aadec+=d
    print(p['phase'], f"t(0.975,{n-1})={t95:.3f}, t(1-0.05/{2*P},{n-1})={tadj:.3f}; pairs decided under simultaneous intervals: {dec}/{len(p['pairs'])}; A/A decided: {aadec}")

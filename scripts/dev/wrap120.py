#!/usr/bin/env python3
"""Lay a source tree out as the 120-column re-layout did: wrap `//` comment lines past 120
columns at word boundaries (indent and prefix kept) and split string literals past 120 at a
space inside the string, continuing with a trailing backslash. Prints how many lines it added."""
import os, re, sys
W = 120
def wrap_comment(line):
    ind, pre, text = re.match(r'^(\s*)(//[/!]?\s?)(.*)$', line).groups()
    head, out, cur = ind + pre, [], ''
    for w in text.split(' '):
        if cur and len(head) + len(cur) + 1 + len(w) > W:
            out.append(head + cur); cur = w
        else:
            cur = (cur + ' ' + w) if cur else w
    return out + [head + cur]
def inside(line, start_inside):
    """For each index, whether it lies inside a string literal."""
    res, ins, esc = [], start_inside, False
    for ch in line:
        res.append(ins)
        if esc: esc = False
        elif ch == '\\' and ins: esc = True
        elif ch == '"': ins = not ins
    return res
def wrap_string(line, start_inside):
    ind = re.match(r'^(\s*)', line).group(1)
    out, rest, si = [], line, start_inside
    while len(rest) > W:
        flags = inside(rest, si)
        cuts = [i for i in range(len(ind) + 1, W - 1) if rest[i] == ' ' and flags[i] and rest[i - 1] != '\\']
        if not cuts: break
        c = cuts[-1]
        out.append(rest[:c + 1] + '\\')
        rest, si = ind + '    ' + rest[c + 1:], True
    return out + [rest]
added = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f)
        new, prev_cont = [], False
        for l in open(p).read().split('\n'):
            cont = prev_cont
            prev_cont = l.endswith('\\') and not l.lstrip().startswith('//')
            if len(l) <= W: new.append(l); continue
            s = l.lstrip()
            w = wrap_comment(l) if s.startswith('//') else wrap_string(l, cont) if ('"' in l or cont) else [l]
            added += len(w) - 1
            new.extend(w)
        open(p, 'w').write('\n'.join(new))
print('added', added)

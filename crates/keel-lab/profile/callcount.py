#!/usr/bin/env python3
"""Calls per call (or message) of the functions whose names match a pattern, from an
`icount.py` directory: how many `malloc`s, task polls, wake-ups or lock slow paths a call makes.

    crates/keel-lab/profile/callcount.py DIR server|client PATTERN... [--n1 N] [--n2 N]

Sums callgrind's call counts of every function matching each PATTERN (a Python regex searched
in the function's name) in the N1 and N2 runs, and prints (C(N2) - C(N1)) / (N2 - N1) for each
pattern, so start-up and warm-up cancel out. E.g. `'^malloc$' '^realloc$' 'Harness.*::poll$'`.
"""
import argparse
import re

p = argparse.ArgumentParser()
p.add_argument('dir')
p.add_argument('side', choices=['server', 'client'])
p.add_argument('patterns', nargs='+')
p.add_argument('--n1', type=int, default=2000)
p.add_argument('--n2', type=int, default=12000)
a = p.parse_args()


def counts(path):
    """Calls of each function, summed over its callers."""
    names, totals, callee = {}, {}, None
    for line in open(path, errors='replace'):
        if line.startswith('cfn=') or line.startswith('cfnc='):
            m = re.match(r'cfnc?=\((\d+)\)(?: (.*))?', line.rstrip('\n'))
            if m:
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                callee = m.group(1)
            else:
                callee = line.rstrip('\n').split('=', 1)[1]
                names.setdefault(callee, callee)
        elif line.startswith('calls=') and callee is not None:
            n = int(line.split('=', 1)[1].split()[0])
            totals[callee] = totals.get(callee, 0) + n
            callee = None
        if line.startswith('fn=('):
            m = re.match(r'fn=\((\d+)\)(?: (.*))?', line.rstrip('\n'))
            if m and m.group(2) is not None:
                names[m.group(1)] = m.group(2)
    return {names.get(k, k): v for k, v in totals.items()}


s = a.side[0]
before, after = counts(f'{a.dir}/{s}{a.n1}.out'), counts(f'{a.dir}/{s}{a.n2}.out')
for pattern in a.patterns:
    rx = re.compile(pattern)
    c1 = sum(v for k, v in before.items() if rx.search(k))
    c2 = sum(v for k, v in after.items() if rx.search(k))
    print(f'{(c2 - c1) / (a.n2 - a.n1):8.2f}  {pattern}')

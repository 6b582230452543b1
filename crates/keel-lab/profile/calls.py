#!/usr/bin/env python3
"""Per-function instructions per call from an `icount.py` directory.

    crates/keel-lab/profile/calls.py DIR server|client [--inclusive] [--top N]

The difference of the N1 and N2 runs' `callgrind_annotate` listings, divided by N2 - N1.
"""
import argparse
import re
import subprocess

p = argparse.ArgumentParser()
p.add_argument('dir')
p.add_argument('side', choices=['server', 'client'])
p.add_argument('--inclusive', action='store_true')
p.add_argument('--top', type=int, default=40)
p.add_argument('--n1', type=int, default=2000)
p.add_argument('--n2', type=int, default=12000)
a = p.parse_args()


def listing(path):
    args = ['callgrind_annotate', '--threshold=100', '--auto=no']
    if a.inclusive:
        args.append('--inclusive=yes')
    text = subprocess.run(args + [path], capture_output=True, text=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r'\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)', line)
        if m:
            costs[m.group(2)] = costs.get(m.group(2), 0) + int(m.group(1).replace(',', ''))
    return costs


s = a.side[0]
before, after = listing(f'{a.dir}/{s}{a.n1}.out'), listing(f'{a.dir}/{s}{a.n2}.out')
rows = sorted(((after.get(k, 0) - before.get(k, 0)) / (a.n2 - a.n1), k)
              for k in set(before) | set(after))
for per_call, name in reversed(rows[-a.top:]):
    print(f'{per_call:8.0f}  {name[:160]}')

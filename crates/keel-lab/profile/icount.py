#!/usr/bin/env python3
"""Instructions per call of `keel-lab peers`' latency workload (one call in flight), on each
side, counted by callgrind: instruction counts do not move with a noisy machine's timing.

    crates/keel-lab/profile/icount.py SYSTEM [KEEL_LAB_BINARY]

Runs the server (`keel-lab peers-serve`) and the client (`keel-lab peers-latency`) under
callgrind twice, with N1 and N2 timed calls (env N1, N2; default 2,000 and 12,000), and prints
(I(N2) - I(N1)) / (N2 - N1) for each side, so start-up and warm-up cancel out. The callgrind
files stay in the directory printed, for `calls.py`. SYSTEM: raw, keel-tcp-async, keel-tcp-sync,
tarpc, ... (`keel-lab peers --help`).
"""
import os
import subprocess
import sys
import tempfile

system = sys.argv[1]
binary = sys.argv[2] if len(sys.argv) > 2 else os.environ.get('BIN', 'target/release/keel-lab')
n1, n2 = int(os.environ.get('N1', 2000)), int(os.environ.get('N2', 12000))
out = tempfile.mkdtemp(prefix='icount-')


def total(path):
    for line in open(path):
        if line.startswith(('summary:', 'totals:')):
            return int(line.split()[1])
    raise SystemExit(f'no totals in {path}')


def run(n):
    server_out, client_out = f'{out}/s{n}.out', f'{out}/c{n}.out'
    grind = ['valgrind', '--tool=callgrind', '--cache-sim=no']
    server = subprocess.Popen(
        grind + [f'--callgrind-out-file={server_out}', binary, 'peers-serve', '--system', system],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = server.stdout.readline().strip().removeprefix('listening on ')
    client = subprocess.run(
        grind + [f'--callgrind-out-file={client_out}', binary, 'peers-latency', '--system', system,
                 '--addr', addr, '--warmup', '500', '--calls', str(n)],
        capture_output=True, text=True)
    print(client.stdout.strip(), file=sys.stderr)
    server.stdin.close()
    server.wait()
    return total(server_out), total(client_out)


s1, c1 = run(n1)
s2, c2 = run(n2)
d = n2 - n1
print(f'{system}: server {(s2 - s1) / d:.0f} instr/call, client {(c2 - c1) / d:.0f} instr/call'
      f'  (files in {out})')

#!/usr/bin/env python3
"""Instructions per call of `keel-lab peers`' latency workload (one call in flight), on each
side, counted by callgrind: instruction counts do not move with a noisy machine's timing.

    crates/keel-lab/profile/icount.py SYSTEM [KEEL_LAB_BINARY]

Runs the server (`keel-lab peers-serve`) and the client (`keel-lab peers-latency`) under
callgrind twice, with N1 and N2 timed calls (env N1, N2; default 2,000 and 12,000), and prints
(I(N2) - I(N1)) / (N2 - N1) for each side, so start-up and warm-up cancel out. The callgrind
files stay in the directory printed, for `calls.py`. SYSTEM: raw, keel-tcp-async, keel-tcp-sync,
tarpc, ... (`keel-lab peers --help`).

With INFLIGHT=K (K > 1), the calls are made K at a time on the one connection (`peers-latency
--inflight K`: K tasks on a runtime with one worker per CPU, as `peers`' throughput workload),
so the counts are a loaded pipeline's: its batched reads and writes. Not for `raw`, whose client
makes one call at a time. With CONNECTIONS=C as well, the K calls are spread over C connections
(`--connections C`), as `peers`' throughput workload over 8 connections.

With STREAM=1, instructions per message of the streaming workload instead: the client
(`keel-lab peers-streaming --count N`) reads one server stream of N quotes to its end, N1 and
N2 (default 100,000 and 600,000) messages. SYSTEM: raw, tonic, keel-tcp-async.
"""
import os
import subprocess
import sys
import tempfile

system = sys.argv[1]
binary = sys.argv[2] if len(sys.argv) > 2 else os.environ.get('BIN', 'target/release/keel-lab')
stream = os.environ.get('STREAM') == '1'
inflight = int(os.environ.get('INFLIGHT', 1))
connections = int(os.environ.get('CONNECTIONS', 1))
n1 = int(os.environ.get('N1', 100_000 if stream else 2000))
n2 = int(os.environ.get('N2', 600_000 if stream else 12000))
unit = 'message' if stream else 'call'
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
    workload = (['peers-streaming', '--count', str(n)] if stream
                else ['peers-latency', '--warmup', '500', '--calls', str(n), '--inflight', str(inflight),
                     '--connections', str(connections)])
    client = subprocess.run(
        grind + [f'--callgrind-out-file={client_out}', binary] + workload
        + ['--system', system, '--addr', addr],
        capture_output=True, text=True)
    print(client.stdout.strip(), file=sys.stderr)
    server.stdin.close()
    server.wait()
    return total(server_out), total(client_out)


s1, c1 = run(n1)
s2, c2 = run(n2)
d = n2 - n1
print(f'{system}: server {(s2 - s1) / d:.0f} instr/{unit}, client {(c2 - c1) / d:.0f} instr/{unit}'
      f'  (files in {out})')

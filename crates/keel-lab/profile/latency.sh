#!/bin/bash
# The pinned latency workload of `keel-lab peers`, alone: server and client on CPU 0, and each
# process's user and system CPU per call (from the kernel's accounting, so a rough split).
#
#   crates/keel-lab/profile/latency.sh SYSTEM [CALLS]     (BIN: the keel-lab binary)
set -euo pipefail
sys=$1; n=${2:-20000}; bin=${BIN:-target/release/keel-lab}
tmp=$(mktemp -d)
coproc SRV { taskset -c 0 /usr/bin/time -f "%U %S" -o "$tmp/server" "$bin" peers-serve --system "$sys"; }
read -r line <&"${SRV[0]}"; addr=${line#listening on }
/usr/bin/time -f "%U %S" -o "$tmp/client" taskset -c 0 "$bin" peers-latency --system "$sys" \
    --addr "$addr" --warmup 2000 --calls "$n" > "$tmp/latency"
exec {SRV[1]}>&-; wait
read -r cu cs < "$tmp/client"; read -r su ss < "$tmp/server"
python3 - "$sys" "$n" "$cu" "$cs" "$su" "$ss" "$(cat "$tmp/latency")" <<'PY'
import sys
sysname, n, cu, cs, su, ss, latency = sys.argv[1], int(sys.argv[2]) + 2000, *map(float, sys.argv[3:7]), sys.argv[7]
us = lambda t: t / n * 1e6
print(f'{sysname}: {latency}; CPU µs/call: client user {us(cu):.2f} sys {us(cs):.2f}, '
      f'server user {us(su):.2f} sys {us(ss):.2f}')
PY
rm -rf "$tmp"

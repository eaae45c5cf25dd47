#!/usr/bin/env bash
# Runs a benchmark script on N emulated nodes: network namespaces pnode0..
# pnodeN-1 behind RATE links (../shared/bench/peers/netns.sh), the script in
# pnode0 with --netns --nodes N --rate RATE and the flags given. Needs root
# and iproute2. Ray's processes and the namespaces are removed at the end.
#   N=4 RATE=1gbit bash bench/netns_run.sh bench/train/async_sgd_netns.py [its flags]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NETNS=${NETNS:-$ROOT/../shared/bench/peers/netns.sh}
N=${N:-4} RATE=${RATE:-1gbit}
[ $# -ge 1 ] || { echo "usage: N=4 RATE=1gbit bash bench/netns_run.sh SCRIPT [flags]" >&2; exit 2; }
[ -f "$NETNS" ] || { echo "netns.sh not found at $NETNS (set NETNS=...)" >&2; exit 2; }
SCRIPT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
trap '"$ROOT/.venv/bin/ray" stop --force >/dev/null 2>&1 || true; bash "$NETNS" down >/dev/null 2>&1 || true' EXIT
bash "$NETNS" up "$N" "$RATE" 100us >/dev/null
ip netns exec pnode0 "$ROOT/.venv/bin/python" "$SCRIPT" --netns --nodes "$N" --rate "$RATE" "$@"

#!/usr/bin/env bash
# A collectives benchmark on an emulated cluster: N network namespaces with
# RATE links (../shared/bench/peers/netns.sh), one raylet each; the driver on
# node 0. Needs root and iproute2. The namespaces are removed at the end.
#   N=8 RATE=1gbit SIZES=33554432 bench/collectives/run_netns.sh [broadcast.py|reduce.py] [its flags]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NETNS=${NETNS:-$ROOT/../shared/bench/peers/netns.sh}
N=${N:-8} RATE=${RATE:-1gbit} SIZES=${SIZES:-33554432}
[ -x "$NETNS" ] || [ -f "$NETNS" ] || { echo "netns.sh not found at $NETNS (set NETNS=...)" >&2; exit 2; }
bash "$NETNS" up "$N" "$RATE" 100us >/dev/null
trap 'bash "$NETNS" down >/dev/null 2>&1 || true' EXIT
SCRIPT=broadcast.py
case "${1:-}" in *.py) SCRIPT=$1; shift ;; esac
ip netns exec pnode0 "$ROOT/.venv/bin/python" "$HERE/$SCRIPT" --netns --nodes "$N" --rate "$RATE" \
  --sizes "$SIZES" "$@"

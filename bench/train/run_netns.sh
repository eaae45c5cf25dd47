#!/usr/bin/env bash
# bench/train/async_sgd_netns.py on N network namespaces with RATE links
# (../shared/bench/peers/netns.sh), the server in pnode0: phalanx with
# collective.reduce, phalanx naive and Ray, one after the other on the same
# namespaces. Needs root and iproute2; Ray the pip extra 'bench'. The
# namespaces are removed at the end.
#   N=4 RATE=1gbit bash bench/train/run_netns.sh [async_sgd_netns.py flags]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NETNS=${NETNS:-$ROOT/../shared/bench/peers/netns.sh}
N=${N:-4} RATE=${RATE:-1gbit}
[ -f "$NETNS" ] || { echo "netns.sh not found at $NETNS (set NETNS=...)" >&2; exit 2; }
RUNS=reduce,naive
"$ROOT/.venv/bin/python" -c "import ray" 2>/dev/null && RUNS=reduce,naive,ray
trap '"$ROOT/.venv/bin/ray" stop --force >/dev/null 2>&1 || true; bash "$NETNS" down >/dev/null 2>&1 || true' EXIT
bash "$NETNS" up "$N" "$RATE" 100us >/dev/null
ip netns exec pnode0 "$ROOT/.venv/bin/python" "$HERE/async_sgd_netns.py" --netns --nodes "$N" --rate "$RATE" \
  --runs "$RUNS" "$@"

#!/usr/bin/env bash
# bench/train/async_sgd_netns.py on N network namespaces with RATE links
# (bench/netns_run.sh), the server in pnode0: phalanx with
# collective.reduce, phalanx naive and Ray (when installed: the pip extra
# 'bench'), one after the other on the same namespaces.
#   N=4 RATE=1gbit bash bench/train/run_netns.sh [async_sgd_netns.py flags]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUNS=reduce,naive
"$HERE/../../.venv/bin/python" -c "import ray" 2>/dev/null && RUNS=reduce,naive,ray
N=${N:-4} exec bash "$HERE/../netns_run.sh" "$HERE/async_sgd_netns.py" --runs "$RUNS" "$@"

#!/usr/bin/env bash
# bench/rl/impala_netns.py on N network namespaces with RATE links
# (bench/netns_run.sh), the learner in pnode0 and a simulator in each
# other: phalanx, then Ray (when installed: the pip extra 'bench'), on the
# same namespaces.
#   N=8 RATE=1gbit bash bench/rl/run_netns.sh [impala_netns.py flags]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUNS=phalanx
"$HERE/../../.venv/bin/python" -c "import ray" 2>/dev/null && RUNS=phalanx,ray
N=${N:-8} exec bash "$HERE/../netns_run.sh" "$HERE/impala_netns.py" --runs "$RUNS" "$@"

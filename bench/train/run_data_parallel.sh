#!/usr/bin/env bash
# bench/train/data_parallel_bench.py on N network namespaces with RATE links
# (bench/netns_run.sh), rank k in pnodeK: every fusion and compression
# setting, then Ray (when installed), one after the other on the same
# namespaces.
#   N=4 RATE=1gbit bash bench/train/run_data_parallel.sh [data_parallel_bench.py flags]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
N=${N:-4} exec bash "$HERE/../netns_run.sh" "$HERE/data_parallel_bench.py" "$@"

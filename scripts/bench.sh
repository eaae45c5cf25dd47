#!/usr/bin/env bash
# Installs phalanx plus the peers it is measured against (Ray, Dask: PyPI, into .venv only),
# then runs the micro-benchmarks side by side. Arguments go to bench/microbenchmark.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PHALANX_EXTRAS=bench bash scripts/setup.sh
exec .venv/bin/python bench/microbenchmark.py "$@"

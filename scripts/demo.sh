#!/usr/bin/env bash
# Installs and builds phalanx, then runs the demo on an embedded local cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== running examples/demo.py"
exec .venv/bin/python examples/demo.py "$@"

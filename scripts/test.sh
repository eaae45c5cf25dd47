#!/usr/bin/env bash
# Installs and builds phalanx, then runs every test: the C++ GoogleTest suites
# (through CTest), a short run of the fuzz targets (scripts/fuzz.sh) and the
# Python end-to-end tests (pytest). Each test starts
# and stops its own redis-server and raylets on free ports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Headless Chromium for the dashboard's test in a real browser (tests/python/test_dashboard.py)
bash scripts/install_debs.sh chromium
build_dir=$(ls -d build/cp*/ | head -n 1)
echo "== C++ tests (ctest in $build_dir)"
.venv/bin/ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j 2
echo "== fuzzing (libFuzzer, 10 s per target; docs/security.md)"
bash scripts/fuzz.sh 10
echo "== Python tests (pytest)"
# Two pytest processes, a test file each at a time (a file's tests share its clusters); most tests wait on
# the processes they start, so two halve the time on two cores. PHALANX_TEST_PROCESSES=0: one process.
.venv/bin/python -m pytest -q -n "${PHALANX_TEST_PROCESSES:-2}" --dist loadfile tests/python tests/chaos "$@"

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
# A test that fails beside another file's clusters runs again alone (pytest --last-failed, one process): the
# run passes if each passes then; they are named here as timing to mend. A test that fails alone fails the run.
procs="${PHALANX_TEST_PROCESSES:-2}"
if ! .venv/bin/python -m pytest -q -n "$procs" --dist loadfile tests/python tests/chaos "$@"; then
  [ "$procs" != 0 ] || exit 1
  echo "== failed beside another pytest process; running them again alone:"
  .venv/bin/python -c 'import json; [print("   ", t) for t in json.load(open(".pytest_cache/v/cache/lastfailed"))]'
  .venv/bin/python -m pytest -q --last-failed --last-failed-no-failures none tests/python tests/chaos "$@"
  echo "== those passed alone: the failures above were timing under two processes"
fi

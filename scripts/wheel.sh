#!/usr/bin/env bash
# Builds the self-contained wheel: ${WHEEL_DIR:-dist}/phalanx-VERSION-cpXY-cpXY-manylinux_*.whl.
# It carries the extension, the raylet and the C++ worker (stripped), a redis-server built from
# Debian's source (scripts/build_redis.sh), and every shared library they need that a manylinux
# system may lack (auditwheel repair grafts them into phalanx.libs/ and points the ELF files'
# RPATH there, executables included). `pip install` it on any Linux x86_64 with glibc as new as
# its tag says and Python 3.11: no compiler, no Debian package, no root. Uses the .venv build
# (scripts/setup.sh), so a second run is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${WHEEL_DIR:-dist}
[ -x .venv/bin/auditwheel ] || PHALANX_EXTRAS=wheel bash scripts/setup.sh  # (pyproject's `wheel` extra)
bash scripts/build_redis.sh
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "== building the wheel"
.venv/bin/python -m pip wheel . -q --no-build-isolation --no-deps -w "$raw" \
  -C cmake.define.PHALANX_BUNDLE_REDIS="$PWD/build/redis/redis-server" -C install.strip=true
mkdir -p "$out"
echo "== auditwheel repair (grafting the shared libraries)"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair -w "$out" "$raw"/phalanx-*.whl
whl=$(ls -t "$out"/phalanx-*manylinux*.whl | head -1)
.venv/bin/auditwheel show "$whl"
echo "== $whl ($(du -h "$whl" | cut -f1))"

#!/usr/bin/env bash
# Installs everything phalanx needs on a fresh Debian 12 machine and builds it:
#   - Debian packages: compilers, Boost, Protocol Buffers, hiredis, redis-server, GoogleTest, jemalloc,
#     msgpack-c (the C++ API's serializer), OpenSSL's libcrypto (the handshake's HMAC and random source),
#     util-linux (setpriv, for the test of another local user), OpenSSH's client and server (`phalanx up`
#     and its test, whose hosts are network namespaces each running an sshd)
#   - a virtual environment in .venv with the Python dependencies from pyproject.toml
#   - phalanx itself (`pip install .`: CMake builds the extension, the raylet and the C++ tests)
# Safe to run again: installed pieces are skipped, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential ccache pkg-config libboost-dev libprotobuf-dev protobuf-compiler
              libhiredis-dev redis-server libgtest-dev libgmock-dev libjemalloc-dev libmsgpack-cxx-dev libssl-dev iproute2 procps util-linux
              python3-venv python3-dev openssh-client openssh-server)
bash scripts/install_debs.sh "${APT_PACKAGES[@]}"

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
echo "== installing Python build tools and dependencies"
.venv/bin/python -m pip install -q --upgrade pip
# Build requirements (pyproject [build-system]) go into the venv so builds are incremental
# (--no-build-isolation reuses build/ instead of a fresh temporary build each time).
.venv/bin/python -m pip install -q "scikit-build-core>=0.9" "pybind11>=2.11" "cmake>=3.20" ninja
# ccache keeps compiled objects across clones of the project on this machine (paths taken relative to the
# clone: CCACHE_BASEDIR), so a fresh clone's build (CI's) takes a few minutes, not 13, where an earlier one ran.
source scripts/ccache_env.sh
echo "== building and installing phalanx (C++ build in build/, ~13 min the first time on 2 cores, ~2 with ccache)"
.venv/bin/python -m pip install -q --no-build-isolation ".[test${PHALANX_EXTRAS:+,$PHALANX_EXTRAS}]"
echo "== phalanx $(.venv/bin/python -c 'import phalanx; print(phalanx.__version__)') is installed in .venv"

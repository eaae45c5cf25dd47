#!/usr/bin/env bash
# The GPU tests, on a machine with an NVIDIA GPU and no package registry (the
# workplace's `device` machine: CUDA, PyTorch, CMake, ninja, pybind11,
# scikit-build-core and nvidia-nccl-cu13 are there; Boost, protobuf, hiredis,
# redis-server, GoogleTest, jemalloc and msgpack are not).
#
#   bash scripts/device_test.sh pack   # here, with a registry: the .deb files into .device/debs (~20 MB)
#   bash scripts/device_test.sh run    # there (carry .device): unpack, build with nvcc, run the GPU tests
#
# `run` unpacks the packages into /opt/phalanx-deps (dpkg -x: nothing is
# installed system-wide), builds phalanx with CUDA into build/, installs the
# Python package into /tmp/phalanx-site, then runs: the CUDA C++ tests (the
# reduce kernels against the CPU kernels, the staged GPU -> GPU copy), the
# object-layer C++ tests, and the Python GPU tests (CUDA tensors, GPU
# scheduling, NCCL). Logs and figures go to $OUT (or .device/out).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(libboost1.81-dev libprotobuf-dev libprotobuf32 libprotoc32 protobuf-compiler zlib1g-dev
          libhiredis-dev libhiredis0.14 redis-server redis-tools liblzf1 liblua5.1-0 libjemalloc2 libjemalloc-dev
          libgtest-dev libgmock-dev libmsgpack-cxx-dev libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3)

case "${1:-}" in
  pack)
    mkdir -p .device/debs
    EXCLUDE="$(git rev-parse --git-dir)/info/exclude"
    mkdir -p "$(dirname "$EXCLUDE")"
    grep -qx '/.device/' "$EXCLUDE" 2>/dev/null || echo '/.device/' >> "$EXCLUDE"  # carried, never committed
    apt-get update -qq
    (cd .device/debs && apt-get download "${PACKAGES[@]}")
    du -sh .device/debs
    echo "now: the device tool's run with carry=['.device'] and command 'bash scripts/device_test.sh run'"
    ;;
  run)
    OUT=${OUT:-.device/out}
    mkdir -p "$OUT"
    D=/opt/phalanx-deps
    mkdir -p "$D"
    for f in .device/debs/*.deb; do dpkg -x "$f" "$D"; done
    ML=x86_64-linux-gnu
    export PATH="$D/usr/bin:$D/usr/sbin:$PATH"
    export CPATH="$D/usr/include:$D/usr/include/$ML${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$D/usr/lib/$ML${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$D/usr/lib/$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CMAKE_PREFIX_PATH="$D/usr"
    export PKG_CONFIG_PATH="$D/usr/lib/$ML/pkgconfig:$D/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$D"  # the .pc files say prefix=/usr
    {
      nvidia-smi -L || true
      nvcc --version | tail -1
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    } 2>&1 | tee "$OUT/machine.txt"
    echo "== building phalanx with CUDA (build/)"
    set -o pipefail
    python3 -m pip install --no-build-isolation --no-deps --target /tmp/phalanx-site . 2>&1 | tail -20 \
      | tee "$OUT/build.txt"
    B=$(ls -d build/cp3*-linux_x86_64 | head -1)
    echo "== C++: CUDA and object-layer tests"
    ctest --test-dir "$B" -R 'Cuda|Staged|ObjectManager|MemoryTransfer|ReduceOps' --output-on-failure 2>&1 \
      | tee "$OUT/ctest.txt"
    "$B"/tests/cuda_staged_test 2>&1 | grep -E 'GB/s|OK|FAIL' | tee -a "$OUT/ctest.txt" || true
    echo "== Python: GPU tests"
    PYTHONPATH=/tmp/phalanx-site python3 -m pytest -q -rs tests/python/test_gpu.py tests/python/test_tensors.py 2>&1 \
      | tee "$OUT/pytest.txt"
    ;;
  *)
    echo "usage: bash scripts/device_test.sh pack|run" >&2
    exit 2
    ;;
esac

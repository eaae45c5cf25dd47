#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and no package registry (the workplace's `device`
# machine: CUDA, PyTorch, CMake, ninja, pybind11, scikit-build-core, pytest and nvidia-nccl-cu13 are
# there; Boost, protobuf, hiredis, redis-server, GoogleTest, jemalloc, msgpack and gymnasium are not).
#
#   bash scripts/device_test.sh pack   # here, with a registry: .deb files and wheels into .device/ (~25 MB)
#   bash scripts/device_test.sh run    # there (carry .device): build, every GPU test, the figures
#
# `run` unpacks the packages into /opt/phalanx-deps (dpkg -x: nothing is installed system-wide), builds
# phalanx with CUDA on every core (build/, the Python package into /tmp/phalanx-site), and runs, each
# step with its own limit, the whole in about 6 minutes:
#   1. `import phalanx._core; import torch` in one process (the order of a GPU user's actor) and the
#      symbols the installed binaries export;
#   2. the CUDA and object-layer C++ tests;
#   3. the Python GPU tests (tests/python/test_gpu.py, test_tensors.py, test_exports.py, test_nccl_setup.py,
#      test_gpu_objects.py, test_gpu_staging.py);
#   4. the figures (bench/gpu/device_figures.py: GPU scheduling, CUDA tensor put/get and actor -> driver
#      beside pinned copies, GPU objects mapped on the same GPU, across two raylets and reduced on the GPU,
#      NCCL with one rank, IMPALA with the learner on the GPU, the policy numpy then a GPU object).
# Into $OUT (or .device/out), 7 files: machine.txt, build.txt, ctest.txt, pytest.txt, figures.log,
# figures.json and summary.json (each step's exit status and seconds). It exits non-zero if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(libboost1.81-dev libprotobuf-dev libprotobuf32 libprotoc32 protobuf-compiler zlib1g-dev
          libhiredis-dev libhiredis0.14 redis-server redis-tools liblzf1 liblua5.1-0 libjemalloc2 libjemalloc-dev
          libgtest-dev libgmock-dev libmsgpack-cxx-dev libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3)
# Pure-Python wheels the device image lacks: IMPALA's environments.
WHEELS=(gymnasium==1.4.0 farama-notifications==0.0.6)
# The symbol whose definition aborted `import phalanx._core; import torch` (std::locale::_Impl::~_Impl):
# the linker names the input that defines it, if any does.
TRACE=_ZNSt6locale5_ImplD1Ev

case "${1:-}" in
  pack)
    set -e
    mkdir -p .device/debs .device/whl
    EXCLUDE="$(git rev-parse --git-dir)/info/exclude"
    mkdir -p "$(dirname "$EXCLUDE")"
    grep -qx '/.device/' "$EXCLUDE" 2>/dev/null || echo '/.device/' >> "$EXCLUDE"  # carried, never committed
    apt-get update -qq
    (cd .device/debs && apt-get download "${PACKAGES[@]}")
    python3 -m pip download -q --no-deps --only-binary=:all: -d .device/whl "${WHEELS[@]}"
    du -sh .device
    echo "now: the device tool's run with carry=['.device'] and command 'bash scripts/device_test.sh run'"
    ;;
  run)
    OUT=${OUT:-.device/out}
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    SUMMARY="$OUT/summary.json"
    echo "{" > "$SUMMARY"
    failed=0
    step() {  # step NAME LIMIT_S LOG COMMAND...: runs it under its limit, appends its output to LOG
      local name=$1 limit=$2 log=$3; shift 3
      local t0=$SECONDS
      echo "== $name ($(date +%T), limit ${limit}s)" | tee -a "$log"
      if [ "$(type -t "$1")" = function ]; then  # a function of this script: run it in a bash of its own
        timeout -k 10 "$limit" bash -c "$(declare -f "$1"); $*" >> "$log" 2>&1
      else
        timeout -k 10 "$limit" "$@" >> "$log" 2>&1
      fi
      local rc=$?
      [ $rc -eq 0 ] || failed=1
      echo "== $name: rc $rc in $((SECONDS - t0)) s" | tee -a "$log"
      printf '  "%s": {"rc": %d, "seconds": %d},\n' "$name" "$rc" "$((SECONDS - t0))" >> "$SUMMARY"
    }
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
    export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
    export PYTHONUNBUFFERED=1
    export SITE=/tmp/phalanx-site TRACE
    if ls .device/whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra-site .device/whl/*.whl
    fi
    export PYTHONPATH="$SITE:/tmp/extra-site"
    {
      nvidia-smi -L || true
      nvcc --version | tail -1
      g++ --version | head -1
      lib=$(g++ -print-file-name=libstdc++.so)
      echo "libstdc++ the compiler links: $lib -> $(readlink -f "$lib")"
      if head -c 4 "$lib" | grep -q ELF; then echo "  (a shared library)"; else head -5 "$lib"; fi  # or a linker script
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
      echo "cores: $(nproc)"
    } > "$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"

    build() {
      rm -rf "$SITE"
      python3 -m pip install -v --no-build-isolation --no-deps --target "$SITE" \
        -C cmake.define.PHALANX_TRACE_SYMBOLS="$TRACE" . > /tmp/build-full.txt 2>&1
      local rc=$?
      grep -E "$TRACE|trace-symbol" /tmp/build-full.txt | grep -v -- '--trace-symbol' | sort -u | head -40
      echo "(lines above: where the linker found $TRACE; none: no input defines or uses it)"
      tail -40 /tmp/build-full.txt
      return $rc
    }
    step build 300 "$OUT/build.txt" build
    B=$(ls -d build/cp3*-linux_x86_64 2>/dev/null | head -1)

    import_order() {
      cd /tmp && python3 -c "import phalanx._core; import torch; print('phalanx, then torch:', torch.ones(2) + 1)" \
        && python3 -c "import torch; import phalanx._core; print('torch, then phalanx: ok')" \
        && for f in "$SITE"/phalanx/_core*.so "$SITE"/phalanx/bin/*; do
             echo "$(basename "$f"): $(nm -D --defined-only "$f" | wc -l) exported symbols"
           done
    }
    step import_order 60 "$OUT/machine.txt" import_order
    step ctest 120 "$OUT/ctest.txt" ctest --test-dir "$B" -R 'Cuda|Staged|ObjectManager|MemoryTransfer|ReduceOps' \
      --output-on-failure
    step cuda_staged_figures 60 "$OUT/ctest.txt" "$B"/tests/cuda_staged_test
    step pytest 240 "$OUT/pytest.txt" python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_exports.py \
      tests/python/test_gpu.py tests/python/test_tensors.py tests/python/test_nccl_setup.py \
      tests/python/test_gpu_objects.py tests/python/test_gpu_staging.py
    step figures 330 "$OUT/figures.log" python3 bench/gpu/device_figures.py --json "$OUT/figures.json" \
      --log "$OUT/figures.log" --impala-seconds 40
    printf '  "failed": %d\n}\n' "$failed" >> "$SUMMARY"
    cat "$SUMMARY"
    exit $failed
    ;;
  *)
    echo "usage: bash scripts/device_test.sh pack|run" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Builds phalanx's libFuzzer targets (tests/fuzz) with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer in build-fuzz/, then runs each for SECONDS
# (default 10) from its checked-in seed corpus (tests/fuzz/corpus/<target>),
# growing a working corpus in build-fuzz/corpus/<target>. Exits non-zero on
# a finding (a crash-* file is left in build-fuzz/ and named in the output).
#   bash scripts/fuzz.sh            # 10 s per target (CI runs this)
#   bash scripts/fuzz.sh 600        # the longer run of docs/security.md
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-10}

bash scripts/install_debs.sh clang libclang-rt-14-dev  # clang and its fuzzer runtime, from Debian's archive
CMAKE=cmake; NINJA=ninja
[ -x .venv/bin/cmake ] && CMAKE=.venv/bin/cmake
[ -x .venv/bin/ninja ] && NINJA=$PWD/.venv/bin/ninja
command -v "$CMAKE" >/dev/null || { echo "cmake is missing: run scripts/setup.sh first"; exit 1; }

source scripts/ccache_env.sh
echo "== building the fuzz targets (clang, ASan, UBSan) in build-fuzz/"
"$CMAKE" -S . -B build-fuzz -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" -DCMAKE_C_COMPILER=clang ${CCACHE_LAUNCHERS:-} \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHALANX_BUILD_FUZZ=ON \
  -DPHALANX_BUILD_PYTHON=OFF -DPHALANX_BUILD_TESTS=OFF -DPHALANX_WITH_CUDA=OFF >/dev/null
"$NINJA" -C build-fuzz fuzz_wire fuzz_raylet >/dev/null

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1  # (protobuf's and Asio's statics are not leaks)
status=0
for t in fuzz_wire fuzz_raylet; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== $t for ${SECONDS_EACH} s (seeds: tests/fuzz/corpus/$t)"
  if ! (cd build-fuzz && "./tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -rss_limit_mb=4096 \
        "corpus/$t" "../tests/fuzz/corpus/$t" >"$t.log" 2>&1); then
    status=1
    echo "   FINDING: see build-fuzz/$t.log and the crash-* file it names"
  fi
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|cov: [0-9]+" "build-fuzz/$t.log" |
    tail -4 | sed 's/^/   /'
done
exit $status

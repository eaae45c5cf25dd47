# Sourced by setup.sh and fuzz.sh: compile through ccache when it is installed (setup.sh installs it).
# Objects are keyed by paths relative to the project (CCACHE_BASEDIR) and not by the build folder
# (CCACHE_NOHASHDIR), so clones in other folders share them; the cache lives in the user's cache folder.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD"
  export CCACHE_NOHASHDIR=1
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanx-ccache}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  CCACHE_LAUNCHERS="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
  export SKBUILD_CMAKE_ARGS="-DCMAKE_C_COMPILER_LAUNCHER=ccache;-DCMAKE_CXX_COMPILER_LAUNCHER=ccache;-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache${SKBUILD_CMAKE_ARGS:+;$SKBUILD_CMAKE_ARGS}"
fi

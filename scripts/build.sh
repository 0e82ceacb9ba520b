#!/usr/bin/env bash
# Configures and builds mlpt into ${MLPT_BUILD_DIR:-build} (idempotent; incremental).
# CUDA parts build when nvcc is found (MLPT_CUDA=AUTO); pass extra CMake flags as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLPT_BUILD_DIR:-build}
jobs=${MLPT_JOBS:-$(nproc)}
launcher=()
# ccache, when installed, keeps rebuilds of unchanged files cheap (paths hashed relative to the tree).
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# The report's charting library, vendored from npm before CMake reads it (a no-op once there).
scripts/vendor-report-charts.sh
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${MLPT_BUILD_TYPE:-RelWithDebInfo} "${launcher[@]}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build" "$@"
fi
start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "build: done in $(( $(date +%s) - start )) s ($build)"

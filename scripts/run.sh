#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a small end-to-end benchmark on this machine
# with the bundled tiny configuration (configs/tiny.toml), then prints where the result log and
# report are. Until a run config exists it describes the bundled plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
export MLPT_CACHE_DIR=${MLPT_CACHE_DIR:-$PWD/.cache}
scripts/setup.sh
scripts/build.sh
mlpt=${MLPT_BUILD_DIR:-build}/bin/mlpt
"$mlpt" plugins list
if [ -f configs/tiny.toml ]; then
  [ -x scripts/fetch-npm-fixtures.sh ] && scripts/fetch-npm-fixtures.sh
  [ -x scripts/build-task-images.sh ] && scripts/build-task-images.sh
scripts/prepare-tiny.sh
  "$mlpt" run configs/tiny.toml "$@"
fi

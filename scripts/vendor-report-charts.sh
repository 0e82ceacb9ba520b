#!/usr/bin/env bash
# Vendors the report's charting library, uPlot (pinned), from the npm registry into
# ${MLPT_CACHE_DIR:-.cache}/vendor; the build compiles it into the report writer so every report
# is one self-contained HTML file. Idempotent. Without npm or the registry the build still works,
# and its reports say the charts are missing.
set -euo pipefail

CACHE_DIR="${MLPT_CACHE_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
DEST="$CACHE_DIR/vendor"
PACKAGE="uplot@1.6.32"  # pinned; the report's chart code (core/run/report.cpp) is written for it
DIST="$DEST/node_modules/uplot/dist"

if [[ -f "$DEST/.mlpt-vendor" && "$(cat "$DEST/.mlpt-vendor")" == "$PACKAGE" && -f "$DIST/uPlot.iife.min.js" ]]; then
  exit 0
fi
command -v npm >/dev/null || { echo "vendor-report-charts: npm not found; reports will have no charts" >&2; exit 0; }
mkdir -p "$DEST"
cd "$DEST"
[[ -f package.json ]] || echo '{"name":"mlpt-vendor","private":true}' > package.json
if ! npm install --no-audit --no-fund --save-exact "$PACKAGE" >/dev/null; then
  echo "vendor-report-charts: npm install $PACKAGE failed; reports will have no charts" >&2
  exit 0
fi
test -f "$DIST/uPlot.iife.min.js" && test -f "$DIST/uPlot.min.css"
echo "$PACKAGE" > .mlpt-vendor
echo "vendor-report-charts: $PACKAGE in $DEST"

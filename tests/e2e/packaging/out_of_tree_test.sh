#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds the SDK example as a submitter would (a
# separate source folder, find_package(mlpt), mlpt::sdk), and loads the result with the installed mlpt.
set -euo pipefail
build=$1; src=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
mkdir "$work/plugin"
cp "$src/sdk/example/exact_answer_reward.cpp" "$work/plugin/"
cp "$work/prefix/share/mlpt/example/CMakeLists.txt.out-of-tree" "$work/plugin/CMakeLists.txt"
cmake -S "$work/plugin" -B "$work/plugin/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/plugin/build" >/dev/null
so="$work/plugin/build/libmy_plugin.so"
[ -f "$so" ] || { echo "FAIL: $so was not built"; exit 1; }
out=$("$work/prefix/bin/mlpt" plugins inspect "$so" --json)
echo "$out" | grep -q '"name": "exact_answer"' || { echo "FAIL: component missing in: $out"; exit 1; }
echo "$out" | grep -q '"abi_version": "1.2"' || { echo "FAIL: wrong ABI in: $out"; exit 1; }
echo "$out" | grep -q '"negotiated_abi_version": "1.2"' || { echo "FAIL: wrong negotiated ABI in: $out"; exit 1; }
# Only the entry point is exported.
exported=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^_' | sort -u | tr '\n' ' ')
[ "$exported" = "mlpt_plugin_init " ] || { echo "FAIL: exported symbols: $exported"; exit 1; }
echo "PASS: out-of-tree plugin built against $work/prefix and loaded"

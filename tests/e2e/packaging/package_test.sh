#!/usr/bin/env bash
# Builds the .tar.gz with CPack, unpacks it into a temporary prefix and runs the packaged mlpt on
# the packaged plugins. Also checks that the .deb is a valid Debian package with the command in it.
set -euo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G "TGZ;DEB" >/dev/null)
tgz=$(ls "$build"/packages/mlpt-*.tar.gz | head -1)
deb=$(ls "$build"/packages/mlpt-*.deb | head -1)
mkdir "$work/prefix"
tar -xzf "$tgz" -C "$work/prefix" --strip-components=1
mlpt="$work/prefix/bin/mlpt"
[ -x "$mlpt" ] || { echo "FAIL: no bin/mlpt in $tgz"; exit 1; }
# The packaged command must find the packaged plugins by itself (nothing from the build tree).
out=$(env -u MLPT_PLUGIN_PATH "$mlpt" plugins inspect libmlpt_example.so)
echo "$out" | grep -q "file: $work/prefix/lib/mlpt/plugins/libmlpt_example.so" || { echo "FAIL: $out"; exit 1; }
for f in include/mlpt/mlpt.h include/mlpt/engine.h include/mlpt/sdk.hpp lib/cmake/mlpt/mlptConfig.cmake; do
  [ -f "$work/prefix/$f" ] || { echo "FAIL: $f missing from the package"; exit 1; }
done
contents=$(dpkg-deb --contents "$deb")
grep -q "\./usr/bin/mlpt$" <<< "$contents" || { echo "FAIL: .deb lacks usr/bin/mlpt"; exit 1; }
echo "PASS: $(basename "$tgz") and $(basename "$deb")"

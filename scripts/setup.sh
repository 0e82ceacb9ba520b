#!/usr/bin/env bash
# Installs what mlpt needs to build, test and run, from Debian's packages (idempotent: does nothing
# when everything is there). Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev libspdlog-dev catch2 libucx-dev ucx-utils libopenmpi-dev openmpi-bin libdlpack-dev nlohmann-json3-dev
  libopenblas-dev zlib1g-dev libcpp-httplib-dev
  squashfs-tools squashfuse bubblewrap fuse3 python3 python3-pytest
  nodejs npm ccache
  chromium  # the report's rendering test (headless screenshot)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from outside Debian (e.g. a preinstalled Node.js): accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]:-}"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present"

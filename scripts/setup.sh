#!/usr/bin/env bash
# Installs qvl's Debian dependencies (when run as root or with sudo) and builds
# it into build/. Safe to run again: both steps are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev python3-torch libopenblas0-pthread
  libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev
  libwebp-dev libtiff-dev libgif-dev libpoppler-cpp-dev
  libutf8proc-dev libssl-dev libedit-dev
  # Only for tests: the Slurm and GNU Parallel tests of `qvl ocr --shard` (they skip without them).
  parallel munge slurmctld slurmd slurm-client
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

BUILD_TYPE="${QVL_BUILD_TYPE:-Release}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >&2
cmake --build build -j "$(nproc)" >&2
echo "setup: built build/apps/qvl" >&2

#!/usr/bin/env bash
# Installs qvl's Debian dependencies (when run as root or with sudo) and builds
# it into build/. Safe to run again: both steps are incremental.
#
#   scripts/setup.sh          what building and running qvl needs; builds the qvl binary
#   scripts/setup.sh --test   also what the test command needs; builds every target
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = --test ] && with_tests=1

PACKAGES=(
  build-essential cmake ninja-build pkg-config file
  libtorch-dev libopenblas0-pthread
  libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev
  libwebp-dev libtiff-dev libgif-dev libpoppler-cpp-dev
  libutf8proc-dev libssl-dev libedit-dev libcpp-httplib-dev
)
# Only for the test command: python3 reads the CLI tests' JSON, curl talks to
# `qvl serve`; Slurm's daemons and GNU Parallel back the tests of `qvl ocr
# --shard`. None is needed to use qvl.
TEST_PACKAGES=(python3 curl parallel munge slurmctld slurmd slurm-client)
[ "$with_tests" -eq 1 ] && PACKAGES+=("${TEST_PACKAGES[@]}")

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
targets=(--target qvl)
[ "$with_tests" -eq 1 ] && targets=()
cmake --build build -j "$(nproc)" "${targets[@]}" >&2
echo "setup: built build/apps/qvl" >&2

#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test: doctest
# suites and the CLI tests, through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build && ctest --output-on-failure -j 2 "$@"

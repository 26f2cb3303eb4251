#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test:
#   1. the whole suite (unit, model and CLI tests) built with
#      AddressSanitizer + UndefinedBehaviorSanitizer (scripts/test_sanitize.sh
#      --all, into build-asan/; skip with QVL_SKIP_SANITIZE=1),
#   2. every suite through ctest: doctest suites against the reference
#      fixtures and the CLI tests driving the qvl binary.
# Extra arguments go to ctest (e.g. -R ask).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${QVL_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/test_sanitize.sh --all
fi
cd build && ctest --output-on-failure -j 2 "$@"

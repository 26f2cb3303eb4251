#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test:
#   1. the unit and CLI tests built with AddressSanitizer +
#      UndefinedBehaviorSanitizer (scripts/test_sanitize.sh --cli, into
#      build-asan/; skip with QVL_SKIP_SANITIZE=1; --all adds the model suite),
#   2. every suite through ctest: doctest suites against the reference
#      fixtures and the CLI tests driving the qvl binary.
# Extra arguments go to ctest (e.g. -R ask).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${QVL_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/test_sanitize.sh --cli
fi
cd build && ctest --output-on-failure -j 2 "$@"

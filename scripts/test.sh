#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test:
#   1. the unit and CLI tests built with AddressSanitizer +
#      UndefinedBehaviorSanitizer (scripts/test_sanitize.sh --cli, into
#      build-asan/; skip with QVL_SKIP_SANITIZE=1; --all adds the model suite),
#   2. the release build through ctest: the doctest suites against the
#      reference fixtures, every CPU tier's suites (tier_*), and the CLI
#      tests driving the release qvl binary. The CLI scripts only stage 1
#      runs (ctest label "sanitized", tests/CMakeLists.txt says which) are
#      left out here; ask and robust run in both. With QVL_SKIP_SANITIZE=1
#      every test runs here.
# Extra arguments go to ctest (e.g. -R ask).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
release_filter=()
if [ "${QVL_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/test_sanitize.sh --cli
  release_filter=(-LE '^sanitized$')
fi
cd build && ctest --output-on-failure -j 2 "${release_filter[@]}" "$@"

#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DQVL_SANITIZE=ON) into build-asan/ and runs them; any sanitizer report
# fails the run. Only qvl_core and its tests are built: everything that reads
# untrusted files lives there, and it builds in a couple of minutes.
#
#   scripts/test_sanitize.sh            qvl_unit_tests
#   scripts/test_sanitize.sh --model    also qvl_model_tests (torch; slow to build)
#
# Extra arguments after the options go to the test binaries (doctest flags).
set -euo pipefail
cd "$(dirname "$0")/.."

with_model=0
if [ "${1:-}" = "--model" ]; then
  with_model=1
  shift
fi

targets=(qvl_unit_tests)
[ "$with_model" -eq 1 ] && targets+=(qvl_model_tests)

if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DQVL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
ninja -C build-asan -j 2 "${targets[@]}" >&2

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

status=0
for t in "${targets[@]}"; do
  echo "test_sanitize: running $t" >&2
  if ! "build-asan/tests/$t" "$@"; then
    echo "test_sanitize: $t FAILED (test failure or sanitizer report above)" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "test_sanitize: ${targets[*]} clean under ASan+UBSan"
exit "$status"

#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DQVL_SANITIZE=ON) into build-asan/ and runs them; any sanitizer report
# fails the run. Only qvl_core and its tests are built: everything that reads
# untrusted files lives there, and so do the CPU kernels (lib/qvl/kernels:
# GEMVs, int8 cache files, decode and vision ops, tested without torch in
# tests/unit/test_kernels_*.cpp); it builds in a couple of minutes.
#
#   scripts/test_sanitize.sh            qvl_unit_tests
#   scripts/test_sanitize.sh --model    also qvl_model_tests (torch; slow to build)
#   scripts/test_sanitize.sh --cli      unit tests, the qvl binary, and the CLI tests labelled
#                                       sanitized* in tests/CMakeLists.txt run it
#                                       (what scripts/test.sh runs: the CLI tests drive the
#                                       decoder, vision and session code the model suite tests,
#                                       and skipping the model suite's ASan build keeps the
#                                       README's test command shorter, docs/TESTING.md;
#                                       scripts/test.sh then leaves these CLI scripts out of
#                                       its release run)
#   scripts/test_sanitize.sh --all      all of the above
#
# Extra arguments after the options go to the test binaries (doctest flags).
set -euo pipefail
cd "$(dirname "$0")/.."

with_model=0
with_cli=0
case "${1:-}" in
  --model) with_model=1; shift ;;
  --cli) with_cli=1; shift ;;
  --all) with_model=1; with_cli=1; shift ;;
esac

targets=(qvl_unit_tests)
[ "$with_model" -eq 1 ] && targets+=(qvl_model_tests)
build_targets=("${targets[@]}")
[ "$with_cli" -eq 1 ] && build_targets+=(qvl qvl_make_photo)  # test_images.sh writes its photo with qvl_make_photo

if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DQVL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
ninja -C build-asan -j 2 "${build_targets[@]}" >&2

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan_suppressions.txt:print_suppressions=0"
# The CLI tests' time bounds (tests/cli/test_cron.sh) allow for the sanitizers' slowdown.
export QVL_TEST_TIME_SCALE=3
# PDF pages render in process unless a test asks for a time limit itself: the
# limit's child renderer is made with glibc's _Fork, which ASan's allocator
# does not know, so a child can inherit one of its locks held by another thread
# and stall until it is killed. The release run covers the child renderer
# (cli_test_robust runs there too).
export QVL_PAGE_TIMEOUT=0

status=0
for t in "${targets[@]}"; do
  echo "test_sanitize: running $t" >&2
  # No unit test needs 1 GB in one allocation: one that asks for it is a size
  # read from a crafted file (tests/data/fuzz-regressions), so it fails here.
  if ! ASAN_OPTIONS="$ASAN_OPTIONS:max_allocation_size_mb=1024" "build-asan/tests/$t" "$@"; then
    echo "test_sanitize: $t FAILED (test failure or sanitizer report above)" >&2
    status=1
  fi
done
if [ "$with_cli" -eq 1 ]; then
  echo "test_sanitize: running the CLI tests against the sanitized qvl" >&2
  # Leak checking stays on; abort_on_error makes a finding fail the script's checks.
  if ! (cd build-asan && ctest -R '^cli_' -L '^sanitized' -j 2 --output-on-failure >&2); then
    echo "test_sanitize: CLI tests FAILED under ASan+UBSan" >&2
    status=1
  fi
fi
[ "$status" -eq 0 ] && echo "test_sanitize: ${build_targets[*]} clean under ASan+UBSan"
exit "$status"

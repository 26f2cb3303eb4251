#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer into build-fuzz/, then runs each for a fixed time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default 60 s, all targets)
#
# Each target starts from its seed corpus in tests/fuzz/corpus/<target>/ (left
# untouched) plus what earlier runs found (build-fuzz/corpus/<target>/).
# Inputs that crash, hang (> 10 s), or allocate too much are kept in
# build-fuzz/crashes/ and make the script exit non-zero. Replay one with
#   build-fuzz/tests/fuzz/fuzz_<target> build-fuzz/crashes/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET="${1:-60}"
shift || true
ALL_TARGETS=(safetensors checkpoint_index config tokenizer image chat jsonl webp tiff bmp gif pdf cache)
TARGETS=("${@:-${ALL_TARGETS[@]}}")

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; install it with: apt-get install -y clang libclang-rt-14-dev" >&2
  exit 1
fi

if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DQVL_FUZZ=ON -DQVL_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" >&2
fi
ninja -C build-fuzz -j 2 $(printf 'fuzz_%s ' "${TARGETS[@]}") >&2

mkdir -p build-fuzz/crashes build-fuzz/logs
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

failed=()
printf '%-18s %10s %8s %8s %6s %7s  %s\n' target executions exec/s cov ft corpus result
for t in "${TARGETS[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  seeds=()
  [ -d "tests/fuzz/corpus/$t" ] && seeds=("tests/fuzz/corpus/$t")
  # The cache target's seeds are files written by qvl's own cache writers.
  [ "$t" = cache ] && QVL_FUZZ_WRITE_SEEDS="build-fuzz/corpus/$t" build-fuzz/tests/fuzz/fuzz_cache
  log="build-fuzz/logs/$t.log"
  status=0
  # -malloc_limit_mb: a single allocation that large from a small input is a bug.
  "build-fuzz/tests/fuzz/fuzz_$t" "build-fuzz/corpus/$t" "${seeds[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$t-" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if [ "$status" -ne 0 ]; then
    result="FAILED (exit $status): see $log"
    failed+=("$t")
  fi
  corpus=$(ls "build-fuzz/corpus/$t" | wc -l)
  printf '%-18s %10s %8s %8s %6s %7s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$result"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed; inputs kept in build-fuzz/crashes/:" >&2
  ls -1 build-fuzz/crashes/ >&2
  exit 1
fi
echo "fuzz: no crashes in ${#TARGETS[@]} target(s), ${SECONDS_PER_TARGET} s each"

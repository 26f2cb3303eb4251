# Shared set-up for the CLI tests; each test script starts with
#   source "$(dirname "$0")/common.sh" "$@"
# ctest runs them as: bash test_X.sh <path-to-qvl> <tests/data>.
set -uo pipefail
QVL="$1"
DATA="$2"
MODEL="$DATA/tiny-qwen3-vl"
# Run once per CPU tier (QVL_ISA, see tests/CMakeLists.txt): a tier this CPU
# cannot run is a skip (77), not a failure.
if [ -n "${QVL_ISA:-}" ] && ! "$QVL" --version > /dev/null 2>&1; then
  echo "skipped: this CPU cannot run QVL_ISA=$QVL_ISA: $("$QVL" --version 2>&1 | head -n 1)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# One vision-module cache for all CLI tests, inside the build tree: never tests/data.
export QVL_CACHE_DIR="${QVL_TEST_CACHE:-$(dirname "$QVL")/../test-cache}"
fail=0
# check DESCRIPTION SHELL-CONDITION: prints ok/FAIL and remembers a failure.
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
# run ARGS...: runs qvl with ARGS, keeping stdout in $TMP/out, stderr in
# $TMP/err and the exit status in $status, for the checks that follow.
run() { "$QVL" "$@" > "$TMP/out" 2> "$TMP/err"; status=$?; }
# dump FILE...: prints the files and fails; a check's condition ends with
# "|| dump FILE" so that a FAIL shows what qvl said.
dump() { cat "$@"; false; }

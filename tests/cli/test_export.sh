#!/usr/bin/env bash
# qvl export driven from the outside: usage: test_export.sh <path-to-qvl> <tests/data>
set -u
QVL=$1
DATA=$2
TINY=$DATA/tiny-qwen3-vl
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
run() {
  "$QVL" "$@" >"$TMP/out" 2>"$TMP/err"
  status=$?
}

# Builds with the embedded script; stdout is just the module's path.
run export --model "$TINY" --dtype f32 --cache-dir "$TMP/cache"
[ "$status" = 0 ] || fail "export exited $status: $(cat "$TMP/err")"
path=$(cat "$TMP/out")
case "$path" in
  "$TMP/cache/vision-"*-f32.pt) ;;
  *) fail "export printed '$path', expected a file under $TMP/cache named vision-...-f32.pt" ;;
esac
[ -s "$path" ] || fail "export printed $path but it is missing or empty"
grep -q "built in" "$TMP/err" || fail "first export did not report a build: $(cat "$TMP/err")"

# A second run finds it; --force rebuilds it.
run export --model "$TINY" --dtype f32 --cache-dir "$TMP/cache"
[ "$status" = 0 ] && [ "$(cat "$TMP/out")" = "$path" ] || fail "second export: status $status, printed $(cat "$TMP/out")"
grep -q "up to date" "$TMP/err" || fail "second export rebuilt: $(cat "$TMP/err")"
run export --model "$TINY" --dtype f32 --cache-dir "$TMP/cache" --force
grep -q "built in" "$TMP/err" || fail "--force did not rebuild: $(cat "$TMP/err")"

# bf16 is a different file; no temp files are left behind.
run export --model "$TINY" --cache-dir "$TMP/cache"
case "$(cat "$TMP/out")" in *-bf16.pt) ;; *) fail "bf16 export printed $(cat "$TMP/out")" ;; esac
[ "$(ls "$TMP/cache" | wc -l)" = 2 ] || fail "cache holds $(ls "$TMP/cache"), expected one f32 and one bf16 module"

# Missing Python: one error line that says what to install.
QVL_PYTHON=/nonexistent/python3 "$QVL" export --model "$TINY" --cache-dir "$TMP/other" >"$TMP/out" 2>"$TMP/err"
status=$?
[ "$status" = 1 ] || fail "export without python exited $status, expected 1"
grep -q "^qvl: error: .*apt-get install python3 python3-torch" "$TMP/err" ||
  fail "export without python says: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "export without python printed more than one line: $(cat "$TMP/err")"

run export --model "$TMP/nowhere" --cache-dir "$TMP/cache"
[ "$status" = 1 ] || fail "export of a missing folder exited $status, expected 1"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "test_export: all checks passed"

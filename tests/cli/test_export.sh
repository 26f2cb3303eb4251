#!/usr/bin/env bash
# qvl export on the tiny model: the first run builds the vision module with the
# embedded script and prints only its path, a second run finds it, --force
# rebuilds it, bf16 and f32 are different files, and a missing Python or model
# folder is one clear error line.
source "$(dirname "$0")/common.sh" "$@"
# A cache folder of our own (not the shared $QVL_CACHE_DIR): this test must see
# the module being built.
CACHE="$TMP/cache"

run export --model "$MODEL" --dtype f32 --cache-dir "$CACHE"
path=$(cat "$TMP/out")
check "export exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... and prints a file under the cache folder named vision-...-f32.pt" \
  '[[ "$path" == "$CACHE/vision-"*-f32.pt ]] || { echo "printed: $path"; false; }'
check "... which exists and is not empty" '[ -s "$path" ]'
check "... and reports a build" 'grep -q "built in" "$TMP/err" || dump "$TMP/err"'

run export --model "$MODEL" --dtype f32 --cache-dir "$CACHE"
check "a second export exits 0 and prints the same path" \
  '[ "$status" = 0 ] && [ "$(cat "$TMP/out")" = "$path" ] || dump "$TMP/out" "$TMP/err"'
check "... finding it up to date" 'grep -q "up to date" "$TMP/err" || dump "$TMP/err"'
run export --model "$MODEL" --dtype f32 --cache-dir "$CACHE" --force
check "--force rebuilds it" 'grep -q "built in" "$TMP/err" || dump "$TMP/err"'

run export --model "$MODEL" --cache-dir "$CACHE"
check "the default export is a bf16 module" '[[ "$(cat "$TMP/out")" == *-bf16.pt ]] || dump "$TMP/out"'
check "the cache holds one f32 and one bf16 module, no temporaries" \
  '[ "$(ls "$CACHE" | wc -l)" = 2 ] || { ls "$CACHE"; false; }'

QVL_PYTHON=/nonexistent/python3 run export --model "$MODEL" --cache-dir "$TMP/other"
check "export without Python exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'
check "... saying what to install" \
  'grep -q "^qvl: error: .*apt-get install python3 python3-torch" "$TMP/err" || dump "$TMP/err"'
check "... in one line" '[ "$(wc -l < "$TMP/err")" = 1 ] || dump "$TMP/err"'

run export --model "$TMP/nowhere" --cache-dir "$CACHE"
check "export of a missing model folder exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'

exit $fail

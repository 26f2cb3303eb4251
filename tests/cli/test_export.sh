#!/usr/bin/env bash
# qvl export on the tiny model: the first run writes the vision module's file
# (made with libtorch alone) and prints only its path, a second run finds it,
# --force rebuilds it, bf16 and f32 are different files, no Python is ever
# started, an image question (which makes the module in memory) writes no
# file, and a missing model folder is one clear error line.
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

# No Python is ever started: with a python3 on PATH and in $QVL_PYTHON (the
# variable qvl once read) that only leave a mark, and nothing else on PATH,
# export still writes the module, and an ask about an image, in a fresh cache
# folder, still answers with the reference's tokens.
mkdir -p "$TMP/fakebin"
for name in python3 python; do
  printf '#!/bin/sh\necho "$0 $*" >> "%s/python-ran"\nexit 1\n' "$TMP" > "$TMP/fakebin/$name"
  chmod +x "$TMP/fakebin/$name"
done
nopython() { PATH="$TMP/fakebin" QVL_PYTHON="$TMP/fakebin/python3" "$@"; }
nopython "$QVL" export --model "$MODEL" --cache-dir "$TMP/fresh-export" > "$TMP/out" 2> "$TMP/err"
status=$?
check "export with no Python exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... and builds the module" 'grep -q "built in" "$TMP/err" && [ -s "$(cat "$TMP/out")" ] || dump "$TMP/err"'
python3 - "$DATA/goldens.json" "$TMP/one_image.expected" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1]))["model_cases"]["one_image"]["greedy_16"], open(sys.argv[2], "w"))
PY
cp "$DATA/images/small.png" "$TMP/"
QVL_CACHE_DIR="$TMP/fresh-ask" nopython "$QVL" ask --model "$MODEL" --image "$TMP/small.png" --greedy -n 16 \
  --dtype f32 --json "What is in the image?" > "$TMP/ask.json" 2> "$TMP/err"
status=$?
check "the first image of an ask with no Python exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... writes no module file in the fresh cache folder" '! ls "$TMP/fresh-ask"/vision-*.pt > /dev/null 2>&1'
check "... and answers with the reference's tokens" \
  "python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))[\"tokens\"]==json.load(open(sys.argv[2])) else 1)' \
   '$TMP/ask.json' '$TMP/one_image.expected' || dump '$TMP/ask.json'"
check "... without starting any Python" '[ ! -e "$TMP/python-ran" ] || dump "$TMP/python-ran"'
check "the binary does not name a Python to run" \
  '! grep -a -q -e QVL_PYTHON -e /usr/bin/python "$QVL" || { echo "qvl still names a Python"; false; }'

run export --model "$TMP/nowhere" --cache-dir "$CACHE"
check "export of a missing model folder exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'

exit $fail

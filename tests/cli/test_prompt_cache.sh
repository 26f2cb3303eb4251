#!/usr/bin/env bash
# The prompt cache (qvl ask / chat --prompt-cache) on the tiny model: a second
# question about the same image loads the image's keys and values instead of
# running the vision encoder, and gives exactly the tokens of a run without
# the cache (float32: the reference's; bfloat16 too); a different image,
# dtype or quantization misses; a damaged entry is said, recomputed and
# rewritten; --prompt-cache off writes nothing; an unwritable folder still
# answers; the size bound evicts the least recently used entry.
source "$(dirname "$0")/common.sh" "$@"

# Our own cache folder, with the vision int8 caches the other tests built copied in.
SHARED_CACHE="$QVL_CACHE_DIR"
export QVL_CACHE_DIR="$TMP/cache"
mkdir -p "$QVL_CACHE_DIR"
cp "$SHARED_CACHE"/vision-* "$QVL_CACHE_DIR"/ 2>/dev/null || true
cp "$DATA"/images/small.png "$DATA"/images/photo.jpg "$TMP"/
python3 - "$DATA/goldens.json" "$TMP/one_image.expected" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1]))["model_cases"]["one_image"]["greedy_16"], open(sys.argv[2], "w"))
PY
PC="$TMP/pc"
Q1="What is in the image?"   # the reference's one_image question
Q2="Which colour is the top left corner?"
# ask NAME [FLAGS...] QUESTION: --json answer in $TMP/NAME.json, stderr in $TMP/NAME.err.
ask() {
  local name=$1; shift
  "$QVL" ask --model "$MODEL" --greedy -n 16 --json "$@" > "$TMP/$name.json" 2> "$TMP/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: ask $name exited $rc"; cat "$TMP/$name.err"; fail=1; }
}
# field NAME PYTHON-EXPR: a value of the answer's JSON (j).
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$TMP/$1.json"; }
same_tokens() { [ "$(field "$1" 'j["tokens"]')" = "$(field "$2" 'j["tokens"]')" ] || dump "$TMP/$1.json" "$TMP/$2.json"; }
entries() { ls "$1"/prompt-*.qkv 2>/dev/null | wc -l; }

for dtype in f32 bf16; do
  ask off-$dtype-q1 --dtype $dtype --prompt-cache off --image "$TMP/small.png" "$Q1"
  ask off-$dtype-q2 --dtype $dtype --prompt-cache off --image "$TMP/small.png" "$Q2"
  ask cold-$dtype --dtype $dtype --prompt-cache "$PC" --image "$TMP/small.png" "$Q1"
  ask warm-$dtype --dtype $dtype --prompt-cache "$PC" --image "$TMP/small.png" "$Q1"
  ask warm2-$dtype --dtype $dtype --prompt-cache "$PC" --image "$TMP/small.png" "$Q2"
  check "$dtype: the first run misses (no entry for this dtype yet) and stores the prefix" \
    "[ \"\$(field cold-$dtype 'j[\"prompt_cache\"]')\" = \"{'reused_tokens': 0, 'stored': True}\" ] || dump '$TMP/cold-$dtype.json'"
  check "$dtype: ... running the vision encoder once" "[ \"\$(field cold-$dtype 'j[\"vision_runs\"]')\" = 1 ]"
  # The image's prefix: system-less chat header + <|vision_start|> + 70 image tokens + <|vision_end|>.
  check "$dtype: the warm run reuses the 75 prefix tokens" \
    "[ \"\$(field warm-$dtype 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ] || dump '$TMP/warm-$dtype.json'"
  check "$dtype: ... without running the vision encoder" \
    "[ \"\$(field warm-$dtype 'j[\"vision_runs\"]')\" = 0 ] && [ \"\$(field warm-$dtype 'j[\"timings\"][\"vision_s\"]')\" = 0.0 ]"
  check "$dtype: ... and stores nothing new" "[ \"\$(field warm-$dtype 'j[\"prompt_cache\"][\"stored\"]')\" = False ]"
  check "$dtype: cold and warm give the same tokens" "same_tokens cold-$dtype warm-$dtype"
  check "$dtype: ... as a run without the prompt cache" "same_tokens off-$dtype-q1 warm-$dtype"
  check "$dtype: another question reuses the image too" \
    "[ \"\$(field warm2-$dtype 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ]"
  check "$dtype: ... with the tokens of a run without the cache" "same_tokens off-$dtype-q2 warm2-$dtype"
done
check "f32 warm tokens are the reference's" \
  "[ \"\$(field warm-f32 'j[\"tokens\"]')\" = \"\$(python3 -c 'import json; print(json.load(open(\"$TMP/one_image.expected\")))')\" ]"
check "one entry per dtype" "[ \$(entries '$PC') -eq 2 ]"

# The tokenizer's parse is kept beside the other caches; a damaged copy is
# parsed again and replaced, never used.
check "the tokenizer cache is in the cache folder" "[ \$(ls '$QVL_CACHE_DIR'/tokenizer-*-v1.bin | wc -l) = 1 ]"
TOKENIZER_CACHE=$(ls "$QVL_CACHE_DIR"/tokenizer-*-v1.bin)
head -c 100000 "$TOKENIZER_CACHE" > "$TMP/tokenizer.cut" && cat "$TMP/tokenizer.cut" > "$TOKENIZER_CACHE"
ask tokenizer-damaged --dtype f32 --prompt-cache off --image "$TMP/small.png" "$Q1"
check "a damaged tokenizer cache still gives the reference's tokens" "same_tokens off-f32-q1 tokenizer-damaged"
check "... and is replaced by a whole one" "[ \$(stat -c %s '$TOKENIZER_CACHE') -gt 100000 ]"

# Invalidation: another image of the same size (same tokens, other pixels), another size, another quantization.
python3 - "$TMP" <<'PY'
import struct, sys
def bmp(path, shade):  # 96x64 24-bit BMP: a gradient, brighter by `shade`
    w, h = 96, 64
    rows = b"".join(bytes((x * 2 + shade) % 256 for x in range(w) for _ in range(3)) for y in range(h))
    head = b"BM" + struct.pack("<IHHI", 54 + len(rows), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    open(path, "wb").write(head + info + rows)
bmp(sys.argv[1] + "/a.bmp", 0)
bmp(sys.argv[1] + "/b.bmp", 40)
PY
ask bmp-a --dtype f32 --prompt-cache "$PC" --image "$TMP/a.bmp" "$Q1"
ask bmp-b --dtype f32 --prompt-cache "$PC" --image "$TMP/b.bmp" "$Q1"
ask bmp-a2 --dtype f32 --prompt-cache "$PC" --image "$TMP/a.bmp" "$Q1"
check "an image of the same size with other pixels misses" \
  "[ \"\$(field bmp-b 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 0 ] && [ \"\$(field bmp-b 'j[\"vision_runs\"]')\" = 1 ] || dump '$TMP/bmp-b.json'"
check "... while the first one hits" "[ \"\$(field bmp-a2 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ] || dump '$TMP/bmp-a2.json'"
ask photo --dtype f32 --prompt-cache "$PC" --image "$TMP/photo.jpg" "$Q1"
check "another image misses and runs the vision encoder" \
  "[ \"\$(field photo 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 0 ] && [ \"\$(field photo 'j[\"vision_runs\"]')\" = 1 ]"
ask int8 --quant int8 --prompt-cache "$PC" --image "$TMP/small.png" "$Q1"
check "--quant int8 misses the bf16 entry" "[ \"\$(field int8 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 0 ]"
ask int8-warm --quant int8 --prompt-cache "$PC" --image "$TMP/small.png" "$Q1"
check "... and hits its own" "[ \"\$(field int8-warm 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ] && same_tokens int8 int8-warm"
# Text before the image is part of the prefix: another such text misses, the same one hits.
for word in Look See; do
  printf '[{"role":"user","content":[{"type":"text","text":"%s:"},{"type":"image","image":"small.png"},{"type":"text","text":"?"}]}]' \
    "$word" > "$TMP/$word-first.json"
done
ask look1 --dtype f32 --prompt-cache "$PC" --messages "$TMP/Look-first.json"
ask see --dtype f32 --prompt-cache "$PC" --messages "$TMP/See-first.json"
ask look2 --dtype f32 --prompt-cache "$PC" --messages "$TMP/Look-first.json"
check "text before the image is part of the key: other text misses" \
  "[ \"\$(field see 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 0 ] || dump '$TMP/see.json'"
check "... the same text hits" \
  "[ \"\$(field look2 'j[\"prompt_cache\"][\"reused_tokens\"]')\" -gt 75 ] && same_tokens look1 look2 || dump '$TMP/look2.json'"

# A prompt without an image has no reusable prefix: nothing is stored.
"$QVL" ask --model "$MODEL" --greedy -n 2 --prompt-cache "$TMP/text-pc" "Why is the sky blue?" > /dev/null 2> "$TMP/text.err"
check "a question without an image stores nothing (no folder made)" "[ ! -e '$TMP/text-pc' ] || dump '$TMP/text.err'"

# A damaged entry: said on stderr, recomputed (same tokens), rewritten (the next run hits).
DPC="$TMP/damaged"
ask d0 --dtype f32 --prompt-cache "$DPC" --image "$TMP/small.png" "$Q1"
ENTRY=$(ls "$DPC"/prompt-*.qkv)
python3 - "$ENTRY" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x10; open(p, "wb").write(b)
PY
ask d1 --dtype f32 --prompt-cache "$DPC" --image "$TMP/small.png" "$Q1"
check "a damaged entry is not used" "[ \"\$(field d1 'j[\"prompt_cache\"]')\" = \"{'reused_tokens': 0, 'stored': True}\" ] || dump '$TMP/d1.json'"
check "... says so in one line" "[ \$(grep -c 'damaged (checksum mismatch)' '$TMP/d1.err') -eq 1 ] || dump '$TMP/d1.err'"
check "... answers the same" "same_tokens d0 d1"
ask d2 --dtype f32 --prompt-cache "$DPC" --image "$TMP/small.png" "$Q1"
check "... and is rewritten whole" "[ \"\$(field d2 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ] && [ ! -s '$TMP/d2.err' ]"
head -c 5000 "$ENTRY" > "$TMP/cut" && cat "$TMP/cut" > "$ENTRY"
ask d3 --dtype f32 --prompt-cache "$DPC" --image "$TMP/small.png" "$Q1"
check "a truncated entry is recomputed too" \
  "[ \"\$(field d3 'j[\"prompt_cache\"][\"stored\"]')\" = True ] && grep -q 'prompt cache' '$TMP/d3.err' && same_tokens d0 d3"
check "no temporaries are left" "[ -z \"\$(ls '$DPC' | grep -v '^prompt-[0-9a-f]*\\.qkv\$')\" ]"

# The default place: the model's cache folder; off writes nothing there.
ask default --dtype f32 --image "$TMP/small.png" "$Q1"
check "on by default, in <cache folder>/prompts" "[ \$(entries '$QVL_CACHE_DIR/prompts') -eq 1 ]"
rm -rf "$QVL_CACHE_DIR/prompts"
ask off --dtype f32 --prompt-cache off --image "$TMP/small.png" "$Q1"
check "--prompt-cache off writes nothing" "[ ! -e '$QVL_CACHE_DIR/prompts' ] && [ \"\$(field off 'j[\"prompt_cache\"][\"stored\"]')\" = False ]"

# An unwritable folder (below a file: even root cannot create it) still answers, with one warning.
printf x > "$TMP/a-file"
ask unwritable --dtype f32 --prompt-cache "$TMP/a-file/pc" --image "$TMP/small.png" "$Q1"
check "an unwritable prompt cache still answers" "same_tokens off-f32-q1 unwritable"
check "... and says once that it could not save" \
  "[ \$(grep -c 'prompt cache: not saved' '$TMP/unwritable.err') -eq 1 ] || dump '$TMP/unwritable.err'"

# The size bound: f32 entries of this image are ~0.6 MB, so 1 MB holds one.
BPC="$TMP/bounded"
ask b1 --dtype f32 --prompt-cache "$BPC" --prompt-cache-max-mb 1 --image "$TMP/small.png" "$Q1"
ask b2 --dtype f32 --prompt-cache "$BPC" --prompt-cache-max-mb 1 --image "$TMP/photo.jpg" "$Q1"
check "the size bound keeps one entry" "[ \$(entries '$BPC') -eq 1 ]"
ask b3 --dtype f32 --prompt-cache "$BPC" --prompt-cache-max-mb 1 --image "$TMP/photo.jpg" "$Q2"
check "... the most recent one" "[ \"\$(field b3 'j[\"prompt_cache\"][\"reused_tokens\"]')\" != 0 ]"

# Two runs writing the same entry at once: both answer, one whole entry, no temporaries.
PPC="$TMP/parallel"
ask p1 --dtype f32 --prompt-cache "$PPC" --image "$TMP/small.png" "$Q1" &
ask p2 --dtype f32 --prompt-cache "$PPC" --image "$TMP/small.png" "$Q2" &
wait
ask p3 --dtype f32 --prompt-cache "$PPC" --image "$TMP/small.png" "$Q1"
check "concurrent writers leave one whole entry" \
  "[ \"\$(ls '$PPC')\" = \"\$(cd '$PPC' && ls prompt-*.qkv)\" ] && [ \$(entries '$PPC') -eq 1 ] && [ ! -s '$TMP/p3.err' ]"
check "... which the next run uses" "[ \"\$(field p3 'j[\"prompt_cache\"][\"reused_tokens\"]')\" = 75 ] && same_tokens p1 p3"

# chat: the first turn of a conversation uses the prompt cache too.
CPC="$TMP/chat-pc"
for run in 1 2; do
  printf '%s\n/stats\n' "$Q1" | "$QVL" chat --model "$MODEL" --greedy -n 8 --dtype f32 --prompt-cache "$CPC" \
    --image "$TMP/small.png" > "$TMP/chat$run.out" 2> "$TMP/chat$run.err"
done
check "chat stores its first turn's prefix" "[ \$(entries '$CPC') -eq 1 ]"
check "... a second chat does not run the vision encoder and answers the same" \
  "grep -qx 'vision_calls: 0' '$TMP/chat2.err' && grep -qx 'vision_calls: 1' '$TMP/chat1.err' && cmp -s '$TMP/chat1.out' '$TMP/chat2.out' || dump '$TMP/chat2.err'"

exit $fail

#!/usr/bin/env bash
# The images users have (issue 12), on the tiny model: a 12 MP phone photo with
# default flags (image-token budget), shrink to fit --max-context, --image -
# (stdin), --page of a PDF/TIFF, and qvl ocr over a folder of every format:
# one record per page, error records for broken files and pages, --resume per
# page. Expected grids are the reference smart_resize's for these sizes
# (tests/unit/test_image_budget.cpp).
source "$(dirname "$0")/common.sh" "$@"
FORMATS="$DATA/images/formats"
MAKE_PHOTO="$(dirname "$QVL")/../tests/qvl_make_photo"
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# ---------------------------------------------------------------- a phone photo, default flags
PHOTO="$TMP/photo-4032x3024.jpg"
"$MAKE_PHOTO" 4032 3024 "$PHOTO"
check "the 4032x3024 test photo was written" "[ -s '$PHOTO' ] || { echo 'no $MAKE_PHOTO?'; false; }"
run ask --model "$MODEL" --image "$PHOTO" --greedy -n 4 --json "What is in this picture?"
check "ask about a 4032x3024 photo with default flags exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... the default budget gives it 864x1152, grid 1x54x72 (972 tokens, not 11844)" \
  '[ "$(json_get "$TMP/out" "d[\"images\"][0][\"grid_thw\"]")" = "[1, 54, 72]" ] || dump "$TMP/out"'
run image-info --model "$MODEL" --image "$PHOTO"
check "image-info on the photo exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... original 4032x3024" 'grep -q "^original *4032x3024$" "$TMP/out" || dump "$TMP/out"'
check "... decoded at a reduced DCT scale" 'grep -q "^decoded *2016x1512 (JPEG DCT scaling" "$TMP/out" || dump "$TMP/out"'
check "... resized to 1152x864 under max_pixels 1048576" \
  'grep -q "^resized *1152x864 (min_pixels 65536, max_pixels 1048576," "$TMP/out" || dump "$TMP/out"'
check "... says the default budget applied, and what the config alone gives" \
  'grep -q "^budget *at most 1024 image tokens (the default of ask and chat.*applied, preprocessor_config.json alone gives 11844 tokens" "$TMP/out" || dump "$TMP/out"'
check "... 972 image tokens" 'grep -q "^tokens *972 image tokens" "$TMP/out" || dump "$TMP/out"'
run image-info --model "$MODEL" --image "$PHOTO" --max-image-tokens 256
check "--max-image-tokens 256: 576x416, 234 tokens" \
  'grep -q "^resized *576x416 " "$TMP/out" && grep -q "^tokens *234 image tokens" "$TMP/out" || dump "$TMP/out" "$TMP/err"'
run image-info --model "$MODEL" --image "$PHOTO" --max-pixels 200704
check "--max-pixels alone replaces the budget: 512x384, 192 tokens" \
  'grep -q "^resized *512x384 " "$TMP/out" && grep -q "^budget *none" "$TMP/out" && grep -q "^tokens *192 image tokens" "$TMP/out" || dump "$TMP/out" "$TMP/err"'
run image-info --model "$MODEL" --image "$PHOTO" --max-pixels 4000000 --max-image-tokens 512
check "the tightest bound wins (--max-image-tokens 512 under --max-pixels 4000000): 494 tokens" \
  'grep -q "^tokens *494 image tokens" "$TMP/out" || dump "$TMP/out" "$TMP/err"'

# ---------------------------------------------------------------- shrink to fit --max-context
# 972 + 768 + 70 image tokens do not fit 1200: each image is capped at 587 tokens (540 + 540 + 70).
run ask --model "$MODEL" --image "$PHOTO" --image "$DATA/images/big.jpg" --image "$DATA/images/small.png" \
  --max-context 1200 --greedy -n 4 -v "Compare them."
check "three images over --max-context 1200 are shrunk to fit: exit 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... one line on stderr says so" \
  '[ "$(grep -c "shrunk" "$TMP/err")" = 1 ] && grep -q "^qvl: the 3 images need 1810 image tokens.*shrunk to 1150 image tokens (at most 587 each)" "$TMP/err" || dump "$TMP/err"'
check "... and -v says what each image got" 'grep -q "(3 images: 540 + 540 + 70 image tokens)" "$TMP/err" || dump "$TMP/err"'
run ask --model "$MODEL" --image "$PHOTO" --image "$DATA/images/big.jpg" --image "$DATA/images/small.png" \
  --max-context 150 --greedy -n 4 "Compare them."
check "not even the smallest size fits --max-context 150: exit 1, one line" \
  '[ "$status" = 1 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "even with the 3 images at the smallest size" "$TMP/err" || dump "$TMP/err"'

# ---------------------------------------------------------------- --image - (stdin)
"$QVL" ask --model "$MODEL" --image "$DATA/images/small.png" --greedy -n 8 --dtype f32 --json "What is in the image?" \
  > "$TMP/file.json" 2> "$TMP/file.err"
"$QVL" ask --model "$MODEL" --image - --greedy -n 8 --dtype f32 --json "What is in the image?" \
  < "$DATA/images/small.png" > "$TMP/stdin.json" 2> "$TMP/stdin.err"
check "ask --image - reads the image from stdin: the same tokens as the file" \
  '[ -s "$TMP/stdin.json" ] && [ "$(json_get "$TMP/stdin.json" "d[\"tokens\"]")" = "$(json_get "$TMP/file.json" "d[\"tokens\"]")" ] || dump "$TMP/stdin.err" "$TMP/stdin.json"'
run image-info --model "$MODEL" --image - < "$DATA/images/photo.jpg"
check "image-info --image - names stdin and reads it" \
  'grep -q "^image *stdin (jpeg, 20005 bytes)" "$TMP/out" && grep -q "^tokens *80 image tokens" "$TMP/out" || dump "$TMP/out" "$TMP/err"'
run ask --model "$MODEL" --image - - < "$DATA/images/small.png"
check "--image - with a question from stdin too is a usage error (exit 2)" \
  '[ "$status" = 2 ] && grep -q "question" "$TMP/err" || { echo "exit $status"; dump "$TMP/err"; }'
run ask --model "$MODEL" --image - "What?" < /dev/null
check "--image - with nothing on stdin: exit 1, one line" \
  '[ "$status" = 1 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "stdin: no image bytes" "$TMP/err" || dump "$TMP/err"'

# chat --image - takes its questions from the terminal; without one (setsid: none), it says so.
if command -v setsid > /dev/null; then
  setsid -w "$QVL" chat --model "$MODEL" --image - < "$DATA/images/small.png" > "$TMP/out" 2> "$TMP/err"
  status=$?
  check "chat --image - without a terminal for the questions: exit 1, one line" \
    '[ "$status" = 1 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "questions must come from a terminal" "$TMP/err" || dump "$TMP/err"'
fi

# ---------------------------------------------------------------- --page
run image-info --model "$MODEL" --image "$FORMATS/pages3.pdf" --page 2
check "image-info --page 2 of a 3-page PDF" 'grep -q "^pages *3 (this is page 2" "$TMP/out" || dump "$TMP/out" "$TMP/err"'
"$QVL" preprocess --model "$MODEL" --image "$FORMATS/pages3.pdf" --out "$TMP/p1.st" > /dev/null 2>&1
"$QVL" preprocess --model "$MODEL" --image "$FORMATS/pages3.pdf" --page 3 --out "$TMP/p3.st" > /dev/null 2>&1
check "preprocess --page 3 gives other pixels than page 1" '[ -s "$TMP/p1.st" ] && [ -s "$TMP/p3.st" ] && ! cmp -s "$TMP/p1.st" "$TMP/p3.st"'
run image-info --model "$MODEL" --image "$FORMATS/pages3.pdf" --page 4
check "a page past the end: exit 1, one line" \
  '[ "$status" = 1 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "page 4" "$TMP/err" || dump "$TMP/err"'
run ask --model "$MODEL" --image "$FORMATS/pages2.tif" --page 2 --greedy -n 2 --json "What is it?"
check "ask --page 2 of a 2-page TIFF exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
run ask --model "$MODEL" --image "$FORMATS/pages2.tif" --page 3 --greedy -n 2 "What is it?"
check "ask --page 3 of a 2-page TIFF: exit 1, one line" \
  '[ "$status" = 1 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "page 3" "$TMP/err" || dump "$TMP/err"'
run ask --model "$MODEL" --image "$FORMATS/pages3.pdf" --dpi 72 --greedy -n 2 --json "What is it?"
check "ask --dpi 72 renders the PDF page at 144x108" \
  '[ "$status" = 0 ] && [ "$(json_get "$TMP/out" "(d[\"images\"][0][\"width\"], d[\"images\"][0][\"height\"])")" = "(144, 108)" ] || dump "$TMP/out" "$TMP/err"'

# ---------------------------------------------------------------- ocr over every format
IN="$TMP/scans"
mkdir -p "$IN"
cp "$FORMATS/pages3.pdf" "$FORMATS/pages2.tif" "$FORMATS/sample.webp" "$FORMATS/sample.bmp" "$FORMATS/sample.gif" \
  "$DATA/images/small.png" "$DATA/images/photo.jpg" "$IN/"
head -c 400 "$FORMATS/pages3.pdf" > "$IN/cut.pdf"
printf 'hello' > "$IN/notes.tif"
# Page 2 of this PDF is 9999x99 pt: over --max-image-pixels, the other pages are fine.
sed 's|/MediaBox \[0 0 144 108\] /Contents 5 0 R|/MediaBox [0 0 9999 99] /Contents 5 0 R|' "$FORMATS/pages3.pdf" \
  > "$IN/wide_page2.pdf"
ocr() { "$QVL" ocr --model "$MODEL" --dtype f32 -n 3 --max-image-pixels 1000000 "$@"; }
ocr --output "$TMP/full.jsonl" "$IN" 2> "$TMP/full.err"
rc=$?
check "ocr over the folder exits 3 (some failed)" "[ $rc -eq 3 ] || { cat '$TMP/full.err'; false; }"
python3 - "$TMP/full.jsonl" "$IN" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["file"].rsplit("/", 1)[1], r.get("page"), "error" in r) for r in recs]
want = [("cut.pdf", None, True), ("notes.tif", None, True),
        ("pages2.tif", 1, False), ("pages2.tif", 2, False),
        ("pages3.pdf", 1, False), ("pages3.pdf", 2, False), ("pages3.pdf", 3, False),
        ("photo.jpg", None, False), ("sample.bmp", None, False), ("sample.gif", None, False),
        ("sample.webp", None, False), ("small.png", None, False),
        ("wide_page2.pdf", 1, False), ("wide_page2.pdf", 2, True), ("wide_page2.pdf", 3, False)]
assert got == want, f"records {got}\n   want {want}"
ok = [r for r in recs if "error" not in r]
assert len(ok) == 12, len(ok)  # 10 pages of the 7 good files, and 2 of wide_page2.pdf
assert all(r["tokens"] and r["width"] > 0 for r in ok)
err = {(r["file"].rsplit("/", 1)[1], r.get("page")): r["error"] for r in recs if "error" in r}
assert "over the limit" in err[("wide_page2.pdf", 2)], err
assert all(r["file"] in r["error"] for r in recs if "error" in r), "errors name the file"
# The same bytes on the same page give the same answer; the pages of a PDF are different images.
pdf = [r for r in ok if r["file"].endswith("/pages3.pdf")]
wide = {r["page"]: r for r in ok if r["file"].endswith("/wide_page2.pdf")}
assert wide[1]["tokens"] == pdf[0]["tokens"] and wide[3]["tokens"] == pdf[2]["tokens"]
print("ok: 15 records in input order: one per page (10 + 2), error records for cut.pdf, notes.tif and one page")
PY
check "... the summary counts pages" "grep -q 'done 12, failed 3, skipped 0, computed 12, reused 0, 15 of 15 pages' '$TMP/full.err' || dump '$TMP/full.err'"

# --resume per page: a run cut in the middle of pages3.pdf (its page 1 written, page 2 half
# written) redoes only the 10 missing records (9 computed, 1 error).
head -n 5 "$TMP/full.jsonl" > "$TMP/cut.jsonl"
sed -n 6p "$TMP/full.jsonl" | head -c 40 >> "$TMP/cut.jsonl"
ocr --output "$TMP/cut.jsonl" --resume "$IN" 2> "$TMP/resume.err"
rc=$?
check "--resume after a cut in the middle of a PDF exits 3 (the old error records stay)" \
  "[ $rc -eq 3 ] || { cat '$TMP/resume.err'; false; }"
check "... skips the 5 records already there and computes only the missing pages" \
  "grep -q 'skipped 5, computed 9, reused 0' '$TMP/resume.err' || dump '$TMP/resume.err'"
strip_ms='[{k: v for k, v in json.loads(l).items() if k != "ms"} for l in open(f)]'
check "... and the output equals the uninterrupted run's, record for record" \
  "python3 -c 'import json,sys; a,b=[$strip_ms for f in sys.argv[1:]]; sys.exit(0 if a==b else 1)' '$TMP/full.jsonl' '$TMP/cut.jsonl' || dump '$TMP/cut.jsonl'"

# --batch: the same records, in the same order.
ocr --batch 4 "$IN" > "$TMP/batch.jsonl" 2> /dev/null
check "--batch 4 gives the same records" \
  "python3 -c 'import json,sys; a,b=[$strip_ms for f in sys.argv[1:]]; sys.exit(0 if a==b else 1)' '$TMP/full.jsonl' '$TMP/batch.jsonl'"

exit $fail

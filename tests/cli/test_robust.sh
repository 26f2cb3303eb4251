#!/usr/bin/env bash
# Robustness from the outside, on copies of the tiny model: a checkpoint that
# does not match its config fails in one line naming the tensor or file before
# anything runs; a TorchScript vision module file in the cache folder is never
# read or rewritten; --max-memory refuses what would not fit; unusual images
# work end to end.
source "$(dirname "$0")/common.sh" "$@"

# Our own cache folder: these checks look at the files in it.
export QVL_CACHE_DIR="$TMP/cache"
IMG="$DATA/images/small.png"

# expect_one_line_error NAME PATTERN COMMAND...: exit 1, one line on stderr matching PATTERN, nothing on stdout.
expect_one_line_error() {
  local name="$1" pattern="$2"
  shift 2
  "$@" > "$TMP/err.out" 2> "$TMP/err.err"
  local rc=$?
  check "$name: exit 1" "[ $rc -eq 1 ] || { echo \"  exit status $rc\"; cat '$TMP/err.err'; false; }"
  check "$name: one line on stderr" "[ \$(wc -l < '$TMP/err.err') -eq 1 ] || { cat '$TMP/err.err'; false; }"
  check "$name: says '$pattern'" "grep -qF -- \"$pattern\" '$TMP/err.err' || { cat '$TMP/err.err'; false; }"
  check "$name: nothing on stdout" "[ ! -s '$TMP/err.out' ]"
}

copy_model() { mkdir -p "$1" && cp "$MODEL"/* "$1"/; }

# ---------------------------------------------------------------- checkpoint checks at start
# A tensor renamed in the shard's header and in the index (as a model of
# another family, or a renamed export, would have it).
copy_model "$TMP/renamed"
python3 - "$TMP/renamed" <<'PY'
import json, struct, sys
d = sys.argv[1]
old = "model.visual.blocks.2.attn.qkv.weight"
new = "model.visual.blocks.2.attn.qkv_renamed.weight"
index = json.load(open(f"{d}/model.safetensors.index.json"))
shard = f"{d}/{index['weight_map'][old]}"
blob = open(shard, "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
header[new] = header.pop(old)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(shard, "wb").write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
index["weight_map"][new] = index["weight_map"].pop(old)
json.dump(index, open(f"{d}/model.safetensors.index.json", "w"))
PY
expect_one_line_error "renamed tensor" "model.visual.blocks.2.attn.qkv.weight" \
  "$QVL" ask --model "$TMP/renamed" "hi"

# config.json describing another width than the weights have.
copy_model "$TMP/wider"
python3 - "$TMP/wider/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["text_config"]["hidden_size"] = 48
cfg["vision_config"]["out_hidden_size"] = 48  # the config itself stays consistent
json.dump(cfg, open(sys.argv[1], "w"))
PY
expect_one_line_error "config hidden_size 48 for 32-wide weights" \
  "'model.language_model.embed_tokens.weight' has shape [151936,32], config implies [151936,48]" \
  "$QVL" ask --model "$TMP/wider" "hi"

# A shard cut short, as an interrupted download leaves it.
copy_model "$TMP/truncated"
truncate -s 1000000 "$TMP/truncated/model-00002-of-00002.safetensors"
expect_one_line_error "truncated shard" "model-00002-of-00002.safetensors" \
  "$QVL" ask --model "$TMP/truncated" "hi"

# ---------------------------------------------------------------- a checkpoint truncated while qvl runs
# chat maps the checkpoint at start, then waits for a question before a lazy
# load reads any weight; the embedding shard is cut short in between, so the
# first answer reads pages the file no longer has (SIGBUS), which must be one
# line naming the file and exit 1, not a silent death by signal.
copy_model "$TMP/shrinking"
shard="$TMP/shrinking/model-00001-of-00002.safetensors"
: > "$TMP/shrink.err"
{
  for _ in $(seq 1200); do grep -q "model loaded" "$TMP/shrink.err" && break; sleep 0.1; done
  truncate -s 4096 "$shard"
  echo "What is it?"
} | timeout 300 "$QVL" chat --model "$TMP/shrinking" --load lazy --dtype f32 --greedy -n 8 --prompt-cache off \
  > "$TMP/shrink.out" 2> "$TMP/shrink.err"
rc=$?
check "checkpoint truncated while read: exit 1, not a signal" "[ $rc -eq 1 ] || { echo \"  exit $rc\"; dump '$TMP/shrink.err'; }"
check "checkpoint truncated while read: one line naming the file" \
  "tail -n 1 '$TMP/shrink.err' | grep -qxF '$shard: the checkpoint changed while it was being read' || dump '$TMP/shrink.err'"

# ---------------------------------------------------------------- vision module files
# qvl makes the vision module in memory from the checkpoint at every run; the
# file `qvl export` (or an older qvl) leaves in the cache folder is not its
# business: never read, never rewritten, never deleted.
copy_model "$TMP/model"
# The prompt cache off: a warm prompt would not need the vision tower this checks.
ask_image() { "$QVL" ask --model "$TMP/model" --image "$IMG" --greedy -n 6 --dtype f32 --json --prompt-cache off "What is it?" 2>> "$TMP/modules.err"; }
tokens() { python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
modules() { ls "$QVL_CACHE_DIR"/vision-*.pt 2>/dev/null; }

first=$(ask_image | tokens)
check "an image question answers and writes no module file" \
  "[ -n '$first' ] && [ -z \"\$(modules)\" ] || { cat '$TMP/modules.err'; false; }"
"$QVL" export --model "$TMP/model" --dtype f32 > "$TMP/export.out" 2>> "$TMP/modules.err"
module=$(cat "$TMP/export.out")
printf 'PK\003\004 not really a zip' > "$module"
again=$(ask_image | tokens)
check "a module file overwritten with junk changes nothing: same answer" "[ '$again' = '$first' ] || { cat '$TMP/modules.err'; false; }"
check "... and the file is left as it was" "[ \"\$(head -c 2 '$module')\" = PK ] && [ \$(stat -c %s '$module') -lt 100 ]"

# ---------------------------------------------------------------- --max-memory
expect_one_line_error "--max-memory below the model's needs" "but --max-memory is 100 MB" \
  "$QVL" ask --model "$MODEL" --max-memory 100 "hi"
check "... and says what the memory is for" "grep -q 'needs about .* MB (bf16 weights .* + KV cache 16 MB + runtime' '$TMP/err.err'"
expect_one_line_error "a long context's KV cache is named as the cause" "a smaller --max-context" \
  "$QVL" ask --model "$MODEL" --max-memory 600 --max-context 200000 "hi"

# The tiny model needs under 400 MB; a 4-megapixel image adds well over 100 MB.
"$QVL" ask --model "$MODEL" --max-memory 500 -n 2 "hi" > /dev/null 2> "$TMP/mem.err"
check "a text question fits in 500 MB" "[ $? -eq 0 ] || { cat '$TMP/mem.err'; false; }"
expect_one_line_error "a huge --max-pixels image over the limit" "lower --max-pixels" \
  "$QVL" ask --model "$MODEL" --max-memory 500 --min-pixels 4000000 --max-pixels 4000000 --max-context 20000 \
  --image "$DATA/images/big.jpg" "hi"

# ---------------------------------------------------------------- other formats, hostile and fine
# Each hostile file (scripts/make_bad_images.py): exit 1 and one line naming the file, quickly;
# nothing from libtiff, poppler, giflib or libwebp reaches the terminal.
while IFS='|' read -r file says; do
  expect_one_line_error "$file" "$DATA/bad/$file: " timeout 30 "$QVL" preprocess --image "$DATA/bad/$file"
  check "$file: says '$says'" "grep -qF -- \"$says\" '$TMP/err.err' || { cat '$TMP/err.err'; false; }"
done <<'LIST'
pdf_encrypted.pdf|PDF is encrypted with a password
pdf_huge_page.pdf|over the limit
pdf_truncated.pdf|invalid or damaged PDF
pdf_100000_pages.pdf|PDF has no readable pages
tiff_huge.tif|image is 100000x100000
tiff_truncated.tif|invalid TIFF
bmp_absurd_offset.bmp|pixel data offset 4294967280 is outside the file
bmp_huge.bmp|image is 2147483647x2147483647
bmp_truncated.bmp|truncated BMP
bmp_rle8.bmp|RLE-compressed BMP is not supported
gif_truncated.gif|corrupt or truncated GIF
gif_huge.gif|image is 65535x65535
webp_huge.webp|image is 16384x16384
webp_truncated.webp|invalid WebP
LIST
# A PDF with a damaged embedded JPEG (found by fuzz_pdf): rendered, without libjpeg's "Corrupt
# JPEG data" warning reaching stderr (poppler leaves libjpeg's printing handler in place;
# lib/qvl/image/pdf_decoder.cpp replaces it).
"$QVL" preprocess --image "$DATA/fuzz-regressions/image-pdf-corrupt-embedded-jpeg.pdf" > /dev/null 2> "$TMP/pdfjpeg.err"
check "PDF with a corrupt embedded JPEG: rendered, quietly" "[ $? -eq 0 ] && [ ! -s '$TMP/pdfjpeg.err' ] || { cat '$TMP/pdfjpeg.err'; false; }"
# A TIFF whose directories loop: page 1 is still readable, without a hang or a word on stderr.
timeout 30 "$QVL" preprocess --image "$DATA/bad/tiff_loop.tif" > /dev/null 2> "$TMP/loop.err"
check "tiff_loop.tif: page 1 read, quietly" "[ $? -eq 0 ] && [ ! -s '$TMP/loop.err' ] || { cat '$TMP/loop.err'; false; }"
for img in sample.webp sample.bmp sample.gif pages2.tif pages3.pdf cmyk8.tif rgb16.tif lossy_alpha.webp; do
  "$QVL" preprocess --image "$DATA/images/formats/$img" > "$TMP/fmt.out" 2> "$TMP/fmt.err"
  check "preprocess $img works, quietly" "[ $? -eq 0 ] && [ -s '$TMP/fmt.out' ] && [ ! -s '$TMP/fmt.err' ] || { cat '$TMP/fmt.err'; false; }"
done

# ---------------------------------------------------------------- a PDF page that never finishes
# 3 KB of PDF: 12 nested form XObjects, each drawing the next 10 times (10^12 squares).
# Rendering it is stopped at --page-timeout (or $QVL_PAGE_TIMEOUT); ocr goes on with the next file.
make_nested_pdf() {
  python3 - "$1" <<'PY'
import sys
levels = 12
objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
           2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
           3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] /Resources << /XObject << /X 10 0 R >> >> "
              b"/Contents 4 0 R >>"}
def stream(head, body):
    return head + b" /Length %d >>\nstream\n" % len(body) + body + b"\nendstream"
objects[4] = stream(b"<<", b"/X Do")
for level in range(levels):
    last = level + 1 == levels
    body = b"0 0 72 72 re f" if last else b"/X Do\n" * 10
    inner = b"" if last else b" /Resources << /XObject << /X %d 0 R >> >>" % (11 + level)
    objects[10 + level] = stream(b"<< /Type /XObject /Subtype /Form /BBox [0 0 72 72]" + inner, body)
out = bytearray(b"%PDF-1.4\n")
offsets = {}
for number in sorted(objects):
    offsets[number] = len(out)
    out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
size = max(objects) + 1
xref = len(out)
out += b"xref\n0 %d\n" % size
for number in range(size):
    out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
open(sys.argv[1], "wb").write(out)
PY
}
make_nested_pdf "$TMP/nested.pdf"
check "the nested-XObject PDF is small" "[ \$(stat -c %s '$TMP/nested.pdf') -lt 4096 ]"
start=$SECONDS
QVL_PAGE_TIMEOUT=1 timeout 60 "$QVL" image-info --model "$MODEL" --image "$TMP/nested.pdf" > "$TMP/nested.out" 2> "$TMP/nested.err"
rc=$?
check "image-info on the nested PDF: exit 1 after QVL_PAGE_TIMEOUT=1 s, not a hang" \
  "[ $rc -eq 1 ] && grep -q 'PDF page 1 takes longer than 1 s to render' '$TMP/nested.err' || dump '$TMP/nested.err'"
check "image-info on the nested PDF: stopped within 20 s" "[ $((SECONDS - start)) -lt 20 ]"
"$QVL" image-info --model "$MODEL" --image "$DATA/images/formats/pages3.pdf" --page-timeout 0 > /dev/null 2> "$TMP/noto.err"
check "--page-timeout 0 renders a good PDF in process" "[ $? -eq 0 ] || dump '$TMP/noto.err'"
mkdir -p "$TMP/bomb"
cp "$IMG" "$TMP/bomb/a_good.png"
cp "$TMP/nested.pdf" "$TMP/bomb/b_bomb.pdf"
cp "$DATA/images/formats/sample.webp" "$TMP/bomb/c_good2.webp"
timeout 120 "$QVL" ocr --model "$MODEL" --dtype f32 -n 2 --page-timeout 2 --output "$TMP/bomb.jsonl" "$TMP/bomb" \
  2> "$TMP/bomb.err"
rc=$?
check "ocr over [good, bomb, good]: exit 3 (one failed), not stopped by timeout" \
  "[ $rc -eq 3 ] || { echo \"  exit $rc\"; dump '$TMP/bomb.err'; }"
python3 - "$TMP/bomb.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["file"].rsplit("/", 1)[1], "error" in r) for r in recs]
assert got == [("a_good.png", False), ("b_bomb.pdf", True), ("c_good2.webp", False)], got
assert "takes longer than 2 s to render" in recs[1]["error"], recs[1]
print("ok: ocr wrote the good files' records around the bomb's error record")
PY

# Pages of text rendered while float32 prefills run on OpenBLAS's threads: the
# renderer's child process must not take those threads down with it (fork's
# atfork handlers did, and the run then waited for ever).
python3 - "$TMP/text" <<'PY'
import os, sys
os.makedirs(sys.argv[1])
for doc in "abcd":
    objs, kids = {1: b"<< /Type /Catalog /Pages 2 0 R >>", 3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}, []
    for p in range(5):
        body = b"BT /F1 10 Tf 56 790 Td 12 TL\n" + b"(The quick brown fox jumps over the lazy dog 0123456789.) '\n" * 60 + b"ET"
        objs[10 + 2 * p] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(body), body)
        objs[11 + 2 * p] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> "
                            b"/Contents %d 0 R >>" % (10 + 2 * p))
        kids.append(b"%d 0 R" % (11 + 2 * p))
    objs[2] = b"<< /Type /Pages /Kids [%s] /Count 5 >>" % b" ".join(kids)
    out, offsets = bytearray(b"%PDF-1.4\n"), {}
    for n in sorted(objs):
        offsets[n] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (n, objs[n])
    size, xref = max(objs) + 1, len(out)
    out += b"xref\n0 %d\n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] if n in offsets else b"0000000000 65535 f \n" for n in range(size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    open(f"{sys.argv[1]}/{doc}.pdf", "wb").write(out)
PY
timeout -s KILL 60 "$QVL" ocr --model "$MODEL" --dtype f32 -n 1 --max-image-tokens 64 --output "$TMP/text.jsonl" "$TMP/text" \
  2> "$TMP/text.err"
rc=$?
check "ocr --dtype f32 over 20 text pages: all done, no hang" \
  "[ $rc -eq 0 ] && [ \$(wc -l < '$TMP/text.jsonl') -eq 20 ] || { echo \"  exit $rc\"; dump '$TMP/text.err'; }"

# ---------------------------------------------------------------- unusual images end to end
for img in rgb16.png gray16.png rgba16.png cmyk.jpg exif6.jpg palette.png interlaced.png animated.png; do
  "$QVL" ask --model "$MODEL" --image "$DATA/bad/$img" --greedy -n 4 --json "What is it?" \
    > "$TMP/img.out" 2> "$TMP/img.err"
  rc=$?
  check "ask with $img works" "[ $rc -eq 0 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))[\"tokens\"]' '$TMP/img.out' \
    || { cat '$TMP/img.err'; false; }"
done

exit $fail

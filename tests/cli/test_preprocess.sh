#!/usr/bin/env bash
# qvl image-info / preprocess on the tiny model: sizes, grid and token cost
# match the reference's, --out writes the golden pixel values as safetensors and
# never overwrites without --force, and bad input is one error line naming the
# file, exit 1.
source "$(dirname "$0")/common.sh" "$@"

# expect_error TEXT QVL-ARGS...: exit 1, nothing on stdout and one stderr line
# "qvl: error: ..." containing TEXT (a grep pattern).
expect_error() {
  local says=$1
  shift
  run "$@"
  check "'$*' exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'
  check "... with exactly one error line" '[ "$(wc -l < "$TMP/err")" = 1 ] || dump "$TMP/err"'
  check "... saying '$says'" 'grep -q "^qvl: error: .*$says" "$TMP/err" || dump "$TMP/err"'
  check "... and nothing on stdout" '[ ! -s "$TMP/out" ] || dump "$TMP/out"'
}

# 1. image-info: sizes, grid and token cost of photo.jpg (goldens.json: grid [1,16,20]).
run image-info --model "$MODEL" --image "$DATA/images/photo.jpg"
check "image-info exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... original size 320x240" 'grep -q "^original *320x240$" "$TMP/out" || dump "$TMP/out"'
check "... resized to 320x256: within the config's min_pixels and the default budget of 1024 tokens" \
  'grep -q "^resized *320x256 (min_pixels 65536, max_pixels 1048576" "$TMP/out" || dump "$TMP/out"'
check "... which it is within" 'grep -q "^budget *at most 1024 image tokens .*: the image is within it$" "$TMP/out" || dump "$TMP/out"'
check "... grid 1x16x20: 320 patches of 1536 values" \
  'grep -q "^grid *t=1 h=16 w=20: 320 patches of 1536 values$" "$TMP/out" || dump "$TMP/out"'
check "... 80 image tokens" 'grep -q "^tokens *80 image tokens" "$TMP/out" || dump "$TMP/out"'

# 2. --max-pixels overrides the config: big.jpg at the max_pixels_200k setting is [1,24,32].
run preprocess --model "$MODEL" --image "$DATA/images/big.jpg" --max-pixels 200704
check "preprocess --max-pixels exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... grid 1x24x32" 'grep -q "^grid *t=1 h=24 w=32" "$TMP/out" || dump "$TMP/out"'

# 3. --out writes the safetensors; the values must be the golden bytes mapped by (x/255 - 0.5)/0.5.
OUT=$TMP/small.safetensors
run preprocess --model "$MODEL" --image "$DATA/images/small.png" --out "$OUT"
check "preprocess --out exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... writes the file" '[ -f "$OUT" ]'
check "... leaving no temporary file" '[ -z "$(ls "$TMP" | grep "\.tmp$")" ]'
expected_bytes=$((280 * 1536 * 4 + 3 * 8))
header_len=$(od -An -t u8 -N 8 "$OUT" | tr -d ' ')
header_len=${header_len:-0}
header=$(head -c $((8 + header_len)) "$OUT" | tail -c +9)
check "... its size is the 8-byte length + header + data" \
  '[ "$(stat -c %s "$OUT")" = $((8 + header_len + expected_bytes)) ]'
check "... pixel_values is F32 [280,1536]" \
  'grep -q "\"pixel_values\":{\"dtype\":\"F32\",\"shape\":\[280,1536\]" <<< "$header" || { echo "header: $header"; false; }'
check "... grid_thw is I64 [1,3]" \
  'grep -q "\"grid_thw\":{\"dtype\":\"I64\",\"shape\":\[1,3\]" <<< "$header" || { echo "header: $header"; false; }'
# argv: ours.safetensors golden.safetensors; prints the difference when it fails.
same_as_golden=$(cat <<'EOF'
import json, struct, sys
def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    def get(name):
        begin, end = header[name]["data_offsets"]
        return data[8 + n + begin:8 + n + end]
    return get
ours, golden = load(sys.argv[1]), load(sys.argv[2])
values = struct.unpack("<%df" % (280 * 1536), ours("pixel_values"))
want = golden("default.small.png.pixel_u8")
worst = max(abs(v - (u / 255.0 - 0.5) / 0.5) for v, u in zip(values, want))
grid = struct.unpack("<3q", ours("grid_thw"))
if worst > 1e-6 or grid != (1, 14, 20):
    print(f"max |difference| {worst}, grid {grid}")
    sys.exit(1)
EOF
)
if command -v python3 > /dev/null; then
  check "... pixel_values are the golden bytes mapped by (x/255 - 0.5)/0.5, grid_thw is 1,14,20" \
    'python3 -c "$same_as_golden" "$OUT" "$DATA/goldens_processor.safetensors"'
else
  echo "note: python3 not found, skipped comparing the values with the golden (the unit tests do it too)"
fi

# 4. An existing --out is never overwritten without --force.
cp "$OUT" "$TMP/before"
expect_error "already exists; pass --force" preprocess --model "$MODEL" --image "$DATA/images/photo.jpg" --out "$OUT"
check "... the existing --out file is untouched" 'cmp -s "$OUT" "$TMP/before"'
run preprocess --model "$MODEL" --image "$DATA/images/photo.jpg" --out "$OUT" --force
check "preprocess --force exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... and replaces the file" '! cmp -s "$OUT" "$TMP/before"'

# 5. Bad input: one clear line naming the file, exit status 1.
expect_error "bad/truncated.jpg: truncated JPEG" image-info --image "$DATA/bad/truncated.jpg"
expect_error "bad/truncated.png: corrupt or truncated PNG" image-info --image "$DATA/bad/truncated.png"
expect_error "bad/text.png: not a PNG or JPEG image" \
  preprocess --image "$DATA/bad/text.png" --out "$TMP/bad.safetensors"
expect_error "bad/empty.png: file is empty" preprocess --image "$DATA/bad/empty.png"
expect_error "bad/huge_header.png: image is 100000x100000 = 10000000000 pixels, over the limit" \
  preprocess --image "$DATA/bad/huge_header.png"
expect_error "aspect ratio 201.0 is over the limit of 200" image-info --image "$DATA/bad/too_wide.png"
expect_error "cannot open image" image-info --image "$TMP/no_such.png"
expect_error "not found" image-info --model "$TMP/no_model" --image "$DATA/images/photo.jpg"
expect_error "min_pixels 9000 is larger than max_pixels 8000" \
  image-info --image "$DATA/images/photo.jpg" --min-pixels 9000 --max-pixels 8000
check "a failed preprocess leaves no output file" '[ ! -e "$TMP/bad.safetensors" ]'

# 6. Usage errors are not runtime errors.
run preprocess
check "preprocess without --image exits with a usage status (not 0, not 1)" \
  '[ "$status" != 0 ] && [ "$status" != 1 ] || { echo "exit $status"; false; }'

exit $fail

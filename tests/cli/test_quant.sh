#!/usr/bin/env bash
# qvl ask --quant int8, end to end on the tiny model: the first greedy token of
# every golden model case equals the reference's (and the bf16 run's); the int8
# weight caches (the decoder's, and the vision tower's, made at the first image:
# int8 and int4 both run the vision linears in int8) are made once in the cache
# folder, reused by later runs, and rebuilt when damaged; a cache folder that
# cannot be written leaves the weights in memory; a bad --quant value is a
# usage error.
source "$(dirname "$0")/common.sh" "$@"

# A cache folder of our own: the int8 and int4 caches are ours.
export QVL_CACHE_DIR="$TMP/cache"
mkdir -p "$QVL_CACHE_DIR"
cp "$DATA"/images/*.* "$TMP"/

python3 - "$DATA/goldens.json" "$TMP" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
for case in g["model_cases"]:
    json.dump(g["chat_template"]["messages"][case], open(f"{sys.argv[2]}/{case}.json", "w"))
    json.dump(g["model_cases"][case]["greedy_16"], open(f"{sys.argv[2]}/{case}.expected", "w"))
PY

int8_cache() { ls "$QVL_CACHE_DIR"/decoder-int8-*.bin 2>/dev/null; }
vision_cache() { ls "$QVL_CACHE_DIR"/vision-mergers-int8-*.bin 2>/dev/null; }
mtime() { stat -c %Y.%y "$1"; }

first=1
for case in text_only one_image system_image multi_turn; do
  for quant in int8 none; do
    "$QVL" ask --model "$MODEL" --messages "$TMP/$case.json" --greedy -n 16 --quant "$quant" --json \
      > "$TMP/$case.$quant.out" 2> "$TMP/$case.$quant.err"
    rc=$?
    check "$case --quant $quant exits 0" "[ $rc -eq 0 ] || { cat '$TMP/$case.$quant.err'; false; }"
  done
  python3 - "$TMP/$case.int8.out" "$TMP/$case.none.out" "$TMP/$case.expected" <<'PY' || fail=1
import json, sys
int8, bf16, expected = (json.load(open(p)) for p in sys.argv[1:4])
name = sys.argv[1].rsplit('/', 1)[1]
assert int8["tokens"][:1] == expected[:1], f"{name}: int8 first token {int8['tokens'][:1]} != reference {expected[:1]}"
assert int8["tokens"][:1] == bf16["tokens"][:1], f"{name}: int8 first token differs from bf16's"
same = next((i for i, (a, b) in enumerate(zip(int8["tokens"], expected)) if a != b), min(len(int8["tokens"]), len(expected)))
print(f"ok: {name}: int8 first token equals the reference's and bf16's ({same}/{len(expected)} greedy tokens agree)")
PY
  if [ $first -eq 1 ]; then
    check "the first int8 run says it builds the cache" "grep -q 'quantizing the decoder weights to int8' '$TMP/$case.int8.err'"
    check "the int8 cache is in the cache folder" "[ -n \"\$(int8_cache)\" ]"
    check "a text-only question makes no vision cache" "[ -z \"\$(vision_cache)\" ]"
    BUILT=$(mtime "$(int8_cache)")
  elif [ $case = one_image ]; then
    check "the first int8 image says it builds the vision cache, and only that" \
      "grep -q 'quantizing the vision weights to int8' '$TMP/$case.int8.err' && ! grep -q 'decoder' '$TMP/$case.int8.err'"
    check "the vision int8 cache is in the cache folder, beside the decoder's" "[ -n \"\$(vision_cache)\" ] && [ -n \"\$(int8_cache)\" ]"
    VISION_BUILT=$(mtime "$(vision_cache)")
  else
    check "$case: a later int8 run reuses the cache silently" "[ ! -s '$TMP/$case.int8.err' ]"
  fi
  first=0
done
check "the int8 cache was written once" "[ \"\$(mtime \"\$(int8_cache)\")\" = '$BUILT' ]"
check "the vision int8 cache was written once" "[ \"\$(mtime \"\$(vision_cache)\")\" = '$VISION_BUILT' ]"
check "no temporaries are left in the cache folder" \
  "[ \$(ls '$QVL_CACHE_DIR' | grep -v '^prompts\$' | grep -vc '^tokenizer-.*\.bin\$') -eq 2 ]"

# A damaged vision cache is rebuilt (and said so), and answers the same. An
# empty prompt cache of its own: a hit would skip the vision encoder, and the
# first run was a miss too, so both prefill the prompt in the same pieces (with
# the prompt cache off, a tier whose int8 GEMM and GEMV round differently, e.g.
# generic, may answer otherwise on this random-weight model).
VCACHE=$(vision_cache)
head -c 1000 "$VCACHE" > "$TMP/vtruncated" && cat "$TMP/vtruncated" > "$VCACHE"
"$QVL" ask --model "$MODEL" --messages "$TMP/system_image.json" --greedy -n 16 --quant int8 --json --prompt-cache "$TMP/prompts-vrebuilt" \
  > "$TMP/vrebuilt.out" 2> "$TMP/vrebuilt.err"
check "a truncated vision cache is rebuilt with a note" "grep -q 'rebuilding the int8 weight cache .*vision-mergers-int8' '$TMP/vrebuilt.err'"
check "the rebuilt vision cache answers as before" \
  "python3 -c 'import json,sys; a=json.load(open(\"$TMP/vrebuilt.out\")); b=json.load(open(\"$TMP/system_image.int8.out\")); sys.exit(0 if a[\"tokens\"]==b[\"tokens\"] else 1)'"
check "the rebuilt vision cache is whole again" "[ \$(stat -c %s '$VCACHE') -gt 1000 ]"

# A damaged cache is rebuilt (and said so), and answers the same.
CACHE=$(int8_cache)
head -c 1000 "$CACHE" > "$TMP/truncated" && cat "$TMP/truncated" > "$CACHE"
"$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant int8 --json \
  > "$TMP/rebuilt.out" 2> "$TMP/rebuilt.err"
check "a truncated cache is rebuilt with a note" "grep -q 'rebuilding the int8 weight cache' '$TMP/rebuilt.err'"
check "the rebuilt cache answers as before" \
  "python3 -c 'import json,sys; a=json.load(open(\"$TMP/rebuilt.out\")); b=json.load(open(\"$TMP/one_image.int8.out\")); sys.exit(0 if a[\"tokens\"]==b[\"tokens\"] else 1)'"
check "the rebuilt cache is whole again" "[ \$(stat -c %s '$CACHE') -gt 1000 ]"

# --quiet keeps the build notes off stderr.
rm -f "$CACHE"
"$QVL" ask --model "$MODEL" --greedy -n 2 --quant int8 -q "Hello" > /dev/null 2> "$TMP/quiet.err"
check "--quiet: no notes while building" "[ ! -s '$TMP/quiet.err' ]"
check "--quiet: the cache is built all the same" "[ -f '$CACHE' ]"

# --quant int4: the cases whose reference margin for the first token is far
# above int4's logit error (tests/model/test_int4.cpp: one_image, system_image)
# start with the reference's token; the int4 cache is made once beside the
# int8 one and rebuilt when damaged.
int4_cache() { ls "$QVL_CACHE_DIR"/decoder-int4-*.bin 2>/dev/null; }
for case in one_image system_image; do
  "$QVL" ask --model "$MODEL" --messages "$TMP/$case.json" --greedy -n 16 --quant int4 --json \
    > "$TMP/$case.int4.out" 2> "$TMP/$case.int4.err"
  rc=$?
  check "$case --quant int4 exits 0" "[ $rc -eq 0 ] || { cat '$TMP/$case.int4.err'; false; }"
  python3 - "$TMP/$case.int4.out" "$TMP/$case.expected" <<'PY' || fail=1
import json, sys
int4, expected = (json.load(open(p)) for p in sys.argv[1:3])
assert int4["tokens"][:1] == expected[:1], f"int4 first token {int4['tokens'][:1]} != reference {expected[:1]}"
print(f"ok: {sys.argv[1].rsplit('/', 1)[1]}: int4 first token equals the reference's")
PY
done
check "the first int4 run says it builds the cache" "grep -q 'quantizing the decoder weights to int4' '$TMP/one_image.int4.err'"
check "a later int4 run reuses the cache silently" "[ ! -s '$TMP/system_image.int4.err' ]"
CACHE4=$(int4_cache)
check "the int4 cache is in the cache folder" "[ -n '$CACHE4' ]"
head -c 3000 "$CACHE4" > "$TMP/truncated4" && cat "$TMP/truncated4" > "$CACHE4"
"$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant int4 --json \
  > "$TMP/rebuilt4.out" 2> "$TMP/rebuilt4.err"
check "a truncated int4 cache is rebuilt with a note" "grep -q 'rebuilding the int4 weight cache' '$TMP/rebuilt4.err'"
check "the rebuilt int4 cache answers as before" \
  "python3 -c 'import json,sys; a=json.load(open(\"$TMP/rebuilt4.out\")); b=json.load(open(\"$TMP/one_image.int4.out\")); sys.exit(0 if a[\"tokens\"]==b[\"tokens\"] else 1)'"
check "the rebuilt int4 cache is whole again" "[ \$(stat -c %s '$CACHE4') -gt 3000 ]"

# ---------------------------------------------------------------- caches prove their contents
# Each cache file carries checksums of its header (which names the checkpoint)
# and of every block: bytes flipped in the middle are found, the file is
# rebuilt with a note, and the answer is a fresh cache's.
# flip_middle FILE: inverts 64 bytes in the middle of FILE (blocks are 64-byte
# aligned, so at least one flipped byte is a matrix's, not padding).
flip_middle() {
  python3 - "$1" <<'PY'
import os, sys
path = sys.argv[1]
middle = os.path.getsize(path) // 2
with open(path, "r+b") as f:
    f.seek(middle)
    chunk = f.read(64)
    f.seek(middle)
    f.write(bytes(b ^ 0xff for b in chunk))
PY
}
same_tokens() {
  python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a["tokens"]==b["tokens"] else 1)' "$1" "$2"
}
flip_middle "$(int8_cache)"
"$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant int8 --json \
  > "$TMP/flip8.out" 2> "$TMP/flip8.err"
check "a flipped int8 cache: rebuilt with one note naming the checksum" \
  "[ \$(grep -c 'rebuilding the int8 weight cache .*decoder-int8.*checksum' '$TMP/flip8.err') -eq 1 ] || dump '$TMP/flip8.err'"
check "a flipped int8 cache: the answer of a fresh cache" "same_tokens '$TMP/flip8.out' '$TMP/one_image.int8.out'"
flip_middle "$(int4_cache)"
"$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant int4 --json \
  > "$TMP/flip4.out" 2> "$TMP/flip4.err"
check "a flipped int4 cache: rebuilt with one note naming the checksum" \
  "[ \$(grep -c 'rebuilding the int4 weight cache .*decoder-int4.*checksum' '$TMP/flip4.err') -eq 1 ] || dump '$TMP/flip4.err'"
check "a flipped int4 cache: the answer of a fresh cache" "same_tokens '$TMP/flip4.out' '$TMP/one_image.int4.out'"
flip_middle "$(vision_cache)"
"$QVL" ask --model "$MODEL" --messages "$TMP/system_image.json" --greedy -n 16 --quant int8 --json \
  --prompt-cache "$TMP/prompts-vflip" > "$TMP/vflip.out" 2> "$TMP/vflip.err"
check "a flipped vision cache: rebuilt with one note naming the checksum" \
  "[ \$(grep -c 'rebuilding the int8 weight cache .*vision-mergers-int8.*checksum' '$TMP/vflip.err') -eq 1 ] || dump '$TMP/vflip.err'"
check "a flipped vision cache: the answer of a fresh cache" "same_tokens '$TMP/vflip.out' '$TMP/system_image.int8.out'"

# Model B: the tiny model with one decoder weight changed. Model A's int8
# cache, its tag edited to name B's checkpoint and saved under B's file name,
# is not used for B.
MODEL_B="$TMP/model-b"
mkdir -p "$MODEL_B" && cp "$MODEL"/* "$MODEL_B"/
python3 - "$MODEL_B" <<'PY'
import json, struct, sys
d = sys.argv[1]
name = "model.language_model.layers.0.mlp.down_proj.weight"
shard = f"{d}/{json.load(open(f'{d}/model.safetensors.index.json'))['weight_map'][name]}"
blob = bytearray(open(shard, "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
begin, end = json.loads(blob[8:8 + n])[name]["data_offsets"]
for i in range(8 + n + begin, 8 + n + end, 2):  # bf16: negate every value
    blob[i + 1] ^= 0x80
open(shard, "wb").write(blob)
PY
"$QVL" ask --model "$MODEL_B" --messages "$TMP/one_image.json" --greedy -n 16 --quant int8 --json \
  > "$TMP/b_fresh.out" 2> "$TMP/b_fresh.err"
check "model B builds its own int8 cache" "grep -q 'quantizing the decoder weights to int8' '$TMP/b_fresh.err' || dump '$TMP/b_fresh.err'"
A_CACHE=$(ls -tr "$QVL_CACHE_DIR"/decoder-int8-*.bin | head -n 1)
B_CACHE=$(ls -t "$QVL_CACHE_DIR"/decoder-int8-*.bin | head -n 1)
python3 - "$A_CACHE" "$B_CACHE" "$TMP/forged" <<'PY'
import re, sys
fingerprint = lambda path: re.search(r"decoder-int8-([0-9a-f]{16})-", path).group(1)
a, b = fingerprint(sys.argv[1]), fingerprint(sys.argv[2])
assert a != b
blob = open(sys.argv[1], "rb").read()
assert blob.count(a.encode()) == 1
open(sys.argv[3], "wb").write(blob.replace(a.encode(), b.encode()))
PY
cp "$TMP/forged" "$B_CACHE"
"$QVL" ask --model "$MODEL_B" --messages "$TMP/one_image.json" --greedy -n 16 --quant int8 --json \
  > "$TMP/b_forged.out" 2> "$TMP/b_forged.err"
check "model A's cache under model B's name: not used, rebuilt with a note" \
  "grep -q 'rebuilding the int8 weight cache .*checksum' '$TMP/b_forged.err' || dump '$TMP/b_forged.err'"
check "model A's cache under model B's name: B's own answer" "same_tokens '$TMP/b_forged.out' '$TMP/b_fresh.out'"

# A cache file other users can write is not trusted (it could have been
# swapped), unless QVL_TRUST_CACHE=1 says the sharing is meant.
CACHE=$(int8_cache | head -n 1)
[ "$CACHE" = "$A_CACHE" ] || CACHE="$A_CACHE"
chmod g+w "$CACHE"
QVL_TRUST_CACHE=1 "$QVL" ask --model "$MODEL" --greedy -n 2 --quant int8 "Hello" > /dev/null 2> "$TMP/trusted.err"
check "QVL_TRUST_CACHE=1: a group-writable cache is used silently" "[ ! -s '$TMP/trusted.err' ] || dump '$TMP/trusted.err'"
"$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant int8 --json \
  > "$TMP/gw.out" 2> "$TMP/gw.err"
check "a group-writable cache: rebuilt with a note saying why" \
  "grep -q 'rebuilding the int8 weight cache .*can be written by other users' '$TMP/gw.err' || dump '$TMP/gw.err'"
check "a group-writable cache: the answer of a fresh cache" "same_tokens '$TMP/gw.out' '$TMP/one_image.int8.out'"
check "the rebuilt cache is not group-writable" "[ -z \"\$(find '$CACHE' -perm -g+w)\" ]"

# A cache folder that cannot be written costs a note, not the run: the weights
# are quantized in memory and answer as a working cache's do. A regular file
# as the folder (the write fails), a folder under a regular file and a
# read-only mount (the folder is refused; the mount fails even for root).
# The prompt cache is off in all of these runs: an unusable folder turns it off
# too, and with it on the prompt is prefilled in two parts (the cached prefix,
# then the rest), whose different rounding can change a late greedy token of
# the tiny model on some CPU tiers.
touch "$TMP/plainfile"
for quant in int8 int4; do
  "$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant $quant --json --prompt-cache off \
    > "$TMP/working.$quant.out" 2> /dev/null
done
uncached() {  # uncached NAME FOLDER QUANT NOTE: one_image with FOLDER as $QVL_CACHE_DIR
  QVL_CACHE_DIR="$2" "$QVL" ask --model "$MODEL" --messages "$TMP/one_image.json" --greedy -n 16 --quant "$3" --json \
    --prompt-cache off > "$TMP/$1.out" 2> "$TMP/$1.err"
  rc=$?
  check "$1: exits 0" "[ $rc -eq 0 ] || dump '$TMP/$1.err'"
  check "$1: one note says why the weight cache is not written" "[ \$(grep -c '$4' '$TMP/$1.err') -eq 1 ] || dump '$TMP/$1.err'"
  check "$1: the answer of a working cache" "same_tokens '$TMP/$1.out' '$TMP/working.$3.out'"
}
uncached "int8, a file as the cache folder" "$TMP/plainfile" int8 \
  "decoder int8 weight cache not saved: cannot create .*plainfile/decoder-int8.*Not a directory; .*in memory"
uncached "int4, a file as the cache folder" "$TMP/plainfile" int4 \
  "decoder int4 weight cache not saved: .*Not a directory; .*in memory"
uncached "int8, a folder under a file" "$TMP/plainfile/sub" int8 \
  "weight cache off: cache folder .*plainfile/sub cannot be created or written; .*in memory"
uncached "int4, a folder under a file" "$TMP/plainfile/sub" int4 "weight cache off: .*plainfile/sub .*in memory"
check "nothing was written beside the file" "[ -f '$TMP/plainfile' ] && [ ! -s '$TMP/plainfile' ] && [ -z \"\$(ls '$TMP' | grep '^plainfile.')\" ]"
mkdir -p "$TMP/readonly"
if mount --bind -o ro "$TMP/readonly" "$TMP/readonly" 2>/dev/null; then
  if ! touch "$TMP/readonly/probe" 2>/dev/null; then
    uncached "int8, a read-only folder" "$TMP/readonly" int8 "weight cache off: cache folder .*readonly cannot be created or written"
  else
    echo "skip: the read-only mount can be written"
  fi
  umount "$TMP/readonly"
else
  echo "skip: no read-only mount here (mount --bind needs root)"
fi

# An unknown quantization is a usage error (exit 2) naming the choices.
"$QVL" ask --model "$MODEL" --quant int3 "Hello" > /dev/null 2> "$TMP/bad.err"
rc=$?
check "--quant int3 exits 2" "[ $rc -eq 2 ]"
check "--quant int3 names the accepted values" "grep -q 'int4' '$TMP/bad.err'"

exit $fail

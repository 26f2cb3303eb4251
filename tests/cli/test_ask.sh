#!/usr/bin/env bash
# qvl ask, end to end on the tiny model: greedy tokens equal the reference's
# for every golden model case (float32), the bfloat16 first token equals the
# reference top-1, and bad input fails with one clear line.
source "$(dirname "$0")/common.sh" "$@"

cp "$DATA"/images/* "$TMP"/

# Every golden model case, through --messages (image paths relative to the JSON file).
python3 - "$DATA/goldens.json" "$TMP" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
for case in g["model_cases"]:
    json.dump(g["chat_template"]["messages"][case], open(f"{sys.argv[2]}/{case}.json", "w"))
    json.dump(g["model_cases"][case]["greedy_16"], open(f"{sys.argv[2]}/{case}.expected", "w"))
PY
for case in text_only one_image system_image multi_turn; do
  for dtype in f32 bf16; do
    "$QVL" ask --model "$MODEL" --messages "$TMP/$case.json" --greedy -n 16 --dtype "$dtype" --json \
      > "$TMP/$case.$dtype.out" 2> "$TMP/$case.$dtype.err"
    rc=$?
    check "$case $dtype exits 0" "[ $rc -eq 0 ] || { cat '$TMP/$case.$dtype.err'; false; }"
    python3 - "$TMP/$case.$dtype.out" "$TMP/$case.expected" "$dtype" <<'PY' || fail=1
import json, sys
out = json.load(open(sys.argv[1])); expected = json.load(open(sys.argv[2])); dtype = sys.argv[3]
for key in ("text", "tokens", "prompt_tokens", "timings", "images"):
    assert key in out, f"missing {key}"
for key in ("load_s", "vision_s", "prefill_s", "decode_s", "ttft_s"):
    assert key in out["timings"], f"missing timings.{key}"
if dtype == "f32":
    assert out["tokens"] == expected, f"f32 tokens {out['tokens']} != reference {expected}"
else:
    assert out["tokens"][:1] == expected[:1], f"bf16 first token {out['tokens'][:1]} != reference {expected[:1]}"
print(f"ok: {sys.argv[1].rsplit('/',1)[1]} matches the reference")
PY
  done
done

# Prompt from stdin and from --image; the streamed text equals the JSON text.
printf 'What is in the image?' | "$QVL" ask --model "$MODEL" --image "$TMP/small.png" --greedy -n 16 --dtype f32 - \
  > "$TMP/stream.txt" 2>/dev/null
"$QVL" ask --model "$MODEL" --image "$TMP/small.png" --greedy -n 16 --dtype f32 --json "What is in the image?" \
  > "$TMP/same.json" 2>/dev/null
check "streamed answer equals the --json text" \
  "python3 -c 'import json,sys; t=json.load(open(\"$TMP/same.json\"))[\"text\"]; s=open(\"$TMP/stream.txt\").read(); sys.exit(0 if s==t+\"\\n\" else 1)'"
check "--image + prompt gives the one_image reference tokens" \
  "python3 -c 'import json,sys; sys.exit(0 if json.load(open(\"$TMP/same.json\"))[\"tokens\"]==json.load(open(\"$TMP/one_image.expected\")) else 1)'"

# Bad input: one line on stderr, exit 1, nothing on stdout.
printf 'hello' > "$TMP/notes.png"
"$QVL" ask --model "$MODEL" --image "$TMP/notes.png" "?" > "$TMP/bad.out" 2> "$TMP/bad.err"
rc=$?
check "a text file named .png fails with exit 1" "[ $rc -eq 1 ]"
check "... with one line naming the file" "[ \$(wc -l < '$TMP/bad.err') -eq 1 ] && grep -q notes.png '$TMP/bad.err'"
check "... and nothing on stdout" "[ ! -s '$TMP/bad.out' ]"

QVL_MODEL= "$QVL" ask --model "$TMP/no-such-model" "hi" > /dev/null 2> "$TMP/nomodel.err"
rc=$?
check "a missing model fails with exit 1" "[ $rc -eq 1 ]"
check "... and says how to download it" "grep -q 'huggingface-cli download Qwen/Qwen3-VL-2B-Instruct' '$TMP/nomodel.err'"

mkdir -p "$TMP/broken" && cp "$MODEL"/*.json "$TMP/broken/" && cp "$MODEL"/model-0000*.safetensors "$TMP/broken/"
truncate -s 1000000 "$TMP/broken/model-00001-of-00002.safetensors"
"$QVL" ask --model "$TMP/broken" "hi" > /dev/null 2> "$TMP/broken.err"
rc=$?
check "a truncated shard fails with exit 1 and one line" "[ $rc -eq 1 ] && [ \$(wc -l < '$TMP/broken.err') -eq 1 ]"
check "... naming the shard" "grep -q 'model-00001-of-00002.safetensors' '$TMP/broken.err'"

"$QVL" ask --model "$MODEL" --bogus-flag > /dev/null 2>&1
check "an unknown flag exits 2" "[ $? -eq 2 ]"

exit $fail

#!/usr/bin/env bash
# qvl synth from the tiny model's config: a complete checkpoint folder whose
# index matches the reference's parameter count and size, the same bytes for the
# same seed, sharding by --shard-size, a non-empty folder refused unless
# --force, and one-line errors.
source "$(dirname "$0")/common.sh" "$@"

# 1. The tiny config into a fresh folder: the 9.7 MB embedding alone, the rest in a second shard.
run synth --config "$MODEL/config.json" --out "$TMP/a" --seed 7 --shard-size 4MB -q
check "synth exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... --quiet prints nothing on stderr" '[ ! -s "$TMP/err" ] || dump "$TMP/err"'
check "... the summary counts 133 tensors, 5807648 parameters" \
  'grep -q "133 tensors, 5807648 parameters" "$TMP/out" || dump "$TMP/out"'
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja preprocessor_config.json \
  generation_config.json model.safetensors.index.json model-00001-of-00002.safetensors \
  model-00002-of-00002.safetensors; do
  check "... writes $f" '[ -f "$TMP/a/$f" ]'
done
check "... leaves no temporary files" '[ -z "$(ls "$TMP/a" | grep "\.tmp$")" ] || { ls "$TMP/a"; false; }'
check "... copies config.json verbatim" 'cmp -s "$MODEL/config.json" "$TMP/a/config.json"'
check "... copies tokenizer.json verbatim" 'cmp -s "$MODEL/tokenizer.json" "$TMP/a/tokenizer.json"'
# The reference's own index records the tiny model's parameter count and BF16 size.
for key in total_parameters total_size; do
  want=$(grep -o "\"$key\": *[0-9]*" "$MODEL/model.safetensors.index.json" | grep -o '[0-9]*$')
  got=$(grep -o "\"$key\": *[0-9]*" "$TMP/a/model.safetensors.index.json" | grep -o '[0-9]*$')
  check "... the index's $key equals the reference's" \
    '[ -n "$want" ] && [ "$want" = "$got" ] || { echo "got '\''$got'\'', the reference has '\''$want'\''"; false; }'
done
names=$(grep -c '"model\.' "$TMP/a/model.safetensors.index.json")
check "... the index's weight_map lists 133 tensors" '[ "$names" = 133 ] || { echo "it lists $names"; false; }'

# 2. Same seed, same bytes; another seed, other bytes.
run synth --config "$MODEL/config.json" --out "$TMP/b" --seed 7 --shard-size 4000000 -q
check "a second synth exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  check "... seed 7 twice gives the same $f (4MB = 4000000 bytes)" 'cmp -s "$TMP/a/$f" "$TMP/b/$f"'
done
run synth --config "$MODEL/config.json" --out "$TMP/c" --seed 8 --shard-size 4000000 -q
check "seeds 7 and 8 give different weights" \
  '! cmp -s "$TMP/a/model-00002-of-00002.safetensors" "$TMP/c/model-00002-of-00002.safetensors"'

# 3. Default shard size: one shard; f32 doubles the data.
run synth --config "$MODEL/config.json" --out "$TMP/d" --dtype f32
check "f32 synth exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... the default shard size gives one shard" \
  '[ -f "$TMP/d/model-00001-of-00001.safetensors" ] || { ls "$TMP/d"; false; }'
check "... total_size is 4 bytes x 5807648" \
  'grep -q "\"total_size\": *23230592" "$TMP/d/model.safetensors.index.json"'
check "... a progress line without -q" \
  'grep -q "wrote $TMP/d/model-00001-of-00001.safetensors" "$TMP/err" || dump "$TMP/err"'

# 4. A non-empty folder is refused, then replaced with --force.
run synth --config "$MODEL/config.json" --out "$TMP/a" --seed 9
check "synth into a non-empty folder exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'
check "... saying so and pointing at --force" \
  'grep -q "^qvl: error: output folder '\''$TMP/a'\'' is not empty (pass --force" "$TMP/err" || dump "$TMP/err"'
run synth --config "$MODEL/config.json" --out "$TMP/a" --seed 9 --force -q
check "--force exits 0" '[ "$status" = 0 ] || dump "$TMP/err"'
check "... leaves no stale shard" '[ ! -e "$TMP/a/model-00002-of-00002.safetensors" ] || { ls "$TMP/a"; false; }'
check "... writes the new checkpoint" '[ -f "$TMP/a/model-00001-of-00001.safetensors" ] || { ls "$TMP/a"; false; }'

# 5. Clear one-line errors.
echo x > "$TMP/file"
run synth --config "$MODEL/config.json" --out "$TMP/file/sub"
check "an unwritable output exits 1" '[ "$status" = 1 ] || { echo "exit $status"; false; }'
check "... with one line naming the folder and the reason" \
  '[ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "cannot create output folder '\''$TMP/file/sub'\'': Not a directory" "$TMP/err" || dump "$TMP/err"'
run synth --config "$TMP/nope.json" --out "$TMP/e"
check "a missing config exits 1 naming it" '[ "$status" = 1 ] && grep -q "nope.json" "$TMP/err" || dump "$TMP/err"'
# Flag errors come from CLI11 with its own non-zero statuses.
run synth --config "$MODEL/config.json" --out "$TMP/e" --dtype f16
check "--dtype f16 is refused naming dtype" '[ "$status" != 0 ] && grep -q "dtype" "$TMP/err" || dump "$TMP/err"'
run synth --out "$TMP/e"
check "a missing --config is refused naming config" '[ "$status" != 0 ] && grep -q "config" "$TMP/err" || dump "$TMP/err"'
check "a failed synth creates no output folder" '[ ! -e "$TMP/e" ]'

exit $fail

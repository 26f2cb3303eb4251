#!/usr/bin/env bash
# qvl synth driven from the outside: usage: test_synth.sh <path-to-qvl> <tests/data>
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

# Runs qvl, keeping stdout/stderr/status in $TMP/{out,err} and $status.
run() {
  "$QVL" "$@" >"$TMP/out" 2>"$TMP/err"
  status=$?
}

# 1. The tiny config into a fresh folder: the 9.7 MB embedding alone, the rest in a second shard.
run synth --config "$TINY/config.json" --out "$TMP/a" --seed 7 --shard-size 4MB -q
[ "$status" = 0 ] || fail "synth exited $status: $(cat "$TMP/err")"
[ -s "$TMP/err" ] && fail "--quiet still printed on stderr: $(cat "$TMP/err")"
grep -q "133 tensors, 5807648 parameters" "$TMP/out" || fail "summary line wrong: $(cat "$TMP/out")"
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja preprocessor_config.json \
  generation_config.json model.safetensors.index.json model-00001-of-00002.safetensors \
  model-00002-of-00002.safetensors; do
  [ -f "$TMP/a/$f" ] || fail "missing output file $f"
done
ls "$TMP/a" | grep -q '\.tmp$' && fail "temporary files left behind: $(ls "$TMP/a")"
cmp -s "$TINY/config.json" "$TMP/a/config.json" || fail "config.json not copied verbatim"
cmp -s "$TINY/tokenizer.json" "$TMP/a/tokenizer.json" || fail "tokenizer.json not copied verbatim"
# The reference's own index records the tiny model's parameter count and BF16 size.
for key in total_parameters total_size; do
  want=$(grep -o "\"$key\": *[0-9]*" "$TINY/model.safetensors.index.json" | grep -o '[0-9]*$')
  got=$(grep -o "\"$key\": *[0-9]*" "$TMP/a/model.safetensors.index.json" | grep -o '[0-9]*$')
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "index $key is '$got', the reference has '$want'"
done
names=$(grep -c '"model\.' "$TMP/a/model.safetensors.index.json")
[ "$names" = 133 ] || fail "index weight_map lists $names tensors, expected 133"

# 2. Same seed, same bytes; another seed, other bytes.
run synth --config "$TINY/config.json" --out "$TMP/b" --seed 7 --shard-size 4000000 -q
[ "$status" = 0 ] || fail "second synth exited $status: $(cat "$TMP/err")"
for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  cmp -s "$TMP/a/$f" "$TMP/b/$f" || fail "seed 7 twice gave different $f"
done
run synth --config "$TINY/config.json" --out "$TMP/c" --seed 8 --shard-size 4000000 -q
cmp -s "$TMP/a/model-00002-of-00002.safetensors" "$TMP/c/model-00002-of-00002.safetensors" &&
  fail "seeds 7 and 8 gave the same weights"

# 3. Default shard size: one shard; f32 doubles the data.
run synth --config "$TINY/config.json" --out "$TMP/d" --dtype f32
[ "$status" = 0 ] || fail "f32 synth exited $status: $(cat "$TMP/err")"
[ -f "$TMP/d/model-00001-of-00001.safetensors" ] || fail "default shard size should give one shard: $(ls "$TMP/d")"
grep -q '"total_size": *23230592' "$TMP/d/model.safetensors.index.json" || fail "f32 total_size is not 4 bytes x 5807648"
grep -q "wrote $TMP/d/model-00001-of-00001.safetensors" "$TMP/err" || fail "no progress line without -q: $(cat "$TMP/err")"

# 4. A non-empty folder is refused, then replaced with --force.
run synth --config "$TINY/config.json" --out "$TMP/a" --seed 9
[ "$status" = 1 ] || fail "synth into a non-empty folder exited $status, expected 1"
grep -q "^qvl: error: output folder '$TMP/a' is not empty (pass --force" "$TMP/err" ||
  fail "wrong error for a non-empty folder: $(cat "$TMP/err")"
run synth --config "$TINY/config.json" --out "$TMP/a" --seed 9 --force -q
[ "$status" = 0 ] || fail "--force exited $status: $(cat "$TMP/err")"
[ -e "$TMP/a/model-00002-of-00002.safetensors" ] && fail "--force left a stale shard: $(ls "$TMP/a")"
[ -f "$TMP/a/model-00001-of-00001.safetensors" ] || fail "--force did not write the new checkpoint: $(ls "$TMP/a")"

# 5. Clear one-line errors.
echo x >"$TMP/file"
run synth --config "$TINY/config.json" --out "$TMP/file/sub"
[ "$status" = 1 ] || fail "unwritable output exited $status, expected 1"
[ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "cannot create output folder '$TMP/file/sub': Not a directory" "$TMP/err" ||
  fail "wrong error for an unwritable output: $(cat "$TMP/err")"
run synth --config "$TMP/nope.json" --out "$TMP/e"
[ "$status" = 1 ] && grep -q "nope.json" "$TMP/err" || fail "missing config: status $status, $(cat "$TMP/err")"
# Flag errors come from CLI11 with its own non-zero statuses.
run synth --config "$TINY/config.json" --out "$TMP/e" --dtype f16
[ "$status" != 0 ] && grep -q "dtype" "$TMP/err" || fail "--dtype f16: status $status, $(cat "$TMP/err")"
run synth --out "$TMP/e"
[ "$status" != 0 ] && grep -q "config" "$TMP/err" || fail "missing --config: status $status, $(cat "$TMP/err")"
[ -e "$TMP/e" ] && fail "a failed synth created its output folder"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all synth checks passed"

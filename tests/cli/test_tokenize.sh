#!/usr/bin/env bash
# qvl tokenize against reference ids from tests/data/goldens.json (tokenizer.cases).
# Usage: test_tokenize.sh <path-to-qvl> <tests/data>
set -u
QVL=$1
DATA=$2
MODEL="$DATA/tiny-qwen3-vl"
failures=0

expect() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then
    echo "FAIL: $1"
    echo "  expected: $2"
    echo "  actual:   $3"
    failures=$((failures + 1))
  fi
}

# "Hello, world!" as an argument, and through stdin.
expect "argument" "9707 11 1879 0" "$("$QVL" tokenize --model "$MODEL" "Hello, world!")"
expect "stdin" "9707 11 1879 0" "$(printf 'Hello, world!' | "$QVL" tokenize --model "$MODEL" -)"
expect "json" '{"ids":[9707,11,1879,0]}' "$("$QVL" tokenize --model "$MODEL" --json "Hello, world!")"

# Special tokens and newlines; stdin is read byte for byte, trailing newline included.
expect "chat markup on stdin" "151644 872 198 6023 151645 198" \
  "$(printf '<|im_start|>user\nhi<|im_end|>\n' | "$QVL" tokenize --model "$MODEL" -)"
expect "chat markup as argument" "151644 872 198 6023 151645 198" \
  "$("$QVL" tokenize --model "$MODEL" $'<|im_start|>user\nhi<|im_end|>\n')"
expect "chinese via QVL_MODEL" "104811 81705 5122 28029 69249 112485 104167 11319" \
  "$(printf '中文测试：图里有几个苹果？' | QVL_MODEL="$MODEL" "$QVL" tokenize -)"
expect "empty text" "" "$(printf '' | "$QVL" tokenize --model "$MODEL" -)"

# Errors: one line on stderr, exit status 1.
err=$(printf 'bad \xff byte' | "$QVL" tokenize --model "$MODEL" - 2>&1 >/dev/null)
status=$?
expect "invalid UTF-8 exit status" "1" "$status"
[[ "$err" == *"not valid UTF-8"* ]] || { echo "FAIL: invalid UTF-8 message: $err"; failures=$((failures + 1)); }
"$QVL" tokenize --model "$DATA/no-such-model" hi >/dev/null 2>&1
expect "missing model exit status" "1" "$?"

# The benchmark runs and reports a rate.
bench=$("$QVL" tokenize --model "$MODEL" --bench-bytes 20000 2>&1 >/dev/null)
[[ "$bench" == *"MB/s"* ]] || { echo "FAIL: --bench-bytes printed: $bench"; failures=$((failures + 1)); }

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "tokenize: all checks passed"

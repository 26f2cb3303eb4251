#!/usr/bin/env bash
# What a hostile tester (and a cron job) does to qvl, on the tiny model: FIFOs,
# sockets and devices refused before they are opened; --threads capped; absurd
# config sizes, NaN weights and mislabelled dtypes refused in a second; two
# `ocr --resume` runs on one output kept apart by a lock; a partial last line
# removed, a foreign file refused; failed writes to stdout are errors; flags
# checked before anything loads; inputs that make no sense refused. Every
# command that used to hang runs under `timeout`, so a regression fails fast.
source "$(dirname "$0")/common.sh" "$@"

IMG="$DATA/images/small.png"
NOMODEL="$TMP/no-such-model"  # flag checks must fail (exit 2) before the model is even looked for

# t LIMIT ARGS...: qvl ARGS with a time limit (killed after it); $status,
# $elapsed (seconds), stdout in $TMP/out, stderr in $TMP/err.
t() {
  local limit="$1"
  shift
  local t0
  t0=$(date +%s.%N)
  timeout -s KILL "$limit" "$QVL" "$@" > "$TMP/out" 2> "$TMP/err" < /dev/null
  status=$?
  elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}
# expect NAME STATUS PATTERN: after t, the status and a fixed string on stderr.
expect() {
  check "$1: exit $2" "[ $status -eq $2 ] || { echo \"  exit status $status after ${elapsed}s\"; dump '$TMP/err'; }"
  check "$1: says '$3'" "grep -qF -- \"$3\" '$TMP/err' || dump '$TMP/err'"
}
# within NAME SECONDS: the last t took less than SECONDS, times
# QVL_TEST_TIME_SCALE: scripts/test_sanitize.sh sets 3, as ASan + UBSan slow
# qvl's own code (parsing a 30 MB message: 4.1 s alone, 6.8 s beside another
# test, against 2.6 s in the release build).
within() {
  local limit
  limit=$(awk -v s="$2" -v f="${QVL_TEST_TIME_SCALE:-1}" 'BEGIN { print s * f }')
  check "$1: in under $limit s (took $elapsed s)" "awk 'BEGIN { exit !($elapsed < $limit) }'"
}
one_line() { check "$1: one line on stderr" "[ \$(wc -l < '$TMP/err') -eq 1 ] || dump '$TMP/err'"; }
# A model folder whose files are links to the tiny model's, but for FILE (copied, to be edited).
model_with_copy() {
  mkdir -p "$1" && ln -sf "$(cd "$MODEL" && pwd)"/* "$1"/ && rm "$1/$2" && cp "$MODEL/$2" "$1/$2"
}

# ------------------------------------------------ 1, 2: FIFOs, sockets, devices
mkdir -p "$TMP/fifo-dir/sub"
mkfifo "$TMP/fifo-dir/sub/fifo.jpg"
t 30 ocr --model "$MODEL" --recursive "$TMP/fifo-dir"
check "ocr --recursive over a FIFO: exit 3" "[ $status -eq 3 ] || dump '$TMP/err'"
check "... gives the FIFO an error record" \
  "grep -q '\"file\":\"$TMP/fifo-dir/sub/fifo.jpg\".*\"error\":.*not a regular file (a FIFO)' '$TMP/out' || dump '$TMP/out'"
FIFO="$TMP/fifo-dir/sub/fifo.jpg"
t 30 ocr --model "$MODEL" "$FIFO"
check "ocr FIFO: exit 3, an error record" "[ $status -eq 3 ] && grep -qF '(a FIFO)' '$TMP/out' || dump '$TMP/out' '$TMP/err'"
t 30 ask --model "$MODEL" --image "$FIFO" "hi"
expect "ask --image FIFO" 1 "$FIFO: not a regular file (a FIFO)"
one_line "ask --image FIFO"
t 30 image-info --image "$FIFO"
expect "image-info FIFO" 1 "not a regular file (a FIFO)"
python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$TMP/sock.png"
t 30 ask --model "$MODEL" --image "$TMP/sock.png" "hi"
expect "ask --image socket" 1 "not a regular file (a socket)"
mkdir -p "$TMP/fifo-model" && ln -s "$(cd "$MODEL" && pwd)"/* "$TMP/fifo-model"/ && rm "$TMP/fifo-model/tokenizer.json"
mkfifo "$TMP/fifo-model/tokenizer.json"
t 30 tokenize --model "$TMP/fifo-model" "hi"
expect "a FIFO as tokenizer.json" 1 "not a regular file (a FIFO)"
for cmd in "ocr --model $MODEL /dev/zero" "ask --model $MODEL --image /dev/zero hi" "image-info --image /dev/zero"; do
  # shellcheck disable=SC2086
  t 10 $cmd
  check "$cmd: refused, 'not a regular file (a character device)'" \
    "[ $status -eq 1 -o $status -eq 3 ] && grep -qF 'not a regular file (a character device)' '$TMP/err' '$TMP/out' || dump '$TMP/err'"
done

# SIGTERM ends ocr promptly, even while files are being read.
mkdir -p "$TMP/term"
for i in 1 2 3 4 5 6; do { cat "$DATA/images/photo.jpg"; printf '%s' "$i"; } > "$TMP/term/p$i.jpg"; done
"$QVL" ocr --model "$MODEL" -n 64 --recursive "$TMP/fifo-dir" "$TMP/term" > "$TMP/term.jsonl" 2> "$TMP/term.err" &
pid=$!
sleep 1
kill -TERM $pid 2>/dev/null
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
check "one SIGTERM ends ocr within 10 s" "! kill -0 $pid 2>/dev/null"
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null

# ------------------------------------------------ 3: --threads
t 10 ask --model "$MODEL" --threads 100000 -n 1 "hi"
expect "--threads 100000" 2 "at most"
within "--threads 100000" 6
t 10 ocr --model "$NOMODEL" --threads 1 --temperature nan "$IMG"
check "ocr --temperature nan: usage error (2), and --threads 1 is fine" \
  "[ $status -eq 2 ] && grep -q -- '--temperature' '$TMP/err' || dump '$TMP/err'"

# ------------------------------------------------ 4: config sizes checked against the checkpoint
model_with_copy "$TMP/layers" config.json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["text_config"]["num_hidden_layers"]=1000000000; json.dump(c,open(sys.argv[1],"w"))' "$TMP/layers/config.json"
t 20 ask --model "$TMP/layers" "hi"
expect "num_hidden_layers 1e9" 1 "num_hidden_layers 1000000000 but the checkpoint holds 4 text layers"
within "num_hidden_layers 1e9" 6
model_with_copy "$TMP/depth" config.json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["vision_config"]["depth"]=1000000; json.dump(c,open(sys.argv[1],"w"))' "$TMP/depth/config.json"
t 20 ask --model "$TMP/depth" "hi"
expect "vision depth 1e6" 1 "depth 1000000 but the checkpoint holds 5 vision blocks"
within "vision depth 1e6" 6

# ------------------------------------------------ 5: a lock on the output
LOCKED="$TMP/locked"
mkdir -p "$LOCKED"
printf 'not an image' > "$LOCKED/a.png"  # an error record: no model work needed
OUT="$TMP/cron.jsonl"
: > "$OUT"
# Another process holds the lock (as a running qvl ocr would): it says so once locked.
python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(60)' \
  "$OUT" "$TMP/locked.flag" &
holder=$!
for _ in $(seq 100); do [ -f "$TMP/locked.flag" ] && break; sleep 0.1; done
t 20 ocr --model "$MODEL" --output "$OUT" --resume "$LOCKED"
expect "a second ocr on a locked output" 75 "another qvl ocr is writing $OUT (pid $holder)"
check "... writes nothing" "[ ! -s '$OUT' ]"
timeout -s KILL 60 "$QVL" ocr --model "$MODEL" --output "$OUT" --resume --wait "$LOCKED" > /dev/null 2> "$TMP/wait.err" &
waiter=$!
for _ in $(seq 200); do grep -q 'waiting for another qvl ocr' "$TMP/wait.err" 2>/dev/null && break; sleep 0.1; done
check "--wait says it waits" "grep -q 'waiting for another qvl ocr' '$TMP/wait.err' || dump '$TMP/wait.err'"
sleep 0.5
check "... and waits while the lock is held" "kill -0 $waiter 2>/dev/null && [ ! -s '$OUT' ]"
kill $holder
wait $holder 2>/dev/null
wait $waiter
rc=$?
check "... and runs when it is released (exit 3: one bad file)" "[ $rc -eq 3 ] || dump '$TMP/wait.err'"
check "... one record" "[ \$(wc -l < '$OUT') -eq 1 ] || dump '$OUT'"

# ------------------------------------------------ 6: --resume and the partial last line
PART="$TMP/part"
mkdir -p "$PART"
printf 'not an image' > "$PART/a.png"
printf 'not an image either' > "$PART/b.png"
t 20 ocr --model "$MODEL" --output "$TMP/part.jsonl" "$PART/a.png"
printf '{"file":"%s","sha256":"87' "$PART/b.png" >> "$TMP/part.jsonl"
t 20 ocr --model "$MODEL" --output "$TMP/part.jsonl" --resume "$PART"
check "--resume after a cut record: exit 3 (bad files)" "[ $status -eq 3 ] || dump '$TMP/err'"
check "... the file is JSONL again: every line a record, each file once" \
  "python3 -c 'import json,sys; f=[json.loads(l)[\"file\"] for l in open(sys.argv[1])]; assert sorted(f)==sorted(set(f)) and len(f)==2, f' '$TMP/part.jsonl' || dump '$TMP/part.jsonl'"
printf 'hello, this is my shopping list\nmilk\n' > "$TMP/foreign.txt"
cp "$TMP/foreign.txt" "$TMP/foreign.jsonl"
t 20 ocr --model "$MODEL" --output "$TMP/foreign.jsonl" --resume "$PART"
expect "--resume onto a file that is not JSONL" 1 "not a qvl ocr record"
check "... leaves it untouched" "cmp -s '$TMP/foreign.txt' '$TMP/foreign.jsonl'"
head -c 300 "$IMG" > "$TMP/binary.jsonl"
t 20 ocr --model "$MODEL" --output "$TMP/binary.jsonl" --resume "$PART"
expect "--resume onto a binary file" 1 "not a qvl ocr record"
check "... leaves it untouched" "cmp -s <(head -c 300 '$IMG') '$TMP/binary.jsonl'"

# ------------------------------------------------ 7: write errors on stdout
if [ -w /dev/full ]; then
  for cmd in "ask --model $MODEL --greedy -n 3 hi" "ask --model $MODEL --greedy -n 3 --json hi" \
             "tokenize --model $MODEL hello" "image-info --image $IMG"; do
    # shellcheck disable=SC2086
    timeout -s KILL 30 "$QVL" $cmd > /dev/full 2> "$TMP/err"
    status=$?
    check "$cmd > /dev/full: exit 1" "[ $status -eq 1 ] || dump '$TMP/err'"
    check "$cmd > /dev/full: one line naming stdout" "[ \$(wc -l < '$TMP/err') -eq 1 ] && grep -q stdout '$TMP/err' || dump '$TMP/err'"
  done
  printf 'hi\nagain\n' | timeout -s KILL 30 "$QVL" chat --model "$MODEL" -q --greedy -n 3 > /dev/full 2> "$TMP/err"
  status=$?
  check "piped chat > /dev/full: exit 1 naming stdout" "[ $status -eq 1 ] && grep -q stdout '$TMP/err' || dump '$TMP/err'"
else
  echo "skipped: /dev/full is not writable here"
fi

# ------------------------------------------------ 8: flags, checked while parsing (exit 2 before anything loads)
for flag in "--temperature -1" "--top-p 2" "--top-k -1" "--repetition-penalty 0" "--top-p nan" \
            "--temperature inf" "--seed -1" "--max-pixels 0" "--max-side -5" "-n 0"; do
  # shellcheck disable=SC2086
  t 10 ask --model "$NOMODEL" $flag "hi"
  check "ask $flag: usage error (2)" "[ $status -eq 2 ] || dump '$TMP/err'"
done
check "-n 0 says 'must be ≥ 1', without a 309-digit number" \
  "grep -qF 'must be ≥ 1' '$TMP/err' && ! grep -qE '[0-9]{30}' '$TMP/err' || dump '$TMP/err'"
t 10 --bogus
expect "qvl --bogus" 2 "ocr"
check "... lists the commands" "grep -q 'ask' '$TMP/err' && grep -q 'chat' '$TMP/err' && grep -q 'tokenize' '$TMP/err' || dump '$TMP/err'"
t 10 version
check "qvl version: exit 0, the version" "[ $status -eq 0 ] && grep -q '^qvl ' '$TMP/out' || dump '$TMP/out' '$TMP/err'"
t 10 help
check "qvl help: exit 0, the commands" "[ $status -eq 0 ] && grep -q 'ocr' '$TMP/out' && grep -q 'ask' '$TMP/out' || dump '$TMP/out' '$TMP/err'"
mkdir -p "$TMP/upper"
printf 'not an image' > "$TMP/upper/a.png"
t 20 ocr --model "$MODEL" --glob '*.PNG' "$TMP/upper"
check "--glob '*.PNG' takes a.png, as the folder scan does" "grep -q 'upper/a.png' '$TMP/out' || dump '$TMP/out' '$TMP/err'"

# ------------------------------------------------ 9: inputs that make no sense
echo '[]' > "$TMP/empty.json"
t 20 ask --model "$MODEL" --messages "$TMP/empty.json"
expect "ask --messages []" 1 "no messages"
check "... generates nothing" "[ ! -s '$TMP/out' ]"
python3 -c 'import json,sys; json.dump([{"role":"user","content":"word " * 6000000}], open(sys.argv[1],"w"))' "$TMP/big.json"
t 20 ask --model "$MODEL" --messages "$TMP/big.json"
expect "a 30 MB message" 1 "context limit"
within "a 30 MB message" 6
one_line "a 30 MB message"
check "... without suggesting --max-pixels (there is no image)" "! grep -q -- '--max-pixels' '$TMP/err'"
mkdir -p "$TMP/no-images"
printf 'text' > "$TMP/no-images/readme.txt"
t 20 ocr --model "$MODEL" "$TMP/no-images"
expect "a folder without images" 0 "no image files"
printf 'not an image' > "$TMP/twice.png"
t 20 ocr --model "$MODEL" "$TMP/twice.png" "$TMP/twice.png"
check "the same path twice: one record" "[ \$(wc -l < '$TMP/out') -eq 1 ] || dump '$TMP/out'"
check "... and says so" "grep -q 'more than once' '$TMP/err' || dump '$TMP/err'"

# ------------------------------------------------ 10: weights that cannot give an answer
model_with_copy "$TMP/eps" config.json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["text_config"]["rms_norm_eps"]=0; json.dump(c,open(sys.argv[1],"w"))' "$TMP/eps/config.json"
t 20 ask --model "$TMP/eps" "hi"
expect "rms_norm_eps 0" 1 "rms_norm_eps"
model_with_copy "$TMP/theta" config.json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["text_config"]["rope_theta"]=-1; json.dump(c,open(sys.argv[1],"w"))' "$TMP/theta/config.json"
t 20 ask --model "$TMP/theta" "hi"
expect "rope_theta -1" 1 "rope_theta"
# edit_shard DIR PYTHON: runs PYTHON with `header` (the shard's JSON header) and
# `data` (a bytearray of its tensor bytes) for the shard holding the final norm.
edit_shard() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
d, code = sys.argv[1], sys.argv[2]
index = json.load(open(f"{d}/model.safetensors.index.json"))
name = "model.language_model.norm.weight"
shard = f"{d}/{index['weight_map'][name]}"
blob = open(shard, "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
data = bytearray(blob[8 + n:])
exec(code)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(shard, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
PY
}
shard_of_norm=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weight_map"]["model.language_model.norm.weight"])' "$MODEL/model.safetensors.index.json")
model_with_copy "$TMP/nan" "$shard_of_norm"
edit_shard "$TMP/nan" 'b, e = header[name]["data_offsets"]; data[b:e] = b"\xc0\x7f" * ((e - b) // 2)'
t 30 ask --model "$TMP/nan" --greedy -n 2 "hi"
expect "a NaN tensor" 1 "the checkpoint contains NaN or Inf"
one_line "a NaN tensor"
model_with_copy "$TMP/f16" "$shard_of_norm"
edit_shard "$TMP/f16" 'header[name]["dtype"] = "F16"'
t 30 ask --model "$TMP/f16" --greedy -n 2 "hi"
expect "a BF16 tensor labelled F16" 1 "labelled F16"
one_line "a BF16 tensor labelled F16"

# ------------------------------------------------ 11: tokenizer.json garbage, in our words
mkdir -p "$TMP/badtok" && ln -s "$(cd "$MODEL" && pwd)"/* "$TMP/badtok"/ && rm "$TMP/badtok/tokenizer.json"
printf '{"version": "1.0",\n  "model": garbage}' > "$TMP/badtok/tokenizer.json"
t 20 tokenize --model "$TMP/badtok" "hi"
expect "a garbage tokenizer.json" 1 "tokenizer.json: not valid JSON at line 2, column 12"
check "... not in nlohmann's words" "! grep -q 'json.exception' '$TMP/err'"

exit $fail

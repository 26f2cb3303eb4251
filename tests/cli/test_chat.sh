#!/usr/bin/env bash
# qvl chat driven through stdin on the tiny model (float32, greedy): one answer
# line per question, the first equal to the reference's greedy text, the image
# encoded once for the whole conversation, a follow-up answered from the cache
# equal to recomputing the saved conversation from scratch, /save refusing to
# overwrite, bad /image and unknown commands reported without leaving, a full
# context reported and recovered with /reset, Ctrl-C stopping an answer.
source "$(dirname "$0")/common.sh" "$@"
export XDG_CACHE_HOME="$TMP/xdg-cache"
show_on_fail() { [ $fail -eq 0 ] || { echo "--- stderr:"; cat "$1"; }; }
touch "$TMP/start"
# The prompt cache off: this test counts the vision encoder's runs within one
# process (test_prompt_cache.sh covers chat's first turn from the prompt cache).
CHAT=("$QVL" chat --model "$MODEL" --greedy -n 8 --dtype f32 --prompt-cache off)

printf 'hello' > "$TMP/notes.png"
python3 -c "
import json
print(json.load(open('$DATA/goldens.json'))['model_cases']['one_image']['greedy_16_text'])" > "$TMP/reference.txt"

# The main session. The first question is the reference's one_image prompt.
cat > "$TMP/script.txt" <<EOF
What is in the image?
/image $TMP/notes.png
/bogus
What colour is it?
/stats
/save $TMP/chat.json
/save $TMP/chat.json
/save! $TMP/chat.json
EOF
"${CHAT[@]}" --image "$DATA/images/small.png" < "$TMP/script.txt" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check "EOF exits 0" "[ $rc -eq 0 ]"
check "two answers on stdout, one line each" "[ \$(wc -l < '$TMP/out.txt') -eq 2 ]"
check "the first answer is the reference's greedy text (a prefix of its 16 tokens)" \
  "python3 -c 'import sys; a=open(\"$TMP/out.txt\").read().split(\"\\n\")[0]; r=open(\"$TMP/reference.txt\").read(); sys.exit(0 if a and r.startswith(a) else 1)'"
check "the second answer is not empty" "[ -n \"\$(sed -n 2p '$TMP/out.txt')\" ]"
check "/stats: two turns" "grep -qx 'turns: 2' '$TMP/err.txt'"
check "/stats: the vision encoder ran exactly once" "grep -qx 'vision_calls: 1' '$TMP/err.txt'"
check "/stats: tokens in cache and the context limit" \
  "grep -qE '^cached_tokens: [1-9][0-9]*$' '$TMP/err.txt' && grep -qx 'max_context: 4096' '$TMP/err.txt'"
check "/stats: the last answer's speed, time to first token and peak RSS" \
  "grep -qE '^last_decode_tok_s: [0-9.]+$' '$TMP/err.txt' && grep -qE '^last_prefill_tok_s: [0-9.]+$' '$TMP/err.txt' \
   && grep -qE '^last_ttft_s: [0-9.]+$' '$TMP/err.txt' && grep -qE '^peak_rss_mb: [1-9][0-9]*$' '$TMP/err.txt'"
check "a non-image /image is one error line naming the file" "[ \$(grep -c 'notes.png' '$TMP/err.txt') -eq 1 ] && grep -q '^error: .*notes.png' '$TMP/err.txt'"
check "an unknown command gets a hint" "grep -q 'unknown command /bogus: /help' '$TMP/err.txt'"
check "/save refuses to overwrite, /save! does" \
  "grep -q 'chat.json exists: /save! ' '$TMP/err.txt' && [ \$(grep -c '^saved 4 messages to ' '$TMP/err.txt') -eq 2 ]"
python3 - "$TMP/chat.json" "$TMP/out.txt" "$TMP" <<'PY' || fail=1
import json, os, sys
messages = json.load(open(sys.argv[1]))
answers = open(sys.argv[2]).read().split("\n")[:2]
assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"], [m["role"] for m in messages]
first = messages[0]["content"]
assert first[0]["type"] == "image" and os.path.isabs(first[0]["image"]) and os.path.exists(first[0]["image"]), first
assert first[1] == {"type": "text", "text": "What is in the image?"}, first
assert messages[2]["content"] == "What colour is it?", messages[2]
assert [messages[1]["content"], messages[3]["content"]] == answers, "saved answers differ from the printed ones"
json.dump(messages[:3], open(sys.argv[3] + "/first3.json", "w"))
print("ok: /save wrote the 4 messages, with the printed answers and an absolute image path")
PY
"$QVL" ask --model "$MODEL" --messages "$TMP/chat.json" --greedy -n 2 --dtype f32 > /dev/null 2> "$TMP/ask.err"
check "qvl ask --messages accepts the saved conversation" "[ $? -eq 0 ] || { cat '$TMP/ask.err'; false; }"
"$QVL" ask --model "$MODEL" --messages "$TMP/first3.json" --greedy -n 8 --dtype f32 > "$TMP/replay.txt" 2> /dev/null
check "the follow-up from the KV cache equals recomputing the conversation from scratch" \
  "[ \"\$(cat '$TMP/replay.txt')\" = \"\$(sed -n 2p '$TMP/out.txt')\" ]"
show_on_fail "$TMP/err.txt"

# A context that holds one turn: the next question is refused, the REPL stays,
# and /reset starts over (the image's features come from the session's feature
# cache: the vision encoder does not run again).
printf 'What is in the image?\nAnd then?\n/reset\nWhat is in the image?\n/stats\n' |
  "${CHAT[@]}" --image "$DATA/images/small.png" --max-context 100 > "$TMP/full.out" 2> "$TMP/full.err"
rc=$?
check "a full context exits 0 at EOF" "[ $rc -eq 0 ]"
check "... says so and how to go on" "grep -q '^context full (100 tokens, .*/reset to start over or raise --max-context' '$TMP/full.err'"
check "... and after /reset the question is answered again" \
  "[ \$(wc -l < '$TMP/full.out') -eq 2 ] && [ \"\$(sed -n 1p '$TMP/full.out')\" = \"\$(sed -n 2p '$TMP/full.out')\" ] \
   && grep -qx 'vision_calls: 1' '$TMP/full.err' && grep -qx 'images_encoded: 1' '$TMP/full.err' \
   && grep -qx 'turns: 1' '$TMP/full.err'"

# /quit ends the REPL even with more input; a system message and no image work.
printf 'Hi\n/quit\nnever asked\n' | "${CHAT[@]}" --system "Be brief." > "$TMP/quit.out" 2> "$TMP/quit.err"
rc=$?
check "/quit exits 0 and reads no further" "[ $rc -eq 0 ] && [ \$(wc -l < '$TMP/quit.out') -eq 1 ]"

# Ctrl-C while an answer streams stops it; the next question still works.
mkfifo "$TMP/in"
"$QVL" chat --model "$MODEL" --greedy -n 3000 --dtype f32 --image "$DATA/images/small.png" \
  < "$TMP/in" > "$TMP/int.out" 2> "$TMP/int.err" &
pid=$!
exec 3> "$TMP/in"
wait_for() { for _ in $(seq 300); do eval "$1" && return 0; sleep 0.1; done; return 1; }
echo "What is in the image?" >&3
wait_for "[ -s '$TMP/int.out' ]" && kill -INT $pid
wait_for "grep -q 'answer stopped' '$TMP/int.err'"
# The random model's answers may contain newlines: bytes, not lines, tell
# when the second answer has started.
first_bytes=$(wc -c < "$TMP/int.out")
echo "And then?" >&3
wait_for "[ \$(wc -c < '$TMP/int.out') -gt $first_bytes ]" && kill -INT $pid
wait_for "[ \$(grep -c 'answer stopped' '$TMP/int.err') -eq 2 ]"
echo "/stats" >&3
exec 3>&-
wait $pid
rc=$?
check "Ctrl-C stops the answer and the REPL goes on to exit 0" "[ $rc -eq 0 ] && [ \$(grep -c '^(answer stopped)$' '$TMP/int.err') -eq 2 ]"
check "... both stopped answers are on stdout, each ended by a newline, and the session kept both turns" \
  "[ $first_bytes -gt 1 ] && [ \$(wc -c < '$TMP/int.out') -gt $first_bytes ] && [ \"\$(head -c $first_bytes '$TMP/int.out' | tail -c 1 | od -An -c | tr -d ' ')\" = '\\n' ] \
   && [ \"\$(tail -c 1 '$TMP/int.out' | od -An -c | tr -d ' ')\" = '\\n' ] && grep -qx 'turns: 2' '$TMP/int.err' && grep -qx 'last_stop_reason: interrupted' '$TMP/int.err'"
show_on_fail "$TMP/int.err"

"${CHAT[@]}" --image "$TMP/notes.png" < /dev/null > /dev/null 2> "$TMP/badstart.err"
check "a bad --image fails at start with exit 1 and one line" "[ $? -eq 1 ] && [ \$(wc -l < '$TMP/badstart.err') -eq 1 ]"
"${CHAT[@]}" --bogus-flag < /dev/null > /dev/null 2>&1
check "an unknown flag exits 2" "[ $? -eq 2 ]"
check "nothing was written into tests/data" "[ -z \"\$(find '$DATA' -newer '$TMP/start' -print -quit)\" ]"

exit $fail

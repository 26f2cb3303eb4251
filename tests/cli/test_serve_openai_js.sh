#!/usr/bin/env bash
# qvl serve through the official OpenAI JavaScript client: chat.completions.create,
# whole and streamed, gives qvl ask's greedy reply. Skipped (77) without node and
# npm, or when the client cannot be installed (offline).
source "$(dirname "$0")/common.sh" "$@"

command -v node > /dev/null && command -v npm > /dev/null || { echo "skipped: node or npm is missing"; exit 77; }
# The client goes into the build tree once (never into the source tree).
CLIENT="$(dirname "$QVL")/../test-cache/npm-openai"
if [ ! -d "$CLIENT/node_modules/openai" ]; then
  mkdir -p "$CLIENT"
  (cd "$CLIENT" && timeout 300 npm install --no-audit --no-fund --silent openai@4 > "$TMP/npm.log" 2>&1) ||
    { echo "skipped: npm install openai failed: $(tail -n 2 "$TMP/npm.log")"; exit 77; }
fi

SERVER=
trap '[ -n "$SERVER" ] && kill -KILL "$SERVER" 2> /dev/null; rm -rf "$TMP"' EXIT
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$QVL" serve --model "$MODEL" --dtype f32 --port "$PORT" --api-key js-key > /dev/null 2> "$TMP/serve.err" &
SERVER=$!
"$QVL" ask --model "$MODEL" --dtype f32 --greedy -n 10 --image "$DATA/images/small.png" --json "What is in the image?" \
  > "$TMP/ref.json" 2> /dev/null
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.1; done
check "the server is ready" "curl -sf http://127.0.0.1:$PORT/health > /dev/null || dump '$TMP/serve.err'"

cat > "$TMP/client.mjs" <<'JS'
import fs from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.CLIENT + "/");
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: `http://127.0.0.1:${process.env.PORT}/v1`, apiKey: "js-key" });
const image = "data:image/png;base64," + fs.readFileSync(process.env.IMAGE).toString("base64");
const request = {
  model: "tiny-qwen3-vl", temperature: 0, max_tokens: 10,
  messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: image } },
                                        { type: "text", text: "What is in the image?" }] }],
};
const whole = await client.chat.completions.create(request);
let streamed = "";
for await (const chunk of await client.chat.completions.create({ ...request, stream: true }))
  streamed += chunk.choices[0]?.delta?.content ?? "";
const models = await client.models.list();
console.log(JSON.stringify({ whole: whole.choices[0].message.content, usage: whole.usage, streamed,
                             models: models.data.map((m) => m.id) }));
JS
CLIENT="$CLIENT/node_modules/openai" PORT="$PORT" IMAGE="$DATA/images/small.png" node "$TMP/client.mjs" \
  > "$TMP/client.out" 2> "$TMP/client.err"
check "the OpenAI client runs" "[ -s '$TMP/client.out' ] || dump '$TMP/client.err'"
python3 - "$TMP/client.out" "$TMP/ref.json" <<'PY' || fail=1
import json, sys
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for name, ok in [("whole reply equals qvl ask's", got["whole"] == ref["text"]),
                 ("streamed reply equals qvl ask's", got["streamed"] == ref["text"]),
                 ("usage.prompt_tokens equals qvl ask's", got["usage"]["prompt_tokens"] == ref["prompt_tokens"]),
                 ("models.list names the model", got["models"] == ["tiny-qwen3-vl"])]:
    print(("ok: " if ok else "FAIL: ") + "openai client: " + name + ("" if ok else f" -- {got} vs {ref['text']!r}"))
    if not ok: sys.exit(1)
PY
kill -TERM "$SERVER"
wait "$SERVER"
rc=$?
SERVER=
check "the server exits 0 on SIGTERM" "[ $rc -eq 0 ]"
exit $fail

#!/usr/bin/env bash
# qvl serve, end to end on the tiny model over loopback: greedy replies (whole
# and streamed) equal `qvl ask`'s for PNG and JPEG data URIs, a text-only and
# a 2-turn conversation; stop strings; usage counts; every error shape; API
# keys; 4 concurrent streams; the queue limit; a client that goes away frees
# its slot; SIGTERM during a stream exits 0 within the grace period.
source "$(dirname "$0")/common.sh" "$@"

servers=()
stop_servers() {
  for pid in "${servers[@]}"; do kill -KILL "$pid" 2> /dev/null; done
  rm -rf "$TMP"
}
trap stop_servers EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_ready PORT PID: until /health says ok (the model loaded), or the server died.
wait_ready() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0
    kill -0 "$2" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}

mkdir -p "$TMP/allowed"
cp "$DATA/images/small.png" "$DATA/images/photo.jpg" "$DATA/images/wide_rgba.png" "$TMP/"
cp "$DATA/images/small.png" "$TMP/allowed/"

# The references: qvl ask, float32, greedy.
N=12
ask() { "$QVL" ask --model "$MODEL" --dtype f32 --greedy -n "$N" --json "$@" 2>> "$TMP/ask.err"; }
ask --image "$TMP/small.png" "What is in the image?" > "$TMP/ref_png.json"
ask --image "$TMP/photo.jpg" "Describe the photo." > "$TMP/ref_jpeg.json"
ask "Hello there" > "$TMP/ref_text.json"
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
first = json.load(open(f"{tmp}/ref_png.json"))["text"]
json.dump([{"role": "user", "content": [{"type": "image", "image": "small.png"}, {"type": "text", "text": "What is in the image?"}]},
           {"role": "assistant", "content": first},
           {"role": "user", "content": "And the colors?"}], open(f"{tmp}/two_turns.json", "w"))
PY
ask --messages "$TMP/two_turns.json" > "$TMP/ref_two_turns.json"
# Sampled, not greedy: the request's temperature, top_p, top_k and seed must reach the sampler.
"$QVL" ask --model "$MODEL" --dtype f32 -n "$N" --temperature 0.7 --top-p 0.9 --top-k 20 --seed 7 --json \
  --image "$TMP/small.png" "What is in the image?" > "$TMP/ref_sampled.json" 2>> "$TMP/ask.err"
check "qvl ask gives the four references" \
  "[ -s '$TMP/ref_png.json' ] && [ -s '$TMP/ref_jpeg.json' ] && [ -s '$TMP/ref_text.json' ] && [ -s '$TMP/ref_two_turns.json' ] || dump '$TMP/ask.err'"

# Anything but loopback needs an API key: refused before the model loads.
"$QVL" serve --model "$MODEL" --host 0.0.0.0 --port "$(free_port)" > /dev/null 2> "$TMP/open.err"
rc=$?
check "--host 0.0.0.0 without --api-key exits 1" "[ $rc -eq 1 ]"
check "... saying it needs --api-key" "grep -q -- '--api-key' '$TMP/open.err' || dump '$TMP/open.err'"

# The main server: an API key, a folder for file:// images, a 1 MiB body
# limit, at most 100000 decoded pixels an image, prompts prefilled 5 tokens
# at a time (so every reply below also checks that path against qvl ask).
PORT=$(free_port)
"$QVL" serve --model "$MODEL" --dtype f32 --greedy -n "$N" --port "$PORT" --api-key sesame \
  --allow-path "$TMP/allowed" --max-body-mb 1 --max-image-pixels 100000 --prefill-chunk 5 > "$TMP/serve.out" 2> "$TMP/serve.err" &
SERVER=$!
servers+=("$SERVER")
check "the server answers /health once the model is loaded" "wait_ready $PORT $SERVER || dump '$TMP/serve.err'"

python3 - "$PORT" "$TMP" <<'PY' || fail=1
import base64, http.client, json, sys, threading
port, tmp = int(sys.argv[1]), sys.argv[2]
KEY = {"Authorization": "Bearer sesame"}
failed = False

def check(name, ok, detail=""):
    global failed
    print(("ok: " if ok else "FAIL: ") + name + ("" if ok else f" -- {detail}"))
    failed |= not ok

def request(method, path, body=None, headers=KEY):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    if isinstance(body, (dict, list)): body = json.dumps(body)
    c.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data

def chat(body, headers=KEY):
    status, _, data = request("POST", "/v1/chat/completions", body, headers)
    return status, json.loads(data)

def stream(body):
    """The streamed reply's text, finish_reason and usage; checks the event shapes on the way."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}), headers=KEY)
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    assert r.getheader("Content-Type").startswith("text/event-stream")
    events = [e for e in r.read().decode("utf-8").split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    assert events[-1] == "data: [DONE]", events[-1]
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks)
    return text, chunks[-1]["choices"][0]["finish_reason"], chunks[-1].get("usage")

def data_uri(path, mime):
    return f"data:{mime};base64," + base64.b64encode(open(path, "rb").read()).decode()

def user(text, image=None):
    parts = [{"type": "image_url", "image_url": {"url": image}}] if image else []
    return {"role": "user", "content": parts + [{"type": "text", "text": text}]}

ref = {k: json.load(open(f"{tmp}/ref_{k}.json")) for k in ("png", "jpeg", "text", "two_turns")}
png, jpeg = data_uri(f"{tmp}/small.png", "image/png"), data_uri(f"{tmp}/photo.jpg", "image/jpeg")
bodies = {
    "png": {"messages": [user("What is in the image?", png)]},
    "jpeg": {"messages": [user("Describe the photo.", jpeg)]},
    "text": {"messages": [{"role": "user", "content": "Hello there"}]},
    "two_turns": {"messages": [user("What is in the image?", png),
                               {"role": "assistant", "content": ref["png"]["text"]},
                               {"role": "user", "content": "And the colors?"}]},
}
for b in bodies.values(): b.update({"temperature": 0, "max_tokens": 12})

def finish_of(r):
    return "stop" if r["stop_reason"] == "eos" else "length"

# Whole and streamed replies equal qvl ask's, with its token counts.
for name, body in bodies.items():
    status, j = chat(body)
    r = ref[name]
    ok = status == 200 and j["choices"][0]["message"]["content"] == r["text"]
    check(f"{name}: the reply equals qvl ask's", ok, f"{status} {j} vs {r['text']!r}")
    if status != 200: continue
    check(f"{name}: the reply's shape", j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-")
          and j["model"] == "tiny-qwen3-vl" and j["choices"][0]["message"]["role"] == "assistant"
          and isinstance(j["created"], int), j)
    check(f"{name}: finish_reason", j["choices"][0]["finish_reason"] == finish_of(r), j["choices"][0])
    u = j["usage"]
    check(f"{name}: usage equals qvl ask's counts", u["prompt_tokens"] == r["prompt_tokens"]
          and u["completion_tokens"] == r["generated_tokens"] and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"],
          f"{u} vs prompt {r['prompt_tokens']} generated {r['generated_tokens']}")
    try:
        text, finish, usage = stream(body)
        check(f"{name}: the streamed reply equals qvl ask's", text == r["text"] and finish == finish_of(r)
              and usage["prompt_tokens"] == r["prompt_tokens"], f"{text!r} {finish} vs {r['text']!r}")
    except AssertionError as e:
        check(f"{name}: the stream is well formed", False, repr(e))

# Per-request sampling equals qvl ask's with the same flags (the server itself is --greedy).
sampled = json.load(open(f"{tmp}/ref_sampled.json"))
body = {**bodies["png"], "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 7}
status, j = chat(body)
check("temperature, top_p, top_k and seed: the reply equals qvl ask's with those flags", status == 200
      and j["choices"][0]["message"]["content"] == sampled["text"] != ref["png"]["text"], f"{j} vs {sampled['text']!r}")
text, _, _ = stream(body)
check("... streamed too", text == sampled["text"], f"{text!r} vs {sampled['text']!r}")

# Stop strings cut the reply before the first of them, whole and streamed.
t = ref["png"]["text"]
stop = t[len(t) // 2 : len(t) // 2 + 3]
want = t[: t.find(stop)]
status, j = chat({**bodies["png"], "stop": stop})
check("stop (a string): the reply ends before it", status == 200 and j["choices"][0]["message"]["content"] == want
      and j["choices"][0]["finish_reason"] == "stop", f"{j} want {want!r} (stop {stop!r})")
text, finish, _ = stream({**bodies["png"], "stop": ["no such text", stop]})
check("stop (a list), streamed: the reply ends before it", text == want and finish == "stop", f"{text!r} {finish}")

# file:// images: only under --allow-path, after resolving the path.
status, j = chat({**bodies["png"], "messages": [user("What is in the image?", f"file://{tmp}/allowed/small.png")]})
check("a file:// image under --allow-path gives the same reply", status == 200
      and j["choices"][0]["message"]["content"] == ref["png"]["text"], j)

def error_check(name, status, j, want_status, param=None, code=None):
    e = j.get("error", {}) if isinstance(j, dict) else {}
    ok = (status == want_status and set(e) == {"message", "type", "param", "code"} and isinstance(e["message"], str)
          and e["message"] and e["type"] in ("invalid_request_error", "server_error")
          and (param is None or e["param"] == param) and (code is None or e["code"] == code))
    check(f"{name}: {want_status} with an OpenAI error object", ok, f"{status} {j}")

for path in (f"{tmp}/small.png", f"{tmp}/allowed/../small.png"):
    status, j = chat({**bodies["png"], "messages": [user("?", "file://" + path)]})
    error_check(f"file://{path.replace(tmp, '$TMP')}", status, j, 400, code="file_not_allowed")
status, j = chat({**bodies["png"], "messages": [user("?", "https://example.com/cat.png")]})
error_check("an https image URL", status, j, 400, code="unsupported_image_url")
status, j = chat({**bodies["png"], "messages": [user("?", "data:image/png;base64,bm90IGFuIGltYWdl")]})
error_check("a data: URI that is not an image", status, j, 400, param="messages")
status, j = chat({**bodies["png"], "messages": [user("?", data_uri(f"{tmp}/wide_rgba.png", "image/png"))]})
error_check("an image of 300000 pixels with --max-image-pixels 100000", status, j, 400, code="invalid_image")

status, _, data = request("POST", "/v1/chat/completions", "{not json")
error_check("a body that is not JSON", status, json.loads(data), 400, code="invalid_json")
for name, body, param in [
    ("missing messages", {"max_tokens": 3}, "messages"),
    ("messages as a string", {"messages": "hi"}, "messages"),
    ("empty messages", {"messages": []}, "messages"),
    ("content as a number", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("an unknown role", {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ("max_tokens as a string", {**bodies["text"], "max_tokens": "x"}, "max_tokens"),
    ("max_tokens 0", {**bodies["text"], "max_tokens": 0}, "max_tokens"),
    ("temperature as a string", {**bodies["text"], "temperature": "hot"}, "temperature"),
    ("stream as a string", {**bodies["text"], "stream": "yes"}, "stream"),
    ("stop as a number", {**bodies["text"], "stop": 7}, "stop"),
    ("a body that is a list", [1, 2], None),
]:
    status, j = chat(body)
    error_check(name, status, j, 400, param=param)
status, j = chat({**bodies["text"], "messages": [{"role": "user", "content": "hello " * 6000}]})
error_check("a prompt longer than the context (4096 tokens)", status, j, 400, param="messages")
check("... saying so", "context" in j.get("error", {}).get("message", ""), j)
status, j = chat({**bodies["text"], "some_future_field": {"x": 1}})
check("unknown fields are ignored", status == 200 and j["choices"][0]["message"]["content"] == ref["text"]["text"], j)

status, _, data = request("POST", "/v1/chat/completions", json.dumps({"messages": [user("x" * (2 << 20))]}))
error_check("a 2 MiB body with --max-body-mb 1", status, json.loads(data or b"{}"), 413)

status, j = chat(bodies["text"], headers={})
error_check("no API key", status, j, 401)
status, j = chat(bodies["text"], headers={"Authorization": "Bearer sesame2"})
error_check("a wrong API key", status, j, 401)
status, _, data = request("GET", "/v1/models", headers={})
check("/v1/models needs the key too", status == 401, status)
status, _, data = request("GET", "/v1/models")
check("/v1/models lists the model by its folder's name", status == 200
      and [m["id"] for m in json.loads(data)["data"]] == ["tiny-qwen3-vl"], data)
status, _, data = request("GET", "/health", headers={})
check("/health needs no key", status == 200 and json.loads(data) == {"status": "ok"}, data)

# Four streams at once (decoded together) each get the reply they get alone.
results = {}
barrier = threading.Barrier(4)
def run(name):
    barrier.wait()
    try: results[name] = stream(bodies[name])
    except Exception as e: results[name] = (repr(e), None, None)
threads = [threading.Thread(target=run, args=(n,)) for n in bodies]
for th in threads: th.start()
for th in threads: th.join()
for name in bodies:
    check(f"4 concurrent streams: {name} equals qvl ask's", results[name][0] == ref[name]["text"],
          f"{results[name][0]!r} vs {ref[name]['text']!r}")

status, _, data = request("GET", "/metrics", headers={})
m = data.decode()
check("/metrics counts the replies by status and has the histograms", status == 200
      and 'qvl_requests_total{status="200"}' in m and 'qvl_requests_total{status="400"}' in m
      and "qvl_time_to_first_token_seconds_bucket" in m and "qvl_decode_tokens_per_second_count" in m
      and "qvl_requests_running 0" in m and "qvl_requests_queued 0" in m, m)
status, headers, data = request("GET", "/", headers={})
check("/ serves the chat page", status == 200 and b"/v1/chat/completions" in data and b"getReader" in data, status)
sys.exit(1 if failed else 0)
PY

# `curl -d` sends a form-encoded body, which httplib caps at 8 KB: the error says what to do.
head -c 9000 /dev/zero | tr '\0' x > "$TMP/form.txt"
curl -s -H 'Authorization: Bearer sesame' "http://127.0.0.1:$PORT/v1/chat/completions" -d @"$TMP/form.txt" > "$TMP/form.out"
check "a form-encoded body over 8 KB: 413 naming Content-Type: application/json" \
  "grep -q 'Content-Type: application/json' '$TMP/form.out' && grep -q request_too_large '$TMP/form.out' || dump '$TMP/form.out'"

# One slot and one queue place: the queue limit, a client that goes away,
# and SIGTERM in the middle of a stream.
PORT2=$(free_port)
"$QVL" serve --model "$MODEL" --dtype f32 --greedy --port "$PORT2" --parallel 1 --queue 1 --shutdown-grace 2 \
  > "$TMP/serve2.out" 2> "$TMP/serve2.err" &
SERVER2=$!
servers+=("$SERVER2")
check "the second server starts" "wait_ready $PORT2 $SERVER2 || dump '$TMP/serve2.err'"
python3 - "$PORT2" "$SERVER2" "$TMP" <<'PY' || fail=1
import base64, http.client, json, os, re, signal, socket, sys, threading, time
port, server, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
failed = False
def check(name, ok, detail=""):
    global failed
    print(("ok: " if ok else "FAIL: ") + name + ("" if ok else f" -- {detail}"))
    failed |= not ok

def metrics():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    return {k: float(v) for k, v in re.findall(r"^(qvl_\S+) (\S+)$", text, re.M)}

def wait_for(cond, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        if cond(): return True
        time.sleep(0.05)
    return False

LONG = json.dumps({"messages": [{"role": "user", "content": "Tell a long story"}], "max_tokens": 4000, "stream": True})
def open_stream():
    """A raw socket with a long streamed reply, read up to its first content chunk."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(LONG)}\r\n\r\n{LONG}".encode())
    got = b""
    while b'"content":"' not in got.replace(b'"content":""', b""):
        got += s.recv(4096)
    return s

# This server prefills a prompt whole (the default --prefill-chunk is longer than it): the same reply.
ref = json.load(open(f"{tmp}/ref_png.json"))
png = "data:image/png;base64," + base64.b64encode(open(f"{tmp}/small.png", "rb").read()).decode()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": png}}, {"type": "text", "text": "What is in the image?"}]}],
    "max_tokens": 12, "temperature": 0}))
j = json.loads(c.getresponse().read())
check("a prompt prefilled whole: the reply equals qvl ask's", j["choices"][0]["message"]["content"] == ref["text"]
      and j["usage"]["prompt_tokens"] == ref["prompt_tokens"] < 256, j)

first = open_stream()
short = {}
def ask_short():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}))
    r = c.getresponse()
    short["status"], short["body"] = r.status, json.loads(r.read())
waiting = threading.Thread(target=ask_short)
waiting.start()
check("a second request waits in the queue", wait_for(lambda: metrics().get("qvl_requests_queued") == 1), metrics())
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}]}))
r = c.getresponse()
body = json.loads(r.read())
check("a third one gets 503 with Retry-After: 1", r.status == 503 and r.getheader("Retry-After") == "1"
      and body["error"]["code"] == "queue_full", (r.status, body))

first.close()  # the client goes away mid-stream
waiting.join(60)
check("... once the streaming client went away, the queued request completes", short.get("status") == 200
      and short["body"]["usage"]["completion_tokens"] > 0, short)
m = metrics()
check("... the abandoned stream was cut short (client-closed status, far fewer than 4000 tokens)",
      m.get('qvl_requests_total{status="499"}') == 1 and m["qvl_completion_tokens_total"] < 3000 and m["qvl_requests_running"] == 0, m)

# The same for a reply sent whole: a client gone while it waits cancels it.
def long_request(stream):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = json.dumps({"messages": [{"role": "user", "content": "Tell a long story"}], "max_tokens": 4000, "stream": stream})
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    return s
before = metrics()["qvl_completion_tokens_total"]
whole = long_request(False)
check("a long reply sent whole is running", wait_for(lambda: metrics().get("qvl_requests_running") == 1), metrics())
whole.close()
check("... the client going away ends it: the slot is free again", wait_for(lambda: metrics().get("qvl_requests_running") == 0, 10), metrics())
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}))
r = c.getresponse()
m = metrics()
check("... a following request completes, the abandoned reply cut short", r.status == 200 and json.loads(r.read())["choices"]
      and m.get('qvl_requests_total{status="499"}') == 2 and m["qvl_completion_tokens_total"] - before < 3000, m)

# SIGTERM during a stream: the stream still ends properly, the server exits within the grace period.
s = open_stream()
t0 = time.time()
os.kill(server, signal.SIGTERM)
rest = b""
while True:
    b = s.recv(65536)
    if not b: break
    rest += b
    if rest.endswith(b"data: [DONE]\n\n\r\n") or b"0\r\n\r\n" in rest[-16:]: break
check("SIGTERM: the running stream still ends with [DONE]", b"data: [DONE]" in rest, rest[-300:])
def gone():
    try: return open(f"/proc/{server}/stat").read().split(")")[1].split()[0] == "Z"
    except FileNotFoundError: return True
check("SIGTERM: the server exits within the grace period (2 s) and a margin", wait_for(gone, 8), time.time() - t0)
sys.exit(1 if failed else 0)
PY
wait "$SERVER2"
rc=$?
check "SIGTERM: exit status 0" "[ $rc -eq 0 ] || dump '$TMP/serve2.err'"

kill -TERM "$SERVER"
wait "$SERVER"
rc=$?
check "the main server exits 0 on SIGTERM when idle" "[ $rc -eq 0 ] || dump '$TMP/serve.err'"
exit $fail

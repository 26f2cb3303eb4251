// qvl serve's chat page (GET /): one HTML file with plain JavaScript. Pick,
// drop or paste an image, ask, and the answer streams in; follow-up questions
// send the whole conversation, image included, as any OpenAI client would.
#pragma once

namespace qvl::app {

inline constexpr const char* kChatPage = R"QVLPAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>qvl</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 46rem; margin: 1rem auto; padding: 0 1rem; color: #222; }
  #drop { border: 2px dashed #aaa; border-radius: 8px; padding: .8rem; text-align: center; color: #666; }
  #drop.over { border-color: #36c; background: #eef3ff; }
  #preview { max-width: 100%; max-height: 16rem; display: none; margin: .5rem auto 0; }
  .msg { white-space: pre-wrap; margin: .6rem 0; padding: .5rem .7rem; border-radius: 8px; }
  .user { background: #eef3ff; } .assistant { background: #f4f4f4; } .error { background: #fee; color: #900; }
  form { display: flex; gap: .5rem; margin-top: .6rem; }
  textarea { flex: 1; font: inherit; min-height: 2.6rem; }
  small { color: #777; }
</style>
</head>
<body>
<h3>qvl <small id="model"></small></h3>
<div id="drop">Drop, paste or <label><u>pick</u><input id="file" type="file" accept="image/*,application/pdf" hidden></label> an image
  <img id="preview" alt="">
</div>
<div id="log"></div>
<form id="ask">
  <textarea id="question" placeholder="Ask about the image (Enter sends, Shift+Enter breaks the line)"></textarea>
  <button id="send">Ask</button>
</form>
<p><small><button id="reset" type="button">New conversation</button>
  API key (if the server wants one): <input id="key" type="password" size="14"></small></p>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let messages = [];   // the conversation, sent whole with every question
let image = null;    // a data: URI, attached to the next question
$("key").value = localStorage.getItem("qvl-key") || "";
$("key").onchange = () => localStorage.setItem("qvl-key", $("key").value);
fetch("/v1/models", { headers: headers() }).then((r) => r.json()).then((j) => { $("model").textContent = j.data[0].id; }).catch(() => {});

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h.Authorization = "Bearer " + $("key").value;
  return h;
}
function useFile(file) {
  if (!file) return;
  const reader = new FileReader();
  reader.onload = () => { image = reader.result; $("preview").src = image; $("preview").style.display = "block"; };
  reader.readAsDataURL(file);
}
$("file").onchange = (e) => useFile(e.target.files[0]);
const drop = $("drop");
drop.ondragover = (e) => { e.preventDefault(); drop.classList.add("over"); };
drop.ondragleave = () => drop.classList.remove("over");
drop.ondrop = (e) => { e.preventDefault(); drop.classList.remove("over"); useFile(e.dataTransfer.files[0]); };
document.onpaste = (e) => {
  for (const item of e.clipboardData.items) if (item.type.startsWith("image/")) useFile(item.getAsFile());
};
$("reset").onclick = () => { messages = []; image = null; $("log").textContent = ""; $("preview").style.display = "none"; };
$("question").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask").requestSubmit(); } };

function bubble(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  $("log").appendChild(div);
  return div;
}

$("ask").onsubmit = async (e) => {
  e.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  $("question").value = "";
  const content = [];
  if (image) { content.push({ type: "image_url", image_url: { url: image } }); image = null; }
  content.push({ type: "text", text: question });
  messages.push({ role: "user", content });
  bubble("user", question);
  const out = bubble("assistant", "");
  $("send").disabled = true;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify({ messages, stream: true }),
    });
    if (!response.ok) {
      const j = await response.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || response.statusText);
    }
    // Server-sent events: "data: {chunk}" blocks separated by a blank line, "data: [DONE]" last.
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", answer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const delta = JSON.parse(event.slice(6)).choices[0].delta;
        if (delta.content) { answer += delta.content; out.textContent = answer; }
      }
    }
    messages.push({ role: "assistant", content: answer });
  } catch (err) {
    messages.pop();
    out.className = "msg error";
    out.textContent = String(err.message || err);
  } finally {
    $("send").disabled = false;
  }
};
</script>
</body>
</html>
)QVLPAGE";

}  // namespace qvl::app

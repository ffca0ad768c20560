#include "serve/page.h"

namespace bankml::serve {

// Plain HTML, CSS and JavaScript that current Chromium and Firefox run as they are: fetch() with a
// ReadableStream reads the server-sent events, an AbortController is the stop button.
static const char PAGE[] = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bankml chat</title>
<style>
  :root { color-scheme: light dark; --b: #8884; }
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: .5em 1em; border-bottom: 1px solid var(--b); display: flex; gap: 1em; align-items: center; flex-wrap: wrap; }
  header label { font-size: 13px; }
  header input { width: 5em; }
  #key { width: 10em; }
  #log { flex: 1; overflow-y: auto; padding: 1em; }
  .msg { max-width: 52em; margin: 0 auto .8em; white-space: pre-wrap; word-wrap: break-word; }
  .user { font-weight: 600; }
  .assistant { padding-left: 1em; border-left: 3px solid var(--b); }
  .error { color: #c33; }
  form { display: flex; gap: .5em; padding: .6em 1em; border-top: 1px solid var(--b); }
  textarea { flex: 1; font: inherit; resize: vertical; min-height: 2.6em; }
  #speed { font-size: 13px; opacity: .8; margin-left: auto; }
</style>
</head>
<body>
<header>
  <strong>bankml</strong> <span id="model"></span>
  <label>system <input id="system" style="width:14em" placeholder="(none)"></label>
  <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.8"></label>
  <label>max tokens <input id="max" type="number" min="1" value="512"></label>
  <label><input id="think" type="checkbox"> thinking</label>
  <label>API key <input id="key" type="password" placeholder="(none)"></label>
  <button type="button" id="clear">clear</button>
  <span id="speed"></span>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter is a new line)" autofocus></textarea>
  <button id="send">Send</button>
  <button type="button" id="stop" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let abort = null;
$("key").value = localStorage.getItem("bankml-key") || "";
$("key").onchange = () => localStorage.setItem("bankml-key", $("key").value);

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}
function add(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  $("log").appendChild(d);
  $("log").scrollTop = $("log").scrollHeight;
  return d;
}
fetch("/v1/models", { headers: headers() }).then((r) => r.json()).then((j) => {
  if (j.data) $("model").textContent = j.data[0].id + " (context " + j.data[0].meta.n_ctx + ")";
}).catch(() => {});

async function send(text) {
  add("user", text);
  history.push({ role: "user", content: text });
  const out = add("assistant", "");
  const messages = ($("system").value ? [{ role: "system", content: $("system").value }] : []).concat(history);
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: Number($("temp").value), max_tokens: Number($("max").value),
    chat_template_kwargs: { enable_thinking: $("think").checked },
  };
  abort = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  const t0 = performance.now();
  let first = 0, pieces = 0, reply = "", done = false;
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: abort.signal });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || r.status + " " + r.statusText);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    while (!done) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!ev.startsWith("data: ")) continue;
        const data = ev.slice(6);
        if (data === "[DONE]") { done = true; break; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.timings) {
          $("speed").textContent = j.timings.predicted_n + " tokens, " + j.timings.predicted_per_second.toFixed(1) +
            " t/s (prompt " + j.timings.prompt_per_second.toFixed(1) + " t/s)";
        }
        const c = j.choices && j.choices[0];
        if (c && c.delta && c.delta.content) {
          if (!first) first = performance.now();
          pieces++;
          reply += c.delta.content;
          out.textContent = reply;
          $("log").scrollTop = $("log").scrollHeight;
          const s = (performance.now() - first) / 1000;
          if (s > 0) $("speed").textContent = (pieces / s).toFixed(1) + " t/s, first token after " + ((first - t0) / 1000).toFixed(2) + " s";
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") out.appendChild(document.createTextNode(" [stopped]"));
    else add("error", String(e.message || e));
  }
  history.push({ role: "assistant", content: reply });
  out.dataset.done = "1";
  abort = null;
  $("send").disabled = false;
  $("stop").disabled = true;
}

$("form").onsubmit = (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || abort) return;
  $("input").value = "";
  send(text);
};
$("input").onkeydown = (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
};
$("stop").onclick = () => { if (abort) abort.abort(); };
$("clear").onclick = () => { history.length = 0; $("log").textContent = ""; $("speed").textContent = ""; };
</script>
</body>
</html>
)HTML";

const char* chat_page() { return PAGE; }

}  // namespace bankml::serve

// The chat page: calls this server's own OpenAI routes (and /api/ps for what is loaded). Its
// settings and its stage bar are built from /ui/tables.json, llmcli's parameter and stage tables.
// Model text is rendered by markdown.js only (DOM nodes, textContent): never innerHTML.
import { render } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const KEY = "llmcli.key"; // sessionStorage: this tab only, gone when it closes
const chat = $("chat");
let tables = { params: [], stages: [] };
let history = []; // the conversation as OpenAI messages
let controller = null; // the reply in flight's AbortController
let asking = null; // the key prompt's promise, shared by the calls that met a 401
let chatId = 0; // New chat's count: a reply stopped by it does not join the next chat's history

function status(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The key prompt: resolves once a key is given. `why` is the server's own words on the 401.
function askKey(why) {
  if (asking) return asking;
  const form = $("key-form");
  $("key-why").textContent = sessionStorage.getItem(KEY) ? `The key was refused: ${why}` : why;
  form.hidden = false;
  $("key").value = "";
  $("key").focus();
  asking = new Promise((resolve) => {
    form.onsubmit = (event) => {
      event.preventDefault();
      const key = $("key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      form.hidden = true;
      asking = null;
      resolve();
    };
  });
  return asking;
}

async function errorText(response) {
  try {
    const body = await response.json();
    const error = body.error;
    return typeof error === "string" ? error : error?.message ?? `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

// fetch with the key; on a 401, the key prompt, then the same call again.
async function api(path, options = {}) {
  for (;;) {
    const headers = { ...(options.headers || {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...options, headers });
    if (response.status !== 401) return response;
    await askKey(await errorText(response));
  }
}

function buildSettings() {
  const box = $("params");
  for (const row of tables.params) {
    const label = el("label", "", `${row.name} (${row.flags.join(", ")})`);
    const input = el("input");
    input.type = "number";
    input.id = `param-${row.name}`;
    input.dataset.name = row.name;
    input.min = row.low;
    input.max = row.high;
    input.step = row.kind === "int" ? "1" : "any";
    input.placeholder = row.default === null ? row.none_means : String(row.default);
    label.title = `${row.help} Range ${row.low}..${row.high}; empty: the server's default.`;
    label.append(input);
    box.append(label);
  }
}

// The request fields of the settings that are set (an empty one: the server's default).
function settings() {
  const fields = {};
  for (const row of tables.params) {
    const input = $(`param-${row.name}`);
    if (input.value === "") continue;
    const value = Number(input.value);
    const whole = row.kind !== "int" || Number.isInteger(value);
    if (!input.checkValidity() || !whole || value < row.low || value > row.high) {
      throw new Error(`${row.name} must be ${row.kind === "int" ? "an integer" : "a number"} in ${row.low}..${row.high}`);
    }
    fields[row.field] = value;
  }
  const tools = $("tools").value.trim();
  if (tools) {
    let parsed;
    try {
      parsed = JSON.parse(tools);
    } catch {
      throw new Error("tools must be a JSON array of OpenAI tools");
    }
    if (!Array.isArray(parsed)) throw new Error("tools must be a JSON array of OpenAI tools");
    fields.tools = parsed;
    fields.tool_choice = $("tool-choice").value;
  }
  return fields;
}

async function loadModels() {
  const [models, ps] = await Promise.all([api("/v1/models"), api("/api/ps")]);
  if (models.status === 503) {
    // `llmcli serve MODEL` loading its model: the routes answer 503 with Retry-After until it is in
    status("the model is loading…");
    setTimeout(() => loadModels().catch((error) => status(error.message, true)), 1000);
    return;
  }
  if (!models.ok) return status(await errorText(models), true);
  const loaded = new Set();
  if (ps.ok) for (const m of (await ps.json()).models) loaded.add(m.name.replace(/:latest$/, ""));
  const select = $("model");
  const chosen = select.value;
  select.replaceChildren();
  for (const model of (await models.json()).data) {
    const option = el("option", "", loaded.has(model.id) ? `${model.id} ● loaded` : model.id);
    option.value = model.id;
    option.dataset.loaded = loaded.has(model.id) ? "yes" : "no";
    select.append(option);
  }
  if (chosen) select.value = chosen;
  status("");
}

function message(role, text) {
  const box = el("section", `msg ${role}`);
  box.append(el("div", "who", role === "user" ? "you" : $("model").value));
  const body = el("div", "body");
  if (text !== undefined) body.append(render(text));
  box.append(body);
  chat.append(box);
  chat.scrollTop = chat.scrollHeight;
  return box;
}

const fmt = (x, digits = 1) => (x === null || x === undefined ? "—" : Number(x).toFixed(digits));

// The seven stages under a reply, in the table's order, each with its ms; then TTFT, tok/s, cached.
function stageBar(timings) {
  const box = el("div", "stagebar");
  const bar = el("div", "bar");
  const legend = el("ol");
  const records = new Map((timings.stages || []).map((s) => [s.name, s]));
  tables.stages.forEach((stage, n) => {
    const record = records.get(stage.key) || { ms: null, detail: "" };
    const part = el("span", `s${n}`);
    part.style.flexGrow = String(record.ms || 0);
    part.title = `${stage.number} ${stage.label}: ${fmt(record.ms)} ms`;
    bar.append(part);
    const item = el("li", `s${n}`, `${stage.number} ${stage.label} `);
    item.dataset.stage = stage.key;
    item.dataset.ms = record.ms ?? "";
    item.title = `${stage.covers}; ${record.detail}`;
    item.append(el("span", "ms", `${fmt(record.ms)} ms`));
    legend.append(item);
  });
  const totals = el("div", "totals");
  const total = (name, label, value, unit) => {
    const b = el("b", "", value);
    b.dataset.total = name;
    totals.append(`${label} `, b, `${unit}   `);
  };
  total("ttft", "TTFT", fmt(timings.ttft_ms), " ms");
  total("tps", "·", fmt(timings.predicted_per_second), " tok/s");
  total("cached", "·", String(timings.cache_n ?? 0), " cached tokens");
  box.append(bar, legend, totals);
  return box;
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

// One streamed reply: its thinking (collapsed), its answer, its tool calls, then its stage bar.
class Reply {
  constructor() {
    this.box = message("assistant");
    this.body = this.box.querySelector(".body");
    this.thinking = el("details", "thinking");
    this.thinking.hidden = true;
    this.thinking.append(el("summary", "", "Thinking"), el("pre"));
    this.box.insertBefore(this.thinking, this.body);
    this.calls = el("div", "calls");
    this.box.append(this.calls);
    this.answer = "";
    this.reasoning = "";
    this.toolCalls = [];
    this.timings = null;
    this.frame = 0;
  }

  take(chunk) {
    if (chunk.timings) this.timings = chunk.timings;
    for (const choice of chunk.choices || []) {
      const delta = choice.delta || {};
      if (delta.reasoning_content) this.reasoning += delta.reasoning_content;
      if (delta.content) this.answer += delta.content;
      for (const call of delta.tool_calls || []) {
        const made = (this.toolCalls[call.index] ||= { id: "", type: "function", function: { name: "", arguments: "" } });
        if (call.id) made.id = call.id;
        if (call.function?.name) made.function.name += call.function.name;
        if (call.function?.arguments) made.function.arguments += call.function.arguments;
      }
    }
    if (!this.frame) this.frame = requestAnimationFrame(() => this.show());
  }

  show() {
    this.frame = 0;
    if (this.reasoning) {
      this.thinking.hidden = false;
      this.thinking.querySelector("pre").textContent = this.reasoning;
    }
    this.body.replaceChildren(render(this.answer));
    this.calls.replaceChildren(
      ...this.toolCalls.map((c) => el("div", "tool-call", `call ${c.function.name}(${c.function.arguments})`)),
    );
    chat.scrollTop = chat.scrollHeight;
  }

  end(note, error) {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.show();
    const actions = el("div", "actions");
    const button = el("button", "", "Copy");
    button.type = "button";
    button.onclick = () => copy(this.answer, button);
    actions.append(button);
    if (note) actions.append(el("span", "note", note));
    if (error) actions.append(el("span", "error", error));
    this.box.append(actions);
    if (this.timings) this.box.append(stageBar(this.timings));
  }

  asMessage() {
    const calls = this.toolCalls.filter(Boolean);
    if (!calls.length) return { role: "assistant", content: this.answer };
    return { role: "assistant", content: this.answer || null, tool_calls: calls };
  }
}

async function read(response, reply) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message || String(chunk.error));
        reply.take(chunk);
      }
    }
  }
}

function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
}

async function send() {
  const text = $("prompt").value;
  if (!text.trim() || controller || !$("model").value) return;
  let fields;
  try {
    fields = settings();
  } catch (error) {
    return status(error.message, true);
  }
  status("");
  $("prompt").value = "";
  history.push({ role: "user", content: text });
  message("user", text);
  const system = $("system").value.trim();
  const messages = system ? [{ role: "system", content: system }, ...history] : history;
  const body = { model: $("model").value, messages, stream: true, ...fields };
  const reply = new Reply();
  const mine = chatId;
  controller = new AbortController();
  busy(true);
  let note = "", error = "";
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) error = await errorText(response);
    else await read(response, reply);
  } catch (failure) {
    if (failure.name === "AbortError") note = "stopped";
    else error = failure.message;
  }
  controller = null;
  busy(false);
  if (mine !== chatId) return;
  reply.end(note, error);
  history.push(reply.asMessage());
  loadModels().catch(() => {}); // the model just used is loaded now
}

function stop() {
  if (controller) controller.abort();
}

function newChat() {
  stop();
  chatId += 1;
  history = [];
  chat.replaceChildren();
  $("prompt").focus();
}

async function start() {
  $("send").onclick = send;
  $("stop").onclick = stop;
  $("new-chat").onclick = newChat;
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  tables = await (await fetch("/ui/tables.json")).json();
  buildSettings();
  await loadModels();
  $("prompt").focus();
}

start().catch((error) => status(error.message, true));

// The inspector page (SPEC §12): the proxy's newest exchanges, live, and one opened side by side.
// Plain JavaScript, no build step, nothing from outside the proxy. Everything the proxy reports
// (names, ids, models, text) is put on the page as text (textContent), never parsed as HTML.
"use strict";

const KEY_STORE = "toolcall-proxy-inspect-key";
const state = {
  rows: new Map(), // seq -> row, oldest first
  size: 200,
  key: sessionStorage.getItem(KEY_STORE) || "",
  selected: null,
  surfaces: new Set(),
  retry: 1000,
};

// -- building the page ---------------------------------------------------------------------------

function el(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(id) {
  return document.getElementById(id);
}

function setStatus(text, kind) {
  const status = $("status");
  status.textContent = text;
  status.className = "status " + (kind || "");
}

function headers() {
  return state.key ? { "x-toolcall-proxy-key": state.key } : {};
}

// -- the list ------------------------------------------------------------------------------------

function time(ts) {
  const date = new Date(ts * 1000);
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
}

// What the proxy did, in the words of the log line.
function chips(row) {
  const out = [];
  const c = row.counts;
  const add = (text, kind) => out.push(el("span", "chip " + (kind || "change"), text));
  if (c.ids_rewritten) add(`ids_rewritten ${c.ids_rewritten}`);
  if (c.calls_dropped) add(`calls_dropped ${c.calls_dropped}`);
  if (c.replays_answered) add(`replays_answered ${c.replays_answered}`);
  if (row.breaker) add("breaker: loop stopped", "stop");
  if (row.repeat) add(`repeat ${row.repeat}`, row.repeat === "note" ? "change" : "stop");
  if (c.text_calls) add(`text calls recovered ${c.text_calls}`);
  if (c.repairs) add(`repairs ${c.repairs}`);
  if (row.dropped) add(`dropped ${row.dropped.join(", ")}`);
  if (row.error) add(`error ${row.error}`, "stop");
  if (!out.length) add("nothing changed", "none");
  return out;
}

function matches(row) {
  const surface = $("f-surface").value;
  const tool = $("f-tool").value.trim().toLowerCase();
  if (surface && row.surface !== surface) return false;
  if ($("f-changed").checked && !row.changed) return false;
  if (tool && !row.tools.some((name) => name.toLowerCase().includes(tool))) return false;
  return true;
}

function rowElement(row) {
  const tr = el(
    "tr",
    row.seq === state.selected ? "selected" : "",
    el("td", "time", time(row.ts)),
    el("td", "", row.route || ""),
    el("td", "", row.surface || ""),
    el("td", "model", row.model === null ? "" : row.model),
    el("td", row.status >= 400 ? "status-error" : "", row.status),
    el("td", "num", `${Math.round(row.duration_ms)} ms`),
    el("td", "did", ...chips(row)),
  );
  tr.dataset.seq = String(row.seq);
  tr.tabIndex = 0;
  tr.addEventListener("click", () => openExchange(row.seq));
  tr.addEventListener("keydown", (event) => {
    if (event.key === "Enter") openExchange(row.seq);
  });
  return tr;
}

function render() {
  const body = $("rows");
  const shown = [];
  for (const row of state.rows.values()) if (matches(row)) shown.push(rowElement(row));
  shown.reverse(); // newest first
  body.replaceChildren(...shown);
  $("empty").hidden = state.rows.size > 0;
  $("count").textContent = `${shown.length} of ${state.rows.size} exchanges (newest first; the last ${state.size} are kept)`;
}

function addSurface(surface) {
  if (!surface || state.surfaces.has(surface)) return;
  state.surfaces.add(surface);
  const option = el("option", "", surface);
  option.value = surface;
  $("f-surface").append(option);
}

function addRows(rows) {
  for (const row of rows) {
    state.rows.set(row.seq, row);
    addSurface(row.surface);
  }
  while (state.rows.size > state.size) state.rows.delete(state.rows.keys().next().value);
  if (rows.length === 1 && matches(rows[0]) && $("rows").children.length) {
    $("rows").prepend(rowElement(rows[0])); // the usual case: one more, on top
    const extra = $("rows").children.length - state.size;
    for (let i = 0; i < extra; i++) $("rows").lastElementChild.remove();
    $("empty").hidden = true;
    $("count").textContent = `${$("rows").children.length} of ${state.rows.size} exchanges (newest first; the last ${state.size} are kept)`;
    return;
  }
  render();
}

// -- the live feed: server-sent events, read with fetch (so a proxy key can be sent) -------------

function handleEvent(block, batch) {
  let event = "message";
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) event = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (event === "hello") {
    const hello = JSON.parse(data);
    state.size = hello.size;
    $("mode").textContent = hello.content
      ? "content shown (--inspect-content on)"
      : "structure only (--inspect-content off)";
  } else if (event === "exchange") {
    batch.push(JSON.parse(data));
  }
}

async function connect() {
  let response;
  try {
    response = await fetch("/_inspect/events", { headers: headers(), cache: "no-store" });
  } catch (error) {
    return reconnect();
  }
  if (response.status === 401) return askKey();
  if (!response.ok) {
    setStatus(`the proxy answered ${response.status}`, "down");
    return reconnect();
  }
  setStatus("live", "live");
  state.retry = 1000;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const batch = [];
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        handleEvent(buffer.slice(0, end), batch);
        buffer = buffer.slice(end + 2);
      }
      if (batch.length) addRows(batch);
    }
  } catch (error) {
    // the connection broke: reconnect below
  }
  reconnect();
}

function reconnect() {
  setStatus("disconnected; reconnecting…", "down");
  setTimeout(connect, state.retry);
  state.retry = Math.min(state.retry * 2, 15000);
}

function askKey() {
  setStatus("a proxy key is required", "down");
  $("keyform").hidden = false;
  $("key").focus();
}

// -- one exchange --------------------------------------------------------------------------------

async function openExchange(seq) {
  state.selected = seq;
  for (const tr of $("rows").children) tr.classList.toggle("selected", tr.dataset.seq === String(seq));
  const detail = $("detail");
  const response = await fetch(`/_inspect/exchanges/${seq}`, { headers: headers(), cache: "no-store" });
  if (response.status === 401) return askKey();
  detail.hidden = false;
  if (!response.ok) {
    detail.replaceChildren(el("p", "notice", `Exchange ${seq} is no longer kept (the ring holds the last ${state.size}).`));
    return;
  }
  detail.replaceChildren(...exchangeView(await response.json()));
  detail.scrollIntoView({ block: "nearest" });
}

function facts(log) {
  const list = el("dl", "facts");
  for (const [key, value] of Object.entries(log)) {
    if (value === null || value === undefined) continue;
    const shown = Array.isArray(value) ? value.join(", ") : String(value);
    list.append(el("div", "", el("dt", "", key), el("dd", "", shown)));
  }
  return list;
}

const KINDS = {
  id_rewritten: "id rewritten",
  call_dropped: "call dropped",
  replay_answered: "replay answered",
  repeat_answered: "repeat answered",
  loop_stopped: "loop stopped",
  repeat_stopped: "repeat stopped",
  text_call_recovered: "text call recovered",
  repair: "repaired",
  request_repair: "request repaired",
  repeat_noted: "repeat noted",
};

function decisionTable(decisions, before, after) {
  const table = el(
    "table",
    "decisions",
    el("thead", "", el("tr", "", el("th", "", "what"), el("th", "", before), el("th", "", after), el("th", "", "note"))),
  );
  const body = el("tbody");
  for (const d of decisions) {
    body.append(
      el(
        "tr",
        "",
        el("td", "kind", KINDS[d.kind] || d.kind),
        el("td", "before", d.before),
        el("td", "after", d.after),
        el("td", "", d.note),
      ),
    );
  }
  table.append(body);
  return table;
}

function partText(part) {
  switch (part.kind) {
    case "call":
      return `call ${part.name} id ${part.id} (arguments ${part.args_bytes} bytes)`;
    case "result":
      return `result for ${part.id} (${part.chars} chars)`;
    case "result_for":
      return `result for ${part.id}`;
    case "text":
      return `text (${part.chars} chars)`;
    default:
      return part.kind;
  }
}

function partView(part, changed) {
  const box = el("div", "");
  box.append(el("div", "part" + (changed ? " changed" : ""), partText(part)));
  const text = part.kind === "call" ? part.args : part.text;
  if (typeof text === "string" && text.length) box.append(el("pre", "text", text + (part.cut ? " …" : "")));
  return box;
}

function messageView(message, other) {
  const box = el("div", "message");
  if (!message) return box;
  box.append(el("span", "role", message.role));
  if (message.parts_omitted) box.append(el("span", "notice", `${message.parts_omitted} parts, too large to keep`));
  message.parts.forEach((part, i) => {
    const twin = other ? other.parts[i] : undefined;
    box.append(partView(part, JSON.stringify(part) !== JSON.stringify(twin)));
  });
  return box;
}

function sidesView(client, upstream) {
  const grid = el("div", "sides", el("div", "head", "client sent"), el("div", "head", "proxy sent upstream"));
  const left = new Map(client.messages.map((m) => [m.at, m]));
  const right = new Map(upstream.messages.map((m) => [m.at, m]));
  const positions = [...new Set([...left.keys(), ...right.keys()])].sort((a, b) => a - b);
  for (const at of positions) {
    const a = left.get(at);
    const b = right.get(at);
    const l = messageView(a, b);
    l.classList.add("left");
    grid.append(l, messageView(b, a));
  }
  return grid;
}

function omitted(summary, side) {
  if (summary.too_large) return el("p", "notice", `${side}: ${summary.bytes} bytes, too large to show`);
  if (summary.not_json) return el("p", "notice", `${side}: ${summary.bytes} bytes, not a JSON object`);
  if (summary.omitted) return el("p", "notice", `${side}: ${summary.omitted} earlier messages not kept`);
  return null;
}

function exchangeView(detail) {
  const row = detail.row;
  if (detail.failed) {
    return [el("h2", "", `Exchange ${row.seq}`), el("p", "notice", "The inspector could not summarize this exchange (its error is in the proxy's log).")];
  }
  const parts = [
    el("h2", "", `Exchange ${row.seq}: ${row.surface} ${row.model === null ? "" : row.model} → ${row.status}`),
    el("div", "", ...chips(row)),
    facts(detail.log),
  ];
  const response = detail.decisions.filter((d) => d.direction === "response");
  const request = detail.decisions.filter((d) => d.direction === "request");
  parts.push(el("h3", "", "The response: what the upstream sent, what the client received"));
  parts.push(
    response.length
      ? decisionTable(response, "upstream sent", "client received")
      : el("p", "notice", "The response reached the client as the upstream sent it (ids, calls and shape unchanged)."),
  );
  if (detail.decisions_omitted) parts.push(el("p", "notice", `${detail.decisions_omitted} more decisions not kept`));
  if (request.length) {
    parts.push(el("h3", "", "The request: what the client sent, what the upstream received"));
    parts.push(decisionTable(request, "client sent", "upstream received"));
  }
  const { client, upstream } = detail.request;
  parts.push(el("h3", "", "The request's history, side by side (changed parts marked)"));
  if (!detail.content) {
    parts.push(el("p", "notice", "Structure only: roles, tool names, ids and sizes. Start the proxy with --inspect-content on to see text and arguments."));
  }
  parts.push(omitted(client, "client sent"), omitted(upstream, "proxy sent upstream"));
  parts.push(sidesView(client, upstream));
  return parts.filter((p) => p !== null);
}

// -- start ---------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["f-surface", "f-tool", "f-changed"]) $(id).addEventListener("input", render);
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = $("key").value.trim();
    sessionStorage.setItem(KEY_STORE, state.key);
    $("keyform").hidden = true;
    setStatus("connecting…");
    connect();
  });
  render();
  connect();
});

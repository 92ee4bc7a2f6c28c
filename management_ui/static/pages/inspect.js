// The message inspector on a queue page: peek (ready or unacked, changes nothing), search
// (streamed, with a stop button), and acting on what was found: redrive to the x-death origin,
// move to another queue, delete selected, delete the first N.
// A stream (stream: true) is read by offset or arrival time and nothing is taken from it: no
// ready/unacked choice, no selection, no action; each message shows its offset and arrival.
//
// API: POST queues/{vh}/{q}/peek | search | redrive | move, DELETE .../messages.

import {
  api, attempt, clear, confirmAction, credentials, enc, errorBox, field, h, hashState, notice,
  num, readableTime, select, setHashState,
} from "../lib.js";
import { guard, whyLine } from "../rights.js";

export function inspector(vhost, name, { stream = false } = {}) {
  const base = `queues/${enc(vhost)}/${enc(name)}`;
  const read = ["read", "queue", name, vhost];
  const selected = new Set();
  const results = h("div.messages");
  const out = h("div");
  let view = "text";
  let shown = [];

  // Where the inspector was (state, position, how many, body view) lives in the URL: a
  // reload or a shared link peeks at the same place again.
  const saved = hashState();
  const state = select("state", [["ready", "ready"], ["unacked", "unacked"]],
    saved.get("peek") === "unacked" ? "unacked" : "ready");
  const offset = h("input", { name: "offset", type: "number", min: 0,
    value: Math.max(0, Number(saved.get("offset")) || 0) });
  const count = h("input", { name: "count", type: "number", min: 1, max: 500,
    value: Math.min(500, Math.max(1, Number(saved.get("count")) || 10)) });
  // A stream's peek and search may start at a time instead (its first chunk that arrived then).
  const since = h("input", { name: "timestamp", type: "datetime-local", step: 1 });
  const mode = select("view", [["text", "text"], ["json", "JSON"], ["hex", "hex"]],
    ["json", "hex"].includes(saved.get("view")) ? saved.get("view") : "text");
  view = mode.value;
  mode.addEventListener("change", () => {
    view = mode.value;
    setHashState({ view: view === "text" ? "" : view });
    draw();
  });

  async function peek(delta = 0) {
    offset.value = Math.max(0, Number(offset.value) + delta * Number(count.value));
    setHashState({ peek: state.value, offset: offset.value, count: count.value });
    selected.clear();
    const found = await attempt(out, () => api("POST", `${base}/peek`, {
      ...from(), count: Number(count.value), state: stream ? "ready" : state.value,
      encoding: "auto" }));
    if (found === undefined) return;
    if (stream && found.length) {  // page on from what was shown (clamped, or found by time)
      offset.value = found[0].position;
      since.value = "";
    }
    shown = found;
    draw(found.length ? null : (stream ? "No messages in the log from there."
      : Number(offset.value) ? "No messages at this position." : `No ${state.value} messages in this queue.`));
  }

  // Where a stream's peek or search starts: the time if one is given (local time), else the offset.
  function from() {
    const at = since.value ? Date.parse(since.value) : NaN;
    return Number.isFinite(at) ? { timestamp: at } : { offset: Number(offset.value) };
  }

  function draw(empty) {
    if (!shown.length) {
      clear(results, h("p.empty", empty || "Peek to see messages; nothing in the queue changes."));
      return;
    }
    clear(results, ...shown.map((m) => messageView(m, view, stream ? null : selected)));
  }

  // -- search, streamed: results are drawn as they arrive; Stop aborts the request --
  const searchId = h("input", { name: "message_id" });
  const searchCorrelation = h("input", { name: "correlation_id" });
  const searchHeader = h("input", { name: "header", placeholder: "name=value" });
  const searchBody = h("input", { name: "body_contains" });
  const searchLimit = h("input", { name: "limit", type: "number", min: 1, value: 100 });
  const stop = h("button", { type: "button", disabled: true }, "Stop");
  const searchStatus = h("span.list-status", { "aria-live": "polite" });
  let controller = null;

  async function search(event) {
    event.preventDefault();
    const query = { limit: Number(searchLimit.value) || 100, ...(stream ? from() : {}) };
    if (searchId.value) query.message_id = searchId.value;
    if (searchCorrelation.value) query.correlation_id = searchCorrelation.value;
    if (searchBody.value) query.body_contains = searchBody.value;
    if (searchHeader.value) {
      const at = searchHeader.value.indexOf("=");
      if (at < 1) { clear(out, errorBox("Header search is name=value.")); return; }
      query.header = { [searchHeader.value.slice(0, at).trim()]: searchHeader.value.slice(at + 1).trim() };
    }
    selected.clear();
    shown = [];
    clear(out);
    controller = new AbortController();
    stop.disabled = false;
    clear(searchStatus, "searching…");
    try {
      await streamSearch(`${base}/search`, query, controller.signal, (m) => {
        shown.push(m);
        results.append(messageView(m, view, stream ? null : selected));
        if (shown.length === 1) results.querySelector("p.empty")?.remove();
        clear(searchStatus, `${shown.length} found so far…`);
      }, () => clear(results, h("p.empty", "Searching…")));
      clear(searchStatus, `${shown.length} found.`);
      if (!shown.length) draw("No message matches.");
    } catch (err) {
      if (err.name === "AbortError") clear(searchStatus, `Stopped: ${shown.length} found.`);
      else { clear(searchStatus); clear(out, errorBox(err)); }
    } finally {
      stop.disabled = true;
      controller = null;
    }
  }
  stop.addEventListener("click", () => controller && controller.abort());

  // -- acting on messages --
  const destination = h("input", { name: "destination", placeholder: "queue name" });
  const firstN = h("input", { name: "first_n", type: "number", min: 1, value: 1 });
  function positions() { return [...selected].sort((a, b) => a - b); }
  function need() {
    if (!selected.size) throw new Error("Select messages first (tick them in the list).");
    return positions();
  }
  // Runs one action, shows the queue as it is now, then says what the action did.
  async function act(text, fn) {
    let result;
    const ok = await attempt(out, async () => { result = await fn(); return true; });
    if (!ok) return;
    await peek(0);
    out.append(notice(summary(text, result)));
  }

  const peekForm = h("form.toolbar", { onsubmit: (e) => { e.preventDefault(); peek(0); } },
    stream ? null : field("Messages", state),
    field(stream ? "From offset" : "From position", offset),
    stream ? field("Or from time", since) : null, field("How many", count),
    field("Show body as", mode),
    guard(h("button.primary", { type: "submit" }, "Peek"), read),
    h("button", { type: "button", onclick: () => peek(-1), "aria-label": "Previous messages" }, "‹"),
    h("button", { type: "button", onclick: () => peek(1), "aria-label": "Next messages" }, "›"));
  const searchForm = h("form.toolbar", { onsubmit: search },
    field("Message id", searchId), field("Correlation id", searchCorrelation),
    field("Header", searchHeader), field("Body contains", searchBody), field("Limit", searchLimit),
    guard(h("button.primary", { type: "submit" }, "Search"), read), stop, searchStatus);
  // Every action needs read on the queue (as basic.get and queue.purge); move publishes
  // through the default exchange, so it needs write there too; redrive needs write on each
  // message's x-death exchange, which the broker judges per message.
  const acting = [];
  const offer = (button, ...checks) => { acting.push(guard(button, read, ...checks)); return button; };
  const actions = h("div.toolbar",
    offer(h("button", { type: "button", onclick: () => act("Redrive", () =>
      api("POST", `${base}/redrive`, { positions: need() })) }, "Redrive selected")),
    offer(h("button", { type: "button", onclick: async () => {
      if (!(await confirmAction(`Redrive every dead-lettered message of ${name} to where x-death says it came from?`, "Redrive all"))) return;
      const q = await api("GET", base);
      act("Redrive", () => api("POST", `${base}/redrive`, { count: q.messages_ready }));
    } }, "Redrive all")),
    field("Move to", destination),
    offer(h("button", { type: "button", onclick: () => act("Move", () => {
      if (!destination.value) throw new Error("Name the destination queue.");
      const chosen = need();
      return api("POST", `${base}/move`, { destination: destination.value, positions: chosen, count: chosen.length });
    }) }, "Move selected"), ["write", "exchange", "", vhost]),
    offer(h("button.danger", { type: "button", onclick: async () => {
      const chosen = need();
      if (!(await confirmAction(`Delete ${chosen.length} selected message(s) from ${name}?`))) return;
      act("Delete", () => api("DELETE", `${base}/messages`, { positions: chosen }));
    } }, "Delete selected")),
    field("First N", firstN),
    offer(h("button.danger", { type: "button", onclick: async () => {
      const n = Number(firstN.value);
      if (!(await confirmAction(`Delete the first ${n} ready message(s) of ${name}?`))) return;
      act("Delete", () => api("DELETE", `${base}/messages`, { count: n }));
    } }, "Delete first N")));
  draw();
  if (saved.has("peek")) setTimeout(() => peek(0), 0);  // where the URL says it was
  if (stream) {
    return h("section.panel.inspector",
      h("h2", "Messages"),
      h("p.hint", "Peek and search read the stream's log by offset or arrival time; nothing "
        + "is consumed and no consumer's offset moves."),
      peekForm, searchForm, out, results);
  }
  return h("section.panel.inspector",
    h("h2", "Messages"),
    h("p.hint", "Peek and search read the queue without changing it: no redelivered flag, no "
      + "reordering, no delivery count."),
    peekForm, searchForm, actions, whyLine(...acting), out, results);
}

function summary(verb, result) {
  if (!result || typeof result !== "object") return `${verb}: done.`;
  const moved = result.moved ?? result.deleted ?? result.count;
  const skipped = result.skipped || [];
  let text = `${verb}: ${num(moved ?? 0)} message(s)`;
  if (skipped.length) {
    text += `; ${skipped.length} skipped (${skipped.slice(0, 5)
      .map((s) => `#${s.position}: ${s.reason}`).join("; ")}${skipped.length > 5 ? "; …" : ""})`;
  }
  return `${text}.`;
}

// POST the search and hand each match to onMatch as it arrives. The API may answer with
// newline-delimited JSON (streamed) or one JSON list; both are read incrementally.
async function streamSearch(path, query, signal, onMatch, onStart) {
  onStart();
  const response = await fetch(`/api/${path}`, {
    method: "POST", signal, credentials: "omit",
    headers: { "Authorization": `Basic ${credentials()}`, "Content-Type": "application/json",
      "Accept": "application/x-ndjson, application/json" },
    body: JSON.stringify(query),
  });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error(data.reason || `${response.status} ${response.statusText}`);
  }
  const type = response.headers.get("Content-Type") || "";
  if (!type.includes("ndjson")) {
    for (const m of await response.json()) onMatch(m);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, at).trim();
      buffer = buffer.slice(at + 1);
      if (line) onMatch(JSON.parse(line));
    }
  }
  if (buffer.trim()) onMatch(JSON.parse(buffer));
}

// ---- one message ----

function payloadBytes(m) {
  if (m.payload_encoding === "base64") {
    const raw = atob(m.payload || "");
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }
  return new TextEncoder().encode(m.payload || "");
}

export function renderBody(m, view) {
  const data = payloadBytes(m);
  if (view === "hex") {
    const lines = [];
    for (let i = 0; i < data.length; i += 16) {
      const row = [...data.slice(i, i + 16)];
      lines.push(`${i.toString(16).padStart(6, "0")}  ${row.map((b) => b.toString(16).padStart(2, "0")).join(" ").padEnd(48)}  ${row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("")}`);
    }
    return lines.join("\n") || "(empty)";
  }
  const text = new TextDecoder("utf-8", { fatal: false }).decode(data);
  if (view === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return `(not JSON)\n${text}`; }
  }
  return text || "(empty)";
}

function messageView(m, view, selected) {
  const props = { ...(m.properties || {}) };
  const headers = props.headers || {};
  delete props.headers;
  const deaths = Array.isArray(headers["x-death"]) ? headers["x-death"] : [];
  const otherHeaders = Object.entries(headers).filter(([k]) => k !== "x-death");
  // A stream's message (no selection: nothing can be done to it) shows offset and arrival.
  const box = selected && h("input", { type: "checkbox", "aria-label": `Select message ${m.position}`,
    checked: selected.has(m.position),
    onchange: () => (box.checked ? selected.add(m.position) : selected.delete(m.position)) });
  return h("article.message", { dataset: { position: m.position } },
    h("header", selected ? h("label", box, ` #${m.position}`) : h("span", `offset ${m.position}`),
      h("span", `exchange ${m.exchange || "(default)"}`), h("span", `key ${m.routing_key}`),
      h("span", `${num(m.payload_bytes)} bytes`),
      selected ? h("span", `redelivered ${m.redelivered ? "yes" : "no"}`)
        : h("span", `arrived ${readableTime(m.timestamp)}`),
      m.consumer_tag ? h("span", `held by ${m.consumer_tag} on ${m.channel} for ${Math.round(m.unacked_for_seconds || 0)} s`) : null),
    h("pre.body", renderBody(m, view)),
    Object.keys(props).length ? h("details", h("summary", "Properties"), kv(Object.entries(props))) : null,
    otherHeaders.length ? h("details", { open: true }, h("summary", "Headers"), kv(otherHeaders)) : null,
    deaths.length ? h("details", { open: true }, h("summary", "x-death"), deathTable(deaths)) : null);
}

function kv(entries) {
  return h("dl.facts", entries.map(([k, v]) => [h("dt", k),
    h("dd", k === "timestamp" ? readableTime(v)
      : typeof v === "object" ? JSON.stringify(v) : String(v))]));
}

function deathTable(deaths) {
  const cols = ["queue", "reason", "count", "exchange", "routing-keys", "time"];
  return h("div.table-wrap", h("table.x-death",
    h("thead", h("tr", cols.map((c) => h("th", c)))),
    h("tbody", deaths.map((d) => h("tr", cols.map((c) => h("td",
      c === "time" ? readableTime(d[c])
        : Array.isArray(d[c]) ? d[c].join(", ")
          : (d[c] && typeof d[c] === "object" ? JSON.stringify(d[c]) : String(d[c] ?? "")))))))));
}

// Trace (per vhost, on demand, over SSE) and the live broker log (administrators, SSE).
//
// API: PUT/DELETE/GET /api/traces/{vhost}, GET /api/traces/{vhost}/stream (SSE).
// EventSource cannot send an Authorization header, so the streams are read with fetch.

import {
  api, ApiError, attempt, clear, confirmAction, credentials, download, enc, errorBox, every,
  field, h, notice, onLeave, select, vhostNames,
} from "../lib.js";


const MAX_LINES = 1000;  // kept in the page; older lines are dropped

// Reads a text/event-stream with fetch; calls onEvent(data, eventName) per event until the
// server sends "event: end", closes, or `signal` aborts.
export async function readSse(path, onEvent, signal) {
  const response = await fetch(`/api/${path}`, { signal, credentials: "omit",
    headers: { "Authorization": `Basic ${credentials()}`, "Accept": "text/event-stream" } });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new ApiError(response.status, data.reason || `${response.status} ${response.statusText}`);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      const lines = block.split("\n");
      const name = (lines.find((l) => l.startsWith("event:")) || "event: message").slice(6).trim();
      const data = lines.filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (name === "end") return;  // the server says the feed is over (tracing stopped)
      if (data) onEvent(data, name);
    }
  }
}

function parse(data) {
  try { return JSON.parse(data); } catch { return { event: "text", message: data }; }
}

// Field order for an event's details; the rest follow in the event's own order.
const FIRST = ["message_id", "queue", "exchange", "routing_key", "dead_lettered_from", "reason",
  "user", "channel", "consumer_tag"];
const SKIP = new Set(["exchanges", "bindings"]);

function fieldValue(v) {
  if (v === null || v === undefined) return "–";
  if (Array.isArray(v)) return v.length ? v.join(", ") : "none";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function when(timestamp) {
  if (typeof timestamp !== "number") return String(timestamp ?? "");
  const d = new Date(timestamp * (timestamp > 1e12 ? 1 : 1000));
  return `${d.toLocaleTimeString("en-GB")}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

// One event: its time, kind, the route it took (if any), and its details as fields.
function eventRow(e) {
  const { event, timestamp, ...rest } = e;
  const detail = h("td", { dataset: { label: "Details" } });
  if (event === "route" && Array.isArray(rest.exchanges)) {
    detail.append(h("div.route-chain", routeChain(rest)));
  }
  const keys = [...FIRST.filter((k) => k in rest),
    ...Object.keys(rest).filter((k) => !FIRST.includes(k) && !SKIP.has(k))];
  detail.append(h("dl.fields", keys.flatMap((k) => [h("dt", k.replace(/_/g, " ")),
    h("dd", fieldValue(rest[k]))])));
  const row = h("tr", { dataset: { event } }, h("td", { dataset: { label: "Time" } }, when(timestamp)),
    h("td", { dataset: { label: "Event" } }, h("span.badge", event)), detail);
  row.dataset.text = `${event} ${keys.map((k) => fieldValue(rest[k])).join(" ")}`.toLowerCase();
  return row;
}

// "orders → eu (exchange-binding) → spill (alternate-exchange) ⇒ q1, q2": how a message went.
function routeChain(route) {
  const hops = route.exchanges.map((x) => (x.name || "(default)") +
    (x.via === "published" ? "" : ` (${x.via})`));
  const end = route.queues.length ? route.queues.join(", ") : "unroutable";
  const from = route.dead_lettered_from
    ? `dead-lettered from ${route.dead_lettered_from} (${route.reason}): ` : "";
  return `${from}${hops.join(" → ")} ⇒ ${end}`;
}

export async function renderTrace(page) {
  const vhosts = await vhostNames();
  const out = h("div");
  const vhost = select("trace-vhost", vhosts, "/");
  const capacity = h("input", { name: "capacity", type: "number", min: 1, value: 10000 });
  const queue = h("input", { name: "queue", placeholder: "regex, optional" });
  const messageId = h("input", { name: "trace-message-id" });
  const filter = h("input", { type: "search", name: "trace-filter",
    placeholder: "Filter shown events", "aria-label": "Filter shown events",
    oninput: () => applyFilter() });
  const rows = h("tbody");
  const shown = [];  // the events in the table, newest first (for Download)
  const status = h("p.trace-status", { role: "status" });
  let controller = null;
  let info = { enabled: false };

  function applyFilter(row) {
    const words = filter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    for (const tr of row ? [row] : rows.children) {
      tr.hidden = !words.every((w) => tr.dataset.text.includes(w));
    }
  }

  function add(e, atTop = true) {
    const row = eventRow(e);
    applyFilter(row);
    if (atTop) { rows.prepend(row); shown.unshift(e); } else { rows.append(row); shown.push(e); }
    while (rows.children.length > MAX_LINES) { rows.lastChild.remove(); shown.pop(); }
  }

  function showAll(events) {
    clear(rows);
    shown.length = 0;
    events.forEach((e) => add(e, false));
  }

  // What tracing is doing, in one sentence, from the broker's state and this page's.
  function describe() {
    const where = `vhost '${vhost.value}'`;
    const count = `${shown.length} event(s) shown`;
    if (!info.enabled) {
      return shown.length
        ? `Tracing is off in ${where}. The ${count} below stay on this page until you clear them.`
        : `Tracing is off in ${where}. Start it to record events.`;
    }
    const filterText = info.queue ? `queues matching ${info.queue}` : "all queues";
    if (controller) {
      return `Tracing ${filterText} in ${where} into a ring of ${info.capacity} events; `
        + `following live, ${count}.`;
    }
    const ring = `the broker's ring holds ${info.records} of ${info.capacity} records`
      + (info.evicted ? ` (${info.evicted} older ones evicted)` : "");
    return `Tracing ${filterText} in ${where}: ${ring}; not following (Follow live), ${count}.`;
  }

  const ring = h("div");
  function stopStream() { if (controller) { controller.abort(); controller = null; } }
  async function showRing() {
    const got = await api("GET", `traces/${enc(vhost.value)}`).catch((err) => ({ error: err.message }));
    if (got.error) { clear(ring, errorBox(got.error)); return; }
    clear(ring);
    info = got;
    if (info.enabled && !controller && !rows.children.length) {
      showAll((info.recent || []).slice().reverse());
    }
    status.textContent = describe();
  }
  vhost.addEventListener("change", () => { stopStream(); showAll([]); showRing(); });
  every(0, showRing);
  onLeave(stopStream);

  async function follow() {
    stopStream();
    const mine = new AbortController();
    controller = mine;
    showAll([]);
    status.textContent = describe();
    try {
      await readSse(`traces/${enc(vhost.value)}/stream`, (data) => {
        add(parse(data));
        status.textContent = describe();
      }, mine.signal);
    } catch (err) {
      if (err.name !== "AbortError") clear(out, errorBox(err));
    }
    if (controller === mine) controller = null;  // a newer stream may have replaced it
    status.textContent = describe();
  }

  async function stop() {
    const records = info.enabled ? info.records : 0;
    if (!(await confirmAction(`Stop tracing in vhost '${vhost.value}'? The broker discards `
      + `the ${records} event(s) in its ring. The ${shown.length} shown here stay on this page `
      + "until you clear them; download them first to keep them.", "Stop tracing"))) return;
    await attempt(out, async () => {
      stopStream();
      await api("DELETE", `traces/${enc(vhost.value)}`);
      await showRing();
    }, `Tracing off in vhost '${vhost.value}'; the events shown are kept on this page.`);
  }

  page.append(h("h1", "Trace"),
    h("p.hint", "Tracing records each message's life (publish, route, enqueue, deliver, ack, "
      + "dead-letter, and its route into the next queue) into a capped ring per vhost. "
      + "Off, it costs nothing."),
    h("form.toolbar", { onsubmit: (e) => { e.preventDefault(); } },
      field("Vhost", vhost), field("Capacity (events)", capacity), field("Queue filter", queue),
      h("button.primary", { type: "button", onclick: () => attempt(out, async () => {
        const body = { capacity: Number(capacity.value) };
        if (queue.value) body.queue = queue.value;
        await api("PUT", `traces/${enc(vhost.value)}`, body);
        await showRing();
        follow();
      }, "Tracing on.") }, "Start tracing"),
      h("button", { type: "button", onclick: stop }, "Stop tracing"),
      h("button", { type: "button", onclick: follow }, "Follow live")),
    h("form.toolbar", { onsubmit: (e) => {
      e.preventDefault();
      attempt(out, async () => {
        stopStream();
        const found = await api("GET", `traces/${enc(vhost.value)}?message_id=${enc(messageId.value)}`);
        const events = Array.isArray(found) ? found : (found.events || []);
        showAll(events);
        status.textContent = describe();
        clear(out, events.length ? notice(`${events.length} event(s) for ${messageId.value}.`)
          : notice("No traced event for this message id."));
      });
    } }, field("Message id", messageId), h("button", { type: "submit" }, "Find message")),
    out, status, ring,
    h("div.toolbar", filter,
      h("button", { type: "button", onclick: () => download(
        `trace-${vhost.value === "/" ? "default" : vhost.value}.json`,
        JSON.stringify(shown, null, 2)) }, "Download shown events"),
      h("button", { type: "button", onclick: () => { showAll([]); status.textContent = describe(); } },
        "Clear")),
    h("div.table-wrap", h("table.trace", h("thead", h("tr", h("th", "Time"), h("th", "Event"),
      h("th", "Details"))), rows)));

}

const LOG_LEVELS = ["debug", "info", "warning", "error"];
const LOG_TAIL = 200;  // lines shown at once when the page opens

// One log line: time, level, logger, message (a traceback keeps its lines).
function logLine(e) {
  const at = typeof e.timestamp === "number" ? new Date(e.timestamp * 1000) : null;
  const time = at ? `${at.toLocaleTimeString("en-GB")}.${String(at.getMilliseconds()).padStart(3, "0")}` : "";
  return h("div.log-line", { dataset: { level: e.level || "info" } },
    h("span.log-time", time), " ", h("span.log-level", (e.level || "").toUpperCase().padEnd(7)),
    " ", h("span.log-logger", e.logger || ""), " ", h("span.log-message", e.message ?? ""));
}

export async function renderLog(page) {
  const lines = h("div.log", { "aria-live": "off", role: "log" });
  const out = h("div");
  const saved = localStorage.getItem("leveret.log-level");
  const level = select("log-level", LOG_LEVELS.map((l) => [l, `${l} and up`]),
    LOG_LEVELS.includes(saved) ? saved : "info");
  level.setAttribute("aria-label", "Lowest level shown");
  let controller = null;
  let paused = false;
  const pause = h("button", { type: "button", onclick: () => {
    paused = !paused; pause.textContent = paused ? "Resume" : "Pause"; } }, "Pause");
  onLeave(() => controller && controller.abort());

  async function follow() {
    if (controller) controller.abort();
    const mine = new AbortController();
    controller = mine;
    clear(lines);
    clear(out);
    try {
      await readSse(`logs/stream?level=${level.value}&tail=${LOG_TAIL}`, (data, name) => {
        if (paused) return;
        if (name === "dropped") {
          lines.append(h("div.log-line.log-dropped", `… ${parse(data).dropped} line(s) skipped (the page fell behind)`));
          return;
        }
        const atBottom = lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 4;
        lines.append(logLine(parse(data)));
        while (lines.childNodes.length > MAX_LINES) lines.firstChild.remove();
        if (atBottom) lines.scrollTop = lines.scrollHeight;
      }, mine.signal);
    } catch (err) {
      if (err.name !== "AbortError") clear(out, errorBox(err.status === 404
        ? "This broker does not stream its log (no /api/logs/stream)." : err));
    }
  }
  level.addEventListener("change", () => {
    localStorage.setItem("leveret.log-level", level.value);
    follow();
  });
  page.append(h("h1", "Broker log"),
    h("p.hint", `The last ${LOG_TAIL} lines at this level, then new ones as the broker writes them.`),
    h("div.toolbar", field("Level", level), pause,
      h("button", { type: "button", onclick: () => clear(lines) }, "Clear")), out, lines);
  follow();
}

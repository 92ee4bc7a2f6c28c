// Trace (per vhost, on demand, over SSE) and the live broker log (administrators, SSE).
//
// API: PUT/DELETE/GET /api/traces/{vhost}, GET /api/traces/{vhost}/stream (SSE).
// EventSource cannot send an Authorization header, so the streams are read with fetch.

import {
  api, ApiError, attempt, clear, credentials, enc, errorBox, every, field, h, notice, onLeave, select,
  vhostNames,
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

function eventRow(e) {
  const { event, timestamp, ...rest } = e;
  const when = typeof timestamp === "number" ? new Date(timestamp * (timestamp > 1e12 ? 1 : 1000)).toISOString().slice(11, 23) : String(timestamp ?? "");
  const detail = h("td");
  if (event === "route" && Array.isArray(rest.exchanges)) {
    detail.append(h("div.route-chain", routeChain(rest)));
  }
  detail.append(h("code", JSON.stringify(rest)));
  return h("tr", { dataset: { event } }, h("td", when), h("td", h("span.badge", event)), detail);
}

// "orders → eu (exchange-binding) → spill (alternate-exchange) ⇒ q1, q2": how a message went.
function routeChain(route) {
  const hops = route.exchanges.map((x) => (x.name || "(default)") +
    (x.via === "published" ? "" : ` (${x.via})`));
  const end = route.queues.length ? route.queues.join(", ") : "unroutable";
  return `${hops.join(" → ")} ⇒ ${end}`;
}

export async function renderTrace(page) {
  const vhosts = await vhostNames();
  const out = h("div");
  const vhost = select("trace-vhost", vhosts, "/");
  const capacity = h("input", { name: "capacity", type: "number", min: 1, value: 10000 });
  const queue = h("input", { name: "queue", placeholder: "regex, optional" });
  const messageId = h("input", { name: "trace-message-id" });
  const rows = h("tbody");
  const status = h("span.list-status", { "aria-live": "polite" });
  let controller = null;

  const ring = h("div");
  function stopStream() { if (controller) { controller.abort(); controller = null; } }
  async function showRing() {
    const info = await api("GET", `traces/${enc(vhost.value)}`).catch((err) => ({ error: err.message }));
    if (info.error) { clear(ring, errorBox(info.error)); return; }
    clear(ring, info.enabled
      ? h("dl.facts", h("dt", "Tracing"), h("dd", "on"),
        h("dt", "Ring"), h("dd", `${info.records} of ${info.capacity} events (${info.evicted} evicted)`),
        h("dt", "Queue filter"), h("dd", info.queue || "all queues"),
        h("dt", "Listeners"), h("dd", String(info.subscribers)))
      : h("p.empty", `Tracing is off in vhost ${vhost.value}. Start it to record events.`));
    if (info.enabled && !controller && !rows.children.length) {
      clear(rows, (info.recent || []).slice().reverse().map(eventRow));
    }
  }
  vhost.addEventListener("change", () => { stopStream(); clear(rows); showRing(); });
  every(5000, showRing);
  onLeave(stopStream);

  async function follow() {
    stopStream();
    controller = new AbortController();
    clear(rows);
    clear(status, "following live…");
    try {
      await readSse(`traces/${enc(vhost.value)}/stream`, (data) => {
        rows.prepend(eventRow(parse(data)));
        while (rows.children.length > MAX_LINES) rows.lastChild.remove();
      }, controller.signal);
      clear(status, "stream ended");
    } catch (err) {
      if (err.name !== "AbortError") clear(out, errorBox(err));
      clear(status, "stopped");
    }
  }

  page.append(h("h1", "Trace"),
    h("p.hint", "Tracing records each message's life (publish, route, enqueue, deliver, ack, "
      + "dead-letter…) into a capped ring per vhost. Off, it costs nothing."),
    h("form.toolbar", { onsubmit: (e) => { e.preventDefault(); } },
      field("Vhost", vhost), field("Capacity (events)", capacity), field("Queue filter", queue),
      h("button.primary", { type: "button", onclick: () => attempt(out, async () => {
        const body = { capacity: Number(capacity.value) };
        if (queue.value) body.queue = queue.value;
        await api("PUT", `traces/${enc(vhost.value)}`, body);
        await showRing();
        follow();
      }, "Tracing on.") }, "Start tracing"),
      h("button", { type: "button", onclick: () => attempt(out, async () => {
        stopStream();
        await api("DELETE", `traces/${enc(vhost.value)}`);
        await showRing();
      }, "Tracing off.") }, "Stop tracing"),
      h("button", { type: "button", onclick: follow }, "Follow live"), status),
    h("form.toolbar", { onsubmit: (e) => {
      e.preventDefault();
      attempt(out, async () => {
        stopStream();
        const found = await api("GET", `traces/${enc(vhost.value)}?message_id=${enc(messageId.value)}`);
        const events = Array.isArray(found) ? found : (found.events || []);
        clear(rows, events.map(eventRow));
        clear(out, events.length ? notice(`${events.length} event(s) for ${messageId.value}.`)
          : notice("No traced event for this message id."));
      });
    } }, field("Message id", messageId), h("button", { type: "submit" }, "Find message")),
    out, ring,
    h("div.table-wrap", h("table.trace", h("thead", h("tr", h("th", "Time"), h("th", "Event"),
      h("th", "Details"))), rows)));

}

export async function renderLog(page) {
  const lines = h("pre.log", { "aria-live": "off" });
  const out = h("div");
  const controller = new AbortController();
  onLeave(() => controller.abort());
  let paused = false;
  const pause = h("button", { type: "button", onclick: () => {
    paused = !paused; pause.textContent = paused ? "Resume" : "Pause"; } }, "Pause");
  page.append(h("h1", "Broker log"), h("div.toolbar", pause,
    h("button", { type: "button", onclick: () => clear(lines) }, "Clear")), out, lines);
  try {
    await readSse("logs/stream", (data) => {
      if (paused) return;
      const e = parse(data);
      lines.append(`${e.message ?? data}\n`);
      while (lines.childNodes.length > MAX_LINES) lines.firstChild.remove();
      lines.scrollTop = lines.scrollHeight;
    }, controller.signal);
  } catch (err) {
    if (err.name !== "AbortError") clear(out, errorBox(err.status === 404
      ? "This broker does not stream its log (no /api/logs/stream)." : err));
  }
}

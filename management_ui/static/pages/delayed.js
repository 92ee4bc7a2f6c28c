// A delayed exchange's schedule on its page: the messages it holds, by due time, with a
// peek at each, and (for a user with configure on the exchange) Cancel, Release now and
// Cancel all.
//
// API: GET exchanges/{vh}/{x}/delayed (needs read; says may_configure), DELETE …/delayed,
// DELETE …/delayed/{id}, POST …/delayed/{id}/release. The listing is read from the store a
// page at a time, so the console asks for the first LIMIT only.

import { api, args, attempt, clear, confirmAction, enc, h, num, readableTime } from "../lib.js";
import { table } from "../table.js";
import { renderBody } from "./inspect.js";

const LIMIT = 100;
const PEEK_CHARS = 80;  // of the body, on one line; the whole message is one click away

// Returns {element, reload}; reload() redraws from the API (the page calls it on refresh).
export function delayedSection(vhost, name) {
  const path = `exchanges/${enc(vhost)}/${enc(name)}/delayed`;
  const about = { kind: "exchange", name, vhost, right: "configure" };
  const out = h("div");
  const status = h("p.hint", { "aria-live": "polite" });
  const list = h("div");
  const cancelAll = h("button.danger", { type: "button", hidden: true, onclick: async () => {
    if (!(await confirmAction(`Cancel every message scheduled on ${name}? They will never be `
      + "delivered.", "Cancel all"))) return;
    await attempt(out, () => api("DELETE", path), "Every scheduled message cancelled.", about);
    await reload();
  } }, "Cancel all");
  const element = h("section.delayed", { hidden: true },
    h("h2", "Scheduled messages"), status, out, list, h("div.toolbar", cancelAll));
  const opened = new Set();  // ids whose peek is open: kept open across refreshes
  let seq = 0;

  async function act(method, url, success) {
    await attempt(out, () => api(method, url), success, about);
    await reload();
  }

  async function reload() {
    const mine = ++seq;
    let data;
    try {
      data = await api("GET", `${path}?count=${LIMIT}`);
    } catch (err) {
      // Without read on the exchange the schedule is not this user's to see: no section.
      if (mine === seq && (err.status === 401 || err.status === 404)) element.hidden = true;
      else if (mine === seq) clear(list, h("div.error", { role: "alert" }, err.message));
      return;
    }
    if (mine !== seq) return;
    element.hidden = false;
    const shown = data.messages.length;
    const total = `${num(data.messages_delayed)} message${data.messages_delayed === 1 ? "" : "s"}`
      + " delayed";
    clear(status, data.messages_delayed > shown
      ? `${total}; the first ${num(shown)} by due time.` : `${total}.`);
    cancelAll.hidden = !data.may_configure || !shown;
    clear(list, table(data.messages, [
      { title: "Due", cell: (m) => h("span", { title: `${m.due} ms since the epoch` },
        `${readableTime(m.due)} (${dueIn(m.due_in_ms)})`) },
      { title: "Routing key", cell: (m) => m.routing_key },
      { title: "Size", cell: (m) => `${num(m.payload_bytes)} B`, className: "num" },
      { title: "Message", cell: (m) => peek(m, opened) },
      ...(data.may_configure ? [{ title: "", cell: (m) => h("div.toolbar",
        h("button.small", { type: "button", onclick: () => act("POST", `${path}/${enc(m.id)}/release`,
          "Released: routed now.") }, "Release now"),
        h("button.small.danger", { type: "button", onclick: async () => {
          if (!(await confirmAction(`Cancel this message (key ${m.routing_key || "none"}, due `
            + `${readableTime(m.due)})?`, "Cancel message"))) return;
          await act("DELETE", `${path}/${enc(m.id)}`, "Message cancelled.");
        } }, "Cancel")) }] : []),
    ], "Nothing scheduled."));
  }

  return { element, reload };
}

function dueIn(ms) {
  if (ms <= 0) return "due now";
  const s = Math.round(ms / 1000);
  if (s < 120) return `in ${s} s`;
  if (s < 7200) return `in ${Math.round(s / 60)} min`;
  if (s < 172800) return `in ${Math.round(s / 3600)} h`;
  return `in ${Math.round(s / 86400)} days`;
}

// One line of the body and the properties that matter, the whole message under <details>.
function peek(m, opened) {
  const text = renderBody(m, "text").replace(/\s+/g, " ");
  const props = { ...(m.properties || {}) };
  const line = text.length > PEEK_CHARS ? `${text.slice(0, PEEK_CHARS)}…` : text;
  const headers = args(props.headers);
  const box = h("details.peek", { open: opened.has(m.id), ontoggle: () => {
    if (box.open) opened.add(m.id); else opened.delete(m.id);
  } }, h("summary", line || "(empty)", headers ? h("small", ` ${headers}`) : null),
    h("pre.body", renderBody(m, "text")),
    h("pre.props", JSON.stringify(props, null, 2)));
  return box;
}

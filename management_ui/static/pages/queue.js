// One queue: counts, a live chart, consumers, bindings (and binding to it), policy, purge,
// delete; then the message inspector (peek, search, redrive, move, delete: inspect.js).

import { RANGE, liveChart, plain } from "../chart.js";
import {
  api, args, attempt, clear, confirmAction, enc, every, field, h, markRefreshed, num, parsePairs,
  rate, yesNo,
} from "../lib.js";
import { connectionLabel, connectionNames, notFound } from "../names.js";
import { guard, whyLine } from "../rights.js";
import { loadedTable, table } from "../table.js";
import { inspector } from "./inspect.js";

const RATES = [
  ["Incoming", "publish"], ["Deliver / get", "deliver_get"], ["Ack", "ack"],
  ["Redelivered", "redeliver"],
];

export async function render(page, vhost, name) {
  const path = `queues/${enc(vhost)}/${enc(name)}`;
  // A queue that is not there (or not this user's to see) gets a page that says so, and
  // nothing to act on: no made-up binding, no forms, no buttons.
  let first;
  try {
    first = await api("GET", `${path}?${RANGE}`);
  } catch (err) {
    if (err.status === 404 || err.status === 401) {
      notFound(page, "queue", name, vhost, err, "#/queues", "Queues");
      return;
    }
    throw err;
  }
  const counts = h("div.cards");
  const details = h("div");
  const consumers = h("div");
  const errors = h("div");
  const chart = liveChart("Queued messages", [
    { label: "Ready", kind: "value", details: (q) => q.messages_ready_details,
      value: (q) => q.messages_ready },
    { label: "Unacked", kind: "value", details: (q) => q.messages_unacknowledged_details,
      value: (q) => q.messages_unacknowledged },
  ], plain);
  const rates = liveChart("Message rates", RATES.map(([label, key]) => ({
    label, kind: "rate", details: (q) => (q.message_stats || {})[`${key}_details`] })));
  const actions = h("div");
  // Offered only as the broker would allow them: purge needs read, delete configure.
  const purgeButton = guard(h("button.danger", { type: "button", onclick: () => purge(vhost, name, actions) }, "Purge messages"),
    ["read", "queue", name, vhost]);
  const deleteButton = guard(h("button.danger", { type: "button", onclick: () => remove(vhost, name, actions) }, "Delete queue"),
    ["configure", "queue", name, vhost]);
  const bindings = loadedTable(`${path}/bindings`, [
    { title: "From", cell: (b) => h("a", { href: `#/exchanges/${enc(b.vhost)}/${enc(b.source || "amq.default")}` },
      b.source || "(AMQP default)") },
    { title: "Routing key", cell: (b) => b.routing_key },
    { title: "Arguments", cell: (b) => args(b.arguments) },
    { title: "", cell: (b) => (b.source ? guard(h("button.small", { type: "button", onclick: async () => {
      if (!(await confirmAction(`Unbind ${name} from ${b.source} (${b.routing_key || "no key"})?`, "Unbind"))) return;
      await attempt(actions, async () => {
        await api("DELETE", `bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`);
        bindings.reload();
      }, "Binding removed.");
    } }, "Unbind"), ["write", "queue", name, vhost], ["read", "exchange", b.source, vhost]) : "") },
  ], "No bindings.");

  page.append(
    h("p.crumbs", h("a", { href: "#/queues" }, "Queues"), ` › ${vhost} › `),
    h("h1", name), errors, counts,
    h("div.charts", chart.element, rates.element), details,
    h("h2", "Consumers"), consumers,
    h("h2", "Bindings"), bindings.element, bindForm(vhost, name, bindings.reload),
    inspector(vhost, name, { stream: first.type === "stream" }),
    h("section.panel.danger-zone", h("h2", "Purge or delete"), actions,
      h("div.toolbar", purgeButton, deleteButton), whyLine(purgeButton, deleteButton)));

  every(0, async () => {
    const q = first || await attempt(errors, () => api("GET", `${path}?${RANGE}`));
    first = null;
    if (!q) return;
    const names = await connectionNames();
    markRefreshed();
    chart.push(q);
    rates.push(q);
    purgeButton.hidden = q.type === "stream"; // a stream's log is never purged (RabbitMQ: 540)
    clear(counts,
      card("Ready", num(q.messages_ready)), card("Unacked", num(q.messages_unacknowledged)),
      card("Total", num(q.messages)), card("Consumers", num(q.consumers)),
      card("Depth rate", rate(q.messages_details)),
      card("Published", num((q.message_stats || {}).publish)),
      card("Delivered", num((q.message_stats || {}).deliver_get)),
      card("Acked", num((q.message_stats || {}).ack)));
    clear(details, h("dl.facts",
      h("dt", "Type"), h("dd", q.type), h("dt", "Durable"), h("dd", yesNo(q.durable)),
      h("dt", "Auto-delete"), h("dd", yesNo(q.auto_delete)), h("dt", "Exclusive"), h("dd", yesNo(q.exclusive)),
      h("dt", "Arguments"), h("dd", args(q.arguments) || "none"),
      h("dt", "Policy"), h("dd", q.policy ? `${q.policy}: ${args(q.effective_policy_definition)}` : "none"),
      ...(q.stream ? [
        h("dt", "Offsets"), h("dd", `${num(q.stream.first_offset)} to ${q.stream.last_offset === null ? "(empty)" : num(q.stream.last_offset)}`),
        h("dt", "Segments"), h("dd", `${num(q.stream.segments)} (${num(q.stream.bytes)} bytes)`),
      ] : [])));
    clear(consumers, table(q.consumer_details || [], [
      { title: "Consumer tag", cell: (c) => c.consumer_tag },
      { title: "Channel", cell: (c) => channelLink(c.channel_details || {}, names) },
      { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
      { title: "Prefetch", cell: (c) => num(c.prefetch_count), className: "num" },
      { title: "Exclusive", cell: (c) => yesNo(c.exclusive) },
      ...(q.stream ? [
        { title: "Next offset", cell: (c) => num(c.stream_offset), className: "num" },
        { title: "Lag", cell: (c) => num(c.stream_lag), className: "num" },
      ] : []),
    ], "No consumers on this queue."));
  });
}

function channelLink(ch, names) {
  return h("a", { href: `#/channels/${enc(ch.name || "")}` },
    `${connectionLabel(ch.connection_name, names)} (${ch.number})`);
}

function card(label, value) {
  return h("div.card", h("div.card-label", label), h("div.card-value", value));
}

function bindForm(vhost, name, reload) {
  const out = h("div");
  const source = h("input", { name: "source", required: true });
  const key = h("input", { name: "routing_key" });
  const more = h("textarea", { name: "arguments", rows: 2, placeholder: "name=value per line" });
  // Binding also needs read on the exchange, which is typed in: the broker judges that.
  const submit = guard(h("button", { type: "submit" }, "Bind"), ["write", "queue", name, vhost]);
  const form = h("form.panel", h("h2", "Bind this queue to an exchange"),
    h("div.grid", field("Exchange", source), field("Routing key", key), field("Arguments", more)),
    out, submit, whyLine(submit));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(out, async () => {
      await api("POST", `bindings/${enc(vhost)}/e/${enc(source.value)}/q/${enc(name)}`,
        { routing_key: key.value, arguments: parsePairs(more.value) });
      reload();
    }, "Bound.", { kind: "queue", name, vhost, right: "write" });
  });
  return form;
}

async function purge(vhost, name, out) {
  if (!(await confirmAction(`Purge every ready message from ${name}? This cannot be undone.`,
    "Purge"))) return;
  await attempt(out, () => api("DELETE", `queues/${enc(vhost)}/${enc(name)}/contents`),
    "Queue purged.", { kind: "queue", name, vhost, right: "read" });
}

async function remove(vhost, name, out) {
  if (!(await confirmAction(`Delete queue ${name} and every message in it?`))) return;
  const ok = await attempt(out, () => api("DELETE", `queues/${enc(vhost)}/${enc(name)}`).then(() => true),
    undefined, { kind: "queue", name, vhost, right: "configure" });
  if (ok) location.hash = "#/queues";
}

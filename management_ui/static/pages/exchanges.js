// Exchanges: list, create, delete; one exchange's bindings both ways, binding, publishing.

import { RANGE, liveChart } from "../chart.js";
import {
  api, args, attempt, clear, confirmAction, enc, every, field, h, markRefreshed, num,
  parsePairs, rate, select, vhostNames, yesNo,
} from "../lib.js";
import { noVhosts, notFound } from "../names.js";
import { guard, guardAsTyped, whyLine } from "../rights.js";
import { loadedTable, pagedList } from "../table.js";
import { delayedSection } from "./delayed.js";

const TYPES = ["direct", "fanout", "topic", "headers"];

function exchangeLink(vhost, name) {
  return h("a", { href: `#/exchanges/${enc(vhost)}/${enc(name || "amq.default")}` },
    name || "(AMQP default)");
}

export async function renderList(page) {
  const vhosts = await vhostNames();
  if (!vhosts.length) {
    page.append(h("h1", "Exchanges"), noVhosts("exchanges"));
    return;
  }
  const list = pagedList({
    path: "exchanges",
    empty: "No exchanges.",
    columns: [
      { title: "Vhost", key: "vhost", cell: (x) => x.vhost },
      { title: "Name", key: "name", cell: (x) => exchangeLink(x.vhost, x.name) },
      { title: "Type", key: "type", cell: (x) => x.type },
      { title: "Durable", key: "durable", cell: (x) => yesNo(x.durable) },
      { title: "Auto-delete", key: "auto_delete", cell: (x) => yesNo(x.auto_delete) },
      { title: "Internal", key: "internal", cell: (x) => yesNo(x.internal) },
      { title: "Arguments", cell: (x) => args(x.arguments) },
      { title: "Rate in", cell: (x) => rate((x.message_stats || {}).publish_in_details),
        className: "num" },
      { title: "Rate out", cell: (x) => rate((x.message_stats || {}).publish_out_details),
        className: "num" },
    ],
  });
  page.append(h("h1", "Exchanges"), list.element, createForm(list.reload, vhosts));
}

function createForm(reload, vhosts) {
  const form = h("form.panel");
  const out = h("div");
  const vhost = select("vhost", vhosts, "/");
  const name = h("input", { name: "name", required: true });
  const type = select("type", TYPES, "direct");
  const durable = select("durable", [["true", "durable"], ["false", "transient"]], "true");
  const autoDelete = select("auto_delete", [["false", "no"], ["true", "yes"]], "false");
  const internal = select("internal", [["false", "no"], ["true", "yes"]], "false");
  const alternate = h("input", { name: "alternate-exchange", placeholder: "optional" });
  const more = h("textarea", { name: "arguments", rows: 2, placeholder: "name=value per line" });
  // Declaring needs configure on the name (an alternate exchange also needs write there and
  // read on this one: the broker judges those).
  const submit = h("button.primary", { type: "submit" }, "Add exchange");
  form.append(h("h2", "Add an exchange"),
    h("div.grid", field("Vhost", vhost), field("Name", name), field("Type", type),
      field("Durability", durable), field("Auto-delete", autoDelete), field("Internal", internal),
      field("Alternate exchange", alternate), field("Other arguments", more)),
    out, submit, guardAsTyped(form, submit,
      () => (name.value ? [["configure", "exchange", name.value, vhost.value]] : [])));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(out, async () => {
      const argsOut = parsePairs(more.value);
      if (alternate.value) argsOut["alternate-exchange"] = alternate.value;
      await api("PUT", `exchanges/${enc(vhost.value)}/${enc(name.value)}`, {
        type: type.value, durable: durable.value === "true",
        auto_delete: autoDelete.value === "true", internal: internal.value === "true",
        arguments: argsOut,
      });
      reload();
    }, `Exchange ${name.value} added.`, { kind: "exchange", name: name.value,
      vhost: vhost.value, right: "configure" });
  });
  return form;
}

const BINDING_COLUMNS = (side, remove) => [
  side === "source"
    ? { title: "To", cell: (b) => (b.destination_type === "queue"
      ? h("a", { href: `#/queues/${enc(b.vhost)}/${enc(b.destination)}` }, b.destination)
      : exchangeLink(b.vhost, b.destination)) }
    : { title: "From", cell: (b) => exchangeLink(b.vhost, b.source) },
  { title: "Kind", cell: (b) => b.destination_type },
  { title: "Routing key", cell: (b) => b.routing_key },
  { title: "Arguments", cell: (b) => args(b.arguments) },
  // Unbinding needs write on the destination and read on the source, as binding.
  { title: "", cell: (b) => guard(h("button.small", { type: "button", onclick: () => remove(b) }, "Unbind"),
    ["write", b.destination_type, b.destination, b.vhost], ["read", "exchange", b.source, b.vhost]) },
];

export async function renderOne(page, vhost, name) {
  const real = name === "amq.default" ? "" : name;
  const path = `exchanges/${enc(vhost)}/${enc(name)}`;
  let info;
  try {
    info = await api("GET", `${path}?${RANGE}`);
  } catch (err) {
    if (err.status === 404 || err.status === 401) {
      notFound(page, "exchange", name, vhost, err, "#/exchanges", "Exchanges");
      return;
    }
    throw err;
  }
  const errors = h("div");
  const counts = h("div");
  const chart = liveChart("Message rates", [
    { label: "In", kind: "rate", details: (x) => (x.message_stats || {}).publish_in_details },
    { label: "Out", kind: "rate", details: (x) => (x.message_stats || {}).publish_out_details },
  ]);
  async function unbind(b) {
    if (!(await confirmAction(`Remove the binding ${b.source || "(default)"} → ${b.destination} `
      + `(${b.routing_key || "no key"})?`, "Unbind"))) return;
    const kind = b.destination_type === "queue" ? "q" : "e";
    await attempt(errors, async () => {
      await api("DELETE", `bindings/${enc(b.vhost)}/e/${enc(b.source)}/${kind}/`
        + `${enc(b.destination)}/${enc(b.properties_key)}`);
      outgoing.reload();
      incoming.reload();
    }, "Binding removed.");
  }
  const outgoing = loadedTable(`${path}/bindings/source`, BINDING_COLUMNS("source", unbind),
    "No bindings from this exchange: messages published to it go nowhere.");
  const incoming = loadedTable(`${path}/bindings/destination`, BINDING_COLUMNS("dest", unbind),
    "No exchange is bound to this one.");
  // messages_delayed is on a delayed exchange's record only.
  const delayed = info.messages_delayed === undefined ? null : delayedSection(vhost, real);
  page.append(
    h("p.crumbs", h("a", { href: "#/exchanges" }, "Exchanges"), ` › ${vhost} › `),
    h("h1", real || "(AMQP default)"),
    h("dl.facts", h("dt", "Type"), h("dd", info.type), h("dt", "Durable"), h("dd", yesNo(info.durable)),
      h("dt", "Auto-delete"), h("dd", yesNo(info.auto_delete)), h("dt", "Internal"),
      h("dd", yesNo(info.internal)), h("dt", "Arguments"), h("dd", args(info.arguments) || "none")),
    errors, h("div.charts", chart.element), counts, delayed ? delayed.element : null,
    h("h2", "Bindings from this exchange"), outgoing.element,
    h("h2", "Bindings to this exchange"), incoming.element,
    real ? bindForm(vhost, real, () => outgoing.reload()) : null,
    publishForm(vhost, name),
    real && !real.startsWith("amq.") ? deleteForm(vhost, real) : null);
  let first = info;
  every(0, async () => {
    const x = first || await attempt(errors, () => api("GET", `${path}?${RANGE}`));
    first = null;
    if (!x) return;
    markRefreshed();
    chart.push(x);
    const m = x.message_stats || {};
    clear(counts, h("p.hint", m.publish_in === undefined
      ? "No messages published into this exchange yet."
      : `${num(m.publish_in)} messages in (${rate(m.publish_in_details)}), `
        + `${num(m.publish_out)} routed out (${rate(m.publish_out_details)}).`),
    x.messages_delayed === undefined ? null
      : h("p.delayed-count", `Messages delayed: ${num(x.messages_delayed)}`));
    if (delayed) await delayed.reload();
  });
}

function bindForm(vhost, source, reload) {
  const out = h("div");
  const kind = select("kind", [["q", "queue"], ["e", "exchange"]], "q");
  const destination = h("input", { name: "destination", required: true });
  const key = h("input", { name: "routing_key" });
  const more = h("textarea", { name: "arguments", rows: 2, placeholder: "name=value per line" });
  // Needs read on this exchange (and write on the destination typed in: the broker judges).
  const submit = guard(h("button", { type: "submit" }, "Bind"), ["read", "exchange", source, vhost]);
  const form = h("form.panel", h("h2", "Add a binding from this exchange"),
    h("div.grid", field("To", kind), field("Name", destination), field("Routing key", key),
      field("Arguments", more)),
    out, submit, whyLine(submit));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(out, async () => {
      await api("POST", `bindings/${enc(vhost)}/e/${enc(source)}/${kind.value}/${enc(destination.value)}`,
        { routing_key: key.value, arguments: parsePairs(more.value) });
      reload();
    }, "Bound.");
  });
  return form;
}

function publishForm(vhost, name) {
  const out = h("div");
  const key = h("input", { name: "routing_key" });
  const payload = h("textarea", { name: "payload", rows: 4 });
  const encoding = select("payload_encoding", [["string", "text"], ["base64", "base64"]], "string");
  const mode = select("delivery_mode", [["1", "1 (transient)"], ["2", "2 (persistent)"]], "2");
  const headers = h("textarea", { name: "headers", rows: 2, placeholder: "name=value per line" });
  const props = {};
  for (const p of ["content_type", "correlation_id", "message_id", "reply_to", "expiration",
    "priority", "type", "app_id"]) props[p] = h("input", { name: p });
  // Publishing needs write on the exchange (amq.default for the default one).
  const submit = guard(h("button.primary", { type: "submit" }, "Publish message"),
    ["write", "exchange", name, vhost]);
  const form = h("form.panel", h("h2", "Publish a message"),
    h("div.grid", field("Routing key", key), field("Delivery mode", mode),
      ...Object.entries(props).map(([p, input]) => field(p.replace("_", " "), input)),
      field("Headers", headers), field("Payload encoding", encoding)),
    field("Payload", payload), out, submit, whyLine(submit));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(out, async () => {
      const properties = { delivery_mode: Number(mode.value) };
      for (const [p, input] of Object.entries(props)) {
        if (input.value === "") continue;
        properties[p] = p === "priority" ? Number(input.value) : input.value;
      }
      const hdrs = parsePairs(headers.value);
      if (Object.keys(hdrs).length) properties.headers = hdrs;
      const result = await api("POST", `exchanges/${enc(vhost)}/${enc(name)}/publish`, {
        routing_key: key.value, payload: payload.value, payload_encoding: encoding.value,
        properties,
      });
      if (!result.routed) throw new Error("Message published but not routed: no binding matched.");
    }, "Message published and routed.");
  });
  return form;
}

function deleteForm(vhost, name) {
  const out = h("div");
  const button = guard(h("button.danger", { type: "button", onclick: async () => {
      if (!(await confirmAction(`Delete exchange ${name} and its bindings?`))) return;
      const ok = await attempt(out, () => api("DELETE", `exchanges/${enc(vhost)}/${enc(name)}`)
        .then(() => true), undefined, { kind: "exchange", name, vhost, right: "configure" });
      if (ok) location.hash = "#/exchanges";
    } }, "Delete exchange"), ["configure", "exchange", name, vhost]);
  return h("section.panel.danger-zone", h("h2", "Delete this exchange"), out, button,
    whyLine(button));
}


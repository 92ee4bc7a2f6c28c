// Connections (close one with a reason), channels, consumers (cancel one); one connection
// (client properties, byte rates, its channels and consumers) and one channel.

import { RANGE, liveChart } from "../chart.js";
import {
  api, attempt, bytes, clear, confirmAction, enc, every, h, markRefreshed, num, rate, yesNo,
} from "../lib.js";
import { connectionLabel, connectionLink, connectionNames, notFound } from "../names.js";
import { pagedList, table } from "../table.js";

// Bytes per second with a unit: "94.0 KiB/s".
export function byteRate(details) {
  const r = details && typeof details.rate === "number" ? details.rate : 0;
  return `${bytes(Math.round(r))}/s`;
}

function byteFormat(v) { return `${bytes(Math.round(v || 0))}/s`; }

function channelLink(name, label) {
  return h("a", { href: `#/channels/${enc(name)}` }, label || name);
}

function queueLink(q) {
  return h("a", { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}` }, q.name);
}

export function renderConnections(page) {
  const errors = h("div");
  let list = null;
  async function close(conn) {
    const label = connectionLabel(conn.name, null, conn.user_provided_name);
    const reason = window.prompt(`Close connection ${label}?\nReason sent to the client:`,
      "Closed via management plugin");
    if (reason === null) return;
    await attempt(errors, async () => {
      await fetchWithReason(conn.name, reason);
      list.reload();
    }, `Closed ${label}.`);
  }
  list = pagedList({
    path: "connections",
    empty: "No client is connected. Connections appear here as clients open them.",
    columns: [
      { title: "Name", key: "name", cell: (c) => connectionLink(c.name, null, c.user_provided_name) },
      { title: "User", key: "user", cell: (c) => c.user },
      { title: "Vhost", key: "vhost", cell: (c) => c.vhost },
      { title: "Client", cell: (c) => clientName(c) },
      { title: "Channels", key: "channels", cell: (c) => num(c.channels), className: "num" },
      { title: "TLS", key: "ssl", cell: (c) => yesNo(c.ssl) },
      { title: "State", key: "state", cell: (c) => c.state },
      { title: "From client", cell: (c) => `${bytes(c.recv_oct)} · ${byteRate(c.recv_oct_details)}` },
      { title: "To client", cell: (c) => `${bytes(c.send_oct)} · ${byteRate(c.send_oct_details)}` },
      { title: "", cell: (c) => h("button.danger.small", { type: "button",
        onclick: () => close(c) }, "Close") },
    ],
  });
  page.append(h("h1", "Connections"), errors, list.element);
}

// DELETE /api/connections/{name} with RabbitMQ's X-Reason header.
async function fetchWithReason(name, reason) {
  const auth = sessionStorage.getItem("leveret.auth");
  const response = await fetch(`/api/connections/${enc(name)}`, {
    method: "DELETE", credentials: "omit",
    headers: { "Authorization": `Basic ${auth}`, "X-Reason": reason },
  });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error(data.reason || `${response.status} ${response.statusText}`);
  }
}

function clientName(c) {
  const p = c.client_properties || {};
  return [p.product, p.version].filter(Boolean).join(" ") || "";
}

export function renderChannels(page) {
  let names = new Map();
  const list = pagedList({
    before: async () => { names = await connectionNames(); },
    path: "channels",
    empty: "No open channels.",
    columns: [
      { title: "Channel", key: "name", cell: (c) => channelLink(c.name,
        `${connectionLabel((c.connection_details || {}).name, names)} (${c.number})`) },
      { title: "User", key: "user", cell: (c) => c.user },
      { title: "Vhost", key: "vhost", cell: (c) => c.vhost },
      { title: "Mode", cell: (c) => [c.confirm ? "confirm" : null, c.transactional ? "tx" : null]
        .filter(Boolean).join(", ") },
      { title: "Prefetch", key: "prefetch_count", cell: (c) => num(c.prefetch_count),
        className: "num" },
      { title: "Unacked", key: "messages_unacknowledged", cell: (c) => num(c.messages_unacknowledged),
        className: "num" },
      { title: "Unconfirmed", key: "messages_unconfirmed", cell: (c) => num(c.messages_unconfirmed),
        className: "num" },
      { title: "Consumers", key: "consumer_count", cell: (c) => num(c.consumer_count),
        className: "num" },
      { title: "Publish", cell: (c) => rate((c.message_stats || {}).publish_details) },
      { title: "Deliver", cell: (c) => rate((c.message_stats || {}).deliver_get_details) },
      { title: "Ack", cell: (c) => rate((c.message_stats || {}).ack_details) },
      { title: "State", key: "state", cell: (c) => c.state },
    ],
  });
  page.append(h("h1", "Channels"), list.element);
}

export function renderConsumers(page) {
  const errors = h("div");
  let list = null;
  let names = new Map();
  async function cancel(c) {
    const ch = c.channel_details || {};
    if (!(await confirmAction(`Cancel consumer ${c.consumer_tag} on ${c.queue.name}? `
      + "The client is sent basic.cancel.", "Cancel consumer"))) return;
    await attempt(errors, async () => {
      await api("DELETE", `consumers/${enc(c.queue.vhost)}/${enc(ch.name)}/${enc(c.consumer_tag)}`);
      list.reload();
    }, `Cancelled ${c.consumer_tag}.`);
  }
  list = pagedList({
    path: "consumers",
    sort: "consumer_tag",
    filterLabel: "Filter by queue",
    before: async () => { names = await connectionNames(); },
    empty: "No consumers. A client's basic.consume shows up here.",
    columns: [
      { title: "Consumer tag", key: "consumer_tag", cell: (c) => c.consumer_tag },
      { title: "Queue", cell: (c) => queueLink(c.queue) },
      { title: "Channel", cell: (c) => {
        const ch = c.channel_details || {};
        return channelLink(ch.name, `${connectionLabel(ch.connection_name, names)} (${ch.number})`);
      } },
      { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
      { title: "Exclusive", cell: (c) => yesNo(c.exclusive) },
      { title: "Prefetch", key: "prefetch_count", cell: (c) => num(c.prefetch_count),
        className: "num" },
      { title: "Active", cell: (c) => yesNo(c.active) },
      { title: "", cell: (c) => h("button.danger.small", { type: "button",
        onclick: () => cancel(c) }, "Cancel") },
    ],
  });
  page.append(h("h1", "Consumers"), errors, list.element);
}


// ---- one connection ----

const FACTS = [
  ["User", (c) => c.user], ["Vhost", (c) => c.vhost], ["Protocol", (c) => c.protocol],
  ["Client address", (c) => `${c.peer_host}:${c.peer_port}`],
  ["Authentication", (c) => c.auth_mechanism],
  ["TLS", (c) => (c.ssl ? [c.ssl_protocol, c.ssl_cipher].filter(Boolean).join(", ") || "yes" : "no")],
  ["Connected at", (c) => new Date(c.connected_at).toLocaleString("en-GB")],
  ["Heartbeat", (c) => (c.timeout ? `${c.timeout} s` : "off")],
  ["Frame max", (c) => `${num(c.frame_max)} bytes`], ["Channel max", (c) => num(c.channel_max)],
  ["State", (c) => c.state],
];

function clientProperties(props) {
  const rows = [];
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "capabilities" && value && typeof value === "object") {
      const on = Object.entries(value).filter(([, v]) => v === true).map(([k]) => k);
      rows.push(h("dt", "capabilities"), h("dd", on.join(", ") || "none"));
    } else {
      rows.push(h("dt", key), h("dd", typeof value === "object" ? JSON.stringify(value) : String(value)));
    }
  }
  return rows.length ? h("dl.facts.client-properties", rows) : h("p.empty", "The client sent none.");
}

export async function renderConnection(page, name) {
  const path = `connections/${enc(name)}`;
  let first;
  try {
    first = await api("GET", `${path}?${RANGE}`);
  } catch (err) {
    if (err.status === 404 || err.status === 401) {
      notFound(page, "connection", name, undefined, err, "#/connections", "Connections");
      return;
    }
    throw err;
  }
  const errors = h("div");
  const facts = h("div");
  const props = h("div");
  const channels = h("div");
  const consumers = h("div");
  const chart = liveChart("Data rates", [
    { label: "From client", kind: "rate", details: (c) => c.recv_oct_details },
    { label: "To client", kind: "rate", details: (c) => c.send_oct_details },
  ], byteFormat);
  const title = h("h1", first.user_provided_name || name);
  page.append(h("p.crumbs", h("a", { href: "#/connections" }, "Connections"), ` › ${first.vhost}`),
    title, first.user_provided_name ? h("p.hint.address", name) : null, errors,
    h("div.charts", chart.element), facts,
    h("h2", "Client properties"), props,
    h("h2", "Channels"), channels, h("h2", "Consumers"), consumers);
  every(0, async () => {
    const c = first || await attempt(errors, () => api("GET", `${path}?${RANGE}`));
    first = null;
    if (!c) return;
    const [chs, cons] = await Promise.all([
      api("GET", `${path}/channels`).catch(() => []),
      api("GET", `consumers/${enc(c.vhost)}`).catch(() => []),
    ]);
    markRefreshed();
    chart.push(c);
    clear(facts, h("dl.facts", FACTS.flatMap(([label, cell]) => [h("dt", label), h("dd", cell(c))]),
      h("dt", "From client"), h("dd", `${bytes(c.recv_oct)} · ${byteRate(c.recv_oct_details)}`),
      h("dt", "To client"), h("dd", `${bytes(c.send_oct)} · ${byteRate(c.send_oct_details)}`)));
    clear(props, clientProperties(c.client_properties));
    clear(channels, table(chs || [], CHANNEL_COLUMNS, "No channels open."));
    clear(consumers, table((cons || []).filter((k) => (k.channel_details || {}).connection_name === name),
      CONSUMER_COLUMNS, "No consumers on this connection."));
  });
}

const CHANNEL_COLUMNS = [
  { title: "Channel", cell: (c) => channelLink(c.name, String(c.number)) },
  { title: "Mode", cell: (c) => [c.confirm ? "confirm" : null, c.transactional ? "tx" : null]
    .filter(Boolean).join(", ") },
  { title: "Prefetch", cell: (c) => num(c.prefetch_count), className: "num" },
  { title: "Unacked", cell: (c) => num(c.messages_unacknowledged), className: "num" },
  { title: "Consumers", cell: (c) => num(c.consumer_count), className: "num" },
  { title: "Publish", cell: (c) => rate((c.message_stats || {}).publish_details), className: "num" },
  { title: "Deliver", cell: (c) => rate((c.message_stats || {}).deliver_get_details), className: "num" },
  { title: "Ack", cell: (c) => rate((c.message_stats || {}).ack_details), className: "num" },
];

const CONSUMER_COLUMNS = [
  { title: "Consumer tag", cell: (c) => c.consumer_tag },
  { title: "Queue", cell: (c) => queueLink(c.queue) },
  { title: "Channel", cell: (c) => channelLink((c.channel_details || {}).name,
    String((c.channel_details || {}).number)) },
  { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
  { title: "Prefetch", cell: (c) => num(c.prefetch_count), className: "num" },
];

// ---- one channel ----

const CHANNEL_RATES = [
  ["Publish", "publish"], ["Confirm", "confirm"], ["Deliver / get", "deliver_get"], ["Ack", "ack"],
  ["Redelivered", "redeliver"],
];

export async function renderChannel(page, name) {
  const path = `channels/${enc(name)}`;
  let first;
  try {
    first = await api("GET", `${path}?${RANGE}`);
  } catch (err) {
    if (err.status === 404 || err.status === 401) {
      notFound(page, "channel", name, undefined, err, "#/channels", "Channels");
      return;
    }
    throw err;
  }
  const errors = h("div");
  const facts = h("div");
  const consumers = h("div");
  const chart = liveChart("Message rates", CHANNEL_RATES.map(([label, key]) => ({
    label, kind: "rate", details: (c) => (c.message_stats || {})[`${key}_details`] })));
  const connName = (first.connection_details || {}).name;
  const names = await connectionNames();
  page.append(h("p.crumbs", h("a", { href: "#/channels" }, "Channels"), " › ",
    connectionLink(connName, names)),
  h("h1", `Channel ${first.number}`), errors, h("div.charts", chart.element), facts,
  h("h2", "Consumers"), consumers);
  every(0, async () => {
    const c = first || await attempt(errors, () => api("GET", `${path}?${RANGE}`));
    first = null;
    if (!c) return;
    const cons = await api("GET", `consumers/${enc(c.vhost)}`).catch(() => []);
    markRefreshed();
    chart.push(c);
    const m = c.message_stats || {};
    clear(facts, h("dl.facts",
      h("dt", "Connection"), h("dd", connectionLink(connName, names)),
      h("dt", "User"), h("dd", c.user), h("dt", "Vhost"), h("dd", c.vhost),
      h("dt", "Mode"), h("dd", [c.confirm ? "confirm" : null, c.transactional ? "transactional" : null]
        .filter(Boolean).join(", ") || "plain"),
      h("dt", "Prefetch"), h("dd", `${num(c.prefetch_count)} per consumer, ${num(c.global_prefetch_count)} per channel`),
      h("dt", "Unacked"), h("dd", num(c.messages_unacknowledged)),
      h("dt", "Unconfirmed"), h("dd", num(c.messages_unconfirmed)),
      h("dt", "Published"), h("dd", `${num(m.publish)} · ${rate(m.publish_details)}`),
      h("dt", "Delivered"), h("dd", `${num(m.deliver_get)} · ${rate(m.deliver_get_details)}`),
      h("dt", "Acked"), h("dd", `${num(m.ack)} · ${rate(m.ack_details)}`),
      h("dt", "State"), h("dd", c.state)));
    clear(consumers, table((cons || []).filter((k) => (k.channel_details || {}).name === name),
      CONSUMER_COLUMNS, "No consumers on this channel."));
  });
}

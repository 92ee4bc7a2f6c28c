// Connections (close one with a reason), channels, consumers (cancel one).

import { api, attempt, bytes, confirmAction, enc, h, num, rate, yesNo } from "../lib.js";
import { pagedList } from "../table.js";

function queueLink(q) {
  return h("a", { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}` }, q.name);
}

export function renderConnections(page) {
  const errors = h("div");
  let list = null;
  async function close(conn) {
    const reason = window.prompt(`Close connection ${conn.name}?\nReason sent to the client:`,
      "Closed via management plugin");
    if (reason === null) return;
    await attempt(errors, async () => {
      await fetchWithReason(conn.name, reason);
      list.reload();
    }, `Closed ${conn.name}.`);
  }
  list = pagedList({
    path: "connections",
    empty: "No client is connected. Connections appear here as clients open them.",
    columns: [
      { title: "Name", key: "name", cell: (c) => c.name },
      { title: "User", key: "user", cell: (c) => c.user },
      { title: "Vhost", key: "vhost", cell: (c) => c.vhost },
      { title: "Client", cell: (c) => clientName(c) },
      { title: "Channels", key: "channels", cell: (c) => num(c.channels), className: "num" },
      { title: "TLS", key: "ssl", cell: (c) => yesNo(c.ssl) },
      { title: "State", key: "state", cell: (c) => c.state },
      { title: "From client", cell: (c) => `${bytes(c.recv_oct)} · ${rate(c.recv_oct_details)}` },
      { title: "To client", cell: (c) => `${bytes(c.send_oct)} · ${rate(c.send_oct_details)}` },
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
  const list = pagedList({
    path: "channels",
    empty: "No open channels.",
    columns: [
      { title: "Channel", key: "name", cell: (c) => c.name },
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
    empty: "No consumers. A client's basic.consume shows up here.",
    columns: [
      { title: "Consumer tag", key: "consumer_tag", cell: (c) => c.consumer_tag },
      { title: "Queue", cell: (c) => queueLink(c.queue) },
      { title: "Channel", cell: (c) => (c.channel_details || {}).name },
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


// Overview: totals, node health, live rate and depth charts, listeners, definitions.

import { RANGE, liveChart, plain } from "../chart.js";
import {
  api, attempt, bytes, clear, download, every, h, isAdmin, isMonitor, markRefreshed, notice, num, rate,
} from "../lib.js";
import { table } from "../table.js";

const RATES = [
  ["Publish", "publish"], ["Deliver", "deliver_get"], ["Ack", "ack"], ["Confirm", "confirm"],
];

export async function render(page) {
  const totals = h("div.cards");
  const health = h("div.cards");
  const listeners = h("div");
  const errors = h("div");
  const rates = liveChart("Message rates", RATES.map(([label, key]) => ({
    label, kind: "rate", details: (o) => (o.message_stats || {})[`${key}_details`] })));
  const queued = liveChart("Queued messages", [
    { label: "Ready", kind: "value", details: (o) => (o.queue_totals || {}).messages_ready_details,
      value: (o) => (o.queue_totals || {}).messages_ready || 0 },
    { label: "Unacked", kind: "value",
      details: (o) => (o.queue_totals || {}).messages_unacknowledged_details,
      value: (o) => (o.queue_totals || {}).messages_unacknowledged || 0 },
  ], plain);
  const cluster = h("section.cluster", { hidden: true });
  page.append(h("h1", "Overview"), errors, totals,
    h("div.charts", rates.element, queued.element),
    h("h2", "Node"), health, cluster, h("h2", "Listeners"), listeners,
    isAdmin() ? definitions() : null);

  every(0, async () => {
    const data = await attempt(errors, () => api("GET", `overview?${RANGE}`));
    if (!data) return;
    markRefreshed();
    drawTotals(totals, data);
    rates.push(data);
    queued.push(data);
    clear(listeners, table(data.listeners || [], [
      { title: "Protocol", cell: (l) => l.protocol },
      { title: "Interface", cell: (l) => l.ip_address },
      { title: "Port", cell: (l) => l.port, className: "num" },
    ], "No listeners."));
    if (!isMonitor()) {
      if (!health.firstChild) {
        clear(health, notice("Node health needs the monitoring or administrator tag."));
      }
      return;
    }
    const nodes = await api("GET", "nodes").catch(() => null);
    if (nodes) {
      drawHealth(health, nodes[0] || {});
      drawCluster(cluster, nodes);
    }
  });
}

// A cluster's nodes (Leveret's /api/nodes fields role, in_sync, replication_lag); a
// single node has no role and shows no section.
function drawCluster(where, nodes) {
  where.hidden = !nodes.some((n) => n.role);
  if (where.hidden) return;
  clear(where, h("h2", "Cluster"), table(nodes, [
    { title: "Node", cell: (n) => n.name },
    { title: "Role", cell: (n) => n.role || "" },
    { title: "Running", cell: (n) => (n.running ? "running" : "not running") },
    { title: "In sync", cell: (n) => (n.in_sync ? "in sync" : "not in sync") },
    { title: "Lag (batches)", className: "num",
      cell: (n) => (n.replication_lag === null || n.replication_lag === undefined
        ? "not connected" : num(n.replication_lag)) },
  ]));
}

function card(label, value, note, state) {
  return h("div.card", { dataset: state ? { state } : {} },
    h("div.card-label", label), h("div.card-value", value), note ? h("div.card-note", note) : null);
}

function drawTotals(where, o) {
  const t = o.object_totals || {};
  const q = o.queue_totals || {};
  const m = o.message_stats || {};
  clear(where,
    card("Connections", num(t.connections)), card("Channels", num(t.channels)),
    card("Exchanges", num(t.exchanges)), card("Queues", num(t.queues)),
    card("Consumers", num(t.consumers)),
    card("Ready", num(q.messages_ready || 0)), card("Unacked", num(q.messages_unacknowledged || 0)),
    card("Publish", rate(m.publish_details)), card("Deliver", rate(m.deliver_get_details)));
}

function drawHealth(where, n) {
  const memory = bytes(n.mem_used);
  const disk = `${bytes(n.disk_free)} free`;
  const alarms = [n.mem_alarm ? "memory" : null, n.disk_free_alarm ? "disk" : null].filter(Boolean);
  clear(where,
    card("Node", n.name || "", n.running === false ? "not running" : "running",
      n.running === false ? "bad" : "good"),
    card("Memory", memory, n.mem_alarm ? "memory alarm" : `limit ${bytes(n.mem_limit)}`, n.mem_alarm ? "bad" : "good"),
    card("Disk", disk, n.disk_free_alarm ? "disk alarm" : `limit ${bytes(n.disk_free_limit)}`, n.disk_free_alarm ? "bad" : "good"),
    card("File descriptors", `${num(n.fd_used)} of ${num(n.fd_total)}`),
    card("Alarms", alarms.length ? alarms.join(", ") : "none", "",
      alarms.length ? "bad" : "good"),
    card("Uptime", n.uptime ? `${Math.round(n.uptime / 60000)} min` : ""));
}

function definitions() {
  const out = h("div");
  const file = h("input", { type: "file", accept: ".json,application/json",
    "aria-label": "Definitions file" });
  return h("section",
    h("h2", "Definitions"),
    h("p.hint", "Exchanges, queues, bindings, users, vhosts, permissions and policies as JSON, "
      + "as RabbitMQ's definitions file."),
    h("div.toolbar",
      h("button", { type: "button", onclick: () => attempt(out, async () => {
        const defs = await api("GET", "definitions");
        download(`leveret-definitions-${new Date().toISOString().slice(0, 10)}.json`,
          JSON.stringify(defs, null, 2));
      }) }, "Download definitions"),
      file,
      h("button", { type: "button", onclick: () => attempt(out, async () => {
        if (!file.files.length) throw new Error("Choose a definitions file first.");
        const text = await file.files[0].text();
        await api("POST", "definitions", text);
      }, "Definitions uploaded.") }, "Upload definitions")),
    out);
}

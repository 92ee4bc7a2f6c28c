// Queues: the list (filter, sort, pages, rates, alert hints) and the create form with the
// common x-arguments offered as fields.

import {
  api, attempt, enc, field, h, num, parsePairs, rate, select, vhostNames,
} from "../lib.js";
import { noVhosts } from "../names.js";
import { guardAsTyped } from "../rights.js";
import { pagedList } from "../table.js";

// Seconds with consumers and unacked messages but no ack before the list says so.
const NO_ACK_SECONDS = 30;
// A queue whose name says it holds dead letters.
const DLQ_NAME = /(^|[._-])(dlq|dlx|dead|deadletter|dead-letter|error|errors|parking)([._-]|$)/i;

// Hints need history (has the ack count moved?), kept per queue while the page is open.
const seen = new Map();

export function hints(q, now = Date.now()) {
  const out = [];
  const key = `${q.vhost}\u0000${q.name}`;
  const acks = (q.message_stats || {}).ack || 0;
  const last = seen.get(key);
  if (!last || last.acks !== acks) seen.set(key, { acks, since: now });
  const quietFor = (now - (seen.get(key).since)) / 1000;
  const growth = (q.messages_details || {}).rate || 0;
  const deadLetters = DLQ_NAME.test(q.name);
  if (deadLetters && q.messages > 0 && growth > 0) {
    out.push(["dlq-growing", "dead-letter queue growing", "Messages are being dead-lettered into this queue."]);
  } else if (deadLetters && q.messages > 0) {
    out.push(["dlq", "dead letters waiting", "Inspect them with Peek; send them home with Redrive."]);
  }
  if (q.consumers > 0 && q.messages_unacknowledged > 0 && quietFor >= NO_ACK_SECONDS) {
    out.push(["no-acks", `no acks for ${Math.round(quietFor)} s`,
      "Consumers hold unacked messages and have acked none lately: stuck or slow consumers?"]);
  }
  if (q.consumers === 0 && q.messages_ready > 0 && growth > 0 && !deadLetters) {
    out.push(["no-consumers", "growing, no consumers", "Messages arrive and nobody consumes them."]);
  }
  if (q.consumers > 0 && typeof q.consumer_utilisation === "number" && q.consumer_utilisation < 0.5) {
    out.push(["utilisation", `consumer utilisation ${Math.round(q.consumer_utilisation * 100)}%`,
      "Consumers could take more: raise their prefetch."]);
  }
  return out;
}

// The API's alerts (management_ui/alerts.py) when the broker sends them; else the page's own.
const ALERT_TEXT = {
  dead_letter_queue_growing: "dead-letter queue growing",
  no_acks: "no acks lately",
  low_consumer_utilisation: "low consumer utilisation",
};

function hintBadges(q) {
  if (Array.isArray(q.alerts)) {
    return q.alerts.map((a) => h("span.badge", { dataset: { hint: a.alert }, title: a.reason || "" },
      ALERT_TEXT[a.alert] || a.alert));
  }
  return hints(q).map(([kind, text, why]) => h("span.badge", { dataset: { hint: kind }, title: why },
    text));
}

export async function render(page) {
  const vhosts = await vhostNames();
  if (!vhosts.length) {
    page.append(h("h1", "Queues"), noVhosts("queues"));
    return;
  }
  const list = pagedList({
    path: "queues",
    empty: "No queues yet. Declare one from a client, or add one below.",
    columns: [
      { title: "Vhost", key: "vhost", cell: (q) => q.vhost },
      { title: "Name", key: "name", cell: (q) => h("a", { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}` }, q.name) },
      { title: "Type", cell: (q) => q.type },
      { title: "Features", cell: (q) => features(q) },
      { title: "Ready", key: "messages_ready", cell: (q) => num(q.messages_ready), className: "num" },
      { title: "Unacked", key: "messages_unacknowledged", cell: (q) => num(q.messages_unacknowledged),
        className: "num" },
      { title: "Total", key: "messages", cell: (q) => num(q.messages), className: "num" },
      { title: "Incoming", cell: (q) => rate(stat(q, "publish")), className: "num" },
      { title: "Deliver / get", cell: (q) => rate(stat(q, "deliver_get")), className: "num" },
      { title: "Ack", cell: (q) => rate(stat(q, "ack")), className: "num" },
      { title: "Redelivered", cell: (q) => rate(stat(q, "redeliver")), className: "num" },
      { title: "State", key: "state", cell: (q) => q.state || "" },
      { title: "Consumers", key: "consumers", cell: (q) => num(q.consumers), className: "num" },
      { title: "Hints", cell: hintBadges },
    ],
  });
  page.append(h("h1", "Queues"), list.element, createForm(list.reload, vhosts));
}

function stat(q, key) {
  return (q.message_stats || {})[`${key}_details`];
}

function features(q) {
  const a = q.arguments || {};
  const out = [];
  if (q.durable) out.push("D");
  if (q.auto_delete) out.push("AD");
  if (q.exclusive) out.push("Excl");
  if ("x-message-ttl" in a) out.push("TTL");
  if ("x-dead-letter-exchange" in a) out.push("DLX");
  if ("x-max-length" in a || "x-max-length-bytes" in a) out.push("Lim");
  if ("x-max-priority" in a) out.push("Pri");
  if (q.policy) out.push(`policy ${q.policy}`);
  return out.map((f) => h("span.tag", f));
}

// [argument, label, kind]: numbers are sent as numbers, the rest as given.
const ARGUMENTS = [
  ["x-message-ttl", "Message TTL (ms)", "number"],
  ["x-expires", "Auto-expire after idle (ms)", "number"],
  ["x-max-length", "Max length (messages)", "number"],
  ["x-max-length-bytes", "Max length (bytes)", "number"],
  ["x-overflow", "Overflow", ["", "drop-head", "reject-publish", "reject-publish-dlx"]],
  ["x-dead-letter-exchange", "Dead-letter exchange", "text"],
  ["x-dead-letter-routing-key", "Dead-letter routing key", "text"],
  ["x-max-priority", "Max priority", "number"],
  ["x-delivery-limit", "Delivery limit", "number"],
  ["x-single-active-consumer", "Single active consumer", ["", "true"]],
];

function createForm(reload, vhosts) {
  const out = h("div");
  const vhost = select("vhost", vhosts, "/");
  const name = h("input", { name: "name", required: true });
  const type = select("x-queue-type", ["classic", "quorum", "stream"], "classic");
  const durable = select("durable", [["true", "durable"], ["false", "transient"]], "true");
  const autoDelete = select("auto_delete", [["false", "no"], ["true", "yes"]], "false");
  const inputs = ARGUMENTS.map(([arg, label, kind]) => [arg, kind, Array.isArray(kind)
    ? select(arg, kind, "")
    : h("input", { name: arg, type: kind === "number" ? "number" : "text", min: kind === "number" ? 0 : undefined }), label]);
  const more = h("textarea", { name: "arguments", rows: 2, placeholder: "name=value per line" });
  // Declaring needs configure on the name (a dead-letter exchange also needs write there
  // and read on the queue: the broker judges those).
  const submit = h("button.primary", { type: "submit" }, "Add queue");
  const form = h("form.panel", h("h2", "Add a queue"),
    h("div.grid", field("Vhost", vhost), field("Name", name), field("Type", type),
      field("Durability", durable), field("Auto-delete", autoDelete),
      ...inputs.map(([, , input, label]) => field(label, input)), field("Other arguments", more)),
    out, submit);
  form.append(guardAsTyped(form, submit,
    () => (name.value ? [["configure", "queue", name.value, vhost.value]] : [])));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(out, async () => {
      const argsOut = { "x-queue-type": type.value, ...parsePairs(more.value) };
      for (const [arg, kind, input] of inputs) {
        if (input.value === "") continue;
        argsOut[arg] = kind === "number" ? Number(input.value)
          : input.value === "true" ? true : input.value;
      }
      await api("PUT", `queues/${enc(vhost.value)}/${enc(name.value)}`, {
        durable: durable.value === "true", auto_delete: autoDelete.value === "true",
        arguments: argsOut,
      });
      reload();
    }, `Queue ${name.value} added.`, { kind: "queue", name: name.value, vhost: vhost.value,
      right: "configure" });
  });
  return form;
}


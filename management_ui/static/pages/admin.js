// Admin: users (tags, password), vhosts, permissions, topic permissions, policies, limits.
// Each section is a table of what exists, a delete button per row, and a form to add or set.

import {
  api, args, attempt, confirmAction, enc, field, h, parsePairs, select, vhostNames,
} from "../lib.js";
import { loadedTable } from "../table.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

function delButton(what, path, reload, out) {
  return h("button.danger.small", { type: "button", onclick: async () => {
    if (!(await confirmAction(`Delete ${what}?`))) return;
    await attempt(out, async () => { await api("DELETE", path); reload(); }, `Deleted ${what}.`);
  } }, "Delete");
}

function section(id, title, list, form) {
  return h("section.panel", { id }, h("h2", title), list.element, form);
}

function submitForm(title, fields, out, action, label) {
  const form = h("form", h("h3", title), h("div.grid", fields), out,
    h("button", { type: "submit" }, label));
  form.addEventListener("submit", (event) => { event.preventDefault(); action(); });
  return form;
}

export async function render(page) {
  const vhosts = await vhostNames();
  page.append(h("h1", "Admin"),
    h("nav.subnav", { "aria-label": "Admin sections" },
      ["users", "vhosts", "permissions", "topic-permissions", "policies", "limits"]
        .map((id) => h("a", { href: `#/admin`, onclick: (e) => {
          e.preventDefault(); document.getElementById(id).scrollIntoView(); } }, id.replace("-", " ")))),
    users(), vhostSection(), permissions(vhosts), topicPermissions(vhosts), policies(vhosts),
    limits(vhosts));
}

function users() {
  const out = h("div");
  const list = loadedTable("users", [
    { title: "Name", cell: (u) => u.name },
    { title: "Tags", cell: (u) => (Array.isArray(u.tags) ? u.tags : String(u.tags || "").split(","))
      .filter(Boolean).map((t) => h("span.tag", t)) },
    { title: "Password", cell: (u) => (u.password_hash ? "set" : "none") },
    { title: "", cell: (u) => delButton(`user ${u.name}`, `users/${enc(u.name)}`, () => list.reload(), out) },
  ], "No users.");
  const name = h("input", { name: "username", required: true, autocomplete: "off" });
  const password = h("input", { name: "new-password", type: "password", autocomplete: "new-password" });
  const boxes = TAGS.map((t) => h("input", { type: "checkbox", value: t, name: `tag-${t}` }));
  const form = submitForm("Add or update a user", [field("Username", name), field("Password", password,
    "Leave empty to keep the current password."),
  h("fieldset.tags", h("legend", "Tags"), boxes.map((b) => h("label.inline", b, ` ${b.value}`)))],
  out, () => attempt(out, async () => {
    const body = { tags: boxes.filter((b) => b.checked).map((b) => b.value).join(",") };
    if (password.value) body.password = password.value;
    else {
      const existing = await api("GET", `users/${enc(name.value)}`).catch(() => null);
      if (!existing) throw new Error("A new user needs a password.");
      body.password_hash = existing.password_hash;
      body.hashing_algorithm = existing.hashing_algorithm;
    }
    await api("PUT", `users/${enc(name.value)}`, body);
    list.reload();
  }, `User ${name.value} saved.`), "Save user");
  return section("users", "Users", list, form);
}

function vhostSection() {
  const out = h("div");
  const list = loadedTable("vhosts", [
    { title: "Name", cell: (v) => v.name },
    { title: "Description", cell: (v) => v.description || "" },
    { title: "Messages", cell: (v) => String(v.messages ?? ""), className: "num" },
    { title: "", cell: (v) => delButton(`vhost ${v.name} and everything in it`, `vhosts/${enc(v.name)}`,
      () => list.reload(), out) },
  ], "No vhosts.");
  const name = h("input", { name: "vhost", required: true });
  const description = h("input", { name: "description" });
  return section("vhosts", "Virtual hosts", list, submitForm("Add a vhost",
    [field("Name", name), field("Description", description)], out,
    () => attempt(out, async () => {
      await api("PUT", `vhosts/${enc(name.value)}`, { description: description.value });
      list.reload();
    }, `Vhost ${name.value} added.`), "Add vhost"));
}

function permissions(vhosts) {
  const out = h("div");
  const list = loadedTable("permissions", [
    { title: "User", cell: (p) => p.user }, { title: "Vhost", cell: (p) => p.vhost },
    { title: "Configure", cell: (p) => p.configure }, { title: "Write", cell: (p) => p.write },
    { title: "Read", cell: (p) => p.read },
    { title: "", cell: (p) => delButton(`${p.user}'s permissions on ${p.vhost}`,
      `permissions/${enc(p.vhost)}/${enc(p.user)}`, () => list.reload(), out) },
  ], "No permissions: no user can use any vhost.");
  const user = h("input", { name: "perm-user", required: true });
  const vhost = select("perm-vhost", vhosts, "/");
  const re = (n) => h("input", { name: `perm-${n}`, value: ".*" });
  const [configure, write, read] = [re("configure"), re("write"), re("read")];
  return section("permissions", "Permissions", list, submitForm("Set permissions",
    [field("User", user), field("Vhost", vhost), field("Configure regexp", configure),
      field("Write regexp", write), field("Read regexp", read)], out,
    () => attempt(out, async () => {
      await api("PUT", `permissions/${enc(vhost.value)}/${enc(user.value)}`,
        { configure: configure.value, write: write.value, read: read.value });
      list.reload();
    }, "Permissions set."), "Set permissions"));
}

function topicPermissions(vhosts) {
  const out = h("div");
  const list = loadedTable("topic-permissions", [
    { title: "User", cell: (p) => p.user }, { title: "Vhost", cell: (p) => p.vhost },
    { title: "Exchange", cell: (p) => p.exchange }, { title: "Write", cell: (p) => p.write },
    { title: "Read", cell: (p) => p.read },
    { title: "", cell: (p) => delButton(`${p.user}'s topic permissions on ${p.exchange}`,
      `topic-permissions/${enc(p.vhost)}/${enc(p.user)}/${enc(p.exchange)}`, () => list.reload(), out) },
  ], "No topic permissions: topic exchanges check only the ordinary permissions.");
  const user = h("input", { name: "topic-user", required: true });
  const vhost = select("topic-vhost", vhosts, "/");
  const exchange = h("input", { name: "topic-exchange", value: "amq.topic" });
  const write = h("input", { name: "topic-write", value: ".*" });
  const read = h("input", { name: "topic-read", value: ".*" });
  return section("topic-permissions", "Topic permissions", list, submitForm(
    "Set topic permissions", [field("User", user), field("Vhost", vhost),
      field("Exchange", exchange), field("Write regexp", write), field("Read regexp", read)], out,
    () => attempt(out, async () => {
      await api("PUT", `topic-permissions/${enc(vhost.value)}/${enc(user.value)}`,
        { exchange: exchange.value, write: write.value, read: read.value });
      list.reload();
    }, "Topic permissions set."), "Set topic permissions"));
}

function policies(vhosts) {
  const out = h("div");
  const list = loadedTable("policies", [
    { title: "Vhost", cell: (p) => p.vhost }, { title: "Name", cell: (p) => p.name },
    { title: "Pattern", cell: (p) => p.pattern }, { title: "Apply to", cell: (p) => p["apply-to"] },
    { title: "Definition", cell: (p) => args(p.definition) },
    { title: "Priority", cell: (p) => String(p.priority), className: "num" },
    { title: "", cell: (p) => delButton(`policy ${p.name}`, `policies/${enc(p.vhost)}/${enc(p.name)}`,
      () => list.reload(), out) },
  ], "No policies.");
  const vhost = select("policy-vhost", vhosts, "/");
  const name = h("input", { name: "policy-name", required: true });
  const pattern = h("input", { name: "policy-pattern", required: true, value: ".*" });
  const applyTo = select("apply-to", ["queues", "exchanges", "all"], "queues");
  const priority = h("input", { name: "policy-priority", type: "number", value: 0 });
  const definition = h("textarea", { name: "definition", rows: 3,
    placeholder: "max-length=1000\ndead-letter-exchange=dlx" });
  return section("policies", "Policies", list, submitForm("Add or update a policy",
    [field("Vhost", vhost), field("Name", name), field("Pattern", pattern),
      field("Apply to", applyTo), field("Priority", priority), field("Definition", definition)], out,
    () => attempt(out, async () => {
      await api("PUT", `policies/${enc(vhost.value)}/${enc(name.value)}`, {
        pattern: pattern.value, "apply-to": applyTo.value, priority: Number(priority.value),
        definition: parsePairs(definition.value) });
      list.reload();
    }, `Policy ${name.value} saved.`), "Save policy"));
}

function limits(vhosts) {
  const out = h("div");
  const list = loadedTable("vhost-limits", [
    { title: "Vhost", cell: (l) => l.vhost },
    { title: "Limits", cell: (l) => args(l.value) },
    { title: "", cell: (l) => Object.keys(l.value || {}).map((k) => delButton(`${k} on ${l.vhost}`,
      `vhost-limits/${enc(l.vhost)}/${enc(k)}`, () => list.reload(), out)) },
  ], "No vhost limits.");
  const vhost = select("limit-vhost", vhosts, "/");
  const kind = select("limit", ["max-connections", "max-queues"], "max-connections");
  const value = h("input", { name: "limit-value", type: "number", min: -1, required: true });
  return section("limits", "Vhost limits", list, submitForm("Set a limit",
    [field("Vhost", vhost), field("Limit", kind), field("Value (-1: none)", value)], out,
    () => attempt(out, async () => {
      await api("PUT", `vhost-limits/${enc(vhost.value)}/${kind.value}`, { value: Number(value.value) });
      list.reload();
    }, "Limit set."), "Set limit"));
}

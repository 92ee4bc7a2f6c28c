// Names as users know them: the connection name a client set (RabbitMQ's
// `user_provided_name`, from client_properties.connection_name) beside the address, and
// RabbitMQ's wording for an object that is missing or not this user's to see.

import { api, currentUser, enc, h } from "./lib.js";

let cached = null;
let cachedAt = 0;
const FRESH_MS = 2000;

// name -> user_provided_name, for the connections this user may see (one request, shared
// by the tables of a page refresh).
export async function connectionNames() {
  if (cached && Date.now() - cachedAt < FRESH_MS) return cached;
  const list = await api("GET", "connections?columns=name,user_provided_name").catch(() => []);
  cached = new Map((list || []).filter((c) => c.user_provided_name)
    .map((c) => [c.name, c.user_provided_name]));
  cachedAt = Date.now();
  return cached;
}

// "orders-service (127.0.0.1:53122 -> 127.0.0.1:5672)", or the address alone.
export function connectionLabel(name, names, provided) {
  const given = provided || (names && names.get(name));
  return given ? `${given} (${name})` : (name || "");
}

export function connectionLink(name, names, provided) {
  return h("a", { href: `#/connections/${enc(name)}` }, connectionLabel(name, names, provided));
}

// RabbitMQ's texts: "no queue 'q' in vhost '/'", "access to queue 'q' in vhost '/' refused
// for user 'u'".
export function missingText(kind, name, vhost, err) {
  const where = vhost === undefined ? "" : ` in vhost '${vhost}'`;
  if (err && err.status === 401) {
    const user = (currentUser() || {}).name || "";
    return `Access to ${kind} '${name}'${where} refused for user '${user}'.`;
  }
  return `No ${kind} '${name}'${where}.`;
}

// The whole page for an object that is not there: what is missing and a way back.
export function notFound(page, kind, name, vhost, err, backHref, backLabel) {
  document.title = "Not found · Leveret";
  page.append(
    h("p.crumbs", h("a", { href: backHref }, backLabel)),
    h("h1", "Not found"),
    h("div.error.not-found", { role: "alert" }, missingText(kind, name, vhost, err)),
    h("p.empty", err && err.status === 401
      ? "An administrator can give this user permissions in that vhost."
      : `It may have been deleted, or never declared. `,
    h("a", { href: backHref }, `Back to ${backLabel.toLowerCase()}`)));
}

// A user with no permissions in any vhost: nothing to list and nowhere to add anything.
export function noVhosts(what) {
  const user = (currentUser() || {}).name || "";
  return h("div.notice.no-vhosts", { role: "status" },
    `User '${user}' has no permissions in any vhost, so there are no ${what} to show and none `
    + "can be added. An administrator can grant permissions on the Admin page.");
}

// The console's small toolkit: DOM building, API calls, tables, dialogs, formatting.
// Plain ES module, no framework: every page is a function that fills an element.

const AUTH_KEY = "leveret.auth";
const USER_KEY = "leveret.user";

// h("button.primary", {onclick}, "text", child...): one element, children appended in order.
export function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key in el && key !== "list" && key !== "form") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// ---- credentials, kept for this tab only (sessionStorage) ----

export function credentials() {
  return sessionStorage.getItem(AUTH_KEY);
}

export function currentUser() {
  try { return JSON.parse(sessionStorage.getItem(USER_KEY) || "null"); } catch { return null; }
}

export function remember(auth, user) {
  sessionStorage.setItem(AUTH_KEY, auth);
  sessionStorage.setItem(USER_KEY, JSON.stringify(user));
}

export function forget() {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem(USER_KEY);
}

export function basic(user, password) {
  // btoa takes Latin-1; encode UTF-8 first so any password works.
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return btoa(String.fromCharCode(...bytes));
}

export function isAdmin() {
  const user = currentUser();
  return !!user && (user.tags || []).includes("administrator");
}

// Monitoring users and administrators read node health and every connection (RabbitMQ's
// "monitor" rule); the console asks for nothing its user may not read.
export function isMonitor() {
  const user = currentUser();
  return !!user && (user.tags || []).some((t) => t === "administrator" || t === "monitoring");
}

// ---- the management API ----

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

// api("GET", "queues/%2F") -> parsed JSON (or null for 204). Errors carry RabbitMQ's reason.
export async function api(method, path, body, auth = credentials()) {
  const headers = { "Accept": "application/json" };
  if (auth) headers["Authorization"] = `Basic ${auth}`;
  const init = { method, headers, credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(`/api/${path}`, init);
  } catch (err) {
    throw new ApiError(0, `cannot reach the broker (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!response.ok) {
    const reason = data && typeof data === "object" ? (data.reason || data.error) : null;
    // Only a refused login logs out; a 401 for a missing tag ("Not monitor user") is shown
    // where it happened.
    if (response.status === 401 && reason === "Login failed" && auth && !path.startsWith("whoami")) {
      document.dispatchEvent(new CustomEvent("leveret:unauthorized", { detail: reason }));
    }
    throw new ApiError(response.status, reason || `${response.status} ${response.statusText}`);
  }
  return data;
}

export const enc = encodeURIComponent;

// ---- feedback in place ----

export function errorBox(err) {
  return h("div.error", { role: "alert" }, err instanceof Error ? err.message : String(err));
}

export function notice(text) {
  return h("div.notice", { role: "status" }, text);
}

// RabbitMQ's HTTP answers to a refused permission ("Access refused.") and a missing path
// object ("Not Found") do not say which; the console knows what it asked for, and says it
// as RabbitMQ's AMQP replies do. about: {kind, name, vhost, right}.
export function explain(err, about) {
  if (!about || !(err instanceof ApiError)) return err;
  const what = `${about.kind} '${about.name}' in vhost '${about.vhost}'`;
  if (err.status === 401 && /^(ACCESS_REFUSED|Access refused)/.test(err.message)) {
    const user = (currentUser() || {}).name || "";
    const right = about.right ? `: it needs the ${about.right} permission` : "";
    return new ApiError(401, `Access to ${what} refused for user '${user}'${right}.`);
  }
  if (err.status === 404 && err.message === "Not Found") {
    return new ApiError(404, `No ${what}.`);
  }
  return err;
}

// Runs fn, showing its error (or a success text) in `where`; returns fn's result.
export async function attempt(where, fn, success, about) {
  clear(where);
  try {
    const result = await fn();
    if (success) clear(where, notice(success));
    return result;
  } catch (err) {
    clear(where, errorBox(explain(err, about)));
    return undefined;
  }
}

// A modal confirmation (a <dialog>); resolves true only on an explicit "yes".
export function confirmAction(question, yes = "Delete") {
  return new Promise((resolve) => {
    const dialog = h("dialog.confirm", { "aria-label": "Confirm" });
    const done = (answer) => { dialog.close(); dialog.remove(); resolve(answer); };
    dialog.append(
      h("p", question),
      h("div.actions",
        h("button", { type: "button", onclick: () => done(false) }, "Cancel"),
        h("button.danger", { type: "button", onclick: () => done(true) }, yes)),
    );
    dialog.addEventListener("cancel", () => done(false));
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("button").focus();
  });
}

// ---- formatting ----

export function num(n) {
  if (n === undefined || n === null || n === "") return "";
  return typeof n === "number" ? n.toLocaleString("en") : String(n);
}

export function rate(details) {
  const r = details && typeof details.rate === "number" ? details.rate : 0;
  return `${r.toFixed(r >= 100 ? 0 : 1)}/s`;
}

export function bytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function yesNo(v) { return v ? "yes" : "no"; }

// Epoch seconds (AMQP timestamps, x-death's time) as "2026-11-27 14:02:03 UTC".
export function readableTime(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return String(seconds ?? "");
  const d = new Date(seconds * (seconds > 1e12 ? 1 : 1000));
  return `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

// ---- a page's state in the URL, after "?" in the hash: #/queues?name=orders&page=2 ----

export function hashState() {
  const at = location.hash.indexOf("?");
  return new URLSearchParams(at >= 0 ? location.hash.slice(at + 1) : "");
}

// Merges `values` (null or "" removes a key) into the hash's state without a navigation, so
// a reload or a shared link opens the page as it is now.
export function setHashState(values) {
  const params = hashState();
  for (const [k, v] of Object.entries(values)) {
    if (v === null || v === undefined || v === "" || v === false) params.delete(k);
    else params.set(k, String(v));
  }
  const path = location.hash.split("?")[0] || "#/";
  const query = params.toString();
  history.replaceState(null, "", `${location.pathname}${location.search}${path}${query ? `?${query}` : ""}`);
}

export function args(obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return "";
  return entries.map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
}

export function vhostLink(vhost) { return enc(vhost); }

export function link(href, text) { return h("a", { href }, text); }

// ---- forms ----

export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h("div.field", h("label", { htmlFor: id }, label), input, hint ? h("small", hint) : null);
}

export function select(name, options, value) {
  return h("select", { name },
    options.map((o) => {
      const [v, text] = Array.isArray(o) ? o : [o, o];
      return h("option", { value: v, selected: v === value }, text);
    }));
}

export async function vhostNames() {
  const vhosts = await api("GET", "vhosts?columns=name");
  return vhosts.map((v) => v.name);
}

// Parses "k=v" lines (values as JSON when they parse: numbers, booleans) into an object.
export function parsePairs(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const trimmed = line.trim();
    if (!trimmed) continue;
    const at = trimmed.indexOf("=");
    if (at < 1) throw new Error(`"${trimmed}" is not name=value`);
    const key = trimmed.slice(0, at).trim();
    const raw = trimmed.slice(at + 1).trim();
    let value = raw;
    if (/^(-?\d+(\.\d+)?|true|false|null|\[.*\]|\{.*\})$/.test(raw)) {
      try { value = JSON.parse(raw); } catch { value = raw; }
    }
    out[key] = value;
  }
  return out;
}

export function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const a = h("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---- page lifecycle: timers and streams a page starts are stopped when it is left ----

const leaving = [];

export function onLeave(fn) { leaving.push(fn); }

export function leave() {
  while (leaving.length) {
    try { leaving.pop()(); } catch (err) { console.warn("cleanup failed", err); }
  }
}

// ---- refreshing: one interval for every page, picked in the header and remembered ----

const REFRESH_KEY = "leveret.refresh";
export const REFRESH_CHOICES = [[2000, "2 s"], [5000, "5 s"], [10000, "10 s"], [30000, "30 s"],
  [0, "paused"]];

export function refreshInterval() {
  const saved = localStorage.getItem(REFRESH_KEY);
  const ms = saved === null ? 5000 : Number(saved);
  return REFRESH_CHOICES.some(([v]) => v === ms) ? ms : 5000;
}

export function setRefreshInterval(ms) {
  localStorage.setItem(REFRESH_KEY, String(ms));
  document.dispatchEvent(new CustomEvent("leveret:interval"));
}

// A page tells the header its data is fresh (the "refreshed at" stamp).
export function markRefreshed() {
  document.dispatchEvent(new CustomEvent("leveret:refreshed", { detail: new Date() }));
}

// Calls fn now, then every `ms` (0: the interval picked in the header, none while paused)
// while the page is shown, skipped while the tab is hidden.
export function every(ms, fn) {
  let timer = null;
  let stopped = false;
  const schedule = () => {
    const wait = ms || refreshInterval();
    timer = setTimeout(async () => {
      if (stopped) return;
      if (wait && !document.hidden) {
        try { await fn(); } catch (err) { console.error("refresh failed", err); }
      }
      if (!stopped) schedule();
    }, wait || 1000);
  };
  const restart = () => { clearTimeout(timer); if (!stopped) schedule(); };
  // A page's own errors are shown in place; anything thrown here is a bug, logged as one.
  Promise.resolve().then(fn).catch((err) => console.error("refresh failed", err))
    .finally(schedule);
  if (!ms) document.addEventListener("leveret:interval", restart);
  onLeave(() => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener("leveret:interval", restart);
  });
}

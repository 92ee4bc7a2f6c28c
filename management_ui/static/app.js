// The console's shell: login, navigation (hash routes, so the server serves one page),
// the theme switch, and which page module draws each route.

import {
  REFRESH_CHOICES, api, basic, clear, credentials, currentUser, errorBox, field, forget, h,
  isAdmin, isMonitor, leave, refreshInterval, remember, setRefreshInterval,
} from "./lib.js";
import * as overview from "./pages/overview.js";
import * as connections from "./pages/connections.js";
import * as exchanges from "./pages/exchanges.js";
import * as queues from "./pages/queues.js";
import * as queue from "./pages/queue.js";
import * as admin from "./pages/admin.js";
import * as apidocs from "./pages/apidocs.js";
import * as tracing from "./pages/tracing.js";

// [hash pattern, module export, nav label (null: not in the menu), who may open it:
// undefined everyone, "admin" administrators, "monitor" monitoring users and administrators]
const ROUTES = [
  [/^\/?$/, overview.render, "Overview"],
  [/^\/connections$/, connections.renderConnections, "Connections"],
  [/^\/connections\/(.+)$/, connections.renderConnection, null],
  [/^\/channels$/, connections.renderChannels, "Channels"],
  [/^\/channels\/(.+)$/, connections.renderChannel, null],
  [/^\/consumers$/, connections.renderConsumers, "Consumers"],
  [/^\/exchanges$/, exchanges.renderList, "Exchanges"],
  [/^\/exchanges\/([^/]+)\/([^/]*)$/, exchanges.renderOne, null],
  [/^\/queues$/, queues.render, "Queues"],
  [/^\/queues\/([^/]+)\/([^/]+)$/, queue.render, null],
  [/^\/admin$/, admin.render, "Admin", "admin"],
  [/^\/trace$/, tracing.renderTrace, "Trace", "monitor"],
  [/^\/log$/, tracing.renderLog, "Log", "admin"],
  [/^\/api-docs$/, apidocs.render, "API"],
];
const HREF = {
  Overview: "#/", Connections: "#/connections", Channels: "#/channels", Consumers: "#/consumers",
  Exchanges: "#/exchanges", Queues: "#/queues", Admin: "#/admin", Trace: "#/trace",
  Log: "#/log", API: "#/api-docs",
};

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const session = document.getElementById("session");

// ---- theme: the system's unless chosen; remembered in this browser ----

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
}

function initialTheme() {
  const saved = localStorage.getItem("leveret.theme");
  if (saved === "dark" || saved === "light") return saved;
  return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches
    ? "dark" : "light";
}

function themeButton() {
  const label = () => (document.documentElement.dataset.theme === "dark" ? "Light theme" : "Dark theme");
  const button = h("button.theme", { type: "button", onclick: () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem("leveret.theme", next);
    applyTheme(next);
    button.textContent = label();
  } }, label());
  return button;
}

// ---- login ----

function drawLogin(message) {
  leave();
  clear(nav);
  clear(session, themeButton());
  const user = h("input", { name: "username", autocomplete: "username", required: true,
    autofocus: true });
  const password = h("input", { name: "password", type: "password",
    autocomplete: "current-password" });
  const errors = h("div");
  if (message) errors.append(errorBox(message));
  const form = h("form.login", { onsubmit: async (event) => {
    event.preventDefault();
    const auth = basic(user.value, password.value);
    try {
      const who = await api("GET", "whoami", undefined, auth);
      remember(auth, who);
      route();
    } catch (err) {
      clear(errors, errorBox(err.status === 401 ? loginRefused(user.value, err.message) : err));
      password.select();
    }
  } },
  h("h1", "Log in to Leveret"),
  h("p.hint", "Any broker user tagged management, monitoring, policymaker or administrator."),
  field("Username", user), field("Password", password), errors,
  h("button.primary", { type: "submit" }, "Log in"));
  clear(main, form);
  user.focus();
}

// What the broker's 401 reason means for the person at the login form.
function loginRefused(name, reason) {
  if (reason === "Login failed") {
    return `Login failed: unknown user '${name}' or wrong password.`;
  }
  if (reason === "Not management user") {
    return `Login refused: user '${name}' has none of the tags management, monitoring, `
      + "policymaker or administrator, which the console needs.";
  }
  if (reason === "User can only log in via localhost") {
    return `Login refused: user '${name}' may only log in from the broker's own machine `
      + "(loopback_users).";
  }
  return `Login refused for user '${name}': ${reason}.`;
}

function logout() {
  forget();
  location.hash = "#/";
  drawLogin();
}

document.addEventListener("leveret:unauthorized", (event) => {
  forget();
  drawLogin(`Logged out: ${event.detail || "the broker refused these credentials"}`);
});

// ---- navigation ----

// "Refreshed at 14:02:07" and the interval every page refreshes at (remembered).
const stamp = h("span.refreshed", { "aria-live": "off" }, "");
document.addEventListener("leveret:refreshed", (event) => {
  const at = event.detail || new Date();
  stamp.textContent = `Refreshed at ${at.toLocaleTimeString("en-GB")}`;
  stamp.dataset.at = String(at.getTime());
});

function intervalPicker() {
  const current = refreshInterval();
  return h("select.interval", { "aria-label": "Refresh every", title: "Refresh every",
    onchange: (event) => setRefreshInterval(Number(event.target.value)) },
  REFRESH_CHOICES.map(([ms, text]) => h("option", { value: ms, selected: ms === current },
    ms ? `every ${text}` : text)));
}

function drawChrome(current) {
  const user = currentUser();
  clear(nav, ROUTES.filter(([, , label, who]) => label && allowed(who))
    .map(([, , label]) => h("a", { href: HREF[label],
      "aria-current": label === current ? "page" : false }, label)));
  stamp.textContent = "";
  clear(session,
    stamp, intervalPicker(),
    h("span.who", { title: (user.tags || []).join(", ") }, user.name),
    themeButton(),
    h("button", { type: "button", onclick: logout }, "Log out"));
}

// The console offers no page, and sends no request, its user may not read.
function allowed(who) {
  return !who || (who === "admin" ? isAdmin() : isMonitor());
}

// The user's own rights (whoami's permissions) are read again at each navigation, so a
// permission changed meanwhile shows on the next page; rights.js judges buttons by them.
async function refreshRights() {
  const auth = credentials();
  try {
    const who = await api("GET", "whoami", undefined, auth);
    // Logged out (or in as someone else) meanwhile: the answer is not this session's.
    if (credentials() === auth) remember(auth, who);
  } catch {
    // keep what login read; a refused login is handled by the api's 401 event
  }
}

let routing = 0;

async function route() {
  if (!credentials()) {
    drawLogin();
    return;
  }
  leave();
  const turn = ++routing;
  await refreshRights();
  if (turn !== routing) return; // navigated again meanwhile: that route draws the page
  if (!credentials()) return; // logged out (or refused) meanwhile: the login form is drawn
  // The hash is the page's path, then its state (filter, sort, page) after "?".
  const raw = location.hash.replace(/^#/, "").split("?")[0];
  const path = decodeURIComponent(raw) === "" ? "/" : raw;
  for (const [pattern, render, label, who] of ROUTES) {
    const match = path.match(pattern);
    if (!match) continue;
    if (!allowed(who)) {
      drawChrome(null);
      const user = currentUser() || {};
      clear(main, h("div.page", h("h1", label),
        h("div.notice", { role: "status" }, `User '${user.name}' cannot open this page: it `
          + `needs the ${who === "admin" ? "administrator" : "monitoring or administrator"} tag.`),
        h("p", h("a", { href: "#/" }, "Back to the overview"))));
      return;
    }
    const navLabel = label || ["Queues", "Exchanges", "Connections", "Channels"]
      .find((l) => path.startsWith(`/${l.toLowerCase()}`)) || "Overview";
    drawChrome(navLabel);
    document.title = `${navLabel} · Leveret`;
    const page = h("div.page");
    clear(main, page);
    try {
      await render(page, ...match.slice(1).map(decodeURIComponent));
    } catch (err) {
      page.append(errorBox(err));
    }
    return;
  }
  drawChrome(null);
  clear(main, h("div.page", h("h1", "Not found"),
    h("p.empty", "No console page here. ", h("a", { href: "#/" }, "Back to the overview"))));
}

applyTheme(initialTheme());
window.addEventListener("hashchange", route);
route();

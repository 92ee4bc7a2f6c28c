// What the signed-in user may do, judged as the broker judges it (broker/permissions.py), so
// the console offers only actions the user can take and says which right a refused one needs.
//
// /api/whoami gives the user's own permissions per vhost (a Leveret field: RabbitMQ lets only
// administrators read permissions). Each pattern is matched unanchored against the resource
// name, as re.search / RabbitMQ's re:run; "" means nothing (stored as ^$); the default
// exchange "" is checked as "amq.default". Python's and JavaScript's regex dialects agree on
// the patterns permissions use; one JavaScript cannot compile is treated as allowing, and the
// broker still decides (its refusal is explained where the action runs, lib.js explain).
// Topic permissions depend on the routing key typed, so they are left to the broker.

import { currentUser, h } from "./lib.js";

const DEFAULT_EXCHANGE = "amq.default";

function permissionIn(vhost) {
  const user = currentUser();
  if (!user || !Array.isArray(user.permissions)) return undefined; // not known: offer all
  return user.permissions.find((p) => p.vhost === vhost) || null;
}

function matches(pattern, name) {
  try {
    return new RegExp(pattern || "^$").test(name);
  } catch {
    return true;
  }
}

// Why the user may not take `right` on a resource, or "" when they may.
export function missing(right, kind, name, vhost) {
  const permission = permissionIn(vhost);
  if (permission === undefined) return "";
  const resource = kind === "exchange" && !name ? DEFAULT_EXCHANGE : name;
  if (permission && matches(permission[right], resource)) return "";
  return `needs ${right} on ${kind} '${resource}' in vhost '${vhost}'`;
}

// Disables `button` (with the reason as its tooltip) unless every check passes; a check is
// [right, kind, name, vhost]. Returns the button.
export function guard(button, ...checks) {
  const why = checks.map((c) => missing(...c)).filter(Boolean);
  button.disabled = why.length > 0;
  button.title = why.length ? `${button.textContent.trim()} ${why.join(" and ")}` : "";
  button.dataset.missing = why.join("; ");
  button.classList.toggle("refused", why.length > 0);
  return button;
}

// A form whose object is typed in (a new queue's vhost and name): its button is judged again
// at each keystroke by checks(), which returns [] until there is a name to judge. Returns the
// line that names the missing right.
export function guardAsTyped(form, button, checks) {
  const line = h("p.why");
  const judge = () => {
    guard(button, ...checks());
    line.textContent = button.disabled ? `${button.textContent.trim()} ${button.dataset.missing.replace(/; /g, " and ")}.` : "";
  };
  form.addEventListener("input", judge);
  form.addEventListener("change", judge);
  return line;
}

// One visible line under a set of guarded buttons naming what each disabled one needs.
export function whyLine(...buttons) {
  const lines = buttons.filter((b) => b.disabled && b.dataset.missing)
    .map((b) => `${b.textContent.trim()} ${b.dataset.missing.replace(/; /g, " and ")}.`);
  return lines.length ? h("p.why", ...lines.flatMap((l, i) => (i ? [h("br"), l] : [l]))) : "";
}

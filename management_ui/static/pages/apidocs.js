// The API reference: /api/openapi.json rendered as a filterable list of operations.

import { api, clear, h } from "../lib.js";

const ORDER = ["get", "put", "post", "delete"];

export async function render(page) {
  const doc = await api("GET", "openapi.json");
  const list = h("div.api-ops");
  const filter = h("input", { type: "search", placeholder: "Filter paths", "aria-label": "Filter paths",
    oninput: () => draw() });
  const ops = [];
  for (const [path, methods] of Object.entries(doc.paths || {})) {
    for (const method of ORDER) if (methods[method]) ops.push([path, method, methods[method]]);
  }
  function draw() {
    const needle = filter.value.toLowerCase();
    const shown = ops.filter(([path, method, op]) => !needle
      || `${method} ${path} ${op.summary || ""}`.toLowerCase().includes(needle));
    clear(list, shown.length ? shown.map(([path, method, op]) => h("details.api-op",
      h("summary", h("span.method", { dataset: { method } }, method.toUpperCase()), " ",
        h("code", path), " ", h("span.hint", op.summary || "")),
      h("dl.facts",
        h("dt", "Tag needed"), h("dd", op["x-rabbitmq-tag"] || "none (no login)"),
        h("dt", "Parameters"), h("dd", (op.parameters || []).map((p) => p.name).join(", ") || "none"),
        h("dt", "Responses"), h("dd", Object.entries(op.responses || {})
          .map(([code, r]) => `${code} ${r.description}`).join(" · ")),
        h("dt", "Try it"), h("dd", h("code", `curl -u USER:PASS -X ${method.toUpperCase()} `
          + `${location.origin}${path}`)))))
      : h("p.empty", "No operation matches."));
  }
  page.append(h("h1", (doc.info || {}).title || "API"),
    h("p.hint", `OpenAPI ${doc.openapi}: every console action is one of these calls. `,
      h("a", { href: "/api/openapi.json" }, "Raw document")),
    h("div.toolbar", filter), list);
  draw();
}

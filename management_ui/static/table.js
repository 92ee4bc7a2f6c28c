// Tables: a plain one for short lists, and a server-paged one for the API's lists.
//
// The paged table asks the API for one page (RabbitMQ's list parameters: name, use_regex,
// sort, sort_reverse, page, page_size), so a vhost with 100,000 queues costs one page.
// Column headers are buttons (keyboard-sortable); the filter applies as you type.

import {
  api, attempt, clear, every, h, hashState, markRefreshed, setHashState,
} from "./lib.js";

// before(data): awaited before a page is drawn (names the rows refer to).
// columns: [{title, key (sort path, optional), cell(row) -> node|text, className}]
export function table(rows, columns, empty) {
  if (!rows.length) return h("p.empty", empty || "Nothing here yet.");
  return h("div.table-wrap",
    h("table",
      h("thead", h("tr", columns.map((c) => h("th", { className: c.className || "" }, c.title)))),
      h("tbody", rows.map((row) => h("tr",
        columns.map((c) => h("td", { className: c.className || "", dataset: { label: c.title } },
          c.cell(row))))))));
}

const PAGE_SIZES = [20, 50, 100, 500];

// A self-refreshing, server-paged list. Returns {element, reload}.
export function pagedList({ path, columns, empty, sort = "name", filterLabel = "Filter by name",
  refresh = true, extra, before }) {
  // The filter, sort, page and page size live in the URL (hashState), so a reload or a
  // shared link shows the same page of the same list.
  const saved = hashState();
  const state = { name: saved.get("name") || "", regex: saved.get("regex") === "true",
    sort: saved.get("sort") || sort, reverse: saved.get("reverse") === "true",
    page: Math.max(1, Number(saved.get("page")) || 1),
    size: PAGE_SIZES.includes(Number(saved.get("size"))) ? Number(saved.get("size")) : 50 };
  const body = h("div.list-body");
  const status = h("div.list-status", { "aria-live": "polite" });
  const errors = h("div");
  const filter = h("input", { type: "search", placeholder: filterLabel, "aria-label": filterLabel,
    value: state.name, oninput: () => { state.name = filter.value; state.page = 1; reload(); } });
  const regex = h("input", { type: "checkbox", "aria-label": "Regular expression",
    checked: state.regex,
    onchange: () => { state.regex = regex.checked; state.page = 1; reload(); } });
  const size = h("select", { "aria-label": "Page size", onchange: () => {
    state.size = Number(size.value); state.page = 1; reload(); } },
  PAGE_SIZES.map((n) => h("option", { value: n, selected: n === state.size }, `${n} per page`)));
  const pager = h("div.pager");
  let seq = 0;

  async function reload() {
    const mine = ++seq;
    setHashState({ name: state.name, regex: state.regex, sort: state.sort === sort ? "" : state.sort,
      reverse: state.reverse, page: state.page > 1 ? state.page : "",
      size: state.size === 50 ? "" : state.size });
    const params = new URLSearchParams({ page: state.page, page_size: state.size,
      name: state.name, use_regex: state.regex, sort: state.sort,
      sort_reverse: state.reverse, pagination: true });
    const data = await attempt(errors, () => api("GET", `${path}?${params}`));
    if (before && data !== undefined) await before(data);
    if (mine !== seq) return;
    if (data === undefined) return;
    draw(data);
    markRefreshed();
  }

  function header(c) {
    if (!c.key) return h("th", { className: c.className || "" }, c.title);
    const active = state.sort === c.key;
    const arrow = active ? (state.reverse ? " ▼" : " ▲") : "";
    return h("th", { className: c.className || "", "aria-sort": active ? (state.reverse ? "descending" : "ascending") : "none" },
      h("button.sort", { type: "button", onclick: () => {
        if (state.sort === c.key) state.reverse = !state.reverse;
        else { state.sort = c.key; state.reverse = false; }
        reload();
      } }, c.title + arrow));
  }

  function draw(data) {
    const rows = data.items;
    clear(status, data.total_count === data.filtered_count
      ? `${data.total_count} in all`
      : `${data.filtered_count} of ${data.total_count} match`);
    if (!rows.length) {
      clear(body, h("p.empty", data.total_count ? "Nothing matches this filter." : (empty || "Nothing here yet.")));
    } else {
      clear(body, h("div.table-wrap", h("table",
        h("thead", h("tr", columns.map(header))),
        h("tbody", rows.map((row) => h("tr", columns.map((c) =>
          h("td", { className: c.className || "", dataset: { label: c.title } }, c.cell(row)))))))));
    }
    const pages = Math.max(data.page_count, 1);
    clear(pager,
      h("button", { type: "button", disabled: state.page <= 1, "aria-label": "Previous page",
        onclick: () => { state.page--; reload(); } }, "‹ Prev"),
      h("span", ` page ${state.page} of ${pages} `),
      h("button", { type: "button", disabled: state.page >= pages, "aria-label": "Next page",
        onclick: () => { state.page++; reload(); } }, "Next ›"));
  }

  const element = h("section.list",
    h("div.toolbar", filter, h("label.inline", regex, " regex"), size, extra || null, status),
    errors, body, pager);
  if (refresh) every(0, reload);  // the header's interval
  else reload();
  return { element, reload };
}

// Loads once and shows a plain table (for short lists such as users or bindings).
export function loadedTable(path, columns, empty, transform) {
  const where = h("div");
  async function reload() {
    const data = await attempt(where, () => api("GET", path));
    if (data !== undefined) clear(where, table(transform ? transform(data) : data, columns, empty));
  }
  reload();
  return { element: where, reload };
}

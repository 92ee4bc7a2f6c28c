// Line charts (uPlot, vendored) drawn from the broker's own history: every page asks the API
// with RANGE (RabbitMQ's lengths_age/msg_rates_age/data_rates_age), and each answer carries
// the last WINDOW seconds as `X_details.samples`, so a chart shows history the moment a page
// opens. A series whose answer has no samples (a user's summed vhost totals) is filled from
// the rates the page sees while it is open.

import { h } from "./lib.js";

export const WINDOW = 300;  // seconds shown
const STEP = 5;  // seconds between points
export const RANGE = ["lengths", "msg_rates", "data_rates"]
  .map((k) => `${k}_age=${WINDOW}&${k}_incr=${STEP}`).join("&");
const POINTS = WINDOW / STEP + 1;
const COLOURS = ["#3b82f6", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6", "#14b8a6"];

// series: [{label, details(data) -> X_details, kind: "rate" (samples are counters: drawn as
// per-second rates) | "value" (drawn as they are)}]. format(v) renders a legend value.
// Returns {element, push(data)}.
export function liveChart(title, series, format = (v) => `${formatValue(v)}/s`) {
  const host = h("div.chart-plot");
  const legend = h("ul.chart-legend");
  const element = h("figure.chart", { dataset: { points: 0 } }, h("figcaption", title), host,
    legend);
  let data = [[], ...series.map(() => [])];
  let plot = null;

  function width() {
    return Math.max(240, Math.floor(host.getBoundingClientRect().width || 480));
  }

  function xRange() {
    const times = data[0];
    const end = times.length ? times[times.length - 1] : Date.now() / 1000;
    return [Math.min(times.length ? times[0] : end, end - WINDOW), end];
  }

  function make() {
    if (typeof window.uPlot !== "function") return null;
    const opts = {
      width: width(), height: 160, legend: { show: false }, cursor: { show: true },
      scales: { x: { time: true, range: () => xRange() }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [{ stroke: "currentColor", grid: { stroke: "rgba(128,128,128,0.2)" }, space: 60,
        values: (u, splits) => splits.map(clock) },
        { stroke: "currentColor", grid: { stroke: "rgba(128,128,128,0.2)" }, size: 56 }],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLOURS[i % COLOURS.length],
        width: 2, points: { show: false } }))],
    };
    return new window.uPlot(opts, data, host);
  }

  // The broker's samples (newest first) as columns, oldest first; null when there are none.
  function fromSamples(sample) {
    const lists = series.map((s) => ((s.details(sample) || {}).samples));
    if (!lists.every((l) => Array.isArray(l) && l.length >= 2)) return null;
    const base = [...lists[0]].reverse();
    const rateCut = series.some((s) => s.kind === "rate") ? 1 : 0;
    const times = base.slice(rateCut).map((p) => p.timestamp / 1000);
    const columns = series.map((s, i) => {
      const points = [...lists[i]].reverse();
      if (s.kind !== "rate") return points.slice(rateCut).map((p) => p.sample);
      return points.slice(1).map((p, j) => {
        const dt = (p.timestamp - points[j].timestamp) / 1000;
        return dt > 0 ? Math.max(0, (p.sample - points[j].sample) / dt) : 0;
      });
    });
    return [times, ...columns];
  }

  // What the answer says now, for a series without samples.
  function current(s, sample) {
    const d = s.details(sample) || {};
    return Number(s.kind === "rate" ? d.rate : s.value ? s.value(sample) : d.rate) || 0;
  }

  function push(sample) {
    const drawn = fromSamples(sample);
    if (drawn) {
      data = drawn;
    } else {
      data[0].push(Date.now() / 1000);
      series.forEach((s, i) => data[i + 1].push(current(s, sample)));
      if (data[0].length > POINTS) data.forEach((column) => column.shift());
    }
    element.dataset.points = data[0].length;
    // Points with something to show, and whether they came from the broker's history.
    element.dataset.nonzero = data[0].filter((_, i) => data.slice(1).some((c) => c[i])).length;
    element.dataset.source = drawn ? "history" : "page";
    legend.replaceChildren(...series.map((s, i) => h("li",
      h("span.swatch", { dataset: { colour: i % COLOURS.length } }),
      `${s.label}: ${format(s.kind === "rate" ? current(s, sample) : data[i + 1][data[0].length - 1] || 0)}`)));
    if (!plot && host.isConnected) plot = make();
    if (plot) {
      if (Math.abs(plot.width - width()) > 8) plot.setSize({ width: width(), height: 160 });
      plot.setData(data);
    }
  }

  return { element, push };
}

// An axis label: "14:05" on the minute, ":30" between (uPlot's default stacks a date row).
function clock(seconds) {
  const d = new Date(seconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return d.getSeconds() ? `:${two(d.getSeconds())}` : `${two(d.getHours())}:${two(d.getMinutes())}`;
}

export function formatValue(v) {
  if (!Number.isFinite(v)) return "0";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, "");
}

export function plain(v) { return formatValue(v); }

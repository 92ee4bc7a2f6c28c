// Live line charts (uPlot, vendored): the console samples the API every few seconds and keeps
// the last POINTS values per series in the page, so charts start empty and fill as you watch.

import { h } from "./lib.js";

const POINTS = 60;
const WINDOW = 300;  // seconds shown at least, so a chart with one point has a sane time axis
const COLOURS = ["#3b82f6", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6", "#14b8a6"];

// series: [{label, value(data) -> number}]. Returns {element, push(data)}.
export function liveChart(title, series, unit = "/s") {
  const host = h("div.chart-plot");
  const legend = h("ul.chart-legend");
  const element = h("figure.chart", h("figcaption", title), host, legend);
  const data = [[], ...series.map(() => [])];
  let plot = null;

  function width() {
    return Math.max(240, Math.floor(host.getBoundingClientRect().width || 480));
  }

  // The last WINDOW seconds up to the newest sample (or now, before the first one): uPlot's
  // own range for one or two points spans years.
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
      axes: [{ stroke: "currentColor", grid: { stroke: "rgba(128,128,128,0.2)" } },
        { stroke: "currentColor", grid: { stroke: "rgba(128,128,128,0.2)" }, size: 56 }],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLOURS[i % COLOURS.length],
        width: 2, points: { show: false } }))],
    };
    return new window.uPlot(opts, data, host);
  }

  function push(sample) {
    data[0].push(Date.now() / 1000);
    series.forEach((s, i) => data[i + 1].push(Number(s.value(sample)) || 0));
    if (data[0].length > POINTS) data.forEach((column) => column.shift());
    legend.replaceChildren(...series.map((s, i) => h("li",
      h("span.swatch", { dataset: { colour: i % COLOURS.length } }),
      `${s.label}: ${formatValue(data[i + 1][data[0].length - 1])}${unit}`)));
    if (!plot && host.isConnected) plot = make();
    if (plot) {
      if (Math.abs(plot.width - width()) > 8) plot.setSize({ width: width(), height: 160 });
      plot.setData(data);
    }
  }

  return { element, push };
}

function formatValue(v) {
  if (!Number.isFinite(v)) return "0";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, "");
}

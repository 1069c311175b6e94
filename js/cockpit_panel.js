// @ts-check
// CockpitPanel: the training instruments of a cockpit log, drawn in SVG/canvas, live and linked.
// Drag across any time series to pick a step range (step_range); every time series shades it, and
// the alpha distribution and the histograms (summed in Python) show that range. The layer picker
// (layer) switches the layer-wise instruments. Each instrument root carries data-instrument and
// data-points (what it drew); histograms also data-total and data-steps, for tests and tools.
// Instruments the run's configuration does not track take no space.
import { defineView } from "./common/view.js";
import { h, svg, makeTooltip } from "./common/dom.js";
import { formatNumber as fmt } from "./common/format.js";
import { INSTRUMENTS, isTracked } from "./cockpit/instruments.js";
import { lineChart, alphaChart, gaugeChart, hist1dChart, hist2dChart } from "./cockpit/charts.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {{ run: string, steps: Serialised | null, series_names: string[], series: Serialised | null,
 *   layers: string[], layer_series_names: string[], layer_series: Serialised | null, layer: string,
 *   step_range: number[], hist1d: Serialised | null, hist1d_range: number[], hist1d_steps: number,
 *   hist2d: Serialised | null, hist2d_range: number[][], hist2d_steps: number, tracked: string[],
 *   notes: {hess_diag?: string, skipped?: Record<string, string>}, height: number, marked_step: number }} CockpitModel
 * @typedef {import("./cockpit/charts.js").Card} Card
 */

const CSS = `
.activis-cockpit .av-grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px; }
.activis-cockpit .av-card { border: 1px solid var(--av-border-soft); border-radius: 4px; padding: 4px 6px;
  position: relative; min-width: 0; }
.activis-cockpit .av-card h4 { margin: 0 0 2px 0; font-size: 12px; font-weight: 600; color: var(--av-fg);
  display: flex; align-items: baseline; gap: 6px; }
.activis-cockpit .av-card .av-sub { font-size: 11px; color: var(--av-fg-muted); font-weight: 400; flex: 1 1 auto;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.activis-cockpit .av-card button[data-role="log-toggle"] { font: inherit; font-size: 10px; padding: 0 4px;
  color: var(--av-fg-muted); background: var(--av-bg); border: 1px solid var(--av-border); border-radius: 3px;
  cursor: pointer; }
.activis-cockpit .av-card button[aria-pressed="true"] { color: var(--av-accent); border-color: var(--av-accent); }
.activis-cockpit svg text { fill: var(--av-fg-muted); font-size: 10px; }
.activis-cockpit svg text.av-axis-label { fill: var(--av-fg-muted); font-size: 10px; font-style: italic; }
.activis-cockpit .av-axis { stroke: var(--av-border); }
.activis-cockpit .av-gridline { stroke: var(--av-border-soft); stroke-dasharray: 2 3; }
.activis-cockpit .av-range { fill: var(--av-accent); fill-opacity: 0.12; stroke: var(--av-accent); stroke-opacity: 0.5;
  pointer-events: none; }
.activis-cockpit .av-footer { font-size: 11px; color: var(--av-fg-muted); padding-top: 4px; white-space: pre-wrap; }
.activis-cockpit .av-empty { font-size: 11px; color: var(--av-fg-muted); }
`;
export default defineView({
  name: "cockpit", css: CSS, arrays: ["steps", "series", "layer_series", "hist1d", "hist2d"], setup,
});

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const COLORS = new Proxy([], { get: (_t, i) => (kit.palette().runs || [])[Number(i) % 10] || "#4e79a7" });
  const title = h("strong", { text: "" });
  const picker = h("select", { "data-role": "layer-picker", title: "Layer for the layer-wise instruments" });
  const rangeLabel = h("span", { "data-role": "range-label", style: { color: "var(--av-fg-muted)" } });
  const clear = h("button", { text: "All steps", "data-role": "clear-range", title: "Clear the step range" });
  const count = h("span", { style: { color: "var(--av-fg-muted)", marginLeft: "auto" } });
  const toolbar = h("div", { className: "activis-toolbar" },
    [title, h("span", { text: "layer" }), picker, rangeLabel, clear, count]);
  const grid = h("div", { className: "av-grid" });
  const footer = h("div", { className: "av-footer" });
  el.append(toolbar, grid, footer);
  const tooltip = makeTooltip(el);
  /** @type {Map<string, Card>} */
  const cards = new Map();
  for (const inst of INSTRUMENTS) {
    const sub = h("span", { className: "av-sub" });
    const head = h("h4", {}, [h("span", { text: inst.title }), sub]);
    const logButton = inst.kind === "line"
      ? h("button", { text: "log", "data-role": "log-toggle", title: "Log scale for the values" }) : null;
    if (logButton) head.appendChild(logButton);
    const body = h("div");
    const card = h("div", { className: "av-card", "data-instrument": inst.key }, [head, body]);
    const entry = { inst, card, body, sub, logButton, log: null }; // log: null follows the data
    if (logButton) {
      logButton.addEventListener("click", () => {
        entry.log = logButton.getAttribute("aria-pressed") !== "true";
        schedule();
      });
    }
    cards.set(inst.key, entry);
    grid.appendChild(card);
  }

  picker.addEventListener("change", () => {
    model.set("layer", picker.value);
    model.save_changes();
  });
  clear.addEventListener("click", () => setRange([]));

  function setRange(/** @type {number[]} */ range) {
    model.set("step_range", range);
    model.save_changes();
    schedule();
  }

  // ------------------------------------------------------------------ data from the model
  function data() {
    const steps = kit.array("steps");
    const matrix = kit.array("series");
    const names = model.get("series_names");
    const n = steps ? steps.data.length : 0;
    const series = new Map();
    if (matrix) names.forEach((name, i) => series.set(name, matrix.data.subarray(i * n, (i + 1) * n)));
    const layers = model.get("layers");
    const layer = model.get("layer");
    const li = layers.indexOf(layer);
    const ls = kit.array("layer_series");
    if (li >= 0 && ls) {
      model.get("layer_series_names").forEach((name, qi) => {
        const off = (qi * layers.length + li) * n;
        series.set(`layer:${name}`, ls.data.subarray(off, off + n));
      });
    }
    const range = model.get("step_range");
    const tracked = new Set([...(model.get("tracked") || []), ...names]);
    return { steps: steps ? steps.data : new Int32Array(0), series, names, layer: li >= 0 ? layer : "", range,
      tracked };
  }

  // ------------------------------------------------------------------ the instruments
  function size(/** @type {HTMLElement} */ body) {
    const width = Math.max(160, body.clientWidth || (el.clientWidth - 40) / 3);
    const height = Math.max(130, Math.floor((model.get("height") - 90) / 5) - 28);
    return { width, height };
  }

  // a drag in progress: draws wait until it ends, so the chart under the pointer stays the one dragged on
  let dragging = false;
  let drawWaiting = false;

  function brush(root, x, height, d, lines, m) {
    // drag across the plot to choose a step range; a click without a drag clears it
    const plotH = height - m.top - m.bottom;
    const overlay = svg("rect", { x: m.left, y: m.top, width: Math.max(1, x.range[1] - m.left), height: plotH,
      fill: "transparent", "data-role": "brush", style: "cursor: crosshair; touch-action: none" });
    root.appendChild(overlay);
    /** @type {number | null} */
    let start = null;
    let band = null;
    const local = (ev) => ev.clientX - root.getBoundingClientRect().left;
    const clamp = (/** @type {number} */ px) => Math.max(m.left, Math.min(x.range[1], px));
    overlay.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      start = clamp(local(ev));
      dragging = true;
      overlay.setPointerCapture(ev.pointerId);
      band = svg("rect", { class: "av-range", x: start, y: m.top, width: 0, height: plotH });
      root.appendChild(band);
      tooltip.hide();
      ev.preventDefault();
    });
    overlay.addEventListener("pointermove", (ev) => {
      const px = clamp(local(ev));
      if (start !== null) {
        band.setAttribute("x", Math.min(start, px));
        band.setAttribute("width", Math.abs(px - start));
        return;
      }
      const step = x.invert(px);
      let best = 0;
      for (let i = 1; i < d.steps.length; i++) {
        if (Math.abs(d.steps[i] - step) < Math.abs(d.steps[best] - step)) best = i;
      }
      const box = el.getBoundingClientRect();
      tooltip.show([`step ${d.steps[best]}`, ...lines.map((l) => `${l.name}: ${fmt(l.values[best])}`)],
        ev.clientX - box.left, ev.clientY - box.top);
    });
    const finish = (ev, cancelled = false) => {
      if (start === null) return;
      const end = clamp(local(ev));
      const [a, b] = [x.invert(Math.min(start, end)), x.invert(Math.max(start, end))];
      const moved = Math.abs(end - start) >= 3;
      start = null;
      dragging = false;
      if (cancelled) {
        if (band) band.remove();
        if (drawWaiting) schedule();
        return;
      }
      const picked = moved ? Array.from(d.steps).filter((s) => s >= a && s <= b) : [];
      setRange(picked.length ? [picked[0], picked[picked.length - 1]] : []);
    };
    overlay.addEventListener("pointerup", (ev) => finish(ev));
    overlay.addEventListener("pointercancel", (ev) => finish(ev, true));
    overlay.addEventListener("pointerleave", () => { if (start === null) tooltip.hide(); });
  }

  // the explorer's checkpoint: a vertical rule at its step in every time series
  function markStep(root, x, height, m) {
    const step = model.get("marked_step");
    if (step < 0 || step < x.domain[0] || step > x.domain[1]) return;
    root.appendChild(svg("line", { class: "av-marked-step", x1: x(step), x2: x(step), y1: m.top, y2: height - m.bottom,
      "data-step": String(step), stroke: "var(--av-accent)", "stroke-width": 1.5, "stroke-dasharray": "3 2",
      "pointer-events": "none" }));
  }

  // ------------------------------------------------------------------ whole panel
  function draw() {
    const d = data();
    title.textContent = model.get("run") || "cockpit";
    const layers = model.get("layers");
    const options = [h("option", { value: "", text: "whole network" }),
      ...layers.map((l) => h("option", { value: l, text: l }))];
    picker.replaceChildren(...options);
    picker.value = d.layer;
    rangeLabel.textContent = d.range.length === 2 ? `steps ${d.range[0]}–${d.range[1]}` : "all steps";
    const first = model.get("first_step_s");
    count.textContent = d.steps.length ? `${d.steps.length} steps tracked` + (first >= 0
      ? ` · first step ${first.toFixed(1)} s${first > 2 ? " (compiling the instruments, once)" : ""}` : "")
      : "waiting for the first step: it compiles the instruments (numba, once, then cached on disk)…";
    el.dataset.firstStep = String(first);
    let shown = 0;
    for (const entry of cards.values()) {
      const { inst, card } = entry;
      if (!isTracked(inst, d)) { // not in this run's configuration: no card, no space
        card.style.display = "none";
        continue;
      }
      card.style.display = "";
      shown++;
      const box = size(entry.body);
      if (inst.kind === "line") {
        const drawn = lineChart(entry, d, box, COLORS);
        if (drawn) {
          markStep(drawn.root, drawn.x, drawn.height, drawn.m);
          brush(drawn.root, drawn.x, drawn.height, d, drawn.lines, drawn.m);
        }
      } else if (inst.kind === "alpha") alphaChart(entry, d, box, COLORS);
      else if (inst.kind === "gauge") gaugeChart(entry, d, box, COLORS);
      else if (inst.kind === "hist1d") {
        hist1dChart(entry, kit.array("hist1d"), model.get("hist1d_steps"), model.get("hist1d_range"), box, COLORS);
      } else if (inst.kind === "hist2d") {
        hist2dChart(entry, kit.array("hist2d"), model.get("hist2d_steps"), model.get("hist2d_range"), box);
      }
    }
    const notes = model.get("notes") || {};
    const lines = [];
    if (notes.hess_diag) lines.push(`Hessian diagonal: ${notes.hess_diag}`);
    for (const [q, why] of Object.entries(notes.skipped || {})) lines.push(`${q} skipped: ${why}`);
    footer.textContent = lines.join("\n");
    el.dataset.steps = String(d.steps.length);
    el.dataset.layer = d.layer;
    el.dataset.markedStep = String(model.get("marked_step"));
    el.dataset.range = d.range.length === 2 ? `${d.range[0]}-${d.range[1]}` : "";
    el.dataset.instruments = String(shown);
    el.dataset.renders = String(Number(el.dataset.renders || 0) + 1);
    el.dataset.ready = "1";
  }

  const redraw = kit.frame(() => {
    if (dragging) { // the chart being brushed must stay in place: draw once the drag ends
      drawWaiting = true;
      el.dataset.drawWaiting = "1";
      return;
    }
    drawWaiting = false;
    delete el.dataset.drawWaiting;
    draw();
  });
  function schedule() { redraw(); }
  kit.on("steps series layer_series layer step_range marked_step hist1d hist2d notes tracked height colours "
    + "first_step_s", schedule);
  kit.onResize(el, schedule);
  draw();
}

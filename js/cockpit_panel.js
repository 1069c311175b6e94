// @ts-check
// CockpitPanel: the training instruments of a cockpit log, drawn in SVG/canvas, live and linked.
// Drag across any time series to pick a step range (step_range); every time series shades it, and
// the alpha distribution and the histograms (summed in Python) show that range. The layer picker
// (layer) switches the layer-wise instruments. Each instrument root carries data-instrument and
// data-points (what it drew); histograms also data-total and data-steps, for tests and tools.
// Instruments the run's configuration does not track take no space.
import { defineView } from "./common/view.js";
import { h, svg, makeTooltip } from "./common/dom.js";
import { scaleLinear, scaleLog, extent, formatValue as fmt } from "./common/axes.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {import("./common/axes.js").Scale} Scale
 * @typedef {{ run: string, steps: Serialised | null, series_names: string[], series: Serialised | null,
 *   layers: string[], layer_series_names: string[], layer_series: Serialised | null, layer: string,
 *   step_range: number[], hist1d: Serialised | null, hist1d_range: number[], hist1d_steps: number,
 *   hist2d: Serialised | null, hist2d_range: number[][], hist2d_steps: number, tracked: string[],
 *   notes: {hess_diag?: string, skipped?: Record<string, string>}, height: number }} CockpitModel
 * @typedef {{ key: string, title: string, kind: string, series?: string[], log?: boolean, layerwise?: boolean,
 *   metrics?: boolean, unit?: string, needs?: string[] }} Instrument
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

// around each chart: the legend row on top, tick labels and the axis label left and below; a second
// axis (the user's metrics) gets its own margin on the right, so no label is drawn over the lines
const MARGIN = { left: 54, right: 10, rightAxis: 44, top: 18, bottom: 30 };
const KNOWN = new Set(["Loss", "GradNorm", "Distance", "UpdateSize", "NormTest", "InnerTest", "OrthoTest",
  "HessMaxEV", "HessTrace", "TICDiag", "TICTrace", "Alpha", "lr", "MeanGSNR", "CABS", "EarlyStopping"]);
// a positive series whose largest value is this many times its median reads on a log scale
const SPIKY = 100;

// key, title, kind, series shown, the y axis' label; "metrics" adds the user's own logged numbers
/** @type {Instrument[]} */
const INSTRUMENTS = [
  { key: "alpha", title: "Step size α", kind: "alpha", needs: ["Alpha"] },
  { key: "gauge", title: "Gradient tests", kind: "gauge", needs: ["NormTest", "InnerTest", "OrthoTest"] },
  { key: "maxev", title: "Max eigenvalue", kind: "line", series: ["HessMaxEV"], log: true, unit: "λmax of H" },
  { key: "distance", title: "Distance & update size", kind: "line", series: ["Distance", "UpdateSize"],
    layerwise: true, unit: "L2 norm" },
  { key: "tests", title: "Gradient tests over steps", kind: "line", series: ["NormTest", "InnerTest", "OrthoTest"],
    unit: "test ratio" },
  { key: "trace", title: "Hessian trace", kind: "line", series: ["HessTrace"], layerwise: true, unit: "tr(H)" },
  { key: "gradnorm", title: "Gradient norm", kind: "line", series: ["GradNorm"], layerwise: true, unit: "‖∇L‖₂" },
  { key: "hist1d", title: "Gradient histogram", kind: "hist1d", needs: ["GradHist1d"] },
  { key: "tic", title: "TIC", kind: "line", series: ["TICDiag", "TICTrace"], unit: "TIC" },
  { key: "loss", title: "Loss & accuracy", kind: "line", series: ["Loss"], metrics: true, unit: "loss" },
  { key: "hist2d", title: "Gradient × parameter histogram", kind: "hist2d", needs: ["GradHist2d"] },
  { key: "lr", title: "Learning rate", kind: "line", series: ["lr"], unit: "learning rate" },
  { key: "other", title: "Other signals", kind: "line", series: ["MeanGSNR", "CABS", "EarlyStopping"],
    unit: "value" },
];

function ema(/** @type {ArrayLike<number>} */ values, alpha = 0.2) {
  // the reference's smoothing: exponential moving average over the finite values
  const out = new Float64Array(values.length).fill(NaN);
  let acc = NaN;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    acc = Number.isFinite(acc) ? alpha * v + (1 - alpha) * acc : v;
    out[i] = acc;
  }
  return out;
}

/** Whether positive values spike far above their median (a diverging loss): they read on a log scale. */
function spiky(/** @type {ArrayLike<number>[]} */ arrays) {
  const values = [];
  for (const a of arrays) for (let i = 0; i < a.length; i++) if (Number.isFinite(a[i])) values.push(a[i]);
  if (values.length < 3 || values.some((v) => v <= 0)) return false;
  values.sort((a, b) => a - b);
  return values[values.length - 1] > SPIKY * values[Math.floor(values.length / 2)];
}

const linear = scaleLinear;

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
  /** @type {Map<string, {inst: Instrument, card: HTMLElement, body: HTMLElement, sub: HTMLElement,
   *   logButton: HTMLElement | null, log: boolean | null}>} */
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

  function inRange(/** @type {number} */ step, /** @type {number[]} */ range) {
    return range.length !== 2 || (step >= range[0] && step <= range[1]);
  }

  /** Whether the run's configuration tracks what an instrument shows (the loss card always shows). */
  function isTracked(/** @type {Instrument} */ inst, /** @type {ReturnType<typeof data>} */ d) {
    if (inst.metrics) return true;
    const needs = inst.needs || inst.series || [];
    return needs.some((name) => d.tracked.has(name));
  }

  // ------------------------------------------------------------------ the instruments
  function size(/** @type {HTMLElement} */ body) {
    const width = Math.max(160, body.clientWidth || (el.clientWidth - 40) / 3);
    const height = Math.max(130, Math.floor((model.get("height") - 90) / 5) - 28);
    return { width, height };
  }

  function lineChart(entry, d) {
    const { inst, body, card, sub, logButton } = entry;
    const { width, height } = size(body);
    let names = inst.series.filter((s) => d.series.has(s));
    if (inst.metrics) names = names.concat(d.names.filter((s) => !KNOWN.has(s)));
    const useLayer = inst.layerwise && d.layer;
    const lines = names.map((name, i) => ({
      name,
      values: useLayer && d.series.has(`layer:${name}`) ? d.series.get(`layer:${name}`) : d.series.get(name),
      color: COLORS[i],
      right: inst.metrics && !KNOWN.has(name),
    }));
    sub.textContent = useLayer ? `layer ${d.layer}` : "";
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const left = lines.filter((l) => !l.right);
    const right = lines.filter((l) => l.right);
    const log = entry.log ?? (inst.log || spiky(left.map((l) => l.values)));
    logButton.setAttribute("aria-pressed", String(log));
    card.dataset.scale = log ? "log" : "linear";
    const yl = extent(left.map((l) => l.values), log);
    if (!d.steps.length || !yl) {
      card.dataset.points = "0";
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no values yet";
      return;
    }
    const m = { ...MARGIN, right: right.length ? MARGIN.rightAxis : MARGIN.right };
    const x = linear(d.steps[0], d.steps[d.steps.length - 1], m.left, width - m.right);
    const y = (log ? scaleLog : linear)(yl[0], yl[1], height - m.bottom, m.top);
    const yrExtent = right.length ? extent(right.map((l) => l.values), false) || [0, 1] : null;
    const yr = yrExtent ? linear(yrExtent[0], yrExtent[1], height - m.bottom, m.top) : null;
    const yLabel = log ? `${inst.unit} (log)` : inst.unit;
    const yrLabel = right.map((l) => l.name).join(", ");
    drawAxes(root, { x, y, yr, width, height, m, xLabel: "step", yLabel, yrLabel });
    card.dataset.ticks = [...root.querySelectorAll("text[data-axis='y']")].map((t) => t.textContent).join("|");
    if (d.range.length === 2) {
      const x0 = x(Math.max(d.range[0], x.domain[0]));
      const x1 = x(Math.min(d.range[1], x.domain[1]));
      root.appendChild(svg("rect", { class: "av-range", x: x0, y: m.top, width: Math.max(1, x1 - x0),
        height: height - m.top - m.bottom }));
    }
    let points = 0;
    for (const line of lines) {
      const ys = line.right ? yr : y;
      const skip = (/** @type {number} */ v) => !Number.isFinite(v) || (log && !line.right && v <= 0);
      let dots = "";
      let path = "";
      const smooth = ema(line.values);
      for (let i = 0; i < d.steps.length; i++) {
        const v = line.values[i];
        if (!skip(v)) {
          dots += `M${x(d.steps[i]).toFixed(1)},${ys(v).toFixed(1)}h0`;
          points++;
        }
        const s = smooth[i];
        if (!skip(s)) path += `${path ? "L" : "M"}${x(d.steps[i]).toFixed(1)},${ys(s).toFixed(1)}`;
      }
      root.appendChild(svg("path", { d: dots, stroke: line.color, "stroke-width": 3, "stroke-linecap": "round",
        "stroke-opacity": 0.45, fill: "none" }));
      root.appendChild(svg("path", { d: path, stroke: line.color, "stroke-width": 1.5, fill: "none" }));
    }
    legend(root, lines, width, m);
    card.dataset.points = String(points);
    brush(root, x, height, d, lines, m);
  }

  /** Axes with round ticks (labels that tell neighbours apart), grid lines and axis labels. */
  function drawAxes(root, { x, y, yr, width, height, m, xLabel, yLabel, yrLabel }) {
    const bottom = height - m.bottom;
    const xTicks = x.ticks(Math.max(2, Math.floor((width - m.left - m.right) / 60)));
    const xText = x.format(xTicks);
    for (const t of xTicks) {
      root.appendChild(svg("line", { class: "av-axis", x1: x(t), x2: x(t), y1: bottom, y2: bottom + 3 }));
      const label = svg("text", { x: x(t), y: bottom + 13, "text-anchor": "middle", "data-axis": "x" });
      label.textContent = xText(t);
      root.appendChild(label);
    }
    const yTicks = y.ticks(Math.max(2, Math.floor((height - m.top - m.bottom) / 28)));
    const yText = y.format(yTicks);
    for (const t of yTicks) {
      root.appendChild(svg("line", { class: "av-gridline", x1: m.left, x2: width - m.right, y1: y(t), y2: y(t) }));
      const label = svg("text", { x: m.left - 4, y: y(t) + 3, "text-anchor": "end", "data-axis": "y" });
      label.textContent = yText(t);
      root.appendChild(label);
    }
    if (yr) {
      const rTicks = yr.ticks(Math.max(2, Math.floor((height - m.top - m.bottom) / 28)));
      const rText = yr.format(rTicks);
      for (const t of rTicks) {
        const label = svg("text", { x: width - m.right + 4, y: yr(t) + 3, "text-anchor": "start", "data-axis": "yr" });
        label.textContent = rText(t);
        root.appendChild(label);
      }
    }
    root.appendChild(svg("line", { class: "av-axis", x1: m.left, x2: width - m.right, y1: bottom, y2: bottom }));
    root.appendChild(svg("line", { class: "av-axis", x1: m.left, x2: m.left, y1: m.top, y2: bottom }));
    const xl = svg("text", { class: "av-axis-label", x: width - m.right, y: height - 3, "text-anchor": "end",
      "data-role": "x-label" });
    xl.textContent = xLabel;
    root.appendChild(xl);
    if (yLabel) {
      const mid = (m.top + bottom) / 2;
      const yl = svg("text", { class: "av-axis-label", x: 10, y: mid, "text-anchor": "middle",
        transform: `rotate(-90 10 ${mid})`, "data-role": "y-label" });
      yl.textContent = yLabel;
      root.appendChild(yl);
    }
    if (yr && yrLabel) {
      const mid = (m.top + bottom) / 2;
      const rl = svg("text", { class: "av-axis-label", x: width - 4, y: mid, "text-anchor": "middle",
        transform: `rotate(90 ${width - 4} ${mid})`, "data-role": "yr-label" });
      rl.textContent = yrLabel;
      root.appendChild(rl);
    }
  }

  function legend(root, lines, width, m = MARGIN) {
    // left to right in the top margin, above the plot: never over a line
    let lx = m.left;
    for (const line of lines) {
      const label = svg("text", { x: lx, y: m.top - 6, "text-anchor": "start", "data-role": "legend" });
      label.style.fill = line.color;
      label.textContent = line.name;
      root.appendChild(label);
      const measured = label.getComputedTextLength ? label.getComputedTextLength() : 0;
      lx += Math.max(measured, line.name.length * 6) + 10;
      if (lx > width) break;
    }
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

  function alphaChart(entry, d) {
    // the alpha distribution over the unit parabola: all steps of the range vs its last 10 %
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const values = d.series.get("Alpha");
    const picked = [];
    for (let i = 0; values && i < d.steps.length; i++) {
      if (Number.isFinite(values[i]) && inRange(d.steps[i], d.range)) picked.push(values[i]);
    }
    card.dataset.points = String(picked.length);
    const last = picked.slice(Math.floor(picked.length * 0.9));
    card.dataset.last = String(last.length);
    sub.textContent = picked.length ? `median ${fmt(median(picked))}` : "";
    const x = linear(-1.5, 1.5, 8, width - 8);
    const y = linear(0, 2.25, height - MARGIN.bottom, MARGIN.top + 10);
    let parabola = "";
    for (let i = 0; i <= 60; i++) {
      const a = -1.5 + (3 * i) / 60;
      parabola += `${i ? "L" : "M"}${x(a).toFixed(1)},${y(a * a).toFixed(1)}`;
    }
    const bottom = height - MARGIN.bottom;
    root.appendChild(svg("line", { class: "av-axis", x1: x(-1.5), x2: x(1.5), y1: bottom, y2: bottom }));
    for (const t of [-1, 0, 1]) {
      root.appendChild(svg("line", { class: "av-axis", x1: x(t), x2: x(t), y1: bottom, y2: bottom + 3 }));
      root.appendChild(svg("text", { x: x(t), y: bottom + 13, "text-anchor": "middle" })).textContent = String(t);
    }
    const axisLabel = svg("text", { class: "av-axis-label", x: width - 8, y: height - 3, "text-anchor": "end",
      "data-role": "x-label" });
    axisLabel.textContent = "α: the step's position on the local parabola";
    root.appendChild(axisLabel);
    root.appendChild(svg("path", { d: parabola, stroke: "var(--av-fg-muted)", "stroke-dasharray": "3 2",
      fill: "none" }));
    if (!picked.length) {
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no values in range";
      return;
    }
    const bins = 30;
    const histo = (arr) => {
      const counts = new Array(bins).fill(0);
      for (const v of arr) {
        const clipped = Math.max(-1.5, Math.min(1.5, v));
        counts[Math.min(bins - 1, Math.max(0, Math.floor(((clipped + 1.5) / 3) * bins)))]++;
      }
      return counts.map((c) => c / arr.length);
    };
    const peak = Math.max(...histo(picked), ...histo(last));
    const bar = (counts, color, opacity) => {
      counts.forEach((c, i) => {
        if (!c) return;
        const hgt = (c / peak) * (height - MARGIN.bottom - MARGIN.top - 24);
        root.appendChild(svg("rect", { x: x(-1.5 + (3 * i) / bins) + 0.5, width: Math.max(1, (width - 16) / bins - 1),
          y: height - MARGIN.bottom - hgt, height: hgt, fill: color, "fill-opacity": opacity }));
      });
    };
    bar(histo(picked), COLORS[0], 0.45);
    bar(histo(last), COLORS[1], 0.55);
    legend(root, [{ name: "all", color: COLORS[0] }, { name: "last 10 %", color: COLORS[1] }], width);
  }

  function symlog(v) {
    return Math.sign(v) * Math.log10(1 + Math.abs(v));
  }

  function gaugeChart(entry, d) {
    // the reference's gauge: a circle of radius NormTest, a band of half-width InnerTest along the
    // gradient (vertical axis) and OrthoTest across it, on symlog axes; fainter: earlier steps
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const get = (name) => d.series.get(name);
    const [norm, inner, ortho] = [get("NormTest"), get("InnerTest"), get("OrthoTest")];
    const idx = [];
    for (let i = 0; i < d.steps.length; i++) {
      if (inRange(d.steps[i], d.range) && [norm, inner, ortho].some((s) => s && Number.isFinite(s[i]))) idx.push(i);
    }
    card.dataset.points = String(idx.length);
    if (!idx.length) {
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no values in range";
      return;
    }
    const cur = idx[idx.length - 1];
    const val = (s, i) => (s && Number.isFinite(s[i]) ? s[i] : NaN);
    let reach = 0;
    for (const i of idx) {
      for (const s of [norm, inner, ortho]) if (Number.isFinite(val(s, i))) reach = Math.max(reach, val(s, i));
    }
    const lim = symlog(reach * 1.2 || 1);
    const side = Math.min(width, height - 4);
    const cx = width / 2;
    const cy = (height - 4) / 2;
    const sc = (v) => (symlog(v) / lim) * (side / 2);
    root.appendChild(svg("line", { class: "av-axis", x1: cx - side / 2, x2: cx + side / 2, y1: cy, y2: cy }));
    root.appendChild(svg("line", { class: "av-axis", x1: cx, x2: cx, y1: cy - side / 2, y2: cy + side / 2 }));
    const o = val(ortho, cur);
    const n = val(inner, cur);
    if (Number.isFinite(o)) {
      root.appendChild(svg("rect", { x: cx - sc(o), y: cy - side / 2, width: 2 * sc(o), height: side,
        fill: COLORS[2], "fill-opacity": 0.18 }));
    }
    if (Number.isFinite(n)) {
      root.appendChild(svg("rect", { x: cx - side / 2, y: cy - sc(n), width: side, height: 2 * sc(n),
        fill: COLORS[1], "fill-opacity": 0.18 }));
    }
    for (const i of idx.slice(-20, -1)) {
      const r = val(norm, i);
      if (Number.isFinite(r)) {
        root.appendChild(svg("circle", { cx, cy, r: sc(r), fill: "none", stroke: COLORS[0], "stroke-opacity": 0.15 }));
      }
    }
    const r = val(norm, cur);
    if (Number.isFinite(r)) {
      root.appendChild(svg("circle", { cx, cy, r: sc(r), fill: "none", stroke: COLORS[0], "stroke-width": 2 }));
    }
    sub.textContent = `step ${d.steps[cur]}`;
    legend(root, [{ name: `norm ${fmt(r)}`, color: COLORS[0] }, { name: `inner ${fmt(n)}`, color: COLORS[1] },
      { name: `ortho ${fmt(o)}`, color: COLORS[2] }], width);
  }

  function hist1dChart(entry) {
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const hist = kit.array("hist1d");
    const steps = model.get("hist1d_steps");
    card.dataset.steps = String(steps);
    if (!hist || !steps) {
      card.dataset.total = "0";
      card.dataset.points = "0";
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no steps in range";
      return;
    }
    const [lo, hi] = model.get("hist1d_range");
    const counts = hist.data;
    let total = 0;
    let nonzero = 0;
    let peak = 0;
    for (const c of counts) { total += c; if (c > 0) nonzero++; peak = Math.max(peak, Math.log10(1 + c)); }
    card.dataset.total = String(total);
    card.dataset.points = String(nonzero);
    const edge = counts[0] + counts[counts.length - 1];
    const stepsText = `${steps} step${steps === 1 ? "" : "s"}`;
    sub.textContent = `${stepsText} · ${(100 * edge / total).toFixed(1)} % clipped at the edges`;
    const m = MARGIN;
    const x = linear(lo, hi, m.left, width - m.right);
    const y = linear(0, peak || 1, height - m.bottom, m.top);
    drawAxes(root, { x, y, yr: null, width, height, m, xLabel: "gradient element", yLabel: "log₁₀(1 + count)",
      yrLabel: "" });
    const w = (width - m.left - m.right) / counts.length;
    const bottom = height - m.bottom;
    let path = "";
    counts.forEach((c, i) => {
      if (!c) return;
      const top = y(Math.log10(1 + c));
      path += `M${(m.left + i * w).toFixed(1)},${bottom.toFixed(1)}V${top.toFixed(1)}`;
      path += `h${Math.max(0.8, w - 0.5).toFixed(1)}V${bottom}`;
    });
    root.appendChild(svg("path", { d: path, fill: COLORS[0], "fill-opacity": 0.6, stroke: "none" }));
  }

  function hist2dChart(entry) {
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const hist = kit.array("hist2d");
    const steps = model.get("hist2d_steps");
    card.dataset.steps = String(steps);
    if (!hist || !steps) {
      card.dataset.total = "0";
      card.dataset.points = "0";
      const root = svg("svg", { width, height });
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no steps in range";
      body.replaceChildren(root);
      return;
    }
    const [gb, pb] = hist.shape;
    const [[glo, ghi], [plo, phi]] = model.get("hist2d_range");
    const canvas = h("canvas", { width: gb, height: pb, "data-role": "hist2d-canvas" });
    Object.assign(canvas.style, { width: `${width - MARGIN.left - 8}px`, height: `${height - MARGIN.bottom - 4}px`,
      imageRendering: "pixelated", marginLeft: `${MARGIN.left}px`, display: "block" });
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(gb, pb);
    let peak = 0;
    let total = 0;
    let nonzero = 0;
    for (const c of hist.data) { total += c; if (c > 0) nonzero++; peak = Math.max(peak, Math.log10(1 + c)); }
    for (let gi = 0; gi < gb; gi++) {
      for (let pi = 0; pi < pb; pi++) {
        const c = hist.data[gi * pb + pi];
        const t = peak ? Math.log10(1 + c) / peak : 0;
        const o = ((pb - 1 - pi) * gb + gi) * 4; // parameter value upwards
        const [r, g, b] = viridis(t);
        img.data[o] = r; img.data[o + 1] = g; img.data[o + 2] = b; img.data[o + 3] = c > 0 ? 255 : 0;
      }
    }
    ctx.putImageData(img, 0, 0);
    card.dataset.total = String(total);
    card.dataset.points = String(nonzero);
    const stepsText = `${steps} step${steps === 1 ? "" : "s"}`;
    sub.textContent = `${stepsText} · x: gradient [${glo}, ${ghi}] · y: parameter [${plo}, ${phi}]`;
    body.replaceChildren(canvas);
  }

  function viridis(t) {
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const s = Math.min(stops.length - 1.001, Math.max(0, t * (stops.length - 1)));
    const i = Math.floor(s);
    const f = s - i;
    return stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
  }

  function median(arr) {
    const s = [...arr].sort((a, b) => a - b);
    const m = Math.floor(s.length / 2);
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
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
    count.textContent = `${d.steps.length} steps tracked`;
    let shown = 0;
    for (const entry of cards.values()) {
      const { inst, card } = entry;
      if (!isTracked(inst, d)) { // not in this run's configuration: no card, no space
        card.style.display = "none";
        continue;
      }
      card.style.display = "";
      shown++;
      if (inst.kind === "line") lineChart(entry, d);
      else if (inst.kind === "alpha") alphaChart(entry, d);
      else if (inst.kind === "gauge") gaugeChart(entry, d);
      else if (inst.kind === "hist1d") hist1dChart(entry);
      else if (inst.kind === "hist2d") hist2dChart(entry);
    }
    const notes = model.get("notes") || {};
    const lines = [];
    if (notes.hess_diag) lines.push(`Hessian diagonal: ${notes.hess_diag}`);
    for (const [q, why] of Object.entries(notes.skipped || {})) lines.push(`${q} skipped: ${why}`);
    footer.textContent = lines.join("\n");
    el.dataset.steps = String(d.steps.length);
    el.dataset.layer = d.layer;
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
  kit.on("steps series layer_series layer step_range hist1d hist2d notes tracked height colours", schedule);
  kit.onResize(el, schedule);
  draw();
}

// CockpitPanel: the training instruments of a cockpit log, drawn in SVG/canvas, live and linked.
// Drag across any time series to pick a step range (step_range); every time series shades it, and
// the alpha distribution and the histograms (summed in Python) show that range. The layer picker
// (layer) switches the layer-wise instruments. Each instrument root carries data-instrument and
// data-points (what it drew); histograms also data-total and data-steps, for tests and tools.
import { applyTheme } from "./common/theme.js";
import { h, svg, makeTooltip } from "./common/dom.js";
import { decodeArray } from "./common/arrays.js";

const CSS = `
.activis-cockpit .av-grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px; }
.activis-cockpit .av-card { border: 1px solid var(--av-border-soft); border-radius: 4px; padding: 4px 6px;
  position: relative; min-width: 0; }
.activis-cockpit .av-card h4 { margin: 0 0 2px 0; font-size: 12px; font-weight: 600; color: var(--av-fg); }
.activis-cockpit .av-card .av-sub { font-size: 11px; color: var(--av-fg-muted); margin-left: 6px; font-weight: 400; }
.activis-cockpit svg text { fill: var(--av-fg-muted); font-size: 10px; }
.activis-cockpit .av-axis { stroke: var(--av-border); }
.activis-cockpit .av-range { fill: var(--av-accent); fill-opacity: 0.12; stroke: var(--av-accent); stroke-opacity: 0.5; }
.activis-cockpit .av-footer { font-size: 11px; color: var(--av-fg-muted); padding-top: 4px; white-space: pre-wrap; }
.activis-cockpit .av-empty { font-size: 11px; color: var(--av-fg-muted); }
`;

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
const MARGIN = { left: 44, right: 8, top: 6, bottom: 18 };
const KNOWN = new Set(["Loss", "GradNorm", "Distance", "UpdateSize", "NormTest", "InnerTest", "OrthoTest",
  "HessMaxEV", "HessTrace", "TICDiag", "TICTrace", "Alpha", "lr", "MeanGSNR", "CABS", "EarlyStopping"]);

// key, title, kind, series shown; "metrics" means the user's own logged numbers (accuracy, ...)
const INSTRUMENTS = [
  { key: "alpha", title: "Step size α", kind: "alpha" },
  { key: "gauge", title: "Gradient tests", kind: "gauge" },
  { key: "maxev", title: "Max eigenvalue", kind: "line", series: ["HessMaxEV"], log: true },
  { key: "distance", title: "Distance & update size", kind: "line", series: ["Distance", "UpdateSize"], layerwise: true },
  { key: "tests", title: "Gradient tests over steps", kind: "line", series: ["NormTest", "InnerTest", "OrthoTest"] },
  { key: "trace", title: "Hessian trace", kind: "line", series: ["HessTrace"], layerwise: true },
  { key: "gradnorm", title: "Gradient norm", kind: "line", series: ["GradNorm"], layerwise: true },
  { key: "hist1d", title: "Gradient histogram", kind: "hist1d" },
  { key: "tic", title: "TIC", kind: "line", series: ["TICDiag", "TICTrace"] },
  { key: "loss", title: "Loss & accuracy", kind: "line", series: ["Loss"], metrics: true },
  { key: "hist2d", title: "Gradient × parameter histogram", kind: "hist2d" },
  { key: "lr", title: "Learning rate", kind: "line", series: ["lr"] },
  { key: "other", title: "Other signals", kind: "line", series: ["MeanGSNR", "CABS", "EarlyStopping"], optional: true },
];

let styled = false;
function addStyle() {
  if (styled || document.getElementById("activis-cockpit-style")) return;
  const style = document.createElement("style");
  style.id = "activis-cockpit-style";
  style.textContent = CSS;
  document.head.appendChild(style);
  styled = true;
}

function ema(values, alpha = 0.2) {
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

function fmt(v) {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e4)) return v.toExponential(2);
  return Number(v.toPrecision(3)).toString();
}

function linear(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  const f = (v) => r0 + ((v - d0) / span) * (r1 - r0);
  f.invert = (p) => d0 + ((p - r0) / (r1 - r0)) * span;
  f.domain = [d0, d1];
  return f;
}

function extent(arrays, positiveOnly) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) {
    for (const v of a) {
      if (!Number.isFinite(v) || (positiveOnly && v <= 0)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo === Infinity) return null;
  if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
  return [lo, hi];
}

function render({ model, el }) {
  applyTheme(el);
  addStyle();
  el.classList.add("activis-cockpit");
  const title = h("strong", { text: "" });
  const picker = h("select", { "data-role": "layer-picker", title: "Layer for the layer-wise instruments" });
  const rangeLabel = h("span", { "data-role": "range-label", style: { color: "var(--av-fg-muted)" } });
  const clear = h("button", { text: "All steps", "data-role": "clear-range", title: "Clear the step range" });
  const count = h("span", { style: { color: "var(--av-fg-muted)", marginLeft: "auto" } });
  const toolbar = h("div", { className: "activis-toolbar" }, [title, h("span", { text: "layer" }), picker, rangeLabel, clear, count]);
  const grid = h("div", { className: "av-grid" });
  const footer = h("div", { className: "av-footer" });
  el.append(toolbar, grid, footer);
  const tooltip = makeTooltip(el);
  const cards = new Map();
  for (const inst of INSTRUMENTS) {
    const head = h("h4", { text: inst.title });
    const sub = h("span", { className: "av-sub" });
    head.appendChild(sub);
    const body = h("div");
    const card = h("div", { className: "av-card", "data-instrument": inst.key }, [head, body]);
    cards.set(inst.key, { inst, card, body, sub });
    grid.appendChild(card);
  }

  picker.addEventListener("change", () => {
    model.set("layer", picker.value);
    model.save_changes();
  });
  clear.addEventListener("click", () => setRange([]));

  function setRange(range) {
    model.set("step_range", range);
    model.save_changes();
    schedule();
  }

  // ------------------------------------------------------------------ data from the model
  function data() {
    const steps = decodeArray(model.get("steps"));
    const matrix = decodeArray(model.get("series"));
    const names = model.get("series_names");
    const n = steps ? steps.data.length : 0;
    const series = new Map();
    names.forEach((name, i) => series.set(name, matrix.data.subarray(i * n, (i + 1) * n)));
    const layers = model.get("layers");
    const layer = model.get("layer");
    const li = layers.indexOf(layer);
    if (li >= 0) {
      const ls = decodeArray(model.get("layer_series"));
      model.get("layer_series_names").forEach((name, qi) => {
        const off = (qi * layers.length + li) * n;
        series.set(`layer:${name}`, ls.data.subarray(off, off + n));
      });
    }
    const range = model.get("step_range");
    return { steps: steps ? steps.data : new Int32Array(0), series, names, layer: li >= 0 ? layer : "", range };
  }

  function inRange(step, range) {
    return range.length !== 2 || (step >= range[0] && step <= range[1]);
  }

  // ------------------------------------------------------------------ the instruments
  function size(body) {
    const width = Math.max(160, body.clientWidth || (el.clientWidth - 40) / 3);
    const height = Math.max(120, Math.floor((model.get("height") - 90) / 5) - 28);
    return { width, height };
  }

  function lineChart(entry, d) {
    const { inst, body, card, sub } = entry;
    const { width, height } = size(body);
    let names = inst.series.filter((s) => d.series.has(s));
    if (inst.metrics) names = names.concat(d.names.filter((s) => !KNOWN.has(s)));
    const useLayer = inst.layerwise && d.layer;
    const lines = names.map((name, i) => ({
      name,
      values: useLayer && d.series.has(`layer:${name}`) ? d.series.get(`layer:${name}`) : d.series.get(name),
      color: COLORS[i % COLORS.length],
      right: inst.metrics && !KNOWN.has(name),
    }));
    sub.textContent = useLayer ? `layer ${d.layer}` : "";
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const left = lines.filter((l) => !l.right);
    const right = lines.filter((l) => l.right);
    const yl = extent(left.map((l) => l.values), inst.log);
    if (!d.steps.length || !yl) {
      card.dataset.points = "0";
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = lines.length ? "no values yet" : "not tracked";
      return;
    }
    const x = linear(d.steps[0], d.steps[d.steps.length - 1], MARGIN.left, width - MARGIN.right);
    const yScale = (ext, log) => {
      if (log) {
        const f = linear(Math.log10(ext[0]), Math.log10(ext[1]), height - MARGIN.bottom, MARGIN.top);
        const g = (v) => f(Math.log10(v));
        g.ticks = [ext[0], Math.sqrt(ext[0] * ext[1]), ext[1]];
        return g;
      }
      const g = linear(ext[0], ext[1], height - MARGIN.bottom, MARGIN.top);
      g.ticks = [ext[0], (ext[0] + ext[1]) / 2, ext[1]];
      return g;
    };
    const y = yScale(yl, inst.log);
    const yr = right.length ? yScale(extent(right.map((l) => l.values), false) || [0, 1], false) : null;
    drawAxes(root, x, y, yr, width, height);
    if (d.range.length === 2) {
      const x0 = x(Math.max(d.range[0], x.domain[0]));
      const x1 = x(Math.min(d.range[1], x.domain[1]));
      root.appendChild(svg("rect", { class: "av-range", x: x0, y: MARGIN.top, width: Math.max(1, x1 - x0), height: height - MARGIN.top - MARGIN.bottom }));
    }
    let points = 0;
    for (const line of lines) {
      const ys = line.right ? yr : y;
      let dots = "";
      let path = "";
      const smooth = ema(line.values);
      for (let i = 0; i < d.steps.length; i++) {
        const v = line.values[i];
        if (Number.isFinite(v) && !(inst.log && v <= 0)) {
          dots += `M${x(d.steps[i]).toFixed(1)},${ys(v).toFixed(1)}h0`;
          points++;
        }
        const s = smooth[i];
        if (Number.isFinite(s) && !(inst.log && s <= 0)) path += `${path ? "L" : "M"}${x(d.steps[i]).toFixed(1)},${ys(s).toFixed(1)}`;
      }
      root.appendChild(svg("path", { d: dots, stroke: line.color, "stroke-width": 3, "stroke-linecap": "round", "stroke-opacity": 0.45, fill: "none" }));
      root.appendChild(svg("path", { d: path, stroke: line.color, "stroke-width": 1.5, fill: "none" }));
    }
    legend(root, lines, width);
    card.dataset.points = String(points);
    brush(root, x, width, height, d, lines);
  }

  function drawAxes(root, x, y, yr, width, height) {
    const bottom = height - MARGIN.bottom;
    root.appendChild(svg("line", { class: "av-axis", x1: MARGIN.left, x2: width - MARGIN.right, y1: bottom, y2: bottom }));
    root.appendChild(svg("line", { class: "av-axis", x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: bottom }));
    for (const t of [x.domain[0], x.domain[1]]) {
      const label = svg("text", { x: x(t), y: height - 4, "text-anchor": t === x.domain[0] ? "start" : "end" });
      label.textContent = String(Math.round(t));
      root.appendChild(label);
    }
    for (const t of y.ticks) {
      const label = svg("text", { x: MARGIN.left - 3, y: y(t) + 3, "text-anchor": "end" });
      label.textContent = fmt(t);
      root.appendChild(label);
    }
    if (yr) {
      for (const t of yr.ticks) {
        const label = svg("text", { x: width - MARGIN.right - 2, y: yr(t) - 2, "text-anchor": "end" });
        label.textContent = fmt(t);
        root.appendChild(label);
      }
    }
  }

  function legend(root, lines, width) {
    // left to right along the top, each name measured once drawn
    let lx = MARGIN.left + 6;
    for (const line of lines) {
      const label = svg("text", { x: lx, y: MARGIN.top + 9, "text-anchor": "start" });
      label.style.fill = line.color;
      label.textContent = line.name;
      root.appendChild(label);
      const measured = label.getComputedTextLength ? label.getComputedTextLength() : 0;
      lx += Math.max(measured, line.name.length * 6) + 10;
      if (lx > width) break;
    }
  }

  function brush(root, x, width, height, d, lines) {
    // drag across the plot to choose a step range; a click without a drag clears it
    const overlay = svg("rect", { x: MARGIN.left, y: MARGIN.top, width: width - MARGIN.left - MARGIN.right,
      height: height - MARGIN.top - MARGIN.bottom, fill: "transparent", "data-role": "brush", style: "cursor: crosshair" });
    root.appendChild(overlay);
    let start = null;
    let band = null;
    const local = (ev) => ev.clientX - root.getBoundingClientRect().left;
    overlay.addEventListener("mousedown", (ev) => {
      start = local(ev);
      band = svg("rect", { class: "av-range", x: start, y: MARGIN.top, width: 0, height: height - MARGIN.top - MARGIN.bottom });
      root.appendChild(band);
      ev.preventDefault();
    });
    overlay.addEventListener("mousemove", (ev) => {
      const px = local(ev);
      if (start !== null && band) {
        band.setAttribute("x", Math.min(start, px));
        band.setAttribute("width", Math.abs(px - start));
      }
      const step = x.invert(px);
      let best = 0;
      for (let i = 1; i < d.steps.length; i++) if (Math.abs(d.steps[i] - step) < Math.abs(d.steps[best] - step)) best = i;
      const box = el.getBoundingClientRect();
      tooltip.show([`step ${d.steps[best]}`, ...lines.map((l) => `${l.name}: ${fmt(l.values[best])}`)],
        ev.clientX - box.left, ev.clientY - box.top);
    });
    const finish = (ev) => {
      if (start === null) return;
      const end = local(ev);
      const [a, b] = [x.invert(Math.min(start, end)), x.invert(Math.max(start, end))];
      const moved = Math.abs(end - start) >= 3;
      start = null;
      const picked = moved ? Array.from(d.steps).filter((s) => s >= a && s <= b) : [];
      setRange(picked.length ? [picked[0], picked[picked.length - 1]] : []);
    };
    overlay.addEventListener("mouseup", finish);
    overlay.addEventListener("mouseleave", (ev) => { tooltip.hide(); if (start !== null) finish(ev); });
  }

  function alphaChart(entry, d) {
    // the alpha distribution over the unit parabola: all steps of the range vs its last 10 %
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const values = d.series.get("Alpha");
    const picked = [];
    if (values) for (let i = 0; i < d.steps.length; i++) if (Number.isFinite(values[i]) && inRange(d.steps[i], d.range)) picked.push(values[i]);
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
    root.appendChild(svg("line", { class: "av-axis", x1: x(-1.5), x2: x(1.5), y1: height - MARGIN.bottom, y2: height - MARGIN.bottom }));
    for (const t of [-1, 0, 1]) {
      root.appendChild(svg("line", { class: "av-axis", x1: x(t), x2: x(t), y1: height - MARGIN.bottom, y2: height - MARGIN.bottom + 3 }));
      root.appendChild(svg("text", { x: x(t), y: height - 4, "text-anchor": "middle" })).textContent = String(t);
    }
    root.appendChild(svg("path", { d: parabola, stroke: "var(--av-fg-muted)", "stroke-dasharray": "3 2", fill: "none" }));
    if (!picked.length) {
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = values ? "no values in range" : "not tracked";
      return;
    }
    const bins = 30;
    const histo = (arr) => {
      const counts = new Array(bins).fill(0);
      for (const v of arr) counts[Math.min(bins - 1, Math.max(0, Math.floor(((Math.max(-1.5, Math.min(1.5, v)) + 1.5) / 3) * bins)))]++;
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
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = norm || inner || ortho ? "no values in range" : "not tracked";
      return;
    }
    const cur = idx[idx.length - 1];
    const val = (s, i) => (s && Number.isFinite(s[i]) ? s[i] : NaN);
    let reach = 0;
    for (const i of idx) for (const s of [norm, inner, ortho]) if (Number.isFinite(val(s, i))) reach = Math.max(reach, val(s, i));
    const lim = symlog(reach * 1.2 || 1);
    const side = Math.min(width, height - 4);
    const cx = width / 2;
    const cy = (height - 4) / 2;
    const sc = (v) => (symlog(v) / lim) * (side / 2);
    root.appendChild(svg("line", { class: "av-axis", x1: cx - side / 2, x2: cx + side / 2, y1: cy, y2: cy }));
    root.appendChild(svg("line", { class: "av-axis", x1: cx, x2: cx, y1: cy - side / 2, y2: cy + side / 2 }));
    const o = val(ortho, cur);
    const n = val(inner, cur);
    if (Number.isFinite(o)) root.appendChild(svg("rect", { x: cx - sc(o), y: cy - side / 2, width: 2 * sc(o), height: side, fill: COLORS[2], "fill-opacity": 0.18 }));
    if (Number.isFinite(n)) root.appendChild(svg("rect", { x: cx - side / 2, y: cy - sc(n), width: side, height: 2 * sc(n), fill: COLORS[1], "fill-opacity": 0.18 }));
    for (const i of idx.slice(-20, -1)) {
      const r = val(norm, i);
      if (Number.isFinite(r)) root.appendChild(svg("circle", { cx, cy, r: sc(r), fill: "none", stroke: COLORS[0], "stroke-opacity": 0.15 }));
    }
    const r = val(norm, cur);
    if (Number.isFinite(r)) root.appendChild(svg("circle", { cx, cy, r: sc(r), fill: "none", stroke: COLORS[0], "stroke-width": 2 }));
    sub.textContent = `step ${d.steps[cur]}`;
    legend(root, [{ name: `norm ${fmt(r)}`, color: COLORS[0] }, { name: `inner ${fmt(n)}`, color: COLORS[1] },
      { name: `ortho ${fmt(o)}`, color: COLORS[2] }], width);
  }

  function hist1dChart(entry) {
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const root = svg("svg", { width, height });
    body.replaceChildren(root);
    const hist = decodeArray(model.get("hist1d"));
    const steps = model.get("hist1d_steps");
    card.dataset.steps = String(steps);
    if (!hist || !steps) {
      card.dataset.total = "0";
      card.dataset.points = "0";
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = hist ? "no steps in range" : "not tracked";
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
    sub.textContent = `${steps} step${steps === 1 ? "" : "s"} · log counts · ${(100 * edge / total).toFixed(1)} % clipped at the edges`;
    const x = linear(lo, hi, MARGIN.left, width - MARGIN.right);
    const y = linear(0, peak || 1, height - MARGIN.bottom, MARGIN.top);
    y.ticks = [0, peak / 2, peak];
    drawAxes(root, x, y, null, width, height);
    if (lo < 0 && hi > 0) root.appendChild(svg("text", { x: x(0), y: height - 4, "text-anchor": "middle" })).textContent = "0";
    const w = (width - MARGIN.left - MARGIN.right) / counts.length;
    let path = "";
    counts.forEach((c, i) => {
      if (!c) return;
      const top = y(Math.log10(1 + c));
      path += `M${(MARGIN.left + i * w).toFixed(1)},${(height - MARGIN.bottom).toFixed(1)}V${top.toFixed(1)}h${Math.max(0.8, w - 0.5).toFixed(1)}V${height - MARGIN.bottom}`;
    });
    root.appendChild(svg("path", { d: path, fill: COLORS[0], "fill-opacity": 0.6, stroke: "none" }));
    const yl = svg("text", { x: 4, y: MARGIN.top + 8 });
    yl.textContent = "log₁₀(1+n)";
    root.appendChild(yl);
  }

  function hist2dChart(entry) {
    const { body, card, sub } = entry;
    const { width, height } = size(body);
    const hist = decodeArray(model.get("hist2d"));
    const steps = model.get("hist2d_steps");
    card.dataset.steps = String(steps);
    if (!hist || !steps) {
      card.dataset.total = "0";
      card.dataset.points = "0";
      const root = svg("svg", { width, height });
      root.appendChild(svg("text", { x: 8, y: 16 })).textContent = hist ? "no steps in range" : "not tracked";
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
    sub.textContent = `${steps} step${steps === 1 ? "" : "s"} · x: gradient [${glo}, ${ghi}] · y: parameter [${plo}, ${phi}]`;
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
    const options = [h("option", { value: "", text: "whole network" }), ...layers.map((l) => h("option", { value: l, text: l }))];
    picker.replaceChildren(...options);
    picker.value = d.layer;
    rangeLabel.textContent = d.range.length === 2 ? `steps ${d.range[0]}–${d.range[1]}` : "all steps";
    count.textContent = `${d.steps.length} steps tracked`;
    for (const entry of cards.values()) {
      const { inst, card } = entry;
      if (inst.optional && !inst.series.some((s) => d.series.has(s))) {
        card.style.display = "none";
        continue;
      }
      card.style.display = "";
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
    el.dataset.renders = String(Number(el.dataset.renders || 0) + 1);
    el.dataset.ready = "1";
  }

  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  }
  for (const name of ["steps", "series", "layer_series", "layer", "step_range", "hist1d", "hist2d", "notes", "height"]) {
    model.on(`change:${name}`, schedule);
  }
  const resize = new ResizeObserver(schedule);
  resize.observe(el);
  draw();
  return () => resize.disconnect();
}

export default { render };

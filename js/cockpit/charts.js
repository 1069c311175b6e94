// @ts-check
// The cockpit's SVG and canvas drawing: axes, legends and every instrument (step series, the alpha
// distribution, the gradient gauge, the two histograms). Each chart draws into its card from the data
// it is given and marks what it drew (data-points, data-total, data-steps); the panel adds the brush.
import { h, svg } from "../common/dom.js";
import { scaleLinear as linear, scaleLog, extent } from "../common/axes.js";
import { formatNumber as fmt, formatPercent } from "../common/format.js";
import { KNOWN, ema, spiky, median } from "./instruments.js";

/**
 * @typedef {import("../common/arrays.js").Decoded} Decoded
 * @typedef {import("./instruments.js").Instrument} Instrument
 * @typedef {import("./instruments.js").CockpitData} CockpitData
 * @typedef {{ inst: Instrument, card: HTMLElement, body: HTMLElement, sub: HTMLElement,
 *   logButton: HTMLElement | null, log: boolean | null }} Card one instrument's card (log: null follows the data)
 * @typedef {{ width: number, height: number }} Size
 * @typedef {ArrayLike<string>} Colours the run colours, by index
 */

// around each chart: the legend row on top, tick labels and the axis label left and below; a second
// axis (the user's metrics) gets its own margin on the right, so no label is drawn over the lines
export const MARGIN = { left: 54, right: 10, rightAxis: 52, top: 18, bottom: 30 };

function inRange(/** @type {number} */ step, /** @type {number[]} */ range) {
  return range.length !== 2 || (step >= range[0] && step <= range[1]);
}

/** Axes with round ticks (labels that tell neighbours apart), grid lines and axis labels. */
export function drawAxes(root, { x, y, yr, width, height, m, xLabel, yLabel, yrLabel }) {
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
    // read bottom to top like the left title; rotated about its baseline at the edge, the letters lie inside
    // the chart (rotate(90) there put them past the edge, clipped, and upside down)
    const rl = svg("text", { class: "av-axis-label", x: width - 2, y: mid, "text-anchor": "middle",
      transform: `rotate(-90 ${width - 2} ${mid})`, "data-role": "yr-label" });
    rl.textContent = yrLabel;
    root.appendChild(rl);
  }
}

export function legend(root, lines, width, m = MARGIN) {
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

function symlog(v) {
  return Math.sign(v) * Math.log10(1 + Math.abs(v));
}

function viridis(t) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const s = Math.min(stops.length - 1.001, Math.max(0, t * (stops.length - 1)));
  const i = Math.floor(s);
  const f = s - i;
  return stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
}

/** Step series (dots, and their moving average as a line); returns what a brush needs, null when empty.
 * @param {Card} entry @param {CockpitData} d @param {Size} size @param {Colours} COLORS */
export function lineChart(entry, d, { width, height }, COLORS) {
  const { inst, body, card, sub, logButton } = entry;
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
    return null;
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
  return { root, x, height, lines, m };
}

/** @param {Card} entry @param {CockpitData} d @param {Size} size @param {Colours} COLORS */
export function alphaChart(entry, d, { width, height }, COLORS) {
  // the alpha distribution over the unit parabola: all steps of the range vs its last 10 %
  const { body, card, sub } = entry;
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

/** @param {Card} entry @param {CockpitData} d @param {Size} size @param {Colours} COLORS */
export function gaugeChart(entry, d, { width, height }, COLORS) {
  // the reference's gauge: a circle of radius NormTest, a band of half-width InnerTest along the
  // gradient (vertical axis) and OrthoTest across it, on symlog axes; fainter: earlier steps
  const { body, card, sub } = entry;
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

/** A histogram's total, its non-empty bins and its tallest bar on the log₁₀(1 + count) scale both draw. */
function countStats(/** @type {ArrayLike<number>} */ counts) {
  let total = 0, nonzero = 0, peak = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i];
    total += c;
    if (c > 0) nonzero++;
    peak = Math.max(peak, Math.log10(1 + c));
  }
  return { total, nonzero, peak };
}

/** @param {Card} entry @param {Decoded | null} hist @param {number} steps @param {number[]} range
 * @param {Size} size @param {Colours} COLORS */
export function hist1dChart(entry, hist, steps, range, { width, height }, COLORS) {
  const { body, card, sub } = entry;
  const root = svg("svg", { width, height });
  body.replaceChildren(root);
  card.dataset.steps = String(steps);
  if (!hist || !steps) {
    card.dataset.total = "0";
    card.dataset.points = "0";
    root.appendChild(svg("text", { x: 8, y: 16 })).textContent = "no steps in range";
    return;
  }
  const [lo, hi] = range;
  const counts = hist.data;
  const { total, nonzero, peak } = countStats(counts);
  card.dataset.total = String(total);
  card.dataset.points = String(nonzero);
  const edge = counts[0] + counts[counts.length - 1];
  const stepsText = `${steps} step${steps === 1 ? "" : "s"}`;
  sub.textContent = `${stepsText} · ${formatPercent(edge / total)} clipped at the edges`;
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

/** @param {Card} entry @param {Decoded | null} hist @param {number} steps @param {number[][]} range
 * @param {Size} size */
export function hist2dChart(entry, hist, steps, range, { width, height }) {
  const { body, card, sub } = entry;
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
  const [[glo, ghi], [plo, phi]] = range;
  const canvas = h("canvas", { width: gb, height: pb, "data-role": "hist2d-canvas" });
  Object.assign(canvas.style, { width: `${width - MARGIN.left - 8}px`, height: `${height - MARGIN.bottom - 4}px`,
    imageRendering: "pixelated", marginLeft: `${MARGIN.left}px`, display: "block" });
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(gb, pb);
  const { total, nonzero, peak } = countStats(hist.data);
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

// EvaluationPanel: ROC and PR per class, the focus class's score distributions (positives and
// negatives) with a draggable threshold, the calibration curve, the confusion matrix and a metrics
// table. The kernel sends exact curves and, per instance, the true class, the focus class's score and
// the best other class; dragging the threshold recounts the confusion matrix and the metrics here, in
// one pass over the instances. A click on a confusion cell or a drag over the distributions brushes
// instances in the shared Selection; a selection made in another view comes back evaluated (compared_*).
// Class names are data: they only ever reach the page through textContent.
import { defineView } from "./common/view.js";
import { h, svg } from "./common/dom.js";
import { frame, line, horizontalDrag } from "./evaluation/chart.js";
import { formatCount, formatInteger, formatNumber } from "./common/format.js";

const SOURCE = "evaluation";
const BINS = 50;
const CSS = `
.activis-eval .av-grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px; }
.activis-eval .av-card { border: 1px solid var(--av-border-soft); border-radius: 4px; padding: 2px 4px; min-width: 0;
  position: relative; overflow: hidden; }
.activis-eval .av-card h4 { margin: 0; font-size: 12px; font-weight: 600; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.activis-eval .av-card h4 .av-sub { color: var(--av-fg-muted); font-weight: 400; margin-left: 4px; }
.activis-eval svg text { fill: var(--av-fg-muted); font-size: 10px; }
.activis-eval .av-axis { stroke: var(--av-border); }
.activis-eval .av-brush { fill: var(--av-accent); fill-opacity: 0.15; stroke: var(--av-accent); }
.activis-eval .av-threshold { stroke: var(--av-warn); stroke-width: 2; cursor: ew-resize; }
.activis-eval .av-chip { cursor: pointer; margin-right: 6px; white-space: nowrap; }
.activis-eval .av-chip[aria-pressed="true"] { font-weight: 600; color: var(--av-fg); }
.activis-eval .av-legend { font-size: 10px; color: var(--av-fg-muted); max-height: 30px; overflow: hidden; }
/* the table fits its card (fixed columns, names cut with an ellipsis): it scrolls down, never sideways */
.activis-eval .av-table { overflow-x: hidden; overflow-y: auto; font-size: 11px; }
.activis-eval table { border-collapse: collapse; width: 100%; table-layout: fixed; }
.activis-eval td, .activis-eval th { padding: 1px 2px; text-align: right; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; font-variant-numeric: tabular-nums; }
.activis-eval td:first-child, .activis-eval th:first-child { text-align: left; }
.activis-eval table[data-role="summary"] td:first-child { width: 55%; }
.activis-eval table[data-role="classes"] { margin-top: 6px; }
.activis-eval table[data-role="classes"] td:first-child, .activis-eval table[data-role="classes"] th:first-child {
  width: 16%; }
.activis-eval input[data-role="threshold"] { width: 7em; }
.activis-eval .av-zoom { fill: var(--av-accent); fill-opacity: 0.1; stroke: var(--av-accent); }
.activis-eval .av-card h4 button { font: inherit; font-size: 10px; font-weight: 400; margin-left: 6px; padding: 0 4px;
  border: 1px solid var(--av-border); border-radius: 2px; background: var(--av-bg); color: var(--av-fg);
  cursor: pointer; }
.activis-eval tr.av-focus td { font-weight: 600; }
.activis-eval .av-cm { position: relative; }
.activis-eval .av-cm-label { position: absolute; font-size: 10px; color: var(--av-fg-muted); overflow: hidden;
  white-space: nowrap; text-overflow: ellipsis; }
.activis-eval .av-error { color: var(--av-warn); }
`;

const SUMMARY_LABELS = {
  accuracy: "accuracy", f1_macro: "F1 (macro)", auc: "ROC AUC", auc_macro: "ROC AUC (macro)",
  auc_micro: "ROC AUC (micro)", average_precision: "average precision", average_precision_macro: "AP (macro)",
  ece: "ECE (top label)", bucket_auc_error: "200-bucket AUC error",
};

const ARRAYS = ["index", "label", "score", "other", "argmax", "roc", "roc_offsets", "pr", "pr_offsets", "reliability",
  "summary",
  "class_metrics", "compared_summary", "compared_class_metrics", "compared_roc"];

function setup(kit) {
  const { model, el } = kit;
  const focusPick = h("select", { "data-role": "focus", title: "Class whose scores are thresholded and drawn" });
  const thresholdBox = h("input", { type: "number", step: "0.01", "data-role": "threshold", placeholder: "argmax",
    title: "Threshold on the focus class's score (empty: each instance's top class, as evaluate() counts)" });
  const argmaxButton = h("button", { text: "argmax", "data-role": "argmax",
    title: "predict each instance's top-scoring class (what activis.evaluate() prints)" });
  const clear = h("button", { text: "Clear selection", "data-role": "clear" });
  const info = h("span", { className: "av-info" });
  const errorBox = h("span", { className: "av-error" });
  const toolbar = h("div", { className: "activis-toolbar" }, [h("strong", { text: "Evaluation" }),
    h("span", { text: "focus class" }), focusPick, h("span", { text: "threshold" }), thresholdBox, argmaxButton, clear,
    info,
      errorBox]);
  const cards = {};
  for (const [key, title] of [["roc", "ROC"], ["pr", "Precision–recall"], ["dist", "Score distributions"],
    ["calibration", "Calibration"], ["confusion", "Confusion"], ["metrics", "Metrics"]]) {
    const sub = h("span", { className: "av-sub" });
    const body = h("div", { className: "av-body" });
    const legend = h("div", { className: "activis-legend av-legend" });
    cards[key] = { root: h("div", { className: "av-card", "data-chart": key }, [h("h4", { text: title }, [sub]),
      body, legend]),
      sub, body, legend };
  }
  const grid = h("div", { className: "av-grid" }, Object.values(cards).map((c) => c.root));
  el.append(toolbar, grid);

  // ------------------------------------------------------------------ state
  let n = 0, K = 0, index, label, score, other, argmax, counts = new Int32Array(0), positives = 0;
  /** @type {number | null} null: argmax (each instance's top class) */
  let threshold = null;
  let focus = 0, domain = [0, 1];
  /** @typedef {{x: [number, number], y: [number, number]}} Zoom */
  /** @type {Record<string, Zoom>} the zoomed part of the ROC and PR charts */
  const zoom = {};
  let shared = null;
  let updates = 0; // threshold updates drawn (for tests and the benchmark)
  let redraw = () => {};
  let W = 0, chartH = 0;
  const marks = {}; // parts moved by a threshold drag
  const colors = () => Array.from({ length: K }, (_, k) => kit.classColour(k));
  const names = () => model.get("class_names") || [];
  const arr = (name) => { const v = kit.array(name); return v ? v.data : null; };

  function readInstances() {
    index = arr("index") || new Int32Array(0);
    label = arr("label") || new Int32Array(0);
    score = arr("score") || new Float32Array(0);
    other = arr("other") || new Int32Array(0);
    argmax = arr("argmax") || new Int32Array(0);
    n = label.length;
    K = names().length;
    focus = model.get("focus");
    domain = model.get("score_domain") || [0, 1];
    positives = 0;
    for (let i = 0; i < n; i++) if (label[i] === focus) positives++;
  }

  /** Instance i's predicted class: its top class (t null), else focus where its score reaches t, the best other. */
  const predicted = (/** @type {number} */ i, /** @type {number | null} */ t) => (t === null
    ? argmax[i] : score[i] >= t ? focus : other[i]);

  /** The confusion matrix at threshold t (null: argmax). */
  function recount(t) {
    counts = new Int32Array(K * K);
    for (let i = 0; i < n; i++) counts[label[i] * K + predicted(i, t)]++;
  }

  function classStats() {
    const prec = new Float64Array(K), rec = new Float64Array(K), f1 = new Float64Array(K);
    let correct = 0;
    for (let a = 0; a < K; a++) {
      let row = 0, col = 0;
      for (let b = 0; b < K; b++) { row += counts[a * K + b]; col += counts[b * K + a]; }
      const tp = counts[a * K + a];
      correct += tp;
      prec[a] = col ? tp / col : 0;
      rec[a] = row ? tp / row : 0;
      f1[a] = prec[a] + rec[a] > 0 ? (2 * prec[a] * rec[a]) / (prec[a] + rec[a]) : 0;
    }
    return { prec, rec, f1, accuracy: n ? correct / n : NaN };
  }

  function focusPoint() {
    const tp = counts[focus * K + focus];
    let fp = 0;
    for (let a = 0; a < K; a++) if (a !== focus) fp += counts[a * K + focus];
    const neg = n - positives;
    return { fpr: neg ? fp / neg : NaN, tpr: positives ? tp / positives : NaN,
      precision: tp + fp ? tp / (tp + fp) : 1 };
  }

  // ------------------------------------------------------------------ charts
  function chip(text, color, pressed, onClick) {
    const c = h("span", { className: "av-chip", "aria-pressed": String(pressed) },
      [h("span", { className: "swatch", style: { background: color } }), h("span", { text })]);
    if (onClick) c.addEventListener("click", onClick);
    return c;
  }

  function setFocus(k) {
    if (k === focus || k < 0 || k >= K) return;
    model.set("focus", k);
    model.save_changes();
  }

  function curves(key, data, offsets, xLabel, yLabel, compared) {
    const card = cards[key];
    /** @type {Zoom} */
    const view = zoom[key] || { x: [0, 1], y: [0, 1] };
    const f = frame(W, chartH, view.x, view.y, xLabel, yLabel);
    clipToFrame(f);
    if (key === "roc") f.plot.appendChild(svg("line", { x1: f.x(0), y1: f.y(0), x2: f.x(1), y2: f.y(1),
      class: "av-axis", "stroke-dasharray": "3 3" }));
    let drawn = 0;
    const xs = data ? data.subarray(0, data.length / 2) : null, ys = data ? data.subarray(data.length / 2) : null;
    const order = [...Array(K).keys()].filter((k) => k !== focus).concat([focus]);
    if (xs) {
      for (const k of order) {
        if (offsets[k + 1] - offsets[k] < 2) continue;
        line(f, xs, ys, offsets[k], offsets[k + 1], { stroke: colors()[k] || "#888",
          "stroke-width": k === focus ? 2.2 : 1,
          "stroke-opacity": k === focus ? 1 : 0.45, "data-class": String(k) });
        drawn++;
      }
      if (K > 2 && offsets[K + 1] - offsets[K] > 1) {
        line(f, xs, ys, offsets[K], offsets[K + 1], { stroke: kit.colour("--av-fg-muted", "#666"),
          "stroke-dasharray": "4 3", "data-class": "micro" });
        drawn++;
      }
    }
    if (compared && compared.length > 3) {
      const m = compared.length / 2;
      line(f, compared.subarray(0, m), compared.subarray(m), 0, m, { stroke: kit.colour("--av-accent", "#1976d2"),
        "stroke-width": 1.6, "stroke-dasharray": "6 3", "data-class": "compared" });
      drawn++;
    }
    marks[key] = { f, dot: svg("circle", { r: 4, fill: "none", stroke: kit.colour("--av-warn", "#e65100"),
      "stroke-width": 2 }) };
    f.plot.appendChild(marks[key].dot);
    card.body.replaceChildren(f.root);
    zoomable(key, f, view);
    card.root.dataset.curves = String(drawn);
    const chips = K <= 2 ? [] : [...Array(K).keys()].map((k) => chip(names()[k], colors()[k], k === focus,
      () => setFocus(k)));
    if (K > 2) chips.push(chip("micro", kit.colour("--av-fg-muted", "#666"), false, null));
    if (compared && compared.length > 3) chips.push(chip(model.get("compared_label"), kit.colour("--av-accent",
      "#1976d2"), false, null));
    card.legend.replaceChildren(...chips);
  }

  let clips = 0;
  /** Keep what a zoomed chart draws inside its axes. */
  function clipToFrame(f) {
    const id = `activis-eval-clip-${Math.random().toString(36).slice(2)}-${clips++}`;
    const clip = svg("clipPath", { id });
    clip.appendChild(svg("rect", { x: f.left, y: f.top, width: f.right - f.left, height: f.bottom - f.top }));
    f.root.insertBefore(clip, f.root.firstChild);
    f.plot.setAttribute("clip-path", `url(#${id})`);
  }

  /** Drag a box on a ROC or PR chart to zoom into it (a near-perfect model's curves hug the axes);
   * double-click, or the card's "full" button, shows all of it again. */
  function zoomable(key, f, view) {
    const card = cards[key];
    const zoomed = view.x[0] > 0 || view.x[1] < 1 || view.y[0] > 0 || view.y[1] < 1;
    card.root.dataset.zoom = zoomed ? JSON.stringify(view) : "";
    const title = card.root.querySelector("h4");
    title.querySelector("button")?.remove();
    if (zoomed) {
      const full = h("button", { text: "full", title: "show the whole chart (or double-click it)" });
      full.addEventListener("click", () => { delete zoom[key]; redraw(); });
      title.appendChild(full);
    }
    const box = svg("rect", { class: "av-zoom", visibility: "hidden" });
    const hit = svg("rect", { x: f.left, y: f.top, width: f.right - f.left, height: f.bottom - f.top,
      fill: "transparent", style: "cursor: crosshair" });
    f.root.append(hit, box);
    const at = (/** @type {PointerEvent} */ e) => {
      const r = f.root.getBoundingClientRect();
      const px = Math.max(f.left, Math.min(f.right, e.clientX - r.left));
      const py = Math.max(f.top, Math.min(f.bottom, e.clientY - r.top));
      return [px, py];
    };
    let start = null;
    hit.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      start = at(e);
      hit.setPointerCapture(e.pointerId);
    });
    hit.addEventListener("pointermove", (e) => {
      if (!start) return;
      const [x, y] = at(e);
      Object.entries({ x: Math.min(x, start[0]), y: Math.min(y, start[1]), width: Math.abs(x - start[0]),
        height: Math.abs(y - start[1]), visibility: "visible" }).forEach(([k, v]) => box.setAttribute(k, String(v)));
    });
    hit.addEventListener("pointerup", (e) => {
      if (!start) return;
      const [x, y] = at(e), s0 = start;
      start = null;
      box.setAttribute("visibility", "hidden");
      if (Math.abs(x - s0[0]) < 6 || Math.abs(y - s0[1]) < 6) return; // a click, not a box
      const dx = (px) => view.x[0] + ((px - f.left) / (f.right - f.left)) * (view.x[1] - view.x[0]);
      const dy = (py) => view.y[0] + ((f.bottom - py) / (f.bottom - f.top)) * (view.y[1] - view.y[0]);
      zoom[key] = { x: [dx(Math.min(x, s0[0])), dx(Math.max(x, s0[0]))],
        y: [dy(Math.max(y, s0[1])), dy(Math.min(y, s0[1]))] };
      redraw();
    });
    hit.addEventListener("dblclick", () => { delete zoom[key]; redraw(); });
  }

  function drawDistributions() {
    const card = cards.dist;
    const [lo, hi] = domain;
    const pos = new Float64Array(BINS), neg = new Float64Array(BINS);
    const scale = BINS / ((hi - lo) || 1);
    for (let i = 0; i < n; i++) {
      const b = Math.min(BINS - 1, Math.max(0, Math.floor((score[i] - lo) * scale)));
      if (label[i] === focus) pos[b]++; else neg[b]++;
    }
    let top = 0;
    for (let b = 0; b < BINS; b++) {
      pos[b] /= positives || 1; neg[b] /= (n - positives) || 1;
      top = Math.max(top, pos[b], neg[b]);
    }
    const f = frame(W, chartH, [lo, hi], [0, top * 1.05 || 1], `score of ${names()[focus] ?? ""}`, "share");
    const edges = new Float64Array(2 * BINS), hp = new Float64Array(2 * BINS), hn = new Float64Array(2 * BINS);
    for (let b = 0; b < BINS; b++) {
      edges[2 * b] = lo + b / scale; edges[2 * b + 1] = lo + (b + 1) / scale;
      hp[2 * b] = hp[2 * b + 1] = pos[b]; hn[2 * b] = hn[2 * b + 1] = neg[b];
    }
    line(f, edges, hn, 0, 2 * BINS, { stroke: kit.colour("--av-fg-muted", "#666"), "stroke-width": 1.4,
      "data-series": "negatives" });
    line(f, edges, hp, 0, 2 * BINS, { stroke: colors()[focus] || "#4e79a7", "stroke-width": 1.8,
      "data-series": "positives" });
    const picked = comparedRows();
    if (picked) { // a selection made in another view: its scores, as a share of it
      const sel = new Float64Array(BINS);
      for (const i of picked) sel[Math.min(BINS - 1, Math.max(0,
        Math.floor((score[i] - lo) * scale)))] += 1 / picked.length;
      const hs = new Float64Array(2 * BINS);
      for (let b = 0; b < BINS; b++) hs[2 * b] = hs[2 * b + 1] = Math.min(sel[b], top * 1.05);
      line(f, edges, hs, 0, 2 * BINS, { stroke: kit.colour("--av-accent", "#1976d2"), "stroke-width": 1.4,
        "stroke-dasharray": "4 2", "data-series": "compared" });
    }
    const brush = svg("rect", { class: "av-brush", y: f.top, height: f.bottom - f.top, width: 0,
      visibility: "hidden", "data-role": "brush" });
    const rule = svg("line", { class: "av-threshold", y1: f.top, y2: f.bottom, "data-role": "threshold" });
    const hit = svg("rect", { x: f.left, y: f.top, width: f.right - f.left, height: f.bottom - f.top,
      fill: "transparent", "data-role": "drag" });
    f.root.append(brush, hit, rule);
    card.body.replaceChildren(f.root);
    marks.dist = { f, rule, brush };
    const range = model.get("selected_range") || [];
    if (range.length === 2 && (!shared || shared.own("brush"))) showBrush(range[0], range[1]);
    let mode = null;
    horizontalDrag(f.root, f, {
      onStart: (v) => {
        mode = threshold !== null && Math.abs(f.x(v) - f.x(threshold)) <= 6 ? "threshold" : "brush";
        return true;
      },
      onMove: (a, b, start, v) => {
        if (mode === "threshold") moveThreshold(v, false);
        else showBrush(a, b);
      },
      onEnd: (a, b, moved, start, v) => {
        if (mode === "threshold") moveThreshold(v, true);
        else if (moved) brushRange(a, b);
        else moveThreshold(v, true); // a click elsewhere puts the threshold there
        mode = null;
      },
    });
    card.legend.replaceChildren(chip(`${names()[focus] ?? ""} (${formatInteger(positives)})`, colors()[focus],
      false, null),
      chip(`others (${formatInteger(n - positives)})`, kit.colour("--av-fg-muted", "#666"), false, null),
      ...(picked ? [chip(`selection (${formatInteger(picked.length)})`, kit.colour("--av-accent", "#1976d2"),
        false, null)] : []));
    card.root.dataset.compared = String(picked ? picked.length : 0);
  }

  function showBrush(a, b) {
    const m = marks.dist;
    if (!m) return;
    const [lo, hi] = domain;
    a = Math.max(lo, a); b = Math.min(hi, b);
    m.brush.setAttribute("x", m.f.x(a));
    m.brush.setAttribute("width", Math.max(0, m.f.x(b) - m.f.x(a)));
    m.brush.setAttribute("visibility", "visible");
  }

  function drawCalibration() {
    const card = cards.calibration;
    const f = frame(W, chartH, [0, 1], [0, 1], "confidence", "accuracy");
    f.plot.appendChild(svg("line", { x1: f.x(0), y1: f.y(0), x2: f.x(1), y2: f.y(1), class: "av-axis",
      "stroke-dasharray": "3 3" }));
    const rel = kit.array("reliability");
    let points = 0;
    if (rel && rel.shape[0]) {
      const m = rel.shape[0], d = rel.data;
      const xs = new Float64Array(m), ys = new Float64Array(m);
      let most = 0;
      for (let i = 0; i < m; i++) { xs[i] = d[3 * i]; ys[i] = d[3 * i + 1]; most = Math.max(most, d[3 * i + 2]); }
      for (let i = 0; i < m; i++) { // bin counts as faint bars along the bottom
        const hgt = (d[3 * i + 2] / most) * (f.bottom - f.top) * 0.25;
        f.plot.appendChild(svg("rect", { x: f.x(xs[i]) - 2, y: f.bottom - hgt, width: 4, height: hgt,
          fill: kit.colour("--av-fg-muted", "#888"), "fill-opacity": 0.35 }));
      }
      line(f, xs, ys, 0, m, { stroke: kit.colour("--av-accent", "#1976d2"), "stroke-width": 1.6 });
      for (let i = 0; i < m; i++) f.plot.appendChild(svg("circle", { cx: f.x(xs[i]), cy: f.y(ys[i]), r: 2.5,
        fill: kit.colour("--av-accent", "#1976d2") }));
      points = m;
    }
    card.root.dataset.points = String(points);
    card.body.replaceChildren(f.root);
  }

  const cm = { canvas: h("canvas", { "data-role": "cells" }), labels: h("div") };
  const cmBox = h("div", { className: "av-cm" }, [cm.canvas, cm.labels]);
  cards.confusion.body.appendChild(cmBox);
  /** The matrix's geometry: labels as wide as the names need (56 px for "0".."9" left 15 px a cell at 10 classes,
   * too small for a count); at least 16 px a cell while the card's width allows, the card growing down. */
  function cmLayout() {
    const longest = names().reduce((m, t) => Math.max(m, String(t).length), 1);
    const lab = K > 30 ? 0 : Math.min(56, 8 + 6.5 * longest);
    const side = Math.max(10, Math.min(W - lab - 4, Math.max(chartH - lab - 4, 16 * K)));
    return { lab, side, cell: side / Math.max(1, K) };
  }
  function drawConfusionLabels() {
    const { lab, side, cell } = cmLayout();
    cmBox.style.height = `${side + lab + 2}px`;
    kit.canvas(cm.canvas, side, side);
    Object.assign(cm.canvas.style, { position: "absolute", left: `${lab}px`, top: "0px", cursor: "pointer" });
    const nodes = [];
    if (lab) {
      for (let k = 0; k < K; k++) {
        nodes.push(h("div", { className: "av-cm-label", "data-axis": "true", text: names()[k],
          title: `true ${names()[k]}`,
          style: { left: "0px", width: `${lab - 3}px`, top: `${k * cell + cell / 2 - 6}px`, textAlign: "right" } }));
        nodes.push(h("div", { className: "av-cm-label", "data-axis": "predicted", text: names()[k],
          title: `predicted ${names()[k]}`,
          style: { left: `${lab + k * cell}px`, width: `${cell}px`, top: `${side + 2}px`, textAlign: "center" } }));
      }
    }
    cm.labels.replaceChildren(...nodes);
    cards.confusion.sub.textContent = "rows: true · columns: predicted";
  }
  function drawConfusionCells() {
    const { side, cell } = cmLayout();
    const ctx = cm.canvas.getContext("2d");
    ctx.clearRect(0, 0, side, side);
    const accent = kit.colour("--av-accent", "#1976d2"), warn = kit.colour("--av-warn", "#e65100");
    const fg = kit.colour("--av-fg", "#111");
    const sel = model.get("selected_cell") || [];
    const fontPx = Math.min(12, Math.max(8, cell * 0.45));
    ctx.font = `${fontPx}px sans-serif`;
    let shown = 0;
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    for (let a = 0; a < K; a++) {
      let row = 0;
      for (let b = 0; b < K; b++) row += counts[a * K + b];
      for (let b = 0; b < K; b++) {
        const c = counts[a * K + b];
        const alpha = row ? 0.08 + 0.92 * (c / row) : 0.04;
        ctx.globalAlpha = alpha;
        ctx.fillStyle = a === b ? accent : warn;
        ctx.fillRect(b * cell + 0.5, a * cell + 0.5, cell - 1, cell - 1);
        ctx.globalAlpha = 1;
        const text = c >= 10000 ? formatCount(c) : String(c);
        if (c && cell >= 14 && ctx.measureText(text).width <= cell - 2) { // an empty cell stays blank
          ctx.fillStyle = alpha > 0.55 ? "#fff" : fg; ctx.fillText(text, b * cell + cell / 2, a * cell + cell / 2);
          shown++;
        }
      }
    }
    if (sel.length === 2) {
      ctx.strokeStyle = fg; ctx.lineWidth = 2;
      ctx.strokeRect(sel[1] * cell + 1, sel[0] * cell + 1, cell - 2, cell - 2);
    }
    el.dataset.counts = JSON.stringify(Array.from(counts));
    el.dataset.countsShown = String(shown);
  }
  kit.listen(cm.canvas, "click", (e) => {
    const box = cm.canvas.getBoundingClientRect();
    const { cell } = cmLayout();
    const b = Math.floor((e.clientX - box.left) / cell), a = Math.floor((e.clientY - box.top) / cell);
    if (a < 0 || b < 0 || a >= K || b >= K) return;
    const sel = model.get("selected_cell") || [];
    if (sel.length === 2 && sel[0] === a && sel[1] === b) { clearSelection(); return; }
    const picked = [];
    for (let i = 0; i < n; i++) {
      if (label[i] === a && predicted(i, threshold) === b) picked.push(index[i]);
    }
    writeBrush(Int32Array.from(picked), { selected_cell: [a, b], selected_range: [] });
  });
  kit.listen(cm.canvas, "mousemove", (e) => {
    const box = cm.canvas.getBoundingClientRect();
    const { cell } = cmLayout();
    const b = Math.floor((e.clientX - box.left) / cell), a = Math.floor((e.clientY - box.top) / cell);
    cm.canvas.title = a >= 0 && b >= 0 && a < K && b < K
      ? `true ${names()[a]}, predicted ${names()[b]}: ${counts[a * K + b]} (click to select)` : "";
  });

  // ------------------------------------------------------------------ metrics table
  const table = h("table", { "data-role": "summary" });
  const classTable = h("table", { "data-role": "classes" }); // its own columns: 7, the summary's 2 or 3
  const tableBox = h("div", { className: "av-table" }, [table, classTable]);
  cards.metrics.body.appendChild(tableBox);
  function drawTable() {
    const s = classStats();
    const p = focusPoint();
    const names_ = model.get("summary_names") || [];
    const summary = arr("summary") || [];
    const compared = arr("compared_summary");
    const cLabel = model.get("compared_label");
    const head = ["metric", "all"];
    if (cLabel) head.push(`${cLabel} (${model.get("compared_n")})`);
    const rows = [];
    const addRow = (name, all, cmp, attrs = {}) => rows.push(h("tr", attrs,
      [h("td", { text: name }), h("td", { text: formatNumber(all) }), ...(cLabel ? [h("td",
        { text: formatNumber(cmp) })] : [])]));
    const ci = compared ? names_.indexOf("accuracy") : -1;
    addRow("instances", n, model.get("compared_n"));
    addRow("accuracy", s.accuracy, ci >= 0 ? compared[ci] : NaN, { "data-metric": "accuracy" });
    const cmpClass = kit.array("compared_class_metrics");
    const metricNames = model.get("class_metric_names") || [];
    const cm_ = (k, name) => (cmpClass && metricNames.includes(name)
      ? cmpClass.data[k * metricNames.length + metricNames.indexOf(name)] : NaN);
    addRow(`precision (${names()[focus]})`, s.prec[focus], cm_(focus, "precision"), { "data-metric": "precision" });
    addRow(`recall (${names()[focus]})`, s.rec[focus], cm_(focus, "recall"), { "data-metric": "recall" });
    addRow(`F1 (${names()[focus]})`, s.f1[focus], cm_(focus, "f1"), { "data-metric": "f1" });
    addRow("false positive rate", p.fpr, NaN, { "data-metric": "fpr" });
    let f1Macro = 0;
    for (let k = 0; k < K; k++) f1Macro += s.f1[k] / K;
    addRow("F1 (macro)", f1Macro, compared ? compared[names_.indexOf("f1_macro")] : NaN, { "data-metric": "f1_macro" });
    for (let i = 0; i < names_.length; i++) {
      if (names_[i] === "accuracy" || names_[i] === "f1_macro") continue;
      addRow(SUMMARY_LABELS[names_[i]] || names_[i], summary[i], compared ? compared[i] : NaN,
        { "data-metric": names_[i] });
    }
    const classHead = h("tr", {}, ["class", "P", "R", "F1", "AUC", "AP", "Δ200"].map((t) => h("th", {
      text: t, title: t === "Δ200" ? "how far a 200-bucket (TensorFlow-style) AUC would be off" : "" })));
    const classRows = [];
    const all = kit.array("class_metrics");
    const col = (name) => metricNames.indexOf(name);
    for (let k = 0; k < K; k++) {
      const v = (name) => (all ? all.data[k * metricNames.length + col(name)] : NaN);
      const tr = h("tr", { className: k === focus ? "av-focus" : "", "data-class": String(k) },
        [h("td", { text: names()[k], title: names()[k] }), ...[s.prec[k], s.rec[k], s.f1[k], v("auc"),
          v("average_precision"), v("bucket_auc_error")]
          .map((x, j) => h("td", { text: Number.isFinite(x) && j < 5 ? x.toFixed(3) : formatNumber(x),
            title: formatNumber(x) }))]);
      tr.addEventListener("click", () => setFocus(k));
      classRows.push(tr);
    }
    table.replaceChildren(h("tr", {}, head.map((t) => h("th", { text: t }))), ...rows);
    classTable.replaceChildren(classHead, ...classRows);
    el.dataset.accuracy = String(s.accuracy);
  }

  // ------------------------------------------------------------------ threshold and selection
  function placeMarks() {
    const p = focusPoint();
    for (const [key, x, y] of [["roc", p.fpr, p.tpr], ["pr", p.tpr, p.precision]]) {
      const m = marks[key];
      if (!m) continue;
      m.dot.setAttribute("cx", m.f.x(x)); m.dot.setAttribute("cy", m.f.y(y));
      m.dot.setAttribute("visibility", Number.isFinite(x) && Number.isFinite(y) ? "visible" : "hidden");
    }
    if (marks.dist) {
      const x = marks.dist.f.x(Math.min(domain[1], Math.max(domain[0], threshold ?? domain[0])));
      marks.dist.rule.setAttribute("x1", x); marks.dist.rule.setAttribute("x2", x);
      marks.dist.rule.setAttribute("visibility", threshold === null ? "hidden" : "visible");
    }
    if (document.activeElement !== thresholdBox) {
      thresholdBox.value = threshold === null ? "" : formatNumber(threshold);
    }
    argmaxButton.setAttribute("aria-pressed", String(threshold === null));
    cards.dist.sub.textContent = threshold === null ? "argmax: click to set a threshold"
      : `threshold ${formatNumber(threshold)}`;
  }

  function applyThreshold(t) {
    const t0 = performance.now();
    threshold = t;
    recount(t);
    drawConfusionCells();
    drawTable();
    placeMarks();
    el.dataset.threshold = t === null ? "argmax" : String(t);
    el.dataset.updateMs = (performance.now() - t0).toFixed(2);
    const update = (updates += 1);
    requestAnimationFrame(() => { // to the frame that shows it: what the user waits for
      if (update === updates) el.dataset.frameMs = (performance.now() - t0).toFixed(2);
      el.dataset.updates = String(update);
    });
  }

  function moveThreshold(v, commit) {
    const t = Math.min(domain[1], Math.max(domain[0], v));
    applyThreshold(t);
    if (commit) { model.set("threshold", t); model.save_changes(); }
  }

  function writeBrush(indices, own) {
    for (const [k, v] of Object.entries(own)) model.set(k, v);
    model.save_changes();
    if (shared) shared.setClause("brush", indices);
    el.dataset.selected = String(indices ? indices.length : 0);
    drawConfusionCells();
  }

  function brushRange(a, b) {
    const picked = [];
    for (let i = 0; i < n; i++) if (score[i] >= a && score[i] <= b) picked.push(index[i]);
    showBrush(a, b);
    writeBrush(Int32Array.from(picked), { selected_range: [a, b], selected_cell: [] });
  }

  function clearSelection() {
    if (marks.dist) marks.dist.brush.setAttribute("visibility", "hidden");
    writeBrush(null, { selected_range: [], selected_cell: [] });
  }

  /** Rows of the selection made elsewhere (another view's brush, else the active subset), or null. */
  function comparedRows() {
    const subset = shared && shared.get("subset") ? shared.indices("subset_indices") : null;
    const ids = shared ? shared.clause("brush") || subset : null;
    if (!ids) return null;
    const wanted = new Set(ids);
    const rows = [];
    for (let i = 0; i < n; i++) if (wanted.has(index[i])) rows.push(i);
    return rows;
  }

  let lastCompared = null;
  function onShared(api) {
    // another view's brush replaces ours: drop our cell and range marks (the kernel sends compared_*)
    shared = api;
    const compared = api.clause("brush") || api.indices("subset_indices");
    // after the frame that shows the brush in the matrix, projection and instance panel: this panel's
    // comparison is the slowest to draw (tens of ms over 100k instances) and sits in a tab
    if (compared !== lastCompared) { lastCompared = compared; setTimeout(redraw, 0); }
    if (!api.own("brush") && model.get("selected_cell").length + model.get("selected_range").length) {
      if (marks.dist) marks.dist.brush.setAttribute("visibility", "hidden");
      el.dataset.selected = "0";
    }
  }

  // ------------------------------------------------------------------ layout and wiring
  function drawPicker() {
    const ks = names();
    focusPick.replaceChildren(...ks.map((name, k) => h("option", { value: String(k), text: name })));
    focusPick.value = String(focus);
  }

  function drawAll() {
    W = Math.max(120, Math.floor((grid.clientWidth - 12) / 3) - 10);
    chartH = Math.max(120, Math.floor((model.get("height") - 40) / 2) - 52);
    readInstances();
    drawPicker();
    curves("roc", arr("roc"), arr("roc_offsets") || new Int32Array(K + 2), "false positive rate",
      "true positive rate", arr("compared_roc"));
    curves("pr", arr("pr"), arr("pr_offsets") || new Int32Array(K + 2), "recall", "precision", null);
    drawDistributions();
    drawCalibration();
    drawConfusionLabels();
    tableBox.style.height = `${chartH + 30}px`;
    const sub = model.get("compared_label");
    cards.metrics.sub.textContent = sub ? `beside ${sub}` : "";
    const caption = model.get("caption");
    info.textContent = `${caption ? `${caption} · ` : ""}${formatInteger(n)} instances · ${K} classes`;
    el.dataset.caption = caption || "";
    errorBox.textContent = model.get("error") || "";
    applyThreshold(model.get("threshold"));
    el.dataset.ready = "1";
    el.dataset.focus = String(focus);
    el.dataset.compared = sub;
  }

  redraw = kit.frame(drawAll);
  kit.listen(focusPick, "change", () => setFocus(Number(focusPick.value)));
  kit.listen(thresholdBox, "change", () => {
    const v = thresholdBox.value.trim() === "" ? NaN : Number(thresholdBox.value);
    if (Number.isFinite(v)) moveThreshold(v, true);
    else backToArgmax();
  });
  const backToArgmax = () => { applyThreshold(null); model.set("threshold", null); model.save_changes(); };
  kit.listen(argmaxButton, "click", backToArgmax);
  kit.listen(clear, "click", clearSelection);
  kit.on("index score other label roc pr reliability focus class_names colours summary class_metrics " +
    "compared_summary compared_roc compared_label height error caption", redraw);
  kit.on("threshold", () => { if (model.get("threshold") !== threshold) applyThreshold(model.get("threshold")); });
  kit.on("argmax", redraw);
  kit.on("selected_cell", drawConfusionCells);
  kit.onResize(grid, drawAll);
  kit.onTheme(redraw);
  kit.selection(onShared);
  drawAll();
}

export default defineView({ name: "eval", css: CSS, arrays: ARRAYS, source: SOURCE, setup });

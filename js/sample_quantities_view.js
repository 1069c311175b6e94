// @ts-check
// SampleQuantitiesView: the per-instance instruments at the explorer's checkpoint (the loss, the gradient
// norm at the logits), one histogram each. Drag across a histogram to brush the instances whose value is
// in that range (`brushed`, `brush_quantity`, `brush_range`; the explorer makes it the Selection's brush,
// source "per_sample"); a click without a drag clears it. Instances another view brushes are overlaid
// as a second histogram (every clause but mine), else this view's own brushed instances. Names come from
// Python and are set as text.
// The root carries data-step, data-brushed and data-highlighted for tests and tools.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { encodeArray } from "./common/arrays.js";
import { formatNumber } from "./common/format.js";

const CSS = `
.activis-per_sample { display: flex; flex-direction: column; gap: 4px; font-size: 12px; user-select: none; }
.activis-per_sample .av-ps-charts { display: flex; gap: 8px; }
.activis-per_sample .av-ps-chart { flex: 1 1 0; min-width: 0; display: flex; flex-direction: column; }
.activis-per_sample canvas { touch-action: none; cursor: ew-resize; }
`;
const BINS = 40;
const MARGIN = { left: 8, right: 8, top: 6, bottom: 18 };

export default defineView({ name: "per_sample", source: "per_sample", css: CSS, arrays: ["values", "brushed"], setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const heading = h("span", { style: { color: "var(--av-fg-muted)", marginLeft: "auto" } });
  const charts = h("div", { className: "av-ps-charts" });
  el.append(h("div", { className: "activis-toolbar" }, [h("strong", { text: "per-instance instruments" }), heading]),
    charts);
  /** @type {ArrayLike<number> | null} */
  let highlighted = null;
  /** @type {{q: number, x0: number, x1: number} | null} */
  let drag = null;
  /** @type {{canvas: HTMLCanvasElement, title: HTMLElement}[]} */
  let panes = [];
  /** @type {{lo: number, hi: number}[]} */
  let domains = [];

  function build() {
    const titles = model.get("quantity_titles") || [];
    panes = titles.map((/** @type {string} */ title, /** @type {number} */ q) => {
      const name = model.get("quantity_names")[q];
      const canvas = /** @type {HTMLCanvasElement} */ (h("canvas", { "data-quantity": name }));
      const label = h("div", { text: title, style: { fontSize: "11px" } });
      listenBrush(canvas, q);
      return { canvas, title: label };
    });
    charts.replaceChildren(...panes.map((p) => h("div", { className: "av-ps-chart" }, [p.title, p.canvas])));
    draw();
  }

  /** @param {number} q */
  function row(q) {
    const v = kit.array("values");
    if (!v || v.shape.length !== 2) return null;
    const n = v.shape[1];
    return v.data.subarray(q * n, (q + 1) * n);
  }

  const draw = kit.frame(() => {
    const width = Math.max(120, Math.floor((el.clientWidth || 600) / Math.max(1, panes.length)) - 8);
    const height = Math.max(80, model.get("height") - 48);
    const brushedQ = (model.get("quantity_names") || []).indexOf(model.get("brush_quantity"));
    const range = model.get("brush_range") || [];
    domains = [];
    panes.forEach((pane, q) => {
      const values = row(q);
      const ctx = kit.canvas(pane.canvas, width, height);
      ctx.clearRect(0, 0, width, height);
      if (!values) return;
      let lo = Infinity, hi = -Infinity;
      for (const v of values) if (v === v) { if (v < lo) lo = v; if (v > hi) hi = v; }
      if (lo === Infinity) { lo = 0; hi = 1; }
      if (hi <= lo) hi = lo + 1;
      domains.push({ lo, hi });
      const w = width - MARGIN.left - MARGIN.right, ht = height - MARGIN.top - MARGIN.bottom;
      const counts = histogram(values, null, lo, hi);
      const own = kit.array("brushed")?.data; // this view's brush, when no other view's is there
      const shown = highlighted || (own && own.length ? own : null);
      const lit = shown ? histogram(values, shown, lo, hi) : null;
      const top = Math.max(1, ...counts);
      const bw = w / BINS;
      ctx.fillStyle = kit.colour("--av-fg-muted", "#888");
      ctx.globalAlpha = lit ? 0.35 : 0.8;
      const bar = (/** @type {number} */ c, /** @type {number} */ b) =>
        ctx.fillRect(MARGIN.left + b * bw, MARGIN.top + ht * (1 - c / top), bw - 1, ht * c / top);
      counts.forEach(bar);
      ctx.globalAlpha = 1;
      if (lit) {
        ctx.fillStyle = kit.colour("--av-accent", "#1f77b4");
        lit.forEach(bar);
      }
      const xOf = (/** @type {number} */ v) => MARGIN.left + ((v - lo) / (hi - lo)) * w;
      const span = drag && drag.q === q ? [Math.min(drag.x0, drag.x1), Math.max(drag.x0, drag.x1)]
        : brushedQ === q && range.length === 2 ? [xOf(range[0]), xOf(range[1])] : null;
      if (span) {
        ctx.strokeStyle = kit.colour("--av-accent", "#1f77b4");
        ctx.setLineDash([4, 3]);
        ctx.strokeRect(span[0], MARGIN.top, Math.max(1, span[1] - span[0]), ht);
        ctx.setLineDash([]);
      }
      ctx.fillStyle = kit.colour("--av-fg-muted", "#666");
      ctx.font = "10px sans-serif";
      ctx.fillText(formatNumber(lo), MARGIN.left, height - 4);
      const hiText = formatNumber(hi);
      ctx.fillText(hiText, width - MARGIN.right - ctx.measureText(hiText).width, height - 4);
    });
    const brushed = kit.array("brushed")?.data;
    const step = model.get("step");
    const count = brushed && brushed.length ? ` · ${brushed.length} brushed` : "";
    heading.textContent = `${step >= 0 ? `step ${step}` : ""}${count}`;
    el.dataset.step = String(step);
    el.dataset.brushed = String(brushed ? brushed.length : 0);
    el.dataset.highlighted = String(highlighted ? highlighted.length : 0);
    el.dataset.ready = "1";
  });

  /** @param {HTMLCanvasElement} canvas @param {number} q */
  function listenBrush(canvas, q) {
    const x = (/** @type {PointerEvent} */ ev) => ev.clientX - canvas.getBoundingClientRect().left;
    kit.listen(canvas, "pointerdown", (ev) => {
      if (ev.button !== 0) return;
      drag = { q, x0: x(ev), x1: x(ev) };
      canvas.setPointerCapture(ev.pointerId);
    });
    kit.listen(canvas, "pointermove", (ev) => {
      if (!drag) return;
      drag.x1 = x(ev);
      draw();
    });
    kit.listen(canvas, "pointerup", () => {
      if (!drag) return;
      const { x0, x1 } = drag;
      drag = null;
      const values = row(q), d = domains[q];
      const w = (canvas.clientWidth || 200) - MARGIN.left - MARGIN.right;
      if (Math.abs(x1 - x0) < 4 || !values || !d) {
        for (const [k, v] of Object.entries({ brush_quantity: "", brush_range: [], brushed: null })) model.set(k, v);
        model.save_changes();
        draw();
        return;
      }
      const at = (/** @type {number} */ px) => d.lo + ((px - MARGIN.left) / w) * (d.hi - d.lo);
      const lo = at(Math.min(x0, x1)), hi = at(Math.max(x0, x1));
      /** @type {number[]} */
      const picked = [];
      for (let i = 0; i < values.length; i++) if (values[i] >= lo && values[i] <= hi) picked.push(i);
      // the explorer's brush, written here so the other views follow it at once (the kernel clears it)
      if (shared && picked.length) shared.setClause("brush", picked);
      model.set("brush_quantity", model.get("quantity_names")[q]);
      model.set("brush_range", [lo, hi]);
      model.set("brushed", encodeArray(Int32Array.from(picked), "int32"));
      model.save_changes();
      draw();
    });
  }

  /** @type {import("./common/selection.js").SharedSelection | null} */
  let shared = null;
  kit.selection((sel) => {
    shared = sel;
    const next = sel ? sel.clause("brush") : null; // decoded once per value: the same object while it stands
    if (next === highlighted) return; // another trait of the Selection (a hover): no redraw
    highlighted = next;
    draw();
  });
  kit.on("quantity_titles quantity_names", build);
  kit.on("values brushed brush_range brush_quantity step height", draw);
  kit.onResize(el, draw);
  build();
}

/**
 * Counts per bin over [lo, hi] of all values, or of the instances in `only`.
 * @param {ArrayLike<number>} values @param {ArrayLike<number> | null} only @param {number} lo @param {number} hi
 */
function histogram(values, only, lo, hi) {
  const counts = new Array(BINS).fill(0);
  const k = BINS / (hi - lo);
  const add = (/** @type {number} */ v) => {
    if (v !== v) return;
    counts[Math.min(BINS - 1, Math.max(0, Math.floor((v - lo) * k)))]++;
  };
  if (only) {
    for (const i of Array.from(only)) if (i < values.length) add(values[i]);
  } else for (let i = 0; i < values.length; i++) add(values[i]);
  return counts;
}

// @ts-check
// DataMapView: Dataset Cartography's map. One point per instance at (variability, confidence), coloured by
// correctness (the correctness colours) or by forgetting events (sequential), the three regions labelled.
// Drag a box to brush instances (`brushed`, which the explorer makes the Selection's brush, source
// "data_map"); a click without a drag clears it. Instances another view brushes (a lasso in the
// projection) are ringed: every clause but mine. The buttons ask Python to add a dynamics subset.
// The root carries data-points, data-brushed and data-highlighted for tests and tools.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { tickFormat } from "./common/format.js";
import { encodeArray } from "./common/arrays.js";

const CSS = `
.activis-data_map { display: flex; flex-direction: column; gap: 4px; font-size: 12px; user-select: none; }
.activis-data_map .activis-toolbar { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; }
.activis-data_map button { font: inherit; font-size: 11px; cursor: pointer; }
.activis-data_map canvas { touch-action: none; cursor: crosshair; }
`;
const MARGIN = { left: 40, right: 10, top: 10, bottom: 30 };
const REGION_LABELS = [
  { text: "easy to learn", x: 0.02, y: 0.93 },
  { text: "ambiguous", x: 0.36, y: 0.93 },
  { text: "hard to learn", x: 0.02, y: 0.06 },
];

export default defineView({
  name: "data_map", source: "data_map", css: CSS,
  arrays: ["confidence", "variability", "correctness", "forgetting", "brushed"], setup,
});

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const colorPick = /** @type {HTMLSelectElement} */ (h("select", { "data-role": "color-by" },
    ["correctness", "forgetting"].map((v) => h("option", { value: v, text: `colour: ${v}` }))));
  colorPick.addEventListener("change", () => { model.set("color_by", colorPick.value); model.save_changes(); });
  const buttons = h("span");
  const count = h("span", { style: { color: "var(--av-fg-muted)", marginLeft: "auto" } });
  const canvas = /** @type {HTMLCanvasElement} */ (h("canvas", { "data-role": "map" }));
  el.append(h("div", { className: "activis-toolbar" }, [h("strong", { text: "data map" }), colorPick, buttons, count]),
    canvas);
  /** @type {ArrayLike<number> | null} */
  let highlighted = null;
  /** @type {{x0: number, y0: number, x1: number, y1: number} | null} */
  let box = null;
  let xMax = 0.5;

  const size = () => ({ width: Math.max(200, el.clientWidth || 400), height: Math.max(120, model.get("height") - 40) });
  /** @param {number} v @param {number} w */
  const sx = (v, w) => MARGIN.left + (v / xMax) * (w - MARGIN.left - MARGIN.right);
  /** @param {number} v @param {number} ht */
  const sy = (v, ht) => ht - MARGIN.bottom - v * (ht - MARGIN.top - MARGIN.bottom);

  function colourOf(/** @type {number} */ i) {
    const p = kit.palette();
    if (model.get("color_by") === "forgetting") {
      const f = kit.array("forgetting")?.data[i] ?? 0;
      const seq = p.sequential || ["#fde725", "#21918c", "#440154"];
      return seq[Math.min(seq.length - 1, Math.round((Math.min(f, 4) / 4) * (seq.length - 1)))];
    }
    const c = kit.array("correctness")?.data[i] ?? 0;
    const scale = p.correctness || ["#2ca02c", "#d62728"];  // [correct, misclassified]
    return scale[Math.min(scale.length - 1, Math.round((1 - c) * (scale.length - 1)))];
  }

  const draw = kit.frame(() => {
    const conf = kit.array("confidence")?.data, vari = kit.array("variability")?.data;
    const { width, height } = size();
    const ctx = kit.canvas(canvas, width, height);
    ctx.clearRect(0, 0, width, height);
    if (!conf || !vari) return;
    xMax = Math.max(0.5, ...Array.from(vari).map((v) => Math.ceil(v * 10) / 10));
    ctx.strokeStyle = kit.colour("--av-border", "#ccc");
    ctx.strokeRect(MARGIN.left, MARGIN.top, width - MARGIN.left - MARGIN.right, height - MARGIN.top - MARGIN.bottom);
    const fg = kit.colour("--av-fg-muted", "#666");
    ctx.fillStyle = fg;
    ctx.font = "10px sans-serif";
    ctx.fillText("variability →", width - 80, height - 8);
    ctx.save();
    ctx.translate(10, MARGIN.top + 70);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText("confidence →", 0, 0);
    ctx.restore();
    for (const t of [0, 0.5, 1]) ctx.fillText(String(t), MARGIN.left - 18, sy(t, height) + 3);
    const xTicks = [0, xMax / 2, xMax], xLabel = tickFormat(xTicks);
    for (const t of xTicks) ctx.fillText(xLabel(t), sx(t, width) - 10, height - MARGIN.bottom + 12);
    const brushed = kit.array("brushed")?.data;
    const marked = new Uint8Array(conf.length);
    if (highlighted) for (const i of Array.from(highlighted)) if (i < marked.length) marked[i] = 1;
    const faded = !!(highlighted && highlighted.length) || !!(brushed && brushed.length);
    if (brushed) for (const i of Array.from(brushed)) if (i < marked.length) marked[i] = 1;
    for (let i = 0; i < conf.length; i++) {
      ctx.globalAlpha = faded && !marked[i] ? 0.15 : 0.85;
      ctx.fillStyle = colourOf(i);
      ctx.fillRect(sx(vari[i], width) - 2, sy(conf[i], height) - 2, 4, 4);
    }
    ctx.globalAlpha = 1;
    if (highlighted) { // another view's brush: ringed
      ctx.strokeStyle = kit.colour("--av-accent", "#1f77b4");
      for (const i of Array.from(highlighted)) {
        if (i >= conf.length) continue;
        ctx.beginPath();
        ctx.arc(sx(vari[i], width), sy(conf[i], height), 4, 0, 2 * Math.PI);
        ctx.stroke();
      }
    }
    // Cartography's default region boundaries: variability 0.2 (ambiguous above), confidence 0.5 (easy above)
    ctx.strokeStyle = kit.colour("--av-border", "#ccc");
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(sx(0.2, width), MARGIN.top);
    ctx.lineTo(sx(0.2, width), height - MARGIN.bottom);
    ctx.moveTo(MARGIN.left, sy(0.5, height));
    ctx.lineTo(sx(0.2, width), sy(0.5, height));
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = fg;
    ctx.font = "italic 11px sans-serif";
    for (const r of REGION_LABELS) ctx.fillText(r.text, sx(r.x * xMax / 0.5, width), sy(r.y, height));
    if (box) {
      ctx.strokeStyle = kit.colour("--av-accent", "#1f77b4");
      ctx.setLineDash([4, 3]);
      const [bx, by] = [Math.min(box.x0, box.x1), Math.min(box.y0, box.y1)];
      ctx.strokeRect(bx, by, Math.abs(box.x1 - box.x0), Math.abs(box.y1 - box.y0));
      ctx.setLineDash([]);
    }
    colorPick.value = model.get("color_by");
    count.textContent = `${conf.length} instances${brushed && brushed.length ? ` · ${brushed.length} brushed` : ""}`;
    el.dataset.points = String(conf.length);
    el.dataset.brushed = String(brushed ? brushed.length : 0);
    el.dataset.highlighted = String(highlighted ? highlighted.length : 0);
    el.dataset.ready = "1";
  });

  function drawButtons() {
    buttons.replaceChildren(...model.get("subset_buttons").map((/** @type {string} */ name) => h("button", {
      text: `+ ${name}`, "data-subset": name, title: `Add the subset "${name}"`,
      onclick: () => model.send({ add_subset: name }),
    })));
  }

  const local = (/** @type {PointerEvent} */ ev) => {
    const r = canvas.getBoundingClientRect();
    return { x: ev.clientX - r.left, y: ev.clientY - r.top };
  };
  kit.listen(canvas, "pointerdown", (ev) => {
    if (ev.button !== 0) return;
    const p = local(ev);
    box = { x0: p.x, y0: p.y, x1: p.x, y1: p.y };
    canvas.setPointerCapture(ev.pointerId);
  });
  kit.listen(canvas, "pointermove", (ev) => {
    if (!box) return;
    const p = local(ev);
    box.x1 = p.x;
    box.y1 = p.y;
    draw();
  });
  kit.listen(canvas, "pointerup", () => {
    if (!box) return;
    const { width, height } = size();
    const conf = kit.array("confidence")?.data, vari = kit.array("variability")?.data;
    const moved = Math.abs(box.x1 - box.x0) + Math.abs(box.y1 - box.y0) >= 4;
    const [xa, xb] = [Math.min(box.x0, box.x1), Math.max(box.x0, box.x1)];
    const [ya, yb] = [Math.min(box.y0, box.y1), Math.max(box.y0, box.y1)];
    box = null;
    /** @type {number[]} */
    const picked = [];
    if (moved && conf && vari) {
      for (let i = 0; i < conf.length; i++) {
        const x = sx(vari[i], width), y = sy(conf[i], height);
        if (x >= xa && x <= xb && y >= ya && y <= yb) picked.push(i);
      }
    }
    // the explorer's brush, written here so the other views follow it at once (the kernel clears it)
    if (shared && picked.length) shared.setClause("brush", picked);
    model.set("brushed", picked.length ? encodeArray(Int32Array.from(picked), "int32") : null);
    model.save_changes();
    draw();
  });

  /** @type {import("./common/selection.js").SharedSelection | null} */
  let shared = null;
  kit.selection((sel) => {
    shared = sel;
    const next = sel ? sel.clause("brush") : null; // decoded once per value: the same object while it stands
    if (next === highlighted) return; // another trait of the Selection (a hover): no 10k-point redraw
    highlighted = next;
    draw();
  });
  kit.on("confidence variability correctness forgetting brushed color_by height colours", draw);
  kit.on("subset_buttons", drawButtons);
  kit.onResize(el, draw);
  drawButtons();
  draw();
}

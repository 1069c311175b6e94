// @ts-check
// The projection's controls around the map: its stylesheet, the toolbar and frame elements, the
// legend (categories to click, or a colour ramp), the toolbar kept in step with the model, and the
// status line. Text from data goes in as text only.
import { h } from "../common/dom.js";
import { formatCount, formatInteger, formatNumber } from "../common/format.js";

/** @typedef {import("../common/view.js").AnyModel} AnyModel */

export const CSS = `
.activis-projection .av-proj-box { display: flex; flex-direction: column; }
.activis-projection .av-proj-frame { position: relative; flex: 1 1 auto; min-height: 120px; overflow: hidden;
  border: 1px solid var(--av-border-soft); touch-action: none; user-select: none; outline: none; }
.activis-projection .av-proj-frame canvas { position: absolute; left: 0; top: 0; }
.activis-projection .av-proj-progress { position: absolute; left: 0; top: 0; height: 3px; width: 0;
  background: var(--av-accent); transition: width 0.15s; pointer-events: none; }
.activis-projection .av-proj-message { position: absolute; inset: 0; display: flex; align-items: center;
  justify-content: center; text-align: center; padding: 16px; color: var(--av-fg-muted); pointer-events: none;
  white-space: pre-wrap; }
.activis-projection .av-proj-message[data-error="true"] { color: var(--av-warn); }
/* the counts sit on the map's corner, not in the toolbar: a count that grows moves no button */
.activis-projection .av-proj-info { position: absolute; right: 4px; top: 3px; color: var(--av-fg-muted);
  white-space: nowrap; font-size: 11px; pointer-events: none; background: var(--av-bg); opacity: 0.85;
  padding: 0 3px; border-radius: 2px; }
/* compact enough for half a notebook column (about 470 px): layer, method, colour, the modes, Fit and Clear */
.activis-projection .activis-toolbar { gap: 3px; }
.activis-projection .activis-toolbar select { max-width: 84px; }
.activis-projection .activis-toolbar select[data-role="color"] { max-width: 100px; }
.activis-projection .activis-toolbar button { padding: 2px 5px; }
.activis-projection .av-proj-legend { max-height: 4.6em; overflow-y: auto; padding: 4px 0 0; }
.activis-projection .av-proj-legend .entry { cursor: pointer; white-space: nowrap; }
.activis-projection .av-proj-legend .entry:hover { color: var(--av-fg); text-decoration: underline; }
.activis-projection .av-proj-legend .title { font-weight: 600; color: var(--av-fg); }
.activis-projection .av-proj-gradient { width: 160px; height: 10px; vertical-align: middle;
  border: 1px solid var(--av-border-soft); }
.activis-projection .av-proj-neuron { width: 4.2em; }
`;

const METHOD_LABELS = { pca: "PCA", umap: "UMAP", tsne: "t-SNE" };
const COLOR_LABELS = {
  label: "true class", pred: "prediction", correct: "correct / misclassified", neuron: "neuron activation",
};

/** Every element of the view, by name. */
export function projectionDom() {
  // toolbar
  const layerSelect = h("select", { title: "Layer whose activations are projected", "data-role": "layer" });
  const methodSelect = h("select", { title: "Projection method", "data-role": "method" });
  for (const [value, label] of Object.entries(METHOD_LABELS)) {
    methodSelect.appendChild(h("option", { value, text: label }));
  }
  const colorSelect = h("select", { title: "Colour points by", "data-role": "color" });
  const neuronInput = h("input", { type: "number", min: "0", step: "1", className: "av-proj-neuron",
    title: "Neuron whose activation colours the points", "data-role": "neuron" });
  const modeButtons = {};
  for (const [mode, label, title] of [["pan", "Pan", "Drag to pan, wheel to zoom (shift-drag lassos)"],
    ["lasso", "Lasso", "Drag a free shape to select (shift adds)"],
    ["box", "Box", "Drag a rectangle to select (shift adds)"]]) {
    modeButtons[mode] = h("button", { text: label, title, "data-mode": mode });
  }
  const fitButton = h("button", { text: "Fit", title: "Show all points (or double-click the map)" });
  const clearButton = h("button", { text: "Clear", title: "Clear the selection (Esc)" });
  const info = h("span", { className: "av-proj-info" });
  const toolbar = h("div", { className: "activis-toolbar" }, [
    layerSelect, methodSelect, colorSelect, neuronInput, modeButtons.pan, modeButtons.lasso, modeButtons.box,
    fitButton, clearButton,
  ]);

  // map
  const canvas = h("canvas", { className: "av-proj-points" });
  const overlay = h("canvas", { className: "av-proj-overlay" });
  const progressBar = h("div", { className: "av-proj-progress" });
  const message = h("div", { className: "av-proj-message" });
  const frame = h("div", { className: "av-proj-frame", tabindex: "0" }, [canvas, overlay, progressBar, message,
    info]);
  const legend = h("div", { className: "activis-legend av-proj-legend" });
  // the height goes on an inner box: ipywidgets rewrites the root's style from its Layout
  const box = h("div", { className: "av-proj-box" }, [toolbar, frame, legend]);
  return {
    layerSelect, methodSelect, colorSelect, neuronInput, modeButtons, fitButton, clearButton, info, toolbar, canvas,
    overlay, progressBar, message, frame, legend, box,
  };
}

/** @typedef {ReturnType<typeof projectionDom>} ProjectionDom */

/**
 * The legend of `spec` (Python's): a click on a category calls onPick(code, additive).
 * @param {HTMLElement} legend @param {any} spec @param {string[]} paletteCss
 * @param {(code: number, additive: boolean) => void} onPick
 */
export function renderLegend(legend, spec, paletteCss, onPick) {
  legend.replaceChildren();
  if (!spec.kind) return;
  legend.appendChild(h("span", { className: "title", text: spec.title || "" }));
  if (spec.kind === "categorical") {
    for (const entry of spec.entries || []) {
      const item = h("span", { className: "entry", "data-code": String(entry.code),
        title: "Click to select these points (shift adds)" }, [
        h("span", { className: "swatch", style: { background: paletteCss[entry.code] || "#888" } }),
        h("span", { text: `${entry.label} (${formatCount(entry.count)})` }),
      ]);
      item.addEventListener("click", (ev) => onPick(entry.code, ev.shiftKey));
      legend.appendChild(item);
    }
  } else {
    const bar = h("canvas", { className: "av-proj-gradient", width: "160", height: "10" });
    const g = bar.getContext("2d");
    for (let x = 0; x < 160; x++) {
      g.fillStyle = paletteCss[Math.min(254, Math.floor((x / 159) * 254))] || "#888";
      g.fillRect(x, 0, 1, 10);
    }
    const [lo, hi] = spec.domain || [0, 1];
    legend.append(h("span", { text: formatNumber(lo) }), bar, h("span", { text: formatNumber(hi) }));
    if (spec.note) legend.appendChild(h("span", { text: spec.note }));
    if (spec.missing) {
      const swatch = h("span", { className: "swatch", style: { background: paletteCss[255] || "#888" } });
      legend.append(h("span", {}, [swatch,
        h("span", { text: `missing (${formatCount(spec.missing)})` })]));
    }
  }
}

/**
 * The toolbar as the model says (options rebuilt only when they change; the neuron box is left alone
 * while the user types in it) and the pressed mode button.
 * @param {ProjectionDom} dom @param {AnyModel} model @param {string} mode
 */
export function syncToolbar({ layerSelect, methodSelect, colorSelect, neuronInput, modeButtons }, model, mode) {
  const layers = model.get("layers") || [];
  const differs = (/** @type {HTMLSelectElement} */ select, /** @type {string[]} */ values) =>
    select.options.length !== values.length || [...select.options].some((o, i) => o.value !== values[i]);
  if (differs(layerSelect, layers)) {
    layerSelect.replaceChildren(...layers.map((l) => h("option", { value: l, text: l })));
  }
  layerSelect.value = model.get("layer");
  methodSelect.value = model.get("method");
  const options = model.get("color_options") || [];
  if (differs(colorSelect, options)) {
    colorSelect.replaceChildren(...options.map((c) => h("option", { value: c, text: COLOR_LABELS[c] || c })));
  }
  colorSelect.value = model.get("color_by");
  const isNeuron = model.get("color_by") === "neuron";
  neuronInput.style.display = isNeuron ? "" : "none";
  neuronInput.max = String(Math.max(0, model.get("n_neurons") - 1));
  if (document.activeElement !== neuronInput) neuronInput.value = String(model.get("neuron"));
  for (const [m, b] of Object.entries(modeButtons)) b.setAttribute("aria-pressed", String(m === mode));
}

/**
 * The status line and the message over the map, from the model: points, selection, progress, errors.
 * @param {AnyModel} model @param {number} n @param {number} selectedCount
 * @param {string} shown what the map shows (a checkpoint's frame drawn in the page before the model says so)
 */
export function statusText(model, n, selectedCount, shown = model.get("shown_method")) {
  const status = model.get("status");
  const progress = model.get("progress");
  const method = model.get("method");
  const running = status === "running" || status === "pending";
  const parts = [`${formatInteger(n)} points`];
  if (selectedCount) parts.push(`${formatInteger(selectedCount)} selected`);
  if (running) {
    const stage = model.get("stage") || "starting";
    parts.push(`${METHOD_LABELS[method] || method}: ${stage} ${Math.round(progress * 100)}%`);
    if (shown && shown !== method) parts.push(`showing ${METHOD_LABELS[shown] || shown}`);
  } else if (shown) {
    parts.push(METHOD_LABELS[shown] || shown);
  }
  if (shown === method && model.get("note")) parts.push(model.get("note"));
  const error = model.get("error");
  let message = "";
  if (error) message = error;
  else if (!n) {
    message = running ? `Computing ${METHOD_LABELS[method] || method} of ${model.get("layer")}…` : "No layout yet.";
  }
  return { info: parts.join(" · "), message, error: Boolean(error), running };
}

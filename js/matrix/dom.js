// @ts-check
// The matrix's stylesheet and elements: a toolbar, a frame (corner, neuron header, row labels, the
// scrolled cells) and a footer with the legend. The view wires them; nothing here listens.
import { h } from "../common/dom.js";
import { formatInteger } from "../common/format.js";
import { HEADER_H } from "./paint.js";

// the row labels take what they need of a narrow view and no more of a wide one: a fixed 220 px left
// 5.8 px a unit at 64 units in a notebook column
const LABEL_COLUMN = "clamp(100px, 16%, 220px)";

export const CSS = `
.activis-matrix .av-frame { display: grid; grid-template-columns: ${LABEL_COLUMN} minmax(0, 1fr);
  grid-template-rows: ${HEADER_H}px 1fr; border: 1px solid var(--av-border-soft); }
.activis-matrix .av-corner { font-size: 11px; color: var(--av-fg-muted); padding: 2px 6px; overflow: hidden;
  white-space: nowrap; border-bottom: 1px solid var(--av-border-soft); border-right: 1px solid var(--av-border-soft); }
.activis-matrix .av-header { position: relative; overflow: hidden; border-bottom: 1px solid var(--av-border-soft);
  cursor: pointer; }
.activis-matrix .av-labels { position: relative; overflow: hidden; border-right: 1px solid var(--av-border-soft); }
.activis-matrix .av-labels-inner { position: relative; }
.activis-matrix .av-row { display: flex; align-items: center; gap: 4px; padding: 0 4px; overflow: hidden;
  white-space: nowrap; cursor: pointer; box-sizing: border-box; }
.activis-matrix .av-row:hover { background: var(--av-bg-alt); }
.activis-matrix .av-row[data-selected="true"] { color: var(--av-accent); font-weight: 600; }
.activis-matrix .av-row[data-hovered="true"] { background: var(--av-bg-alt); }
.activis-matrix .av-row .av-text { flex: 1 1 auto; overflow: hidden; text-overflow: ellipsis; }
.activis-matrix .av-row .av-size { flex: 0 0 auto; color: var(--av-fg-muted); font-size: 10px; }
.activis-matrix .av-row button { display: none; flex: 0 0 auto; font: inherit; font-size: 10px; line-height: 1;
  padding: 1px 3px; border: 1px solid var(--av-border); border-radius: 2px; background: var(--av-bg);
  color: var(--av-fg); cursor: pointer; }
.activis-matrix .av-row:hover button, .activis-matrix .av-row button[aria-pressed="true"] { display: inline-block; }
.activis-matrix .av-row button[aria-pressed="true"] { border-color: var(--av-accent); color: var(--av-accent); }
.activis-matrix .av-scroller { position: relative; overflow: auto; }
.activis-matrix .av-canvas { position: absolute; left: 0; top: 0; cursor: crosshair; }
.activis-matrix .av-footer { display: flex; gap: 12px; align-items: center; padding: 4px 0 0; font-size: 11px;
  color: var(--av-fg-muted); flex-wrap: wrap; }
.activis-matrix .av-status { color: var(--av-warn); cursor: pointer; }
.activis-matrix .av-group { display: inline-flex; }
.activis-matrix .av-group button { border-radius: 0; margin-left: -1px; }
.activis-matrix .av-group button:first-child { border-radius: 3px 0 0 3px; margin-left: 0; }
.activis-matrix .av-group button:last-child { border-radius: 0 3px 3px 0; }
.activis-matrix .activis-toolbar input[type=number] { width: 8.5em; cursor: text; } /* "instance #" and the spinner */
.activis-matrix .activis-toolbar select { max-width: 120px; }
`;

/** Every element of the view, by name. */
export function matrixDom() {
  const layerSelect = h("select", { title: "Layer", "aria-label": "layer" });
  const statSelect = h("select", { title: "Statistic shown in each cell", "aria-label": "statistic" });
  for (const [value, text] of [["mean", "mean"], ["active", "fraction active"], ["std", "std"]]) {
    statSelect.appendChild(h("option", { value, text }));
  }
  const modeButtons = {};
  const modeGroup = h("span", { className: "av-group", role: "group", "aria-label": "neuron order" });
  for (const [mode, text, title] of [
    ["index", "Index", "Neurons in index order"],
    ["sort", "Sort", "Neurons sorted by the values in the sort row"],
    ["cluster", "Cluster", "Neurons with similar profiles side by side (hierarchical clustering)"],
  ]) {
    modeButtons[mode] = h("button", { text, title, "data-mode": mode, className: "av-mode" });
    modeGroup.appendChild(modeButtons[mode]);
  }
  const sortSelect = h("select", { title: "Row to sort neurons by", "aria-label": "sort by row" });
  const diffSelect = h("select", { title: "Show every row minus this row", "aria-label": "difference to" });
  const zoomOut = h("button", { text: "−", title: "Narrower columns" });
  const zoomFit = h("button", { text: "Fit", title: "Fit all neurons in the width" });
  const zoomIn = h("button", { text: "+", title: "Wider columns (or Ctrl + wheel)" });
  const addSubset = h("select", { title: "Add a subset row", "aria-label": "add subset" });
  const addInstanceInput = h("input", {
    type: "number", min: "0", placeholder: "instance #", "aria-label": "instance index",
  });
  const addInstanceButton = h("button", { text: "Pin", title: "Add this instance as a row" });
  const toolbar = h("div", { className: "activis-toolbar" }, [
    layerSelect, statSelect, modeGroup, h("span", { text: "by" }), sortSelect,
    h("span", { text: "Δ" }), diffSelect, h("span", { className: "av-group" }, [zoomOut, zoomFit, zoomIn]),
    addSubset, addInstanceInput, addInstanceButton,
  ]);

  const corner = h("div", { className: "av-corner" });
  const header = h("div", { className: "av-header" });
  const headerCanvas = h("canvas", { className: "av-header-canvas" });
  header.appendChild(headerCanvas);
  const labels = h("div", { className: "av-labels" });
  const labelsInner = h("div", { className: "av-labels-inner" });
  labels.appendChild(labelsInner);
  const scroller = h("div", { className: "av-scroller" });
  const spacer = h("div", { className: "av-spacer" });
  const canvas = h("canvas", { className: "av-canvas" });
  scroller.append(spacer, canvas);
  const frame = h("div", { className: "av-frame" }, [corner, header, labels, scroller]);

  const legendCanvas = h("canvas", { className: "av-legend", width: "160", height: "10" });
  const legendLo = h("span");
  const legendMid = h("span");
  const legendHi = h("span");
  const legendTitle = h("span");
  const legendEmpty = h("span", { className: "av-empty" });
  const info = h("span", { className: "av-info" });
  const status = h("span", { className: "av-status", title: "click to dismiss" });
  const progress = h("span", { className: "av-progress" });
  const footer = h("div", { className: "av-footer" }, [
    legendTitle, h("span", {}, [legendLo]), legendCanvas, h("span", {}, [legendHi]), legendMid, legendEmpty, info,
    progress, status,
  ]);
  return { layerSelect, statSelect, modeButtons, sortSelect, diffSelect, zoomOut, zoomFit, zoomIn, addSubset,
    addInstanceInput, addInstanceButton, toolbar, corner, header, headerCanvas, labels, labelsInner, scroller, spacer,
    canvas, frame, legendCanvas, legendLo, legendMid, legendHi, legendTitle, legendEmpty, info, progress, status,
    footer };
}

/**
 * One row's label: its name and size, and the buttons that sort by it, compare to it and remove it.
 * @param {{key: string, label: string, kind: string, size: number, description: string}} row
 * @param {number} rowH @param {number} font
 */
export function rowLabel(row, rowH, font) {
  const text = h("span", { className: "av-text" });
  const size = h("span", { className: "av-size" });
  const sortBtn = h("button", { text: "↓", title: "Sort neurons by this row", className: "av-sort" });
  const diffBtn = h("button", { text: "Δ", title: "Show every row minus this row", className: "av-diff" });
  const removeBtn = h("button", { text: "×", title: "Remove this row", className: "av-remove" });
  const div = h("div", { className: "av-row", "data-key": row.key, "data-kind": row.kind },
    [text, size, sortBtn, diffBtn, removeBtn]);
  relabel(div, row);
  div.style.height = `${rowH}px`;
  div.style.fontSize = `${Math.max(6, font)}px`;
  if (rowH < 8) { text.style.visibility = "hidden"; size.style.visibility = "hidden"; }
  return { div, sortBtn, diffBtn, removeBtn };
}

/** Write a row's name, size and description into its label (a brushed row's change in place). */
export function relabel(/** @type {HTMLElement} */ div, /** @type {Parameters<typeof rowLabel>[0]} */ row) {
  /** @type {HTMLElement} */ (div.querySelector(".av-text")).textContent = row.label; // from data: text, never markup
  /** @type {HTMLElement} */ (div.querySelector(".av-size")).textContent =
    row.kind === "instance" ? "" : `n=${formatInteger(Number(row.size))}`;
  div.title = `${row.label}\n${row.description}`;
}

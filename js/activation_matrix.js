// @ts-check
// ActivationMatrix: rows are subsets and instances, columns are the neurons of one layer.
// The matrix is one offscreen image (one pixel per cell, in display order) scaled onto a canvas
// the size of the visible area, so 1,024 x 100 cells cost one putImageData and one drawImage.
// Sorting by a row happens here (no kernel round trip); clustering arrives from Python as an order.
import { defineView } from "./common/view.js";
import { h, makeTooltip } from "./common/dom.js";
import { encodeArray } from "./common/arrays.js";
import { colourScale, paintCells, sortOrder, cellLines, STAT_TITLE } from "./matrix/cells.js";
import { formatNumber } from "./common/format.js";
import { HEADER_H, drawMarks, drawHeader, paintRamp } from "./matrix/paint.js";
import { CSS, matrixDom, relabel, rowLabel } from "./matrix/dom.js";
import { BRUSH_KEY, pageRows } from "./matrix/local_rows.js";
import { frameAt, sameValues, stepHolding } from "./common/checkpoint_frames.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {{ key: string, label: string, kind: "subset" | "instance" | "indices", size: number,
 *   description: string }} Row
 * @typedef {{ layer: string, layers: string[], neuron_kind: string, statistic: "mean" | "active" | "std",
 *   threshold: number, row_keys: string[], rows: Row[], values: Serialised | null, available_subsets: string[],
 *   order_mode: "index" | "sort" | "cluster", sort_by_row: string, difference_to: string,
 *   neuron_order: Serialised | null, selected_neuron: number, selected_row: string, hovered_neuron: number,
 *   hovered_row: string, status: string, progress: string, row_members: Serialised | null,
 *   row_offsets: Serialised | null, member_keys: string[], index_members: Serialised | null,
 *   index_offsets: Serialised | null, index_keys: string[], height: number }} MatrixModel
 */

const MIN_ROW_H = 4;
const MAX_ROW_H = 22;
const MAX_CELL_W = 40;

export default defineView({
  name: "matrix", css: CSS, source: "matrix", setup,
  arrays: ["values", "neuron_order", "row_members", "row_offsets", "index_members", "index_offsets",
    "page_activations", "checkpoint_values"],
});

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const themeColor = (/** @type {HTMLElement} */ _el, /** @type {string} */ name, /** @type {string} */ fallback) =>
    kit.colour(name, fallback);

  // ------------------------------------------------------------------ DOM
  const { layerSelect, statSelect, modeButtons, sortSelect, diffSelect, zoomOut, zoomFit, zoomIn, addSubset,
    addInstanceInput, addInstanceButton, toolbar, corner, header, headerCanvas, labels, labelsInner, scroller, spacer,
    canvas, frame, legendCanvas, legendLo, legendMid, legendHi, legendTitle, legendEmpty, info, progress, status,
    footer } = matrixDom();
  el.append(toolbar, frame, footer);
  const tooltip = makeTooltip(el);
  const ctx = canvas.getContext("2d");
  const headerCtx = headerCanvas.getContext("2d");
  const offscreen = document.createElement("canvas");
  const offCtx = offscreen.getContext("2d");

  // ------------------------------------------------------------------ state
  let R = 0, N = 0;
  /** @type {import("./common/arrays.js").Typed} */
  let raw = new Float32Array(0);   // rows x neurons as sent
  /** @type {import("./common/arrays.js").Typed} */
  let shown = new Float32Array(0); // after difference mode
  let rows = [];
  let order = new Int32Array(0);
  let position = new Int32Array(0); // neuron -> column
  /** @type {import("./matrix/cells.js").ColourScale} */
  let scale = { kind: "sequential", lo: 0, hi: 1, lut: null, nan: [200, 200, 200], hasNan: false };
  let cellW = 1, rowH = 12, fitMode = true;
  let hover = { row: -1, col: -1 };
  let pendingCluster = false;
  const rowEls = [];
  /** @type {import("./common/selection.js").SharedSelection | null} */
  let shared = null;           // the explorer's Selection, when one is attached
  let sharedHoverRow = -1;     // the row whose instances we last wrote to selection.hover
  /** @type {Map<string, ArrayLike<number>>} a row's instances by its key, for linking in the browser */
  let members = new Map();
  /** @type {{ layer: string, neurons: number[] }} neurons a linked view points at (selection.highlight_neurons) */
  let highlight = { layer: "", neurons: [] };
  const pageRowsHere = pageRows(kit);
  /** @type {ArrayLike<number> | null | undefined} the brush clause last drawn (undefined: none seen yet) */
  let seenBrush;
  let shownStep = -1;          // the checkpoint drawn (the shared Selection's), -1 outside a run

  const keyIndex = (key) => rows.findIndex((r) => r.key === key);
  const save = (changes) => {
    for (const [k, v] of Object.entries(changes)) model.set(k, v);
    model.save_changes();
  };

  // ------------------------------------------------------------------ data -> image
  function computeShown() {
    const ref = keyIndex(model.get("difference_to"));
    if (ref < 0) {
      shown = raw;
      return;
    }
    shown = new Float32Array(raw.length);
    const base = ref * N;
    for (let r = 0; r < R; r++) {
      const o = r * N;
      for (let j = 0; j < N; j++) shown[o + j] = raw[o + j] - raw[base + j];
    }
  }

  function computeScale() {
    const stat = model.get("statistic");
    const diff = keyIndex(model.get("difference_to")) >= 0 || !!model.get("compared_to");
    const bg = themeColor(el, "--av-bg", "#ffffff"), nan = themeColor(el, "--av-bg-alt", "#eeeeee");
    scale = colourScale(shown, stat, diff, kit.palette().matrix, bg, nan);
  }

  function computeOrder() {
    const mode = model.get("order_mode");
    const t0 = performance.now();
    let next = null;
    if (mode === "sort") {
      const r = keyIndex(model.get("sort_by_row"));
      if (r >= 0) next = sortOrder(shown, r, N);
    } else if (mode === "cluster") {
      const sent = kit.array("neuron_order");
      if (sent && sent.data.length === N) next = Int32Array.from(sent.data);
    }
    if (!next) {
      next = new Int32Array(N);
      for (let j = 0; j < N; j++) next[j] = j;
    }
    order = next;
    position = new Int32Array(N);
    for (let p = 0; p < N; p++) position[order[p]] = p;
    return performance.now() - t0;
  }

  function buildImage() {
    offscreen.width = Math.max(1, N);
    offscreen.height = Math.max(1, R);
    if (!R || !N) return;
    const image = offCtx.createImageData(N, R);
    paintCells(image.data, shown, order, R, N, scale);
    offCtx.putImageData(image, 0, 0);
  }

  // ------------------------------------------------------------------ geometry
  let seenWidth = 0; // the scroller's width as its resize observer last saw it
  function layout() {
    const toolbarH = toolbar.offsetHeight || 30;
    const footerH = footer.offsetHeight || 22;
    // as tall as the rows need at full row height, at most what `height` leaves for the frame
    const budget = Math.max(80, model.get("height") - toolbarH - footerH - 6);
    const width = scroller.clientWidth || seenWidth || 600; // 0 while hidden or while the theme swaps
    if (fitMode) cellW = N ? Math.min(MAX_CELL_W, width / N) : 1;
    const scrollbar = N * cellW > width + 0.5 ? 14 : 0;
    const frameH = Math.min(budget, Math.max(HEADER_H + 60, HEADER_H + R * MAX_ROW_H + scrollbar + 2));
    frame.style.height = `${frameH}px`;
    const height = scroller.clientHeight || frameH - HEADER_H;
    rowH = R ? Math.max(MIN_ROW_H, Math.min(MAX_ROW_H, Math.floor(height / R))) : MAX_ROW_H;
    spacer.style.width = `${Math.max(1, N * cellW)}px`;
    spacer.style.height = `${Math.max(1, R * rowH)}px`;
    const cw = scroller.clientWidth || width, ch = scroller.clientHeight || height;
    kit.canvas(canvas, Math.max(1, cw), Math.max(1, ch));
    kit.canvas(headerCanvas, Math.max(1, cw), HEADER_H);
    el.dataset.cellW = cellW.toFixed(3);
    el.dataset.rowH = String(rowH);
  }

  function buildLabels() {
    labelsInner.replaceChildren();
    // the label column scrolls with the matrix: same content height, plus the matrix's scrollbar
    labelsInner.style.height = `${R * rowH}px`;
    labelsInner.style.paddingBottom = `${scroller.offsetHeight - scroller.clientHeight}px`;
    labelsInner.style.boxSizing = "content-box";
    rowEls.length = 0;
    const font = Math.min(12, rowH - 1);
    for (const row of rows) {
      const { div, sortBtn, diffBtn, removeBtn } = rowLabel(row, rowH, font);
      div.addEventListener("click", () => {
        const key = model.get("selected_row") === row.key ? "" : row.key;
        save({ selected_row: key });
        shareRow(key);
      });
      div.addEventListener("mouseenter", () => setHover(rows.indexOf(row), -1));
      sortBtn.addEventListener("click", (ev) => {
        ev.stopPropagation();
        save({ sort_by_row: row.key, order_mode: "sort" });
      });
      diffBtn.addEventListener("click", (ev) => {
        ev.stopPropagation();
        save({ difference_to: model.get("difference_to") === row.key ? "" : row.key });
      });
      removeBtn.addEventListener("click", (ev) => {
        ev.stopPropagation();
        save({ row_keys: model.get("row_keys").filter((k) => k !== row.key) });
      });
      labelsInner.appendChild(div);
      rowEls.push({ div, sortBtn, diffBtn });
    }
    markLabels();
  }

  function markLabels() {
    const sel = model.get("selected_row"), sortKey = model.get("sort_by_row"), diffKey = model.get("difference_to");
    const sorting = model.get("order_mode") === "sort";
    rows.forEach((row, i) => {
      const { div, sortBtn, diffBtn } = rowEls[i];
      div.dataset.selected = String(row.key === sel);
      div.dataset.hovered = String(i === hover.row);
      sortBtn.setAttribute("aria-pressed", String(sorting && row.key === sortKey));
      diffBtn.setAttribute("aria-pressed", String(row.key === diffKey));
    });
    if (labels.scrollTop !== scroller.scrollTop) labels.scrollTop = scroller.scrollTop;
  }

  // ------------------------------------------------------------------ drawing
  function blit() {
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.width / dpr, H = canvas.height / dpr;
    const sl = scroller.scrollLeft, st = scroller.scrollTop;
    const cells = { R, N, cellW, rowH, order, position }, picked = marks();
    canvas.style.transform = `translate(${sl}px, ${st}px)`;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = themeColor(el, "--av-bg", "#fff");
    ctx.fillRect(0, 0, W, H);
    if (R && N) {
      const c0 = Math.max(0, Math.floor(sl / cellW)), c1 = Math.min(N, Math.ceil((sl + W) / cellW));
      const r0 = Math.max(0, Math.floor(st / rowH)), r1 = Math.min(R, Math.ceil((st + H) / rowH));
      // below one pixel per neuron, average neighbouring columns instead of dropping them
      ctx.imageSmoothingEnabled = cellW < 1;
      ctx.imageSmoothingQuality = "high";
      if (c1 > c0 && r1 > r0) {
        ctx.drawImage(offscreen, c0, r0, c1 - c0, r1 - r0, c0 * cellW - sl, r0 * rowH - st, (c1 - c0) * cellW,
          (r1 - r0) * rowH);
      }
      drawMarks(ctx, cells, { sl, st, W, H }, picked, kit.colour);
    }
    drawHeader(headerCtx, cells, sl, W, picked, kit.colour);
    markLabels();
    el.dataset.highlightedNeurons = picked.highlighted.join(",");
  }

  /** The linked view's neurons, when they belong to the layer shown here. */
  function highlightedHere() {
    return highlight.layer === model.get("layer") ? highlight.neurons.filter((j) => j >= 0 && j < N) : [];
  }

  /** What the painted marks need to know: the picked neuron and row, the difference row, links, hover. */
  function marks() {
    return { neuron: model.get("selected_neuron"), selRow: keyIndex(model.get("selected_row")),
      ref: keyIndex(model.get("difference_to")), highlighted: highlightedHere(), hover };
  }

  function drawLegend() {
    paintRamp(legendCanvas, scale.lut);
    legendCanvas.style.border = "1px solid var(--av-border-soft)";
    const stat = model.get("statistic");
    const ref = keyIndex(model.get("difference_to"));
    let title = STAT_TITLE[stat] + (stat === "active" ? ` (> ${formatNumber(model.get("threshold"))})` : "");
    if (model.get("compared_to")) title = `${title}, change since ${model.get("compared_to")}`;
    if (ref >= 0) title = `${title}, minus row “${rows[ref].label}”`;
    legendTitle.textContent = title;
    legendLo.textContent = formatNumber(scale.lo);
    legendHi.textContent = formatNumber(scale.hi);
    legendMid.textContent = scale.kind === "diverging" ? "(0 at the centre)" : "";
    const grey = model.get("progress") ? "grey: not computed yet" : "grey: empty subset";
    legendEmpty.textContent = scale.hasNan ? grey : "";
    el.dataset.scale = scale.kind;
    el.dataset.comparedTo = model.get("compared_to") || "";
  }

  /** The corner names the hovered row (labels are hidden when rows are thin), else the matrix size. */
  function updateCorner() {
    const kind = model.get("neuron_kind") || "unit";
    corner.textContent = hover.row >= 0 && rows[hover.row] ? rows[hover.row].label : `${R} rows × ${N} ${kind}s`;
  }

  function updateInfo(ms) {
    updateCorner();
    info.textContent = `${model.get("layer")} · ${model.get("order_mode")}${pendingCluster ? " (clustering…)" : ""}` +
      (ms !== undefined ? ` · ${ms.toFixed(1)} ms` : "");
  }

  // ------------------------------------------------------------------ pipelines
  function markRendered(kind, ms) {
    el.dataset.rows = String(R);
    el.dataset.neurons = String(N);
    el.dataset.orderMode = model.get("order_mode");
    el.dataset.firstNeuron = N ? String(order[0]) : "";
    el.dataset.order = order.join(",");
    el.dataset.selectedNeuron = String(model.get("selected_neuron"));
    el.dataset.selectedRow = model.get("selected_row");
    el.dataset[kind] = ms.toFixed(2);
    el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    // when the browser has painted the frame: the time a user waits
    const t0 = performance.now() - ms;
    requestAnimationFrame(() => { el.dataset[`${kind}Frame`] = (performance.now() - t0).toFixed(2); });
  }

  /** Everything from the kernel's values: difference, scale, order, image, layout, labels. */
  function fullDraw() {
    const decoded = kit.array("values");
    rows = model.get("rows") || [];
    if (decoded && decoded.shape.length === 2) {
      [R, N] = decoded.shape;
      raw = decoded.data;
    } else {
      R = 0; N = 0; raw = new Float32Array(0);
    }
    if (rows.length !== R) rows = rows.slice(0, R); // rows and values arrive in one message; be safe
    drawAll("kernel");
  }

  /** Draw `raw` and `rows` from scratch; `from` says who computed them ("kernel", or "page": a brushed
   * row computed here before the kernel's arrives). */
  function drawAll(/** @type {string} */ from) {
    const t0 = performance.now();
    computeShown();
    computeScale();
    computeOrder();
    buildImage();
    layout();
    buildLabels();
    blit();
    drawLegend();
    fillSelects();
    const ms = performance.now() - t0;
    updateInfo(ms);
    el.dataset.rowsFrom = from;
    markRendered("drawMs", ms);
  }

  /** The brush changed in the page: draw its row (or drop it) now, from the layer the page holds; the
   * kernel's row replaces it when it arrives. Without the layer here the row waits for the kernel. */
  function drawPageBrush(/** @type {ArrayLike<number> | null} */ brush) {
    const next = pageRowsHere.withBrush({ raw, rows, N }, brush, shownStep);
    if (!next) return;
    const inPlace = next.rows.length === R && rowEls.length === R;
    ({ raw, rows } = next);
    R = rows.length;
    if (next.members) members.set(BRUSH_KEY, next.members);
    else members.delete(BRUSH_KEY);
    sharedHoverRow = -1;
    if (!inPlace) {
      drawAll("page");
      return;
    }
    const at = keyIndex(BRUSH_KEY);
    relabel(rowEls[at].div, rows[at]); // the same rows: no layout, only this label and the cells
    redrawShown("page");
  }

  /** A new neuron order only (sort row, mode, cluster order): no new values, same scale. */
  function reorder() {
    const t0 = performance.now();
    computeOrder();
    buildImage();
    blit();
    const ms = performance.now() - t0;
    updateInfo(ms);
    markRendered("sortMs", ms);
  }

  /** Difference mode changes values and scale but not the data from Python (`from`: a brushed row's values,
   * computed here, did). */
  function redrawShown(/** @type {string} */ from = "") {
    const t0 = performance.now();
    computeShown();
    computeScale();
    computeOrder();
    buildImage();
    blit();
    drawLegend();
    const ms = performance.now() - t0;
    updateInfo(ms);
    if (from) el.dataset.rowsFrom = from;
    markRendered("drawMs", ms);
  }

  function fillSelects() {
    const layers = model.get("layers") || [];
    layerSelect.replaceChildren(...layers.map((l) => h("option", { value: l, text: l })));
    layerSelect.value = model.get("layer");
    statSelect.value = model.get("statistic");
    const rowOptions = (/** @type {string} */ none) =>
      [h("option", { value: "", text: none }), ...rows.map((r) => h("option", { value: r.key, text: r.label }))];
    sortSelect.replaceChildren(...rowOptions("(row)"));
    sortSelect.value = model.get("sort_by_row");
    diffSelect.replaceChildren(...rowOptions("none"));
    diffSelect.value = model.get("difference_to");
    const shownKeys = new Set(model.get("row_keys"));
    const options = (model.get("available_subsets") || []).filter((name) => !shownKeys.has(`subset:${name}`));
    addSubset.replaceChildren(h("option", { value: "", text: "+ subset…" }),
      ...options.map((n) => h("option", { value: n, text: n })));
    addSubset.value = "";
    for (const [mode, button] of Object.entries(modeButtons)) {
      button.setAttribute("aria-pressed", String(model.get("order_mode") === mode));
    }
    status.textContent = model.get("status") ? `⚠ ${model.get("status")}` : "";
  }

  // ------------------------------------------------------------------ interaction
  function cellAt(ev) {
    const box = canvas.getBoundingClientRect();
    const x = ev.clientX - box.left + scroller.scrollLeft, y = ev.clientY - box.top + scroller.scrollTop;
    const col = Math.floor(x / cellW), row = Math.floor(y / rowH);
    if (col < 0 || col >= N || row < 0 || row >= R) return null;
    return { row, col, neuron: order[col] };
  }

  function setHover(row, col) {
    if (row === hover.row && col === hover.col) return;
    hover = { row, col };
    const key = row >= 0 ? rows[row].key : "";
    const neuron = col >= 0 ? order[col] : -1;
    if (model.get("hovered_row") !== key || model.get("hovered_neuron") !== neuron) {
      save({ hovered_row: key, hovered_neuron: neuron });
    }
    shareHover(row);
    updateCorner();
    blit();
  }

  // ------------------------------------------------------------------ shared selection (explorer)
  function rowMembers(r) {
    return (r >= 0 && r < rows.length && members.get(rows[r].key)) || null;
  }

  /** Light up the hovered row's instances in the other views, once per row, not per mouse move. */
  function shareHover(row) {
    if (!shared || row === sharedHoverRow) return;
    const inside = row >= 0 ? rowMembers(row) : null;
    if (row >= 0 && !inside) return;
    sharedHoverRow = row;
    if (inside) shared.setClause("hover", inside);
    else shared.clearClause("hover");
  }

  function shareNeuron(neuron) {
    if (shared && shared.get("neuron") !== neuron) shared.set({ neuron });
  }

  function shareRow(key) {
    if (!shared) return;
    const r = keyIndex(key);
    if (!key || r < 0 || rows[r].kind !== "subset") {
      if (shared.get("subset")) shared.set({ subset: "", subset_indices: null });
      return;
    }
    const inside = rowMembers(r);
    const indices = inside ? encodeArray(Int32Array.from(inside), "int32") : null;
    shared.set({ subset: rows[r].label, subset_indices: indices });
  }

  /** The shared neuron and layer drive this view (the explorer's selection wins). */
  function followShared(/** @type {import("./common/selection.js").SharedSelection | null} */ sel) {
    if (sel !== shared) sharedHoverRow = -1;
    shared = sel;
    if (!sel) return;
    const step = sel.get("checkpoint");
    if (typeof step === "number" && step !== shownStep) moveToCheckpoint(step);
    const brush = sel.clause("brush"); // decoded once per value: the same object while it stands
    if (seenBrush !== undefined && brush !== seenBrush) drawPageBrush(brush);
    seenBrush = brush;
    const neuron = sel.get("neuron");
    if (typeof neuron === "number" && neuron >= -1 && neuron < N && neuron !== model.get("selected_neuron")) {
      save({ selected_neuron: neuron });
    }
    const layer = sel.get("layer");
    if (layer && layer !== model.get("layer") && (model.get("layers") || []).includes(layer)) save({ layer });
    const neurons = sel.indices("highlight_neurons");
    const next = { layer: neurons ? sel.get("highlight_neurons_layer") : "",
      neurons: neurons ? Array.from(neurons) : [] };
    if (next.layer !== highlight.layer || next.neurons.join() !== highlight.neurons.join()) {
      highlight = next;
      blit();
    }
  }

  /** The rows' instances: the subset and instance rows in row_members, the index rows (a brush) in index_members,
   * each part for the keys it names (a page without member_keys gives every row, in row_keys' order). */
  function decodeMembers() {
    members = new Map();
    for (const [part, keysName] of [["row", "member_keys"], ["index", "index_keys"]]) {
      const m = kit.array(`${part}_members`), o = kit.array(`${part}_offsets`);
      if (!m || !o) continue;
      const keys = model.get(keysName);
      const named = keys && keys.length ? keys : part === "row" ? model.get("row_keys") : [];
      named.forEach((/** @type {string} */ key, /** @type {number} */ r) => {
        if (r + 1 < o.data.length) members.set(key, m.data.subarray(o.data[r], o.data[r + 1]));
      });
    }
  }

  function tooltipLines(cell) {
    const ref = keyIndex(model.get("difference_to"));
    return cellLines(cell, { rows, raw, shown, N, stat: model.get("statistic"), ref,
      kind: model.get("neuron_kind") || "unit" });
  }

  canvas.addEventListener("mousemove", (ev) => {
    const cell = cellAt(ev);
    if (!cell) { tooltip.hide(); setHover(-1, -1); return; }
    setHover(cell.row, cell.col);
    const box = el.getBoundingClientRect();
    tooltip.show(tooltipLines(cell), ev.clientX - box.left, ev.clientY - box.top);
  });
  canvas.addEventListener("mouseleave", () => { tooltip.hide(); setHover(-1, -1); });
  el.addEventListener("mouseleave", () => setHover(-1, -1));
  // a cell picks its neuron (a second click lets it go); rows are picked by their labels
  canvas.addEventListener("click", (ev) => {
    const cell = cellAt(ev);
    if (!cell) return;
    const neuron = model.get("selected_neuron") === cell.neuron ? -1 : cell.neuron;
    save({ selected_neuron: neuron });
    shareNeuron(neuron);
  });
  header.addEventListener("click", (ev) => {
    const box = header.getBoundingClientRect();
    const col = Math.floor((ev.clientX - box.left + scroller.scrollLeft) / cellW);
    if (col < 0 || col >= N) return;
    const neuron = model.get("selected_neuron") === order[col] ? -1 : order[col];
    save({ selected_neuron: neuron });
    shareNeuron(neuron);
  });
  labels.addEventListener("mouseleave", () => setHover(-1, -1));
  // labels scrolled by the browser (focus, find, scrollIntoView) or the wheel move the matrix too
  labels.addEventListener("scroll", () => {
    if (scroller.scrollTop !== labels.scrollTop) scroller.scrollTop = labels.scrollTop;
  });
  labels.addEventListener("wheel", (ev) => {
    if (scroller.scrollHeight <= scroller.clientHeight) return; // nothing to scroll: let the notebook scroll
    scroller.scrollTop += ev.deltaY;
    ev.preventDefault();
  }, { passive: false });
  scroller.addEventListener("scroll", blit);
  scroller.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey) return;
    ev.preventDefault();
    const box = scroller.getBoundingClientRect();
    zoom(ev.deltaY < 0 ? 1.25 : 0.8, ev.clientX - box.left);
  }, { passive: false });

  function zoom(factor, anchorX) {
    const width = scroller.clientWidth || 600;
    const fit = N ? Math.min(MAX_CELL_W, width / N) : 1;
    const anchor = anchorX ?? width / 2;
    const neuronAt = (scroller.scrollLeft + anchor) / cellW;
    cellW = Math.max(fit, Math.min(MAX_CELL_W, cellW * factor));
    fitMode = cellW <= fit;
    layout();
    scroller.scrollLeft = neuronAt * cellW - anchor;
    blit();
  }
  zoomIn.addEventListener("click", () => zoom(2));
  zoomOut.addEventListener("click", () => zoom(0.5));
  zoomFit.addEventListener("click", () => { fitMode = true; layout(); blit(); });

  layerSelect.addEventListener("change", () => {
    save({ layer: layerSelect.value });
    if (shared) shared.set({ layer: layerSelect.value });
  });
  statSelect.addEventListener("change", () => save({ statistic: statSelect.value }));
  sortSelect.addEventListener("change", () => {
    save(sortSelect.value ? { sort_by_row: sortSelect.value, order_mode: "sort" } : { sort_by_row: "" });
  });
  diffSelect.addEventListener("change", () => save({ difference_to: diffSelect.value }));
  for (const [mode, button] of Object.entries(modeButtons)) {
    button.addEventListener("click", () => {
      const changes = { order_mode: mode };
      if (mode === "sort" && keyIndex(model.get("sort_by_row")) < 0 && R) {
        const sel = keyIndex(model.get("selected_row"));
        changes.sort_by_row = rows[sel >= 0 ? sel : 0].key;
      }
      save(changes);
    });
  }
  addSubset.addEventListener("change", () => {
    if (addSubset.value) save({ row_keys: [...model.get("row_keys"), `subset:${addSubset.value}`] });
  });
  const pinInstance = () => {
    const text = addInstanceInput.value.trim();
    if (text === "") return;
    const key = `instance:${text}`;
    if (!model.get("row_keys").includes(key)) save({ row_keys: [...model.get("row_keys"), key] });
    addInstanceInput.value = "";
  };
  addInstanceButton.addEventListener("click", pinInstance);
  addInstanceInput.addEventListener("keydown", (ev) => { if (ev.key === "Enter") pinInstance(); });
  status.addEventListener("click", () => save({ status: "" }));

  // ------------------------------------------------------------------ checkpoints
  const frames = () => kit.array("checkpoint_values");
  const frameSteps = () => /** @type {number[]} */ (model.get("checkpoint_steps") || []);
  /** Whether the values drawn are the frame of the checkpoint drawn: only then are the other frames this view's. */
  const framesHeld = () => sameValues(frameAt(frames(), frameSteps(), shownStep), raw);

  /** The timeline moved (in the page or from Python): draw the checkpoint's frame now, not after the kernel. */
  function moveToCheckpoint(/** @type {number} */ step) {
    const next = frameAt(frames(), frameSteps(), step);
    const held = framesHeld();
    shownStep = step;
    el.dataset.checkpoint = String(step);
    if (next && held) {
      raw = next;
      redrawShown();
    }
  }

  /** The kernel's values, unless they are a frame while the frames are held: the kernel following a move the
   * page has drawn (or passed, while playing ahead of it) draws nothing again. */
  function onValues() {
    pendingCluster = false;
    const sent = kit.array("values");
    const at = sent && framesHeld() ? stepHolding(frames(), frameSteps(), sent.data) : null;
    if (at === null) {
      fullDraw();
      return;
    }
    if (at === shownStep) raw = sent.data;
    rows = (model.get("rows") || []).slice(0, R); // a subset's size at this checkpoint
    buildLabels();
    el.dataset.rowsFrom = "kernel"; // a brushed row the page drew is the kernel's now
    el.dataset.followed = String(Number(el.dataset.followed || 0) + 1);
  }

  // ------------------------------------------------------------------ model events
  const onOrderMode = () => {
    pendingCluster = model.get("order_mode") === "cluster";
    fillSelects();
    reorder();
  };
  const onSortRow = () => { fillSelects(); if (model.get("order_mode") === "sort") reorder(); else markLabels(); };
  const onNeuronOrder = () => {
    if (model.get("order_mode") !== "cluster") return; // sort and index orders are computed here
    pendingCluster = false;
    reorder();
  };
  const onDifference = () => { fillSelects(); redrawShown(); };
  /** A selection made elsewhere (Python, a linked view) may be scrolled out of sight: bring it in. */
  function ensureVisible() {
    const neuron = model.get("selected_neuron"), row = keyIndex(model.get("selected_row"));
    if (neuron >= 0 && neuron < N) {
      const x = position[neuron] * cellW;
      if (x < scroller.scrollLeft || x + cellW > scroller.scrollLeft + scroller.clientWidth) {
        scroller.scrollLeft = x - scroller.clientWidth / 2;
      }
    }
    if (row >= 0) {
      const y = row * rowH;
      if (y < scroller.scrollTop || y + rowH > scroller.scrollTop + scroller.clientHeight) {
        scroller.scrollTop = y - scroller.clientHeight / 2;
      }
    }
  }

  const onSelection = () => {
    el.dataset.selectedNeuron = String(model.get("selected_neuron"));
    el.dataset.selectedRow = model.get("selected_row");
    ensureVisible();
    blit();
  };
  const onSelects = () => fillSelects();
  kit.on("values", onValues);
  const onFrames = () => { el.dataset.frames = String(frames() ? frameSteps().length : 0); };
  kit.on("checkpoint_values checkpoint_steps", onFrames);
  onFrames();
  kit.on("order_mode", onOrderMode);
  kit.on("sort_by_row", onSortRow);
  kit.on("neuron_order", onNeuronOrder);
  kit.on("difference_to", onDifference);
  kit.on("selected_neuron selected_row", onSelection);
  kit.on("height", fullDraw);
  kit.on("status available_subsets layers", onSelects);
  // rows computed in the background (a large layer): "computing … %" until their values arrive
  const onProgress = () => {
    progress.textContent = model.get("progress") || "";
    el.dataset.progress = model.get("progress") || "";
  };
  kit.on("progress", onProgress);
  onProgress();
  kit.on("row_members index_members member_keys index_keys", () => { decodeMembers(); sharedHoverRow = -1; });
  // theme switches change the CSS variables the colours come from
  kit.onTheme(() => { computeScale(); buildImage(); blit(); drawLegend(); });
  kit.on("colours", () => { computeScale(); buildImage(); blit(); drawLegend(); });
  kit.onResize(scroller, (size) => { seenWidth = size.width; layout(); buildLabels(); blit(); });

  /** For tests and tools: the values a row (by key) is drawn from, or null. */
  /** @type {any} */ (el).activisRow = (/** @type {string} */ key) => {
    const r = keyIndex(key);
    return r < 0 ? null : Array.from(raw.subarray(r * N, (r + 1) * N));
  };
  decodeMembers();
  kit.selection(followShared);
  fullDraw();
  // the first draw can happen before the element is attached (zero width): lay out again once it is
  kit.frame(() => { layout(); buildLabels(); blit(); })();
}

// @ts-check
// ProjectionView: every instance as a dot on a 2D map of its activations (PCA, UMAP or t-SNE).
// Points are rasterised into an ImageData buffer by our own loop: headless Chromium here has no
// GPU (WebGL would fall back to software), and a Canvas2D pixel loop draws 100,000 points in a
// few milliseconds on any browser (measured in the page: data-draw-ms, data-highlight-ms).
// Positions and colour codes arrive as binary buffers; names from the data are set as text only.
import { defineView } from "./common/view.js";
import { makeTooltip } from "./common/dom.js";
import { encodeArray } from "./common/arrays.js";
import { cssRGBA, pack } from "./common/colours.js";
import { addRowsInPolygon, autoPointSize, shuffledOrder, normalise, buildGrid, nearestRow, inPaintOrder,
  fitTransform as fitLayout, dataTransform as layoutToData } from "./projection/geometry.js";
import { paintPoints, paintRings, paintOverlay, colourTables, colourSignature, morph } from "./projection/paint.js";
import { CSS, projectionDom, renderLegend, syncToolbar, statusText } from "./projection/controls.js";
import { frameAt, sameValues, stepHolding } from "./common/checkpoint_frames.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {{ layer: string, layers: string[], method: string, shown_method: string, positions: Serialised | null,
 *   instance_ids: Serialised | null, color_by: string, color_options: string[], neuron: number, n_neurons: number,
 *   color_codes: Serialised | null, palette: string[], legend: object, point_size: number, status: string,
 *   stage: string, progress: number, error: string, selected_indices: Serialised | null,
 *   highlighted_indices: Serialised | null, filter_indices: Serialised | null, hovered_index: number,
 *   hover_details: {index?: number, fields?: string[][]}, lasso: Serialised | null, height: number }} ProjectionModel
 */

const ANIMATE_MS = 600;
const ANIMATE_MAX_POINTS = 300_000;

// ------------------------------------------------------------------ the view
const ARRAYS = ["positions", "instance_ids", "color_codes", "selected_indices", "highlighted_indices",
  "filter_indices", "checkpoint_positions", "checkpoint_codes"];

export default defineView({ name: "projection", css: CSS, arrays: ARRAYS, source: "projection", setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;

  const dom = projectionDom();
  const { layerSelect, methodSelect, colorSelect, neuronInput, modeButtons, fitButton, clearButton, info, canvas,
    overlay, progressBar, message, frame, legend, box } = dom;
  el.appendChild(box);
  const tooltip = makeTooltip(el);
  let ctx = kit.canvas(canvas, 1, 1);
  let octx = kit.canvas(overlay, 1, 1);

  // state (rows are positions in the arrays; instance ids are what Python sees)
  let n = 0;
  let pos = null; // Float32Array of the current target layout (data coordinates)
  let layout = null; // {norm, cx, cy, span, extent} of the target layout
  let grid = null;
  let codes = null;
  // Painting walks the points in a fixed shuffled order (no class always on top). The arrays it
  // reads are kept in that order, so that a frame reads memory sequentially: at a million points,
  // random access into row-ordered arrays was 5x slower.
  let order = null; // paint position -> row
  let rank = null; // row -> paint position
  let paintXY = null; // normalised coordinates being drawn, in paint order (moves while animating)
  let paintCodes = null; // colour codes in paint order
  let paintLayer = null; // 0 front, 1 faded (outside the selection), 2 faint (outside the filter)
  let layered = false;
  let visibleCount = 0;
  let ids = null; // Int32Array row -> instance id, or null when row == id
  let rowOfId = null;
  let selected = null; // Uint8Array per row
  let selectedCount = 0;
  let inFilter = null; // Uint8Array per row, or null (no filter)
  let highlighted = new Int32Array(0); // rows
  let hoveredRow = -1;
  /** @type {ArrayLike<number> | null} */
  let linkedLit = null; // instances another view lights up (its hover or subset)
  /** @type {ArrayLike<number> | null} */
  let linkedBrush = null; // instances inside another view's brush
  /** @type {import("./common/selection.js").SharedSelection | null} */
  let shared = null; // the explorer's Selection, when one is attached
  let linkedHoverRow = -1;
  let palette = new Uint32Array(256), faded = new Uint32Array(256), faint = new Uint32Array(256);
  let paletteCss = [];
  let bgRGBA = [255, 255, 255, 255], fgRGBA = [0, 0, 0, 255];
  let image = null, pixels = null, basePixels = null;
  let cssW = 0, cssH = 0, dpr = 1;
  let view = { k: 1, tx: 0, ty: 0 };
  let mode = "pan";
  let animation = null;
  let firstDraw = null; // performance.now() when the first layout arrived, until it is drawn
  let shownStep = -1; // the checkpoint drawn (the shared Selection's), -1 outside a run

  // ---------------------------------------------------------------- transforms
  function fitTransform() {
    return fitLayout(layout, cssW, cssH, view);
  }

  function dataTransform() {
    // data coordinates -> css px of the target layout (exposed for tests and linking)
    return layoutToData(fitTransform(), layout);
  }

  function cssToData(X, Y) {
    const t = dataTransform();
    return [(X - t.bx) / t.ax, (Y - t.by) / t.ay];
  }

  function pointSize() {
    const base = model.get("point_size") || autoPointSize(n);
    return Math.max(1, Math.round(base * Math.min(4, Math.sqrt(view.k)) * dpr));
  }

  // ---------------------------------------------------------------- colours
  function readTheme() {
    bgRGBA = cssRGBA(kit.colour("--av-bg", "#fff"));
    fgRGBA = cssRGBA(kit.colour("--av-fg", "#111"));
    bgRGBA[3] = 255;
    const accent = kit.colour("--av-accent", "#1976d2");
    paletteCss = model.get("palette") || [];
    ({ palette, faded, faint } = colourTables(paletteCss, accent, bgRGBA));
  }

  // ---------------------------------------------------------------- drawing
  /** @param {{width: number, height: number}} [size] the frame's inside, as its resize observer saw it */
  function resize(size) {
    const w = Math.max(1, Math.floor(size ? size.width : frame.clientWidth)); // inside the border
    const hgt = Math.max(1, Math.floor(size ? size.height : frame.clientHeight));
    dpr = window.devicePixelRatio || 1;
    if (w === cssW && hgt === cssH && image && image.width === Math.round(w * dpr)) return false;
    cssW = w; cssH = hgt;
    ctx = kit.canvas(canvas, w, hgt);
    octx = kit.canvas(overlay, w, hgt);
    image = ctx.createImageData(canvas.width, canvas.height);
    pixels = new Uint32Array(image.data.buffer);
    basePixels = new Uint32Array(pixels.length);
    return true;
  }

  function paintTransform() {
    const t = fitTransform();
    return { ax: t.ax * dpr, bx: t.bx * dpr, ay: t.ay * dpr, by: t.by * dpr, W: canvas.width, H: canvas.height };
  }

  function drawBase() {
    if (!image) return;
    const t0 = performance.now();
    pixels.fill(pack(bgRGBA[0], bgRGBA[1], bgRGBA[2]));
    if (paintXY && n) {
      const size = pointSize();
      const pass = (/** @type {number} */ wanted, /** @type {Uint32Array} */ colours) => paintPoints(pixels,
        paintTransform(), paintXY, paintCodes, layered ? paintLayer : null, wanted, colours, size, n);
      if (layered) {
        pass(2, faint);
        pass(1, faded);
      }
      pass(0, palette);
    }
    basePixels.set(pixels);
    el.dataset.points = String(paintXY ? visibleCount : 0);
    el.dataset.drawMs = (performance.now() - t0).toFixed(2);
    drawHighlights(false);
    el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    if (firstDraw !== null && paintXY) {
      el.dataset.firstDrawMs = (performance.now() - firstDraw).toFixed(1);
      firstDraw = null;
    }
    el.dataset.view = JSON.stringify(dataTransform());
  }

  function drawHighlights(fromBase = true) {
    // highlighted instances on top: a ring in the text colour around the point's own colour
    if (!image) return;
    const t0 = performance.now();
    if (fromBase) pixels.set(basePixels);
    if (highlighted.length && paintXY) {
      const ring = pack(fgRGBA[0], fgRGBA[1], fgRGBA[2]);
      paintRings(pixels, paintTransform(), paintXY, paintCodes, rank, highlighted, ring, palette, pointSize());
    }
    ctx.putImageData(image, 0, 0);
    el.dataset.highlighted = String(highlighted.length);
    if (fromBase) el.dataset.highlightMs = (performance.now() - t0).toFixed(2);
  }

  function drawOverlay(path = null, closed = false) {
    const ringed = hoveredRow >= 0 ? hoveredRow : linkedHoverRow;
    let ringAt = null;
    if (ringed >= 0 && ringed < n && paintXY) {
      const t = fitTransform();
      const o = rank[ringed];
      ringAt = { x: t.ax * paintXY[2 * o] + t.bx, y: t.ay * paintXY[2 * o + 1] + t.by, r: pointSize() / dpr / 2 + 4 };
    }
    paintOverlay(octx, dpr, cssW, cssH, kit.colour("--av-accent", "#1976d2"), ringAt, path, closed);
  }

  const scheduleDraw = kit.frame(() => { drawBase(); drawOverlay(); });

  // ---------------------------------------------------------------- data from Python
  /** Rows of the instances in an index trait. */
  function rowsOfIds(/** @type {string} */ name) {
    const arr = kit.array(name);
    return rowsOf(arr ? arr.data : null);
  }

  function rowsOf(instanceIds) {
    if (!instanceIds) return new Int32Array(0);
    const out = [];
    for (const id of instanceIds) {
      const row = rowOfId ? rowOfId.get(id) : id;
      if (row !== undefined && row >= 0 && row < n) out.push(row);
    }
    return Int32Array.from(out);
  }

  function idOfRow(row) {
    return ids ? ids[row] : row;
  }

  function loadIds() {
    const arr = kit.array("instance_ids");
    ids = arr ? arr.data : null;
    rowOfId = null;
    if (ids) {
      rowOfId = new Map();
      for (let r = 0; r < ids.length; r++) rowOfId.set(ids[r], r);
    }
  }

  function loadSelection() {
    selected = new Uint8Array(n);
    const rows = rowsOfIds("selected_indices");
    for (const r of rows) selected[r] = 1;
    selectedCount = rows.length;
    el.dataset.selected = String(selectedCount);
    updateLayers();
  }

  function loadFilter() {
    // this view's filter_indices and another view's brush: a point must be inside both
    const sets = [model.get("filter_indices") ? rowsOfIds("filter_indices") : null,
      linkedBrush ? rowsOf(linkedBrush) : null].filter(Boolean);
    inFilter = null;
    if (sets.length) {
      const count = new Uint8Array(n);
      for (const rows of sets) for (const r of rows) count[r]++;
      inFilter = count.map((c) => (c === sets.length ? 1 : 0));
    }
    el.dataset.filtered = inFilter ? String(inFilter.reduce((a, b) => a + b, 0)) : "";
    updateLayers();
  }

  function updateLayers() {
    // points outside the selection are faded and drawn below it; outside the filter, fainter still
    layered = selectedCount > 0 || inFilter !== null;
    if (!layered || !order) return;
    paintLayer = new Uint8Array(n);
    for (let o = 0; o < n; o++) {
      const row = order[o];
      paintLayer[o] = inFilter && !inFilter[row] ? 2 : selectedCount > 0 && !selected[row] ? 1 : 0;
    }
  }

  function loadHighlight() {
    // what another view lights up (in the browser, no kernel) takes the place of highlight()
    const t0 = performance.now();
    highlighted = linkedLit ? rowsOf(linkedLit) : rowsOfIds("highlighted_indices");
    drawHighlights(true);
    el.dataset.highlightMs = (performance.now() - t0).toFixed(2);
  }

  /** Colour codes and their legend: the kernel's, or a checkpoint's frame. */
  function loadCodes(arr = kit.array("color_codes"), legendSpec = model.get("legend") || {}) {
    codes = arr && arr.data.length === n ? arr.data : null;
    paintCodes = new Uint8Array(n).fill(255); // 255: no colour yet (drawn grey)
    if (codes) for (let o = 0; o < n; o++) paintCodes[o] = codes[order[o]];
    readTheme();
    el.dataset.colorBy = model.get("color_by");
    el.dataset.colorSignature = colourSignature(codes, palette, n);
    renderLegend(legend, legendSpec, paletteCss, selectCode);
  }

  /** A layout: the kernel's, or a checkpoint's frame. */
  function loadPositions(arr = kit.array("positions")) {
    const newN = arr ? arr.shape[0] : 0;
    if (firstDraw === null && !paintXY && newN) firstDraw = performance.now();
    const previous = paintXY;
    const animate = previous && newN === n && n > 0 && n <= ANIMATE_MAX_POINTS;
    if (newN !== n || !order) {
      n = newN;
      order = shuffledOrder(n);
      rank = new Uint32Array(n);
      for (let o = 0; o < n; o++) rank[order[o]] = o;
      loadIds();
      loadSelection();
      loadFilter();
      loadCodes();
      highlighted = linkedLit ? rowsOf(linkedLit) : rowsOfIds("highlighted_indices");
      hoveredRow = -1;
    }
    pos = arr ? arr.data : null;
    layout = pos ? normalise(pos, n) : null;
    grid = layout ? buildGrid(layout.norm, n) : null;
    visibleCount = 0;
    for (let i = 0; pos && i < 2 * n; i += 2) {
      if (Number.isFinite(pos[i]) && Number.isFinite(pos[i + 1])) visibleCount++;
    }
    const target = layout ? inPaintOrder(layout.norm, order, n) : null;
    if (animate) {
      startAnimation(previous, target);
    } else {
      paintXY = target;
      scheduleDraw();
    }
    updateStatus();
  }

  function startAnimation(from, to) {
    if (animation) cancelAnimationFrame(animation.frame);
    el.dataset.animating = "true";
    animation = morph(from, to, ANIMATE_MS, (current) => { paintXY = current; drawBase(); }, () => {
      paintXY = to;
      animation = null;
      delete el.dataset.animating;
      drawBase();
      drawOverlay();
    });
  }

  // ---------------------------------------------------------------- legend, toolbar, status
  function syncControls() {
    syncToolbar(dom, model, mode);
    el.dataset.mode = mode;
  }

  function updateStatus() {
    const status = model.get("status");
    const i = framesHeld() ? frameSteps().indexOf(shownStep) : -1;
    const shown = i >= 0 ? model.get("checkpoint_methods")[i] : model.get("shown_method");
    el.dataset.status = status;
    el.dataset.progress = String(model.get("progress"));
    if (shown && el.dataset.shownMethod !== shown) {
      el.dataset.shownHistory = [el.dataset.shownHistory, shown].filter(Boolean).join(",");
    }
    el.dataset.shownMethod = shown;
    const text = statusText(model, n, selectedCount, shown);
    progressBar.style.width = text.running ? `${Math.round(model.get("progress") * 100)}%` : "0";
    info.textContent = text.info;
    message.dataset.error = String(text.error);
    message.textContent = text.message;
  }


  // ---------------------------------------------------------------- selection
  function sendSelection(rows, polygon = null) {
    const sorted = Int32Array.from(Array.from(rows, idOfRow)).sort();
    // a lasso, a box or a legend pick is the explorer's brush: written here, the other views follow it
    // without waiting for the kernel (which makes a click on one point a pin, and clears the brush itself)
    const t0 = performance.now();
    if (shared && (sorted.length > 1 || (polygon && sorted.length === 1))) shared.setClause("brush", sorted);
    el.dataset.brushMs = (performance.now() - t0).toFixed(1); // the other views' page work on the brush
    model.set("selected_indices", encodeArray(sorted, "int32"));
    // the lasso / box that made this selection (layout coordinates); none for clicks and legend picks
    const poly = polygon ? Float64Array.from(polygon) : null;
    const lasso = poly ? { dtype: "float64", shape: [poly.length / 2, 2], buffer: new DataView(poly.buffer) } : null;
    model.set("lasso", lasso);
    model.save_changes();
  }

  function currentRows() {
    const rows = [];
    if (selected) for (let i = 0; i < n; i++) if (selected[i]) rows.push(i);
    return rows;
  }

  function selectPolygon(cssPoints, additive) {
    if (!pos || cssPoints.length < 3) return;
    const poly = [];
    for (const [X, Y] of cssPoints) poly.push(...cssToData(X, Y));
    const rows = new Set(additive ? currentRows() : []);
    const t0 = performance.now();
    addRowsInPolygon(pos, n, poly, rows);
    el.dataset.selectMs = (performance.now() - t0).toFixed(1);
    sendSelection(rows, poly);
  }

  function selectCode(code, additive) {
    if (!codes) return;
    const rows = new Set(additive ? currentRows() : []);
    for (let i = 0; i < n; i++) if (codes[i] === code) rows.add(i);
    sendSelection(rows);
  }

  function clickAt(X, Y, additive) {
    const row = pickRow(X, Y);
    if (row < 0) {
      if (!additive) sendSelection([]);
      return;
    }
    const rows = new Set(additive ? currentRows() : []);
    if (additive && selected[row]) rows.delete(row);
    else rows.add(row);
    sendSelection(rows);
  }

  // ---------------------------------------------------------------- hover
  function pickRow(X, Y) {
    if (!grid || !layout) return -1;
    const t = fitTransform();
    const nx = (X - t.bx) / t.ax, ny = (Y - t.by) / t.ay;
    const radius = (Math.max(5, pointSize() / dpr / 2 + 3)) / t.ax;
    return nearestRow(grid, layout.norm, nx, ny, radius);
  }

  function tooltipLines(row) {
    const id = idOfRow(row);
    const details = model.get("hover_details") || {};
    const lines = [`#${id}`];
    if (details.index === id && Array.isArray(details.fields)) {
      for (const [key, value] of details.fields) lines.push(`${key}: ${value}`);
    } else {
      const spec = model.get("legend") || {};
      const categorical = spec.kind === "categorical" && codes;
      const entry = categorical ? (spec.entries || []).find((e) => e.code === codes[row]) : null;
      if (entry) lines.push(`${spec.title}: ${entry.label}`);
    }
    return lines;
  }

  let lastPointer = null;
  function hoverAt(X, Y) {
    const row = pickRow(X, Y);
    lastPointer = [X, Y];
    if (row !== hoveredRow) {
      hoveredRow = row;
      drawOverlay();
      const id = row >= 0 ? idOfRow(row) : -1;
      model.set("hovered_index", id);
      model.save_changes();
    }
    el.dataset.hovered = String(hoveredRow >= 0 ? idOfRow(hoveredRow) : -1);
    if (row >= 0) showTooltip(row, X, Y);
    else tooltip.hide();
  }

  function clearHover() {
    lastPointer = null;
    tooltip.hide();
    if (hoveredRow >= 0) {
      hoveredRow = -1;
      drawOverlay();
      model.set("hovered_index", -1);
      model.save_changes();
    }
    el.dataset.hovered = "-1";
  }

  // ---------------------------------------------------------------- pointer interaction
  let gesture = null;
  function localXY(ev) {
    const box = canvas.getBoundingClientRect();
    return [ev.clientX - box.left, ev.clientY - box.top];
  }

  function showTooltip(row, X, Y) {
    // X, Y are canvas coordinates; the tooltip is positioned inside the view's root
    const c = canvas.getBoundingClientRect(), r = el.getBoundingClientRect();
    tooltip.show(tooltipLines(row), X + c.left - r.left, Y + c.top - r.top);
  }

  frame.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0) return;
    frame.focus({ preventScroll: true });
    const [X, Y] = localXY(ev);
    const kind = mode === "box" ? "box" : mode === "lasso" || ev.shiftKey ? "lasso" : "pan";
    gesture = { kind, start: [X, Y], path: [[X, Y]], moved: false, additive: ev.shiftKey, view: { ...view } };
    frame.setPointerCapture(ev.pointerId);
    tooltip.hide();
  });

  frame.addEventListener("pointermove", (ev) => {
    const [X, Y] = localXY(ev);
    if (!gesture) {
      hoverAt(X, Y);
      return;
    }
    const dx = X - gesture.start[0], dy = Y - gesture.start[1];
    if (Math.abs(dx) + Math.abs(dy) > 3) gesture.moved = true;
    if (gesture.kind === "pan") {
      view = { ...gesture.view, tx: gesture.view.tx + dx, ty: gesture.view.ty + dy };
      scheduleDraw();
    } else if (gesture.kind === "lasso") {
      const last = gesture.path[gesture.path.length - 1];
      if (Math.hypot(X - last[0], Y - last[1]) >= 2) gesture.path.push([X, Y]);
      drawOverlay(gesture.path);
    } else {
      const [x0, y0] = gesture.start;
      gesture.path = [[x0, y0], [X, y0], [X, Y], [x0, Y]];
      drawOverlay(gesture.path, true);
    }
  });

  function endGesture(ev) {
    if (!gesture) return;
    const g = gesture;
    gesture = null;
    if (frame.hasPointerCapture(ev.pointerId)) frame.releasePointerCapture(ev.pointerId);
    const [X, Y] = localXY(ev);
    if (!g.moved) clickAt(X, Y, g.additive);
    else if (g.kind === "lasso") selectPolygon(g.path, g.additive);
    else if (g.kind === "box") selectPolygon(g.path, g.additive);
    drawOverlay();
  }
  frame.addEventListener("pointerup", endGesture);
  frame.addEventListener("pointercancel", () => { gesture = null; drawOverlay(); });
  frame.addEventListener("pointerleave", () => { if (!gesture) clearHover(); });

  frame.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const [X, Y] = localXY(ev);
    const k = Math.min(5000, Math.max(0.5, view.k * Math.exp(-ev.deltaY * 0.002)));
    const f = k / view.k;
    view = { k, tx: X - (X - view.tx) * f, ty: Y - (Y - view.ty) * f };
    scheduleDraw();
    if (lastPointer) hoverAt(X, Y);
  }, { passive: false });

  frame.addEventListener("dblclick", () => { view = { k: 1, tx: 0, ty: 0 }; scheduleDraw(); });
  frame.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") sendSelection([]);
  });

  for (const [m, b] of Object.entries(modeButtons)) {
    b.addEventListener("click", () => { mode = m; syncControls(); });
  }
  fitButton.addEventListener("click", () => { view = { k: 1, tx: 0, ty: 0 }; scheduleDraw(); });
  clearButton.addEventListener("click", () => sendSelection([]));
  layerSelect.addEventListener("change", () => { model.set("layer", layerSelect.value); model.save_changes(); });
  methodSelect.addEventListener("change", () => { model.set("method", methodSelect.value); model.save_changes(); });
  colorSelect.addEventListener("change", () => { model.set("color_by", colorSelect.value); model.save_changes(); });
  neuronInput.addEventListener("change", () => {
    const v = Math.round(Number(neuronInput.value));
    if (Number.isFinite(v)) { model.set("neuron", v); model.save_changes(); }
  });

  // ---------------------------------------------------------------- shared selection (explorer)
  /** Follow the shared selection: every clause but this view's own (the Selection applies Mosaic's rule). */
  function followShared(/** @type {import("./common/selection.js").SharedSelection | null} */ sel) {
    shared = sel;
    const step = sel ? sel.get("checkpoint") : -1;
    if (typeof step === "number" && step !== shownStep) moveToCheckpoint(step);
    const hover = sel ? sel.clause("hover") : null;
    const lit = hover && hover.length ? hover : sel ? sel.indices("subset_indices") : null;
    if (lit !== linkedLit) {
      linkedLit = lit;
      loadHighlight();
    }
    const brush = sel ? sel.clause("brush") : null;
    if (brush !== linkedBrush) {
      linkedBrush = brush;
      loadFilter();
      scheduleDraw();
    }
    const id = sel ? sel.get("hover_instance") : -1;
    const row = typeof id === "number" && id >= 0 ? (rowOfId ? rowOfId.get(id) ?? -1 : id) : -1;
    if (row !== linkedHoverRow) {
      linkedHoverRow = row;
      el.dataset.linkedHover = String(row >= 0 ? id : -1);
      drawOverlay();
    }
  }

  // ---------------------------------------------------------------- checkpoints
  const frameSteps = () => /** @type {number[]} */ (model.get("checkpoint_steps") || []);
  const positionFrames = () => kit.array("checkpoint_positions");
  const codeFrames = () => kit.array("checkpoint_codes");
  /** Whether the layout and colours drawn are the frames of the checkpoint drawn (then the others are this
   * view's too); colours without frames are the kernel's to change. */
  function framesHeld() {
    const steps = frameSteps();
    return sameValues(frameAt(positionFrames(), steps, shownStep), pos)
      && (!codeFrames() || sameValues(frameAt(codeFrames(), steps, shownStep), codes));
  }

  /** The timeline moved (in the page or from Python): move to the checkpoint's layout and colours now. */
  function moveToCheckpoint(/** @type {number} */ step) {
    const steps = frameSteps(), i = steps.indexOf(step);
    const next = frameAt(positionFrames(), steps, step);
    const held = framesHeld();
    shownStep = step;
    el.dataset.checkpoint = String(step);
    if (!next || !held) return;
    const nextCodes = frameAt(codeFrames(), steps, step);
    if (nextCodes) loadCodes({ data: nextCodes, shape: [n] }, model.get("checkpoint_legends")[i]);
    loadPositions({ data: next, shape: [n, 2] });
  }

  /** A kernel update that is a frame while the frames are held: the kernel following a move the page has
   * drawn (or passed, while playing ahead of it), drawn no second time. */
  function isFollowUp(/** @type {import("./common/arrays.js").Decoded | null} */ frames, /** @type {string} */ name,
    /** @type {(step: number) => boolean} */ also = () => true) {
    const sent = kit.array(name);
    const at = sent && frames && framesHeld() ? stepHolding(frames, frameSteps(), sent.data) : null;
    if (at === null || !also(at)) return false;
    el.dataset.followed = String(Number(el.dataset.followed || 0) + 1);
    return true;
  }
  const sameLegend = (/** @type {number} */ step) => JSON.stringify(model.get("legend"))
    === JSON.stringify(model.get("checkpoint_legends")[frameSteps().indexOf(step)]);

  // ---------------------------------------------------------------- wiring
  const on = kit.on;
  on("positions", () => {
    if (!isFollowUp(positionFrames(), "positions")) loadPositions();
    else updateStatus();
  });
  on("checkpoint_positions checkpoint_steps", () => {
    el.dataset.frames = String(positionFrames() ? frameSteps().length : 0);
  });
  on("instance_ids", () => { loadIds(); loadSelection(); loadFilter(); scheduleDraw(); });
  let codesQueued = false; // colour codes, palette and legend arrive together: decode them once
  on("color_codes palette legend", () => {
    if (codesQueued) return;
    codesQueued = true;
    queueMicrotask(() => {
      codesQueued = false;
      if (isFollowUp(codeFrames(), "color_codes", sameLegend)) return;
      loadCodes();
      scheduleDraw();
    });
  });
  on("selected_indices", () => { loadSelection(); updateStatus(); scheduleDraw(); });
  on("filter_indices", () => { loadFilter(); scheduleDraw(); });
  on("highlighted_indices", loadHighlight);
  on("hovered_index", () => {
    // set from Python (a linked view): ring the point, without a tooltip
    const id = model.get("hovered_index");
    const row = id < 0 ? -1 : rowOfId ? rowOfId.get(id) ?? -1 : id < n ? id : -1;
    if (row !== hoveredRow) { hoveredRow = row; drawOverlay(); }
  });
  on("hover_details", () => {
    if (hoveredRow >= 0 && lastPointer) showTooltip(hoveredRow, lastPointer[0], lastPointer[1]);
  });
  on("status progress stage shown_method error method", () => { updateStatus(); syncControls(); });
  on("layers layer color_options color_by neuron n_neurons", syncControls);
  on("point_size", scheduleDraw);
  on("height", () => { box.style.height = `${model.get("height")}px`; });

  box.style.height = `${model.get("height")}px`;
  kit.onResize(frame, (size) => { if (resize(size)) { readTheme(); drawBase(); drawOverlay(); } });
  kit.onTheme(() => { readTheme(); scheduleDraw(); });

  syncControls();
  loadCodes();
  loadPositions();
  resize();
  drawBase();
  kit.selection(followShared);
  kit.cleanup(() => { if (animation) cancelAnimationFrame(animation.frame); });
}

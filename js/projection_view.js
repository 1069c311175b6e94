// @ts-check
// ProjectionView: every instance as a dot on a 2D map of its activations (PCA, UMAP or t-SNE).
// Points are rasterised into an ImageData buffer by our own loop: headless Chromium here has no
// GPU (WebGL would fall back to software), and a Canvas2D pixel loop draws 100,000 points in a
// few milliseconds on any browser (measured in the page: data-draw-ms, data-highlight-ms).
// Positions and colour codes arrive as binary buffers; names from the data are set as text only.
import { defineView } from "./common/view.js";
import { h, makeTooltip, formatCount } from "./common/dom.js";
import { cssRGBA, pack, mix } from "./common/colours.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {{ layer: string, layers: string[], method: string, shown_method: string, positions: Serialised | null,
 *   instance_ids: Serialised | null, color_by: string, color_options: string[], neuron: number, n_neurons: number,
 *   color_codes: Serialised | null, palette: string[], legend: object, point_size: number, status: string,
 *   stage: string, progress: number, error: string, selected_indices: Serialised | null,
 *   highlighted_indices: Serialised | null, filter_indices: Serialised | null, hovered_index: number,
 *   hover_details: {index?: number, fields?: string[][]}, lasso: Serialised | null, height: number }} ProjectionModel
 */

const CSS = `
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
.activis-projection .av-proj-info { color: var(--av-fg-muted); margin-left: auto; white-space: nowrap; }
.activis-projection .av-proj-legend { max-height: 4.6em; overflow-y: auto; padding: 4px 0 0; }
.activis-projection .av-proj-legend .entry { cursor: pointer; white-space: nowrap; }
.activis-projection .av-proj-legend .entry:hover { color: var(--av-fg); text-decoration: underline; }
.activis-projection .av-proj-legend .title { font-weight: 600; color: var(--av-fg); }
.activis-projection .av-proj-gradient { width: 160px; height: 10px; vertical-align: middle;
  border: 1px solid var(--av-border-soft); }
.activis-projection .av-proj-neuron { width: 5em; }
`;

const METHOD_LABELS = { pca: "PCA", umap: "UMAP", tsne: "t-SNE" };
const COLOR_LABELS = {
  label: "true class", pred: "prediction", correct: "correct / misclassified", neuron: "neuron activation",
};
const MARGIN = 12; // css px around the fitted layout
const ANIMATE_MS = 600;
const ANIMATE_MAX_POINTS = 300_000;

// ------------------------------------------------------------------ geometry
/** Even-odd point in polygon; poly is a flat [x0, y0, x1, y1, ...] array in data coordinates. */
function insidePolygon(x, y, poly) {
  let inside = false;
  const m = poly.length / 2;
  for (let i = 0, j = m - 1; i < m; j = i++) {
    const xi = poly[2 * i], yi = poly[2 * i + 1], xj = poly[2 * j], yj = poly[2 * j + 1];
    if ((yi > y) !== (yj > y) && x < ((xj - xi) * (y - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

/** Offsets of a filled disc (or square for tiny sizes) of `size` device pixels. */
function stampOffsets(size) {
  const out = [];
  const r = size / 2;
  const lo = -Math.floor((size - 1) / 2);
  for (let dy = lo; dy < lo + size; dy++) {
    for (let dx = lo; dx < lo + size; dx++) {
      const cx = dx - lo + 0.5 - r, cy = dy - lo + 0.5 - r;
      if (size <= 3 || cx * cx + cy * cy <= r * r + 0.25) out.push(dx, dy);
    }
  }
  return Int32Array.from(out);
}

function autoPointSize(n) {
  if (n <= 2_000) return 6;
  if (n <= 20_000) return 4;
  if (n <= 200_000) return 3;
  if (n <= 600_000) return 2;
  return 1;
}

/** A fixed pseudo-random draw order, so that no class is always painted over another. */
function shuffledOrder(n) {
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  let s = 0x9e3779b9;
  for (let i = n - 1; i > 0; i--) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5;
    const j = (s >>> 0) % (i + 1);
    const t = order[i]; order[i] = order[j]; order[j] = t;
  }
  return order;
}

/** Layout normalised into [0, 1]^2 with one scale for both axes (aspect kept), NaN rows stay NaN. */
function normalise(pos, n) {
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (let i = 0; i < n; i++) {
    const x = pos[2 * i], y = pos[2 * i + 1];
    if (!(Number.isFinite(x) && Number.isFinite(y))) continue;
    if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
  }
  if (x0 > x1) { x0 = x1 = y0 = y1 = 0; }
  const span = Math.max(x1 - x0, y1 - y0) || 1;
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const extent = [Math.max((x1 - x0) / span, 1e-3), Math.max((y1 - y0) / span, 1e-3)];
  const norm = new Float32Array(2 * n);
  for (let i = 0; i < n; i++) {
    norm[2 * i] = (pos[2 * i] - cx) / span + 0.5;
    norm[2 * i + 1] = (pos[2 * i + 1] - cy) / span + 0.5;
  }
  return { norm, cx, cy, span, extent };
}

/** Uniform grid over the normalised layout for nearest-point queries. */
function buildGrid(norm, n) {
  const G = Math.max(1, Math.min(1024, Math.round(Math.sqrt(n / 4))));
  const cellOf = new Int32Array(n);
  const start = new Int32Array(G * G + 1);
  for (let i = 0; i < n; i++) {
    const x = norm[2 * i], y = norm[2 * i + 1];
    if (!(x === x && y === y)) { cellOf[i] = -1; continue; }
    const c = Math.min(G - 1, Math.max(0, Math.floor(y * G))) * G + Math.min(G - 1, Math.max(0, Math.floor(x * G)));
    cellOf[i] = c;
    start[c + 1]++;
  }
  for (let c = 0; c < G * G; c++) start[c + 1] += start[c];
  const fill = start.slice(0, G * G);
  const items = new Int32Array(n);
  for (let i = 0; i < n; i++) if (cellOf[i] >= 0) items[fill[cellOf[i]]++] = i;
  return { G, start, items };
}

function nearestRow(grid, norm, x, y, r) {
  const { G, start, items } = grid;
  const cx0 = Math.max(0, Math.floor((x - r) * G)), cx1 = Math.min(G - 1, Math.floor((x + r) * G));
  const cy0 = Math.max(0, Math.floor((y - r) * G)), cy1 = Math.min(G - 1, Math.floor((y + r) * G));
  let best = -1, bestD = r * r;
  for (let cy = cy0; cy <= cy1; cy++) {
    for (let cx = cx0; cx <= cx1; cx++) {
      const c = cy * G + cx;
      for (let k = start[c]; k < start[c + 1]; k++) {
        const i = items[k];
        const dx = norm[2 * i] - x, dy = norm[2 * i + 1] - y;
        const d = dx * dx + dy * dy;
        if (d <= bestD) { bestD = d; best = i; }
      }
    }
  }
  return best;
}

function encodeInt32(rows) {
  const arr = Int32Array.from(rows);
  return { dtype: "int32", shape: [arr.length], buffer: new DataView(arr.buffer) };
}

// ------------------------------------------------------------------ the view
const ARRAYS = ["positions", "instance_ids", "color_codes", "selected_indices", "highlighted_indices",
  "filter_indices"];

export default defineView({ name: "projection", css: CSS, arrays: ARRAYS, source: "projection", setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;

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
    fitButton, clearButton, info,
  ]);

  // map
  const canvas = h("canvas", { className: "av-proj-points" });
  const overlay = h("canvas", { className: "av-proj-overlay" });
  const progressBar = h("div", { className: "av-proj-progress" });
  const message = h("div", { className: "av-proj-message" });
  const frame = h("div", { className: "av-proj-frame", tabindex: "0" }, [canvas, overlay, progressBar, message]);
  const legend = h("div", { className: "activis-legend av-proj-legend" });
  // the height goes on an inner box: ipywidgets rewrites the root's style from its Layout
  const box = h("div", { className: "av-proj-box" }, [toolbar, frame, legend]);
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

  // ---------------------------------------------------------------- transforms
  function fitTransform() {
    // normalised [0,1]^2 -> css px: X = ax * nx + bx, Y = ay * ny + by; the layout (centred on
    // 0.5) fills the frame with one scale for both axes
    const [ex, ey] = layout ? layout.extent : [1, 1];
    const s0 = Math.max(1, Math.min((cssW - 2 * MARGIN) / ex, (cssH - 2 * MARGIN) / ey));
    const ox = cssW / 2 - s0 / 2, oy = cssH / 2 - s0 / 2;
    return { ax: s0 * view.k, bx: ox * view.k + view.tx, ay: -s0 * view.k, by: (oy + s0) * view.k + view.ty };
  }

  function dataTransform() {
    // data coordinates -> css px of the target layout (exposed for tests and linking)
    const t = fitTransform();
    if (!layout) return t;
    const { cx, cy, span } = layout;
    return {
      ax: t.ax / span, bx: t.bx + t.ax * (0.5 - cx / span), ay: t.ay / span, by: t.by + t.ay * (0.5 - cy / span),
    };
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
    palette = new Uint32Array(256); faded = new Uint32Array(256); faint = new Uint32Array(256);
    for (let c = 0; c < 256; c++) {
      const rgb = cssRGBA(paletteCss[c] || accent);
      palette[c] = pack(rgb[0], rgb[1], rgb[2]);
      faded[c] = mix(rgb, bgRGBA, 0.22);
      faint[c] = mix(rgb, bgRGBA, 0.07);
    }
  }

  function colorSignature() {
    // FNV-1a over every point's colour: changes whenever what is drawn changes colour
    let hsh = 0x811c9dc5;
    if (!codes) return "0";
    for (let i = 0; i < n; i++) {
      hsh ^= palette[codes[i]];
      hsh = Math.imul(hsh, 16777619) >>> 0;
    }
    return hsh.toString(16);
  }

  // ---------------------------------------------------------------- drawing
  function resize() {
    const w = Math.max(1, frame.clientWidth), hgt = Math.max(1, frame.clientHeight); // inside the border
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

  function stamp(x, y, col, offs, W, H) {
    for (let k = 0; k < offs.length; k += 2) {
      const xx = x + offs[k], yy = y + offs[k + 1];
      if (xx >= 0 && xx < W && yy >= 0 && yy < H) pixels[yy * W + xx] = col;
    }
  }

  function paintLayerPass(wanted, colours, size) {
    // every point whose layer is `wanted`, in paint order (sequential reads)
    const { ax, bx, ay, by, W, H } = paintTransform();
    const xy = paintXY, cs = paintCodes, lay = layered ? paintLayer : null, px = pixels;
    const offs = stampOffsets(size);
    if (offs.length === 2) { // one pixel per point: the hot loop at a million points
      const xMax = W - 0.5, yMax = H - 0.5;
      for (let o = 0; o < n; o++) {
        if (lay !== null && lay[o] !== wanted) continue;
        const fx = ax * xy[2 * o] + bx, fy = ay * xy[2 * o + 1] + by;
        if (!(fx >= -0.5 && fx < xMax && fy >= -0.5 && fy < yMax)) continue; // also skips NaN
        px[((fy + 0.5) | 0) * W + ((fx + 0.5) | 0)] = colours[cs[o]];
      }
      return;
    }
    for (let o = 0; o < n; o++) {
      if (lay !== null && lay[o] !== wanted) continue;
      const x = Math.round(ax * xy[2 * o] + bx), y = Math.round(ay * xy[2 * o + 1] + by);
      if (!(x > -size && x < W + size && y > -size && y < H + size)) continue; // also skips NaN
      stamp(x, y, colours[cs[o]], offs, W, H);
    }
  }

  function drawBase() {
    if (!image) return;
    const t0 = performance.now();
    pixels.fill(pack(bgRGBA[0], bgRGBA[1], bgRGBA[2]));
    if (paintXY && n) {
      const size = pointSize();
      if (layered) {
        paintLayerPass(2, faint, size);
        paintLayerPass(1, faded, size);
      }
      paintLayerPass(0, palette, size);
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
      const size = pointSize();
      const { ax, bx, ay, by, W, H } = paintTransform();
      const ring = pack(fgRGBA[0], fgRGBA[1], fgRGBA[2]);
      const outer = stampOffsets(size + 4), inner = stampOffsets(size + 1);
      for (const row of highlighted) {
        const o = rank[row];
        const x = Math.round(ax * paintXY[2 * o] + bx), y = Math.round(ay * paintXY[2 * o + 1] + by);
        if (!(x > -size - 4 && x < W + size + 4 && y > -size - 4 && y < H + size + 4)) continue;
        stamp(x, y, ring, outer, W, H);
        stamp(x, y, palette[paintCodes[o]], inner, W, H);
      }
    }
    ctx.putImageData(image, 0, 0);
    el.dataset.highlighted = String(highlighted.length);
    if (fromBase) el.dataset.highlightMs = (performance.now() - t0).toFixed(2);
  }

  function drawOverlay(path = null, closed = false) {
    octx.setTransform(dpr, 0, 0, dpr, 0, 0);
    octx.clearRect(0, 0, cssW, cssH);
    const accent = kit.colour("--av-accent", "#1976d2");
    const ringed = hoveredRow >= 0 ? hoveredRow : linkedHoverRow;
    if (ringed >= 0 && ringed < n && paintXY) {
      const t = fitTransform();
      const o = rank[ringed];
      const x = t.ax * paintXY[2 * o] + t.bx, y = t.ay * paintXY[2 * o + 1] + t.by;
      octx.beginPath();
      octx.arc(x, y, pointSize() / dpr / 2 + 4, 0, 2 * Math.PI);
      octx.lineWidth = 2;
      octx.strokeStyle = accent;
      octx.stroke();
    }
    if (path && path.length >= 2) {
      octx.beginPath();
      octx.moveTo(path[0][0], path[0][1]);
      for (const [x, y] of path.slice(1)) octx.lineTo(x, y);
      if (closed) octx.closePath();
      octx.lineWidth = 1.5;
      octx.setLineDash([5, 4]);
      octx.strokeStyle = accent;
      octx.stroke();
      octx.setLineDash([]);
    }
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

  function loadCodes() {
    const arr = kit.array("color_codes");
    codes = arr && arr.data.length === n ? arr.data : null;
    paintCodes = new Uint8Array(n).fill(255); // 255: no colour yet (drawn grey)
    if (codes) for (let o = 0; o < n; o++) paintCodes[o] = codes[order[o]];
    readTheme();
    el.dataset.colorBy = model.get("color_by");
    el.dataset.colorSignature = colorSignature();
    renderLegend();
  }

  function inPaintOrder(norm) {
    const out = new Float32Array(2 * n);
    for (let o = 0; o < n; o++) {
      const row = order[o];
      out[2 * o] = norm[2 * row];
      out[2 * o + 1] = norm[2 * row + 1];
    }
    return out;
  }

  function loadPositions() {
    const arr = kit.array("positions");
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
    const target = layout ? inPaintOrder(layout.norm) : null;
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
    const current = new Float32Array(from); // keep `from` intact while interpolating
    const t0 = performance.now();
    el.dataset.animating = "true";
    const step = () => {
      const t = Math.min(1, (performance.now() - t0) / ANIMATE_MS);
      const e = t < 0.5 ? 2 * t * t : 1 - Math.pow(-2 * t + 2, 2) / 2;
      if (t < 1) {
        for (let i = 0; i < current.length; i++) current[i] = from[i] + (to[i] - from[i]) * e;
        paintXY = current;
        drawBase();
        animation.frame = requestAnimationFrame(step);
      } else {
        paintXY = to;
        animation = null;
        delete el.dataset.animating;
        drawBase();
        drawOverlay();
      }
    };
    animation = { frame: requestAnimationFrame(step) };
  }

  // ---------------------------------------------------------------- legend, toolbar, status
  function renderLegend() {
    const spec = model.get("legend") || {};
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
        item.addEventListener("click", (ev) => selectCode(entry.code, ev.shiftKey));
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
      legend.append(h("span", { text: formatValue(lo) }), bar, h("span", { text: formatValue(hi) }));
      if (spec.note) legend.appendChild(h("span", { text: spec.note }));
      if (spec.missing) {
        const swatch = h("span", { className: "swatch", style: { background: paletteCss[255] || "#888" } });
        legend.append(h("span", {}, [swatch,
          h("span", { text: `missing (${formatCount(spec.missing)})` })]));
      }
    }
  }

  function formatValue(v) {
    if (!Number.isFinite(v)) return String(v);
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : String(Number(v.toPrecision(4)));
  }

  function syncToolbar() {
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
    el.dataset.mode = mode;
  }

  function updateStatus() {
    const status = model.get("status");
    const progress = model.get("progress");
    const method = model.get("method");
    const shown = model.get("shown_method");
    el.dataset.status = status;
    el.dataset.progress = String(progress);
    if (shown && el.dataset.shownMethod !== shown) {
      el.dataset.shownHistory = [el.dataset.shownHistory, shown].filter(Boolean).join(",");
    }
    el.dataset.shownMethod = shown;
    const running = status === "running" || status === "pending";
    progressBar.style.width = running ? `${Math.round(progress * 100)}%` : "0";
    const parts = [`${n.toLocaleString()} points`];
    if (selectedCount) parts.push(`${selectedCount.toLocaleString()} selected`);
    if (running) {
      const stage = model.get("stage") || "starting";
      parts.push(`${METHOD_LABELS[method] || method}: ${stage} ${Math.round(progress * 100)}%`);
      if (shown && shown !== method) parts.push(`showing ${METHOD_LABELS[shown] || shown}`);
    } else if (shown) {
      parts.push(METHOD_LABELS[shown] || shown);
    }
    info.textContent = parts.join(" · ");
    const error = model.get("error");
    message.dataset.error = String(Boolean(error));
    if (error) message.textContent = error;
    else if (!n) {
      message.textContent = running ? `Computing ${METHOD_LABELS[method] || method} of ${model.get("layer")}…`
        : "No layout yet.";
    }
    else message.textContent = "";
  }

  // ---------------------------------------------------------------- selection
  function sendSelection(rows, polygon = null) {
    const sorted = Array.from(rows, idOfRow).sort((a, b) => a - b);
    model.set("selected_indices", encodeInt32(sorted));
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
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let k = 0; k < poly.length; k += 2) {
      x0 = Math.min(x0, poly[k]); x1 = Math.max(x1, poly[k]);
      y0 = Math.min(y0, poly[k + 1]); y1 = Math.max(y1, poly[k + 1]);
    }
    const rows = new Set(additive ? currentRows() : []);
    for (let i = 0; i < n; i++) {
      const x = pos[2 * i], y = pos[2 * i + 1];
      if (x < x0 || x > x1 || y < y0 || y > y1) continue; // also skips NaN
      if (insidePolygon(x, y, poly)) rows.add(i);
    }
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
    b.addEventListener("click", () => { mode = m; syncToolbar(); });
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

  // ---------------------------------------------------------------- wiring
  const on = kit.on;
  on("positions", loadPositions);
  on("instance_ids", () => { loadIds(); loadSelection(); loadFilter(); scheduleDraw(); });
  let codesQueued = false; // colour codes, palette and legend arrive together: decode them once
  on("color_codes palette legend", () => {
    if (codesQueued) return;
    codesQueued = true;
    queueMicrotask(() => { codesQueued = false; loadCodes(); scheduleDraw(); });
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
  on("status progress stage shown_method error method", () => { updateStatus(); syncToolbar(); });
  on("layers layer color_options color_by neuron n_neurons", syncToolbar);
  on("point_size", scheduleDraw);
  on("height", () => { box.style.height = `${model.get("height")}px`; });

  box.style.height = `${model.get("height")}px`;
  kit.onResize(frame, () => { if (resize()) { readTheme(); drawBase(); drawOverlay(); } });
  kit.onTheme(() => { readTheme(); scheduleDraw(); });

  syncToolbar();
  loadCodes();
  loadPositions();
  resize();
  drawBase();
  kit.selection(followShared);
  kit.cleanup(() => { if (animation) cancelAnimationFrame(animation.frame); });
}

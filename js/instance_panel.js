// @ts-check
// InstancePanel (ActiVis §4.3-C): sampled instances as squares grouped by true class; in each
// group the correctly classified fill columns from the left and the misclassified from the right,
// both sorted by score (or by a neuron's activation). Fill = true class, border = predicted class;
// image inputs are drawn as thumbnails inside the squares. One canvas for all squares (a DOM node
// per square does not scale), one overlay canvas for the hover ring, DOM only for text.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { formatInteger, formatNumber } from "./common/format.js";
import { decodeArray } from "./common/arrays.js";
import { rampColour } from "./common/colours.js";
import { narrowSample } from "./instances/narrow.js";

/**
 * @typedef {import("./common/arrays.js").Serialised} Serialised
 * @typedef {{ _sample: object, _sort_keys: Serialised | null, class_names: string[], thumbnails: boolean,
 *   sort_label: string, pinned: number[], hovered_index: number, highlighted_indices: Serialised | null,
 *   height: number }} InstancePanelModel
 */

const CARD_LINES = 24;

const CSS = `
.activis-ip .av-ip-scroll { position: relative; overflow-y: auto; overflow-x: hidden;
  border: 1px solid var(--av-border-soft); }
.activis-ip .av-ip-stack { position: relative; }
.activis-ip canvas.av-ip-canvas, .activis-ip canvas.av-ip-overlay { position: absolute; left: 0; top: 0; }
.activis-ip canvas.av-ip-overlay { pointer-events: none; }
.activis-ip .av-ip-group { position: absolute; left: 6px; right: 6px; height: 16px; font-size: 11px;
  line-height: 16px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; color: var(--av-fg-muted);
  pointer-events: none; }
.activis-ip .av-ip-group b { color: var(--av-fg); font-weight: 600; }
.activis-ip .av-ip-group .av-ip-right { position: absolute; right: 0; }
.activis-ip .av-ip-info { color: var(--av-fg-muted); }
.activis-ip .av-ip-empty { padding: 12px; color: var(--av-fg-muted); }
.activis-ip .av-ip-card { position: absolute; z-index: 10; display: none; pointer-events: none; min-width: 180px;
  max-width: 360px; background: var(--av-bg); color: var(--av-fg); border: 1px solid var(--av-border);
  border-radius: 3px; padding: 6px 8px; font-size: 12px; box-shadow: 0 1px 4px rgba(0,0,0,0.25); }
.activis-ip .av-ip-card .av-ip-card-title { font-weight: 600; margin-bottom: 2px; }
.activis-ip .av-ip-card .av-ip-row { display: flex; gap: 6px; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.activis-ip .av-ip-card .av-ip-key { color: var(--av-fg-muted); flex: 0 0 auto; }
.activis-ip .av-ip-card .av-ip-val { overflow: hidden; text-overflow: ellipsis; }
.activis-ip .av-ip-card canvas { display: block; margin: 4px 0; image-rendering: pixelated;
  border: 1px solid var(--av-border-soft); }
.activis-ip .av-ip-card .av-ip-hint { color: var(--av-fg-muted); font-size: 11px; margin-top: 3px; }
`;


/** Decode the sample the kernel sent: typed arrays per instance plus text columns. */
function decodeSample(raw) {
  if (!raw || !raw.index) return null;
  const arr = (v) => (v ? decodeArray(v) : null);
  const s = {
    index: arr(raw.index).data, label: arr(raw.label).data, pred: arr(raw.pred).data,
    confidence: arr(raw.confidence).data, labelScore: raw.label_score ? arr(raw.label_score).data : null,
    numbers: arr(raw.numbers), numberNames: raw.number_names || [], numberInteger: raw.number_integer || [],
    texts: raw.texts || [], thumbs: arr(raw.thumbs), total: raw.total, candidates: raw.candidates,
    filtered: raw.filtered, classTotals: arr(raw.class_totals).data, classWrong: arr(raw.class_wrong).data,
    featuresLeftOut: raw.features_left_out || 0,
  };
  s.n = s.index.length;
  s.position = new Map();
  for (let i = 0; i < s.n; i++) s.position.set(s.index[i], i);
  return s;
}

/** All thumbnails in one canvas (one RGBA upload), so drawing them is one drawImage per square. */
function buildAtlas(thumbs) {
  if (!thumbs) return null;
  const [n, th, tw, ch] = thumbs.shape;
  const perRow = Math.max(1, Math.ceil(Math.sqrt(n)));
  const canvas = document.createElement("canvas");
  canvas.width = perRow * tw;
  canvas.height = Math.max(1, Math.ceil(n / perRow)) * th;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(canvas.width, canvas.height);
  const src = thumbs.data, dst = img.data, W = canvas.width;
  for (let i = 0; i < n; i++) {
    const ox = (i % perRow) * tw, oy = Math.floor(i / perRow) * th;
    for (let y = 0; y < th; y++) {
      for (let x = 0; x < tw; x++) {
        const s = ((i * th + y) * tw + x) * ch;
        const d = ((oy + y) * W + ox + x) * 4;
        dst[d] = src[s];
        dst[d + 1] = src[s + (ch > 1 ? 1 : 0)];
        dst[d + 2] = src[s + (ch > 1 ? 2 : 0)];
        dst[d + 3] = 255;
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  return { canvas, perRow, tw, th };
}

/** Positions of every square: groups by true class, correct from the left, misclassified from the right. */
function layoutGroups(s, sortKeys, width, cell) {
  const groups = new Map();
  for (let i = 0; i < s.n; i++) {
    const k = s.label[i];
    if (!groups.has(k)) groups.set(k, { label: k, correct: [], wrong: [] });
    const g = groups.get(k);
    (k >= 0 && s.pred[i] !== k ? g.wrong : g.correct).push(i);
  }
  const key = sortKeys && sortKeys.length === s.n ? sortKeys : s.confidence;
  const byKey = (a, b) => {
    const ka = key[a], kb = key[b];
    const na = Number.isNaN(ka), nb = Number.isNaN(kb);
    if (na !== nb) return na ? 1 : -1; // NaN last
    if (!na && ka !== kb) return kb - ka; // highest first
    return s.index[a] - s.index[b];
  };
  const ordered = [...groups.values()].sort((a, b) => Number(a.label < 0) - Number(b.label < 0) || a.label - b.label);
  const pad = 6, header = 18, gapAfter = 8;
  const cols = Math.max(4, Math.floor((width - 2 * pad) / cell));
  const x = new Float32Array(s.n), y = new Float32Array(s.n);
  let top = 4;
  for (const g of ordered) {
    g.correct.sort(byKey);
    g.wrong.sort(byKey);
    const nc = g.correct.length, nw = g.wrong.length;
    // fewest rows that fit both blocks with an empty column between them
    let rows = 1;
    while (Math.ceil(nc / rows) + Math.ceil(nw / rows) + (nc && nw ? 1 : 0) > cols) rows++;
    g.top = top;
    g.y0 = top + header;
    g.rows = rows;
    g.cols = cols;
    g.slots = new Int32Array(rows * cols).fill(-1);
    g.correct.forEach((i, j) => {
      const c = Math.floor(j / rows), r = j % rows;
      x[i] = pad + c * cell; y[i] = g.y0 + r * cell; g.slots[r * cols + c] = i;
    });
    g.wrong.forEach((i, j) => {
      const c = cols - 1 - Math.floor(j / rows), r = j % rows;
      x[i] = pad + c * cell; y[i] = g.y0 + r * cell; g.slots[r * cols + c] = i;
    });
    top = g.y0 + rows * cell + gapAfter;
  }
  return { groups: ordered, x, y, pad, cols, height: top };
}

export default defineView({ name: "ip", css: CSS, source: "instances",
  arrays: ["_sort_keys", "highlighted_indices", "marked_indices"], setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  el.classList.add("activis-instances");
  const info = h("span", { className: "av-ip-info" });
  const sortInfo = h("span", { className: "av-ip-info av-ip-sort" });
  const btnThumbs = h("button", { text: "Thumbnails", title: "Draw the input images inside the squares" });
  const btnClear = h("button", { text: "Clear pins", title: "Unpin every instance" });
  const toolbar = h("div", { className: "activis-toolbar" }, [btnThumbs, btnClear, info, sortInfo]);
  const legend = h("div", { className: "activis-legend av-ip-legend" });
  const canvas = h("canvas", { className: "av-ip-canvas", role: "img", "aria-label": "instances by true class" });
  const overlay = h("canvas", { className: "av-ip-overlay" });
  const headers = h("div", { className: "av-ip-headers" });
  const stack = h("div", { className: "av-ip-stack" }, [canvas, overlay, headers]);
  const scroll = h("div", { className: "av-ip-scroll" }, [stack]);
  const card = h("div", { className: "av-ip-card" });
  el.append(toolbar, legend, scroll, card);

  let sample = null, atlas = null, lay = null, hovered = -1, lastWidth = 0;
  let pinned = new Set(), highlighted = null;
  let lastHighlighted = null; // the highlighted set the view last scrolled to
  /** @type {{values: ArrayLike<number>, lo: number, hi: number} | null} */
  let valueFill = null; // sorted by a neuron (or any values): the fill shows them

  function nClasses() {
    let n = (model.get("class_names") || []).length;
    if (sample) for (const k of sample.classTotals.keys()) if (sample.classTotals[k]) n = Math.max(n, k + 1);
    return n;
  }
  const colorOf = kit.classColour;
  function nameOf(k) {
    if (k < 0) return "(no label)";
    const names = model.get("class_names") || [];
    return k < names.length ? names[k] : String(k);
  }
  const useThumbs = () => !!(atlas && model.get("thumbnails"));

  let kernelSample = null; // the kernel's sample; `sample` is it, or it narrowed to a brush in the page
  function readSample() {
    sample = kernelSample = decodeSample(model.get("_sample"));
    atlas = sample ? buildAtlas(sample.thumbs) : null;
  }
  /** @type {ArrayLike<number> | null | undefined} the brush clause last seen (undefined: none yet) */
  let seenBrush;
  /** A brush made in the page: narrow to it now; the kernel's sample within it replaces this. */
  function narrowTo(/** @type {ArrayLike<number> | null} */ brush) {
    if (!kernelSample || !brush || !brush.length) return; // a cleared brush needs the kernel's new sample
    sample = narrowSample(kernelSample, brush, new Set(model.get("pinned") || []));
    atlas = buildAtlas(sample.thumbs);
    schedule(false);
  }
  // an explorer's shared selection lights instances up from the browser, no kernel round trip:
  // another view's hover first, else the active subset, else this view's own highlighted_indices
  /** @type {ArrayLike<number> | null} */
  let linked = null;
  function followShared(/** @type {import("./common/selection.js").SharedSelection | null} */ sel) {
    const brush = sel ? sel.clause("brush") : null;
    if (seenBrush !== undefined && brush !== seenBrush) narrowTo(brush);
    seenBrush = brush;
    const hover = sel ? sel.clause("hover") : null;
    const next = hover && hover.length ? hover : sel ? sel.indices("subset_indices") : null;
    const before = linked;
    linked = next && next.length ? next : null;
    if (linked !== before) schedule(false);
  }
  function readSelections() {
    pinned = new Set(model.get("pinned") || []);
    const hl = kit.array("highlighted_indices");
    const own = hl && hl.data.length ? hl.data : null;
    const lit = linked || own;
    highlighted = lit ? new Set(Array.from(lit)) : null;
  }

  function drawLegend() {
    const n = nClasses();
    const items = [];
    for (let k = 0; k < n; k++) {
      const sw = h("span", { className: "swatch", style: { background: colorOf(k) } });
      items.push(h("span", { className: "av-ip-legend-item", "data-class": String(k) },
        [sw, h("span", { text: nameOf(k) })]));
    }
    if (sample && sample.label.some((k) => k < 0)) {
      const swatch = h("span", { className: "swatch", style: { background: colorOf(-1) } });
      items.push(h("span", {}, [swatch, h("span", { text: "(no label)" })]));
    }
    if (valueFill) { // the fill is the values sorted by, the class reads from the border and the groups
      const bar = h("canvas", { className: "av-ip-gradient", width: "100", height: "9" });
      const g = /** @type {CanvasRenderingContext2D} */ (bar.getContext("2d"));
      for (let x = 0; x < 100; x++) {
        g.fillStyle = rampColour(kit.palette().sequential, x / 99);
        g.fillRect(x, 0, 1, 9);
      }
      items.unshift(h("span", { className: "av-ip-legend-values", "data-role": "value-legend" }, [
        h("span", { text: `fill: ${model.get("sort_label") || "sort value"} ` }),
        h("span", { text: formatNumber(valueFill.lo) }), bar, h("span", { text: formatNumber(valueFill.hi) }),
      ]));
    }
    const note = valueFill ? "border: predicted class · right: misclassified"
      : "fill: true class · border: predicted class · right: misclassified";
    items.push(h("span", { className: "av-ip-legend-note", text: note }));
    legend.replaceChildren(...items);
  }

  function draw() {
    const t0 = performance.now();
    readSelections();
    const sortKeysRaw = kit.array("_sort_keys");
    const sortKeys = sortKeysRaw && sample && sample.kept
      ? Float32Array.from(sample.kept, (/** @type {number} */ i) => sortKeysRaw.data[i])
      : sortKeysRaw ? sortKeysRaw.data : null;
    valueFill = null;
    if (sample && sortKeys && sortKeys.length === sample.n) {
      let lo = Infinity, hi = -Infinity;
      for (let i = 0; i < sortKeys.length; i++) {
        if (sortKeys[i] < lo) lo = sortKeys[i];
        if (sortKeys[i] > hi) hi = sortKeys[i];
      }
      if (lo <= hi) valueFill = { values: sortKeys, lo, hi };
    }
    const total = model.get("height");
    const thumbs = useThumbs();
    btnThumbs.style.display = atlas ? "" : "none";
    btnThumbs.setAttribute("aria-pressed", String(thumbs));
    drawLegend();
    scroll.style.height = `${Math.max(80, total - toolbar.offsetHeight - legend.offsetHeight - 6)}px`;
    const width = scroll.clientWidth || lastWidth || el.clientWidth || 800; // 0 while hidden or the theme swaps
    lastWidth = width;
    const cell = thumbs ? 34 : 12;
    headers.replaceChildren();
    if (!sample || sample.n === 0) {
      lay = null;
      canvas.width = canvas.height = overlay.width = overlay.height = 0;
      stack.style.height = "0px";
      const text = !sample ? "No data." : sample.counting ? "None of the instances shown is brushed; sampling…"
        : "No instances to show: the filter selects none.";
      headers.appendChild(h("div", { className: "av-ip-empty", text }));
      finish(t0, 0, 0, 0, 0, []);
      return;
    }
    lay = layoutGroups(sample, sortKeys, width, cell);
    kit.canvas(overlay, width, lay.height);
    const ctx = kit.canvas(canvas, width, lay.height);
    stack.style.height = `${lay.height}px`;
    ctx.clearRect(0, 0, width, lay.height);
    ctx.imageSmoothingEnabled = false;
    const fg = kit.colour("--av-fg", "#111");
    const accent = kit.colour("--av-accent", "#1976d2");
    const size = cell - 2;
    const border = thumbs ? 3 : 2;
    let drawn = 0, thumbsDrawn = 0, pinnedDrawn = 0, highlightedDrawn = 0;
    const summary = [];
    for (const g of lay.groups) {
      for (const list of [g.correct, g.wrong]) {
        for (const i of list) {
          const x = lay.x[i], y = lay.y[i];
          const lit = !highlighted || highlighted.has(sample.index[i]);
          ctx.globalAlpha = lit ? 1 : 0.18;
          ctx.fillStyle = colorOf(sample.pred[i]); // border = predicted class
          ctx.fillRect(x, y, size, size);
          // fill: the true class, or the value sorted by
          ctx.fillStyle = valueFill ? fillOf(valueFill.values[i]) : colorOf(sample.label[i]);
          ctx.fillRect(x + border, y + border, size - 2 * border, size - 2 * border);
          if (thumbs) {
            const inset = border + 2;
            const ax = (i % atlas.perRow) * atlas.tw, ay = Math.floor(i / atlas.perRow) * atlas.th;
            const side = size - 2 * inset;
            ctx.drawImage(atlas.canvas, ax, ay, atlas.tw, atlas.th, x + inset, y + inset, side, side);
            thumbsDrawn++;
          }
          drawn++;
          if (highlighted && lit) highlightedDrawn++;
        }
      }
      const first = g.correct.length ? g.correct[0] : g.wrong[0];
      summary.push({
        label: g.label, correct: g.correct.length, wrong: g.wrong.length, first: sample.index[first],
        firstWrong: g.wrong.length ? sample.index[g.wrong[0]] : null,
        correctMaxX: g.correct.length ? Math.max(...g.correct.map((i) => lay.x[i])) : null,
        wrongMinX: g.wrong.length ? Math.min(...g.wrong.map((i) => lay.x[i])) : null,
      });
      addHeader(g);
    }
    ctx.globalAlpha = 1;
    if (highlighted && thumbs) { // dimming alone is hard to read over images: outline the lit ones too
      ctx.strokeStyle = accent;
      ctx.lineWidth = 1;
      for (let i = 0; i < sample.n; i++) {
        if (highlighted.has(sample.index[i])) {
          ctx.strokeRect(lay.x[i] - 0.5, lay.y[i] - 0.5, size + 1, size + 1);
        }
      }
    }
    // pins in the text colour (black on light, white on dark): they must not read as a class colour
    ctx.strokeStyle = fg;
    ctx.lineWidth = 2;
    ctx.fillStyle = fg;
    for (const idx of pinned) {
      const i = sample.position.get(idx);
      if (i === undefined) continue;
      ctx.strokeRect(lay.x[i] - 1, lay.y[i] - 1, size + 2, size + 2);
      ctx.beginPath(); // a corner flag: pinned reads even at 10 px
      ctx.moveTo(lay.x[i] + size - 5, lay.y[i] - 1);
      ctx.lineTo(lay.x[i] + size + 1, lay.y[i] - 1);
      ctx.lineTo(lay.x[i] + size + 1, lay.y[i] + 5);
      ctx.fill();
      pinnedDrawn++;
    }
    const markedDrawn = drawMarks(ctx, size);
    drawOverlay();
    scrollToHighlighted(size);
    el.dataset.markedDrawn = String(markedDrawn);
    finish(t0, drawn, thumbsDrawn, pinnedDrawn, highlightedDrawn, summary);
  }

  /** The marked instances (a prediction that changed between checkpoints): a corner triangle, bottom left. */
  function drawMarks(/** @type {CanvasRenderingContext2D} */ ctx, /** @type {number} */ size) {
    const marked = kit.array("marked_indices")?.data;
    if (!marked || !sample) return 0;
    ctx.fillStyle = kit.colour("--av-warn", "#e6550d");
    let drawn = 0;
    for (const idx of Array.from(marked)) {
      const i = sample.position.get(idx);
      if (i === undefined) continue;
      const x = lay.x[i], y = lay.y[i] + size;
      ctx.beginPath();
      ctx.moveTo(x - 1, y + 1);
      ctx.lineTo(x - 1, y - 6);
      ctx.lineTo(x + 6, y + 1);
      ctx.fill();
      drawn++;
    }
    return drawn;
  }

  /** The fill for a value sorted by: the palette's sequential ramp over the sample's range. */
  function fillOf(/** @type {number} */ v) {
    if (!valueFill || !Number.isFinite(v)) return colorOf(-1);
    const { lo, hi } = valueFill;
    return rampColour(kit.palette().sequential, hi > lo ? (v - lo) / (hi - lo) : 0.5);
  }

  /** A new set lit up (another view's hover or subset, highlight()): bring one of its squares into view. */
  function scrollToHighlighted(/** @type {number} */ size) {
    const changed = highlighted !== lastHighlighted;
    lastHighlighted = highlighted;
    if (!highlighted || !lay) { el.dataset.highlightedVisible = "0"; return; }
    const top = scroll.scrollTop, bottom = top + scroll.clientHeight;
    let first = -1, visible = 0;
    for (let i = 0; i < sample.n; i++) {
      if (!highlighted.has(sample.index[i])) continue;
      if (lay.y[i] >= top && lay.y[i] + size <= bottom) visible++;
      if (first < 0 || lay.y[i] < lay.y[first]) first = i;
    }
    if (changed && first >= 0 && !visible) {
      scroll.scrollTop = Math.max(0, lay.y[first] - 24);
      el.dataset.scrolledTo = String(sample.index[first]);
      visible = 0;
      const t = scroll.scrollTop, b = t + scroll.clientHeight;
      for (let i = 0; i < sample.n; i++) {
        if (highlighted.has(sample.index[i]) && lay.y[i] >= t && lay.y[i] + size <= b) visible++;
      }
    }
    el.dataset.highlightedVisible = String(visible);
  }

  function addHeader(g) {
    const k = g.label;
    const shownTotal = g.correct.length + g.wrong.length;
    const classTotal = k >= 0 && k < sample.classTotals.length ? sample.classTotals[k] : shownTotal;
    const classWrong = k >= 0 && k < sample.classWrong.length ? sample.classWrong[k] : g.wrong.length;
    const sw = h("span", { className: "swatch", style: {
      display: "inline-block", width: "9px", height: "9px", marginRight: "4px", background: colorOf(k) } });
    const name = h("b", { text: nameOf(k) });
    const us = (/** @type {number} */ v) => formatInteger(Number(v));
    // narrowed in the page, the class totals over the brush are the kernel's to count
    const of = (/** @type {number} */ total) => (sample.counting ? "" : ` of ${us(total)}`);
    const counts = h("span", { text: ` · ${us(shownTotal)} shown${of(classTotal)}` });
    const right = h("span", {
      className: "av-ip-right",
      text: g.wrong.length || classWrong ? `misclassified: ${g.wrong.length} shown${of(classWrong)} →` : "",
    });
    headers.appendChild(h("div", { className: "av-ip-group", "data-label": String(k), style: { top: `${g.top}px` } },
      [sw, name, counts, right]));
  }

  function finish(t0, drawn, thumbsDrawn, pinnedDrawn, highlightedDrawn, summary) {
    const ms = performance.now() - t0;
    const s = sample;
    const parts = [];
    if (s) {
      parts.push(`${formatInteger(s.n)} of ${formatInteger(Number(s.total))} instances shown`);
      if (s.filtered) parts.push(`filter: ${formatInteger(Number(s.candidates))}`);
      let wrong = 0;
      for (let i = 0; i < s.n; i++) if (s.label[i] >= 0 && s.label[i] !== s.pred[i]) wrong++;
      parts.push(`${wrong} misclassified`);
      if (pinned.size) parts.push(`${pinned.size} pinned`);
      if (highlighted) parts.push(`${highlightedDrawn} of ${highlighted.size} highlighted shown`);
      const marked = kit.array("marked_indices")?.data;
      if (marked && marked.length) parts.push(`◣ ${marked.length} ${model.get("mark_label") || "marked"}`);
    }
    info.textContent = parts.join(" · ");
    const sortLabel = model.get("sort_label");
    sortInfo.textContent = model.get("_sort_keys") ? `· sorted by ${sortLabel || "the given values"}`
      : "· sorted by confidence";
    el.dataset.drawn = String(drawn);
    el.dataset.groups = String(summary.length);
    el.dataset.thumbnailsDrawn = String(thumbsDrawn);
    el.dataset.pinnedDrawn = String(pinnedDrawn);
    el.dataset.highlightedDrawn = String(highlightedDrawn);
    el.dataset.sorted = model.get("_sort_keys") ? "values" : "confidence";
    el.dataset.colourBy = valueFill ? "values" : "class";
    el.dataset.layout = JSON.stringify(summary);
    el.dataset.drawMs = ms.toFixed(2);
    el.dataset.sampleFrom = s && s.counting ? "page" : "kernel";
    el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
  }

  function drawOverlay() {
    const ctx = /** @type {CanvasRenderingContext2D} */ (overlay.getContext("2d"));
    const dpr = window.devicePixelRatio || 1;
    ctx.clearRect(0, 0, overlay.width / dpr, overlay.height / dpr);
    if (!lay || hovered < 0) return;
    const i = sample.position.get(hovered);
    if (i === undefined) return;
    const size = (useThumbs() ? 34 : 12) - 2;
    ctx.strokeStyle = kit.colour("--av-fg", "#111");
    ctx.lineWidth = 2;
    ctx.strokeRect(lay.x[i] - 2, lay.y[i] - 2, size + 4, size + 4);
  }

  /** The sample position under a point in canvas coordinates, or -1. */
  function hit(px, py) {
    if (!lay) return -1;
    const cell = useThumbs() ? 34 : 12;
    for (const g of lay.groups) {
      if (py < g.y0 || py >= g.y0 + g.rows * cell) continue;
      const c = Math.floor((px - lay.pad) / cell), r = Math.floor((py - g.y0) / cell);
      if (c < 0 || c >= g.cols || (px - lay.pad) % cell >= cell - 2 || (py - g.y0) % cell >= cell - 2) return -1;
      return g.slots[r * g.cols + c];
    }
    return -1;
  }

  function row(key, value, color) {
    const children = [h("span", { className: "av-ip-key", text: key })];
    if (color) {
      children.push(h("span", { className: "swatch", style: {
        display: "inline-block", width: "9px", height: "9px", marginTop: "3px", background: color } }));
    }
    children.push(h("span", { className: "av-ip-val", text: value }));
    return h("div", { className: "av-ip-row", "data-key": key }, children);
  }

  function showCard(i, clientX, clientY) {
    const s = sample;
    const idx = s.index[i];
    const k = s.label[i], p = s.pred[i];
    const wrong = k >= 0 && k !== p;
    const lines = [
      h("div", { className: "av-ip-card-title", text: `instance ${idx}${wrong ? " · misclassified" : ""}` }),
      row("true", nameOf(k), colorOf(k)),
      row("predicted", nameOf(p), colorOf(p)),
      row("confidence", formatNumber(s.confidence[i])),
    ];
    if (s.labelScore && wrong) lines.push(row("score of true class", formatNumber(s.labelScore[i])));
    const sk = kit.array("_sort_keys");
    if (sk && sk.data.length === s.n) {
      lines.push(row(model.get("sort_label") || "sort value", formatNumber(sk.data[i])));
    }
    if (s.thumbs) {
      const [, th, tw] = s.thumbs.shape;
      const scale = Math.max(1, Math.floor(96 / Math.max(th, tw)));
      const thumb = h("canvas", { className: "av-ip-thumb", width: String(tw * scale), height: String(th * scale) });
      const tctx = thumb.getContext("2d");
      tctx.imageSmoothingEnabled = false;
      const ax = (i % atlas.perRow) * atlas.tw, ay = Math.floor(i / atlas.perRow) * atlas.th;
      tctx.drawImage(atlas.canvas, ax, ay, tw, th, 0, 0, tw * scale, th * scale);
      lines.push(thumb);
    }
    const meta = [];
    if (s.numbers) {
      const m = s.numbers.shape[1];
      for (let j = 0; j < m; j++) {
        meta.push([s.numberNames[j], (s.numberInteger[j] ? formatInteger : formatNumber)(s.numbers.data[i * m + j])]);
      }
    }
    for (const col of s.texts) meta.push([col.name, col.values[i]]);
    for (const [key, value] of meta.slice(0, CARD_LINES)) lines.push(row(key, value));
    const more = Math.max(0, meta.length - CARD_LINES) + s.featuresLeftOut;
    if (more) lines.push(h("div", { className: "av-ip-hint", text: `+${more} more values` }));
    const hint = pinned.has(idx) ? "pinned · click to unpin" : "click to pin";
    lines.push(h("div", { className: "av-ip-hint", text: hint }));
    card.replaceChildren(...lines);
    card.dataset.index = String(idx);
    card.style.display = "block";
    const box = el.getBoundingClientRect();
    const x = clientX - box.left, y = clientY - box.top;
    const left = x + 14 + card.offsetWidth > box.width ? Math.max(0, x - 14 - card.offsetWidth) : x + 14;
    const top = Math.max(0, Math.min(y + 14, box.height - card.offsetHeight));
    card.style.left = `${left}px`;
    card.style.top = `${top}px`;
  }

  function setHovered(idx) {
    if (idx === hovered) return;
    hovered = idx;
    drawOverlay();
    model.set("hovered_index", idx);
    model.save_changes();
  }

  function pointer(ev) {
    const r = canvas.getBoundingClientRect();
    return hit(ev.clientX - r.left, ev.clientY - r.top);
  }

  scroll.addEventListener("mousemove", (ev) => {
    const i = pointer(ev);
    if (i < 0) {
      card.style.display = "none";
      setHovered(-1);
      return;
    }
    setHovered(sample.index[i]);
    showCard(i, ev.clientX, ev.clientY);
  });
  scroll.addEventListener("mouseleave", () => {
    card.style.display = "none";
    setHovered(-1);
  });
  scroll.addEventListener("click", (ev) => {
    const i = pointer(ev);
    if (i < 0) return;
    const idx = sample.index[i];
    const next = (model.get("pinned") || []).filter((p) => p !== idx);
    if (next.length === (model.get("pinned") || []).length) next.push(idx);
    model.set("pinned", next);
    model.save_changes();
    showCard(i, ev.clientX, ev.clientY);
  });
  btnThumbs.addEventListener("click", () => {
    model.set("thumbnails", !model.get("thumbnails"));
    model.save_changes();
  });
  btnClear.addEventListener("click", () => { model.set("pinned", []); model.save_changes(); });

  /** For tests and other views: scroll an instance's square into view and return its centre in client
   * coordinates (null when it is not drawn). */
  /** @type {any} */ (el).activisLocate = (/** @type {number} */ idx) => {
    const i = sample && lay ? sample.position.get(idx) : undefined;
    if (i === undefined) return null;
    const cellSize = useThumbs() ? 34 : 12;
    if (lay.y[i] < scroll.scrollTop || lay.y[i] + cellSize > scroll.scrollTop + scroll.clientHeight) {
      scroll.scrollTop = Math.max(0, lay.y[i] - scroll.clientHeight / 2);
    }
    scroll.scrollIntoView({ block: "nearest" });
    const r = canvas.getBoundingClientRect();
    const half = ((useThumbs() ? 34 : 12) - 2) / 2;
    return { x: r.left + lay.x[i] + half, y: r.top + lay.y[i] + half };
  };

  // coalesce the several trait changes of one kernel message into one draw
  let pending = false, resample = false;
  function schedule(sampleChanged) {
    resample = resample || sampleChanged;
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      if (resample) readSample();
      resample = false;
      draw();
    });
  }
  kit.on("_sample", () => schedule(true));
  kit.on("_sort_keys sort_label pinned highlighted_indices marked_indices mark_label class_names colours thumbnails "
    + "height", () => schedule(false));
  kit.onResize(scroll, (size) => {
    if (Math.abs(size.width - lastWidth) > 1) schedule(false);
  });
  // canvas colours are read from the theme at draw time: redraw when JupyterLab switches theme
  kit.onTheme(() => schedule(false));
  kit.selection(followShared);
  readSample();
  draw();
}

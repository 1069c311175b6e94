// @ts-check
// The projection's layout maths, no drawing: the layout normalised into the unit square and fitted to
// the frame, the fixed shuffled paint order, a uniform grid for nearest-point hover, the rows in a lasso.

/**
 * @typedef {{ norm: Float32Array, cx: number, cy: number, span: number, extent: number[] }} Layout
 * @typedef {{ G: number, start: Int32Array, items: Int32Array }} Grid
 * @typedef {{ ax: number, bx: number, ay: number, by: number }} Transform X = ax * x + bx, Y = ay * y + by
 * @typedef {{ k: number, tx: number, ty: number }} Zoom the user's zoom and pan
 */

const MARGIN = 12; // css px around the fitted layout

/**
 * Normalised [0,1]^2 -> css px: the layout (centred on 0.5) fills the frame with one scale for both
 * axes, then the user's zoom and pan apply.
 * @param {Layout | null} layout @param {number} cssW @param {number} cssH @param {Zoom} view
 * @returns {Transform}
 */
export function fitTransform(layout, cssW, cssH, view) {
  const [ex, ey] = layout ? layout.extent : [1, 1];
  const s0 = Math.max(1, Math.min((cssW - 2 * MARGIN) / ex, (cssH - 2 * MARGIN) / ey));
  const ox = cssW / 2 - s0 / 2, oy = cssH / 2 - s0 / 2;
  return { ax: s0 * view.k, bx: ox * view.k + view.tx, ay: -s0 * view.k, by: (oy + s0) * view.k + view.ty };
}

/**
 * Data coordinates -> css px, from the transform of the normalised layout.
 * @param {Transform} t @param {Layout | null} layout @returns {Transform}
 */
export function dataTransform(t, layout) {
  if (!layout) return t;
  const { cx, cy, span } = layout;
  return {
    ax: t.ax / span, bx: t.bx + t.ax * (0.5 - cx / span), ay: t.ay / span, by: t.by + t.ay * (0.5 - cy / span),
  };
}

/**
 * Row-ordered x, y pairs rearranged into paint order.
 * @param {Float32Array} norm @param {Uint32Array} order paint position -> row @param {number} n
 */
export function inPaintOrder(norm, order, n) {
  const out = new Float32Array(2 * n);
  for (let o = 0; o < n; o++) {
    const row = order[o];
    out[2 * o] = norm[2 * row];
    out[2 * o + 1] = norm[2 * row + 1];
  }
  return out;
}

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

/**
 * Add to `rows` every row of `pos` (flat x, y pairs) inside the polygon `poly` (data coordinates).
 * @param {ArrayLike<number>} pos @param {number} n @param {number[]} poly @param {Set<number>} rows
 */
export function addRowsInPolygon(pos, n, poly, rows) {
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (let k = 0; k < poly.length; k += 2) {
    x0 = Math.min(x0, poly[k]); x1 = Math.max(x1, poly[k]);
    y0 = Math.min(y0, poly[k + 1]); y1 = Math.max(y1, poly[k + 1]);
  }
  for (let i = 0; i < n; i++) {
    const x = pos[2 * i], y = pos[2 * i + 1];
    if (x < x0 || x > x1 || y < y0 || y > y1) continue; // also skips NaN
    if (insidePolygon(x, y, poly)) rows.add(i);
  }
}

export function autoPointSize(n) {
  if (n <= 2_000) return 6;
  if (n <= 20_000) return 4;
  if (n <= 200_000) return 3;
  if (n <= 600_000) return 2;
  return 1;
}

/** A fixed pseudo-random draw order, so that no class is always painted over another. */
export function shuffledOrder(n) {
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
export function normalise(pos, n) {
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
export function buildGrid(norm, n) {
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

export function nearestRow(grid, norm, x, y, r) {
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

// @ts-check
// What the kernel computes for an Explorer, computed in the page from the embedded data, the same way:
// a matrix row's statistics over any instances (activis/subsets/aggregation.py), the neuron order of a
// sorted row (activis/subsets/ordering.py) and a neuron's colouring (activis/widgets/projection_view.py).
import { formatNumber } from "../common/format.js";

// a matrix row's statistics are shared with the live matrix (its rows computed in the page)
export { rowStatistics, uniqueSorted, widenHalf } from "../common/row_statistics.js";

export const STATS = ["mean", "active", "std"];
const MISSING_CODE = 255;
const LEVELS = 255;

/** Neuron order by one row's values: largest first, NaN last, ties by index. */
export function sortNeurons(/** @type {ArrayLike<number>} */ row) {
  const order = Array.from({ length: row.length }, (_, i) => i);
  const key = (/** @type {number} */ i) => (Number.isNaN(row[i]) ? Infinity : -row[i]);
  order.sort((a, b) => key(a) - key(b) || a - b);
  return Int32Array.from(order);
}

/** numpy's default (linear) percentile of sorted values. */
function percentile(/** @type {Float64Array} */ sorted, /** @type {number} */ q) {
  const pos = (sorted.length - 1) * q / 100;
  const lo = Math.floor(pos), hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/**
 * A continuous colouring as the kernel makes it: 255 levels, tails clipped to the 0.5-99.5th
 * percentiles when long, a diverging scale centred on 0 for values of both signs.
 * @param {ArrayLike<number>} column
 * @param {string} title
 * @param {{sequential: string[], diverging: string[]}} ramps each with the missing colour last
 */
export function continuousColouring(column, title, ramps) {
  const n = column.length;
  const codes = new Uint8Array(n).fill(MISSING_CODE);
  const finite = [];
  for (let i = 0; i < n; i++) if (Number.isFinite(column[i])) finite.push(column[i]);
  /** @type {Record<string, any>} */
  const legend = { kind: "continuous", title, missing: n - finite.length };
  if (!finite.length) {
    legend.domain = [0, 0];
    return { codes, palette: ramps.sequential, legend };
  }
  const sorted = Float64Array.from(finite).sort();
  const vmin = sorted[0], vmax = sorted[sorted.length - 1];
  let lo = vmin, hi = vmax;
  const pLo = percentile(sorted, 0.5), pHi = percentile(sorted, 99.5);
  if (pHi > pLo && hi - lo > 1.5 * (pHi - pLo)) { lo = pLo; hi = pHi; }
  const diverging = lo < 0 && hi > 0;
  if (diverging) { const m = Math.max(-lo, hi); lo = -m; hi = m; }
  const span = (hi - lo) || 1;
  for (let i = 0; i < n; i++) {
    const v = column[i];
    if (!Number.isFinite(v)) continue;
    codes[i] = Math.min(LEVELS - 1, Math.max(0, Math.round((v - lo) / span * (LEVELS - 1))));
  }
  legend.domain = [lo, hi];
  legend.scale = diverging ? "diverging" : "sequential";
  if (lo > vmin || hi < vmax) legend.note = `(clipped; full range ${formatNumber(vmin)} to ${formatNumber(vmax)})`;
  return { codes, palette: diverging ? ramps.diverging : ramps.sequential, legend };
}

/** A typed array as the {dtype, shape, buffer} a view decodes. */
export function serialised(/** @type {Float32Array | Int32Array | Uint8Array} */ typed, /** @type {number[]} */ shape) {
  const dtype = typed instanceof Float32Array ? "float32" : typed instanceof Int32Array ? "int32" : "uint8";
  return { dtype, shape, buffer: new DataView(typed.buffer, typed.byteOffset, typed.byteLength) };
}

// @ts-check
// What the kernel computes for an Explorer, computed in the page from the embedded data, the same way:
// a matrix row's statistics over any instances (activis/subsets/aggregation.py), the neuron order of a
// sorted row (activis/subsets/ordering.py) and a neuron's colouring (activis/widgets/projection_view.py).
import { formatNumber } from "../common/format.js";

export const STATS = ["mean", "active", "std"];
const MISSING_CODE = 255;
const LEVELS = 255;

/**
 * Per-neuron mean, fraction above `threshold` and population std of the given rows of an n x k matrix,
 * in float64 as the kernel accumulates them; an empty row set gives NaN.
 * @param {Float32Array} values n x k, row-major
 * @param {number} k neurons
 * @param {ArrayLike<number>} rows instance indices (unique)
 * @param {number} threshold
 */
export function rowStatistics(values, k, rows, threshold) {
  const sum = new Float64Array(k), squares = new Float64Array(k), active = new Float64Array(k);
  const n = rows.length;
  for (let r = 0; r < n; r++) {
    const base = rows[r] * k;
    for (let j = 0; j < k; j++) {
      const v = values[base + j];
      sum[j] += v;
      squares[j] += v * v;
      if (v > threshold) active[j] += 1;
    }
  }
  const mean = new Float32Array(k), frac = new Float32Array(k), std = new Float32Array(k);
  for (let j = 0; j < k; j++) {
    if (!n) { mean[j] = frac[j] = std[j] = NaN; continue; }
    const m = sum[j] / n;
    mean[j] = m;
    frac[j] = active[j] / n;
    std[j] = Math.sqrt(Math.max(squares[j] / n - m * m, 0));
  }
  return { mean, active: frac, std };
}

/** IEEE half-precision values as float32: a 65,536-entry table, built once, then one lookup per value. */
let HALF = /** @type {Float32Array | null} */ (null);
export function widenHalf(/** @type {Uint16Array} */ bits) {
  if (!HALF) {
    HALF = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) {
      const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
      HALF[h] = exponent === 0 ? sign * 2 ** -14 * (fraction / 1024)
        : exponent === 31 ? (fraction ? NaN : sign * Infinity)
          : sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
    }
  }
  const table = HALF, out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
  return out;
}

/** Sorted, de-duplicated instance indices (what Subset.from_indices keeps). */
export function uniqueSorted(/** @type {ArrayLike<number>} */ indices) {
  return Int32Array.from(new Set(Array.from(indices))).sort();
}

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

// @ts-check
// A matrix row's statistics over any instances, computed in the page the way the kernel does
// (activis/subsets/aggregation.py: float64 sums, population std, fraction above the threshold): the
// saved page computes every row with it, the live matrix the brushed row before the kernel's arrives.

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

// @ts-check
// A matrix row's statistics over any instances, computed in the page the way the kernel does
// (activis/subsets/aggregation.py: float64 sums, population std, fraction above the threshold): the
// saved page computes every row with it, the live matrix the brushed row before the kernel's arrives.

/**
 * Per-neuron mean, fraction above `threshold` and population std of the given rows of an n x k matrix,
 * in float64 as the kernel accumulates them; an empty row set gives NaN. `wanted` names the statistics
 * to compute (the others come back null): a brushed row in the live matrix needs only the one shown.
 * @param {Float32Array} values n x k, row-major
 * @param {number} k neurons
 * @param {ArrayLike<number>} rows instance indices (unique)
 * @param {number} threshold
 * @param {string[]} [wanted]
 */
export function rowStatistics(values, k, rows, threshold, wanted = ["mean", "active", "std"]) {
  const needStd = wanted.includes("std"), needSum = needStd || wanted.includes("mean");
  const needActive = wanted.includes("active");
  const sum = new Float64Array(k), squares = new Float64Array(k), active = new Float64Array(k);
  const n = rows.length;
  for (let r = 0; r < n; r++) {
    const base = rows[r] * k;
    if (needStd) {
      for (let j = 0; j < k; j++) {
        const v = values[base + j];
        sum[j] += v;
        squares[j] += v * v;
      }
    } else if (needSum) {
      for (let j = 0; j < k; j++) sum[j] += values[base + j];
    }
    if (needActive) for (let j = 0; j < k; j++) if (values[base + j] > threshold) active[j] += 1;
  }
  const mean = new Float32Array(k), frac = new Float32Array(k), std = new Float32Array(k);
  for (let j = 0; j < k; j++) {
    if (!n) { mean[j] = frac[j] = std[j] = NaN; continue; }
    const m = sum[j] / n;
    mean[j] = m;
    frac[j] = active[j] / n;
    std[j] = Math.sqrt(Math.max(squares[j] / n - m * m, 0));
  }
  return { mean: needSum && wanted.includes("mean") ? mean : null, active: needActive ? frac : null,
    std: needStd ? std : null };
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
  let increasing = true; // a lasso's indices already are: no set, no sort
  for (let i = 1; i < indices.length && increasing; i++) increasing = indices[i] > indices[i - 1];
  return increasing ? Int32Array.from(indices) : Int32Array.from(new Set(Array.from(indices))).sort();
}

// @ts-check
// Scales and ticks for the views' charts: round tick values (1, 2 or 5 times a power of ten) whose
// labels always tell neighbours apart (js/common/format.js), linear or log10, each with invert() for brushing.
import { tickFormat } from "./format.js";

/**
 * @typedef {((v: number) => number) & { invert: (p: number) => number, domain: [number, number],
 *   range: [number, number], log: boolean, ticks: (count?: number) => number[],
 *   format: (ticks: number[]) => (v: number) => string }} Scale
 */

/**
 * Round values covering [lo, hi], about `count` of them.
 * @param {number} lo @param {number} hi @param {number} [count]
 * @returns {number[]}
 */
export function niceTicks(lo, hi, count = 4) {
  if (!(Number.isFinite(lo) && Number.isFinite(hi))) return [];
  if (lo === hi) return [lo];
  if (lo > hi) [lo, hi] = [hi, lo];
  const raw = (hi - lo) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  const out = [];
  for (let i = Math.ceil(lo / step); i * step <= hi + step * 1e-9; i++) out.push(i * step);
  return out.map((v) => (Math.abs(v) < step * 1e-9 ? 0 : v));
}

/**
 * A linear scale from data [d0, d1] to pixels [r0, r1].
 * @param {number} d0 @param {number} d1 @param {number} r0 @param {number} r1
 * @returns {Scale}
 */
export function scaleLinear(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  const f = /** @type {Scale} */ ((/** @type {number} */ v) => r0 + ((v - d0) / span) * (r1 - r0));
  f.invert = (p) => d0 + ((p - r0) / (r1 - r0)) * span;
  f.domain = [d0, d1];
  f.range = [r0, r1];
  f.log = false;
  f.ticks = (count = 4) => niceTicks(d0, d1, count);
  f.format = tickFormat;
  return f;
}

/**
 * A log10 scale (both ends > 0): ticks at powers of ten, or 1-2-5 steps inside one decade.
 * @param {number} d0 @param {number} d1 @param {number} r0 @param {number} r1
 * @returns {Scale}
 */
export function scaleLog(d0, d1, r0, r1) {
  const l0 = Math.log10(d0), l1 = Math.log10(d1);
  const inner = scaleLinear(l0, l1, r0, r1);
  const f = /** @type {Scale} */ ((/** @type {number} */ v) => inner(Math.log10(v)));
  f.invert = (p) => Math.pow(10, inner.invert(p));
  f.domain = [d0, d1];
  f.range = [r0, r1];
  f.log = true;
  f.ticks = (count = 4) => {
    if (l1 - l0 >= 1) {
      const every = Math.max(1, Math.ceil((Math.floor(l1) - Math.ceil(l0) + 1) / Math.max(1, count)));
      const out = [];
      for (let e = Math.ceil(l0); e <= Math.floor(l1); e += every) out.push(Math.pow(10, e));
      if (out.length >= 2) return out;
    }
    return niceTicks(d0, d1, count).filter((v) => v > 0);
  };
  f.format = (ticks) => {
    const powers = ticks.every((t) => Math.abs(Math.log10(t) - Math.round(Math.log10(t))) < 1e-9);
    if (!powers) return tickFormat(ticks);
    return (v) => {
      const e = Math.round(Math.log10(v));
      return e >= -2 && e <= 3 ? String(Number(v.toPrecision(1))) : `1e${e}`;
    };
  };
  return f;
}

/**
 * The extent of finite values (only positive ones for a log scale); a flat series gets some room.
 * @param {ArrayLike<number>[]} arrays @param {boolean} positiveOnly
 * @returns {[number, number] | null}
 */
export function extent(arrays, positiveOnly) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) {
    for (let i = 0; i < a.length; i++) {
      const v = a[i];
      if (!Number.isFinite(v) || (positiveOnly && v <= 0)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo === Infinity) return null;
  if (lo === hi) {
    if (positiveOnly) return [lo / 2, hi * 2];
    lo -= Math.abs(lo) * 0.1 || 1;
    hi += Math.abs(hi) * 0.1 || 1;
  }
  return [lo, hi];
}

// @ts-check
// The matrix's numbers turned into pixels and words: the colour scale (a lookup table through the
// palette's ramps), one RGBA pixel per cell in display order, the neuron order of a sort, and the
// text of a cell's tooltip. No DOM here: the view owns the canvases.
import { cssRGBA } from "../common/colours.js";
import { formatInteger, formatNumber } from "../common/format.js";

/**
 * @typedef {import("../common/arrays.js").Typed} Typed
 * @typedef {{ kind: "sequential" | "diverging", lo: number, hi: number, lut: Uint8ClampedArray | null,
 *   nan: number[], hasNan: boolean }} ColourScale
 * @typedef {{ light: string[], dark: string[] }} Ramp
 */

export const LUT_SIZE = 256;

/** Any CSS colour -> [r, g, b]. */
const parseColor = (/** @type {string} */ css) => cssRGBA(css).slice(0, 3);

function isDark(rgb) {
  return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] < 128;
}

/** A LUT_SIZE x RGBA table interpolating through the given stops. */
function makeLut(stops) {
  const lut = new Uint8ClampedArray(LUT_SIZE * 4);
  for (let i = 0; i < LUT_SIZE; i++) {
    const t = (i / (LUT_SIZE - 1)) * (stops.length - 1);
    const k = Math.min(stops.length - 2, Math.floor(t));
    const f = t - k;
    for (let c = 0; c < 3; c++) lut[i * 4 + c] = stops[k][c] + (stops[k + 1][c] - stops[k][c]) * f;
    lut[i * 4 + 3] = 255;
  }
  return lut;
}

/** Neuron order by one row's values: largest first, NaN last, ties by index (as activis.subsets.sort_neurons).
 * @param {ArrayLike<number>} values @param {number} row @param {number} n */
export function sortOrder(values, row, n) {
  const order = new Int32Array(n);
  for (let j = 0; j < n; j++) order[j] = j;
  const base = row * n;
  order.sort((a, b) => {
    const va = values[base + a], vb = values[base + b];
    const na = va !== va, nb = vb !== vb;
    if (na || nb) return na === nb ? a - b : na ? 1 : -1;
    return vb - va || a - b;
  });
  return order;
}

export const STAT_TITLE = { mean: "mean activation", active: "fraction active", std: "standard deviation" };

/**
 * The colour scale of the values shown: diverging around 0 for differences and signed means, else
 * sequential from 0; the low end is the theme background, so zero reads as empty in light and dark.
 * @param {Typed} shown @param {string} stat @param {boolean} diff
 * @param {Record<string, Ramp>} ramps the palette's matrix ramps @param {string} bgCss @param {string} nanCss
 * @returns {ColourScale}
 */
export function colourScale(shown, stat, diff, ramps, bgCss, nanCss) {
  let lo = Infinity, hi = -Infinity, hasNan = false;
  for (let i = 0; i < shown.length; i++) {
    const v = shown[i];
    if (v !== v) { hasNan = true; continue; }
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === Infinity) { lo = 0; hi = 1; }
  const bg = parseColor(bgCss);
  const theme = isDark(bg) ? "dark" : "light";
  const hex = (/** @type {string[]} */ list) => list.map(parseColor);
  const diverging = diff || (stat === "mean" && lo < 0);
  const nan = parseColor(nanCss);
  if (diverging) {
    const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    const stops = [...hex(ramps.diverging_low[theme]), bg, ...hex(ramps.diverging_high[theme])];
    return { kind: "diverging", lo: -m, hi: m, lut: makeLut(stops), nan, hasNan };
  }
  const top = stat === "active" ? 1 : hi > 0 ? hi : 1;
  return { kind: "sequential", lo: 0, hi: top, lut: makeLut([bg, ...hex(ramps.sequential[theme])]), nan, hasNan };
}

/**
 * Paint every cell into `px` (an R x N RGBA image), columns in display order.
 * @param {Uint8ClampedArray} px @param {Typed} shown @param {Int32Array} order @param {number} R @param {number} N
 * @param {ColourScale} scale
 */
export function paintCells(px, shown, order, R, N, scale) {
  const { lo, hi, lut, nan } = scale;
  const k = (LUT_SIZE - 1) / (hi - lo || 1);
  for (let r = 0; r < R; r++) {
    const src = r * N;
    let dst = r * N * 4;
    for (let p = 0; p < N; p++, dst += 4) {
      const v = shown[src + order[p]];
      if (v !== v) {
        px[dst] = nan[0]; px[dst + 1] = nan[1]; px[dst + 2] = nan[2]; px[dst + 3] = 255;
        continue;
      }
      let i = ((v - lo) * k) | 0;
      i = i < 0 ? 0 : i > LUT_SIZE - 1 ? LUT_SIZE - 1 : i;
      px[dst] = lut[i * 4]; px[dst + 1] = lut[i * 4 + 1]; px[dst + 2] = lut[i * 4 + 2]; px[dst + 3] = 255;
    }
  }
}

/**
 * A cell's tooltip: its row, its neuron, the value (and how a difference was made), its rank in the row.
 * @param {{row: number, col: number, neuron: number}} cell
 * @param {{ rows: {label: string, kind: string, size: number}[], raw: Typed, shown: Typed, N: number,
 *   stat: string, ref: number, kind: string }} matrix ref: the difference row, -1 for none
 */
export function cellLines(cell, { rows, raw, shown, N, stat, ref, kind }) {
  const row = rows[cell.row];
  const v = shown[cell.row * N + cell.neuron];
  let rank = 1, valid = 0;
  for (let j = 0; j < N; j++) {
    const u = shown[cell.row * N + j];
    if (u === u) { valid++; if (u > v) rank++; }
  }
  const lines = [
    row.kind === "instance" ? row.label : `${row.label} · ${formatInteger(Number(row.size))} instances`,
    `${kind} ${cell.neuron} (column ${cell.col + 1} of ${N})`,
  ];
  if (v !== v) lines.push(`${STAT_TITLE[stat]}: – (empty subset)`);
  else if (ref >= 0) {
    const a = raw[cell.row * N + cell.neuron], b = raw[ref * N + cell.neuron];
    const [fa, fb, fv] = [a, b, v].map(formatNumber);
    lines.push(`${STAT_TITLE[stat]}: ${fa} − ${fb} (${rows[ref].label}) = ${fv}`);
  } else lines.push(`${STAT_TITLE[stat]}: ${formatNumber(v)}`);
  if (v === v) lines.push(`rank ${rank} of ${valid} in this row`);
  return lines;
}

// @ts-check
// How every view writes a number, so that 12345.6 reads the same in a tooltip, a legend, a table and
// an Altair chart (activis/export/format.py is the Python mirror, tested equal on a table of numbers).
//   formatNumber: 4 significant digits; whole units from 1,000 on; exponents below 1e-3 and from 1e6 on.
//   formatInteger: a count, with thousands separators.   formatCount: a count, compact (12k, 3.4M).
//   formatPercent: a fraction as a percentage with one decimal.   tickFormat: axis tick labels.

/** Trailing zeros of a mantissa dropped ("1.230e-4" → "1.23e-4"), and "+" kept, as d3's "~e" writes it. */
function trimExponent(/** @type {string} */ text) {
  const [mantissa, exponent] = text.split("e");
  const trimmed = mantissa.includes(".") ? mantissa.replace(/0+$/, "").replace(/\.$/, "") : mantissa;
  return `${trimmed}e${exponent}`;
}

/** A value for a tooltip, a legend, a table cell or a label. */
export function formatNumber(/** @type {number} */ v) {
  if (Number.isNaN(v)) return "–";
  if (v === Infinity) return "∞";
  if (v === -Infinity) return "-∞";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e6) return trimExponent(v.toExponential(3));
  if (a >= 1000) return v.toFixed(0);
  return String(Number(v.toPrecision(4)));
}

/** A count with thousands separators ("12,346"); non-integers are rounded half away from zero. */
export function formatInteger(/** @type {number} */ n) {
  if (!Number.isFinite(n)) return formatNumber(n);
  return (Number(n.toFixed(0)) || 0).toLocaleString("en-US");
}

/** A count where room is short: 999, 1.2k, 12k, 3.4M. */
export function formatCount(/** @type {number} */ n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(n >= 1e4 ? 0 : 1)}k`;
  return String(n);
}

/** A fraction as a percentage with one decimal (0.1234 → "12.3%"). */
export function formatPercent(/** @type {number} */ fraction) {
  if (!Number.isFinite(fraction)) return formatNumber(fraction);
  const text = (fraction * 100).toFixed(1);
  return `${text === "-0.0" ? "0.0" : text}%`;
}

/**
 * A formatter that gives each tick of `ticks` a distinct label: as many decimals as the spacing
 * needs, exponent notation for very small or large magnitudes.
 * @param {number[]} ticks
 * @returns {(v: number) => string}
 */
export function tickFormat(ticks) {
  const finite = ticks.filter(Number.isFinite);
  if (!finite.length) return formatNumber;
  let spacing = Infinity;
  for (let i = 1; i < finite.length; i++) spacing = Math.min(spacing, Math.abs(finite[i] - finite[i - 1]));
  const magnitude = Math.max(...finite.map(Math.abs));
  if (magnitude !== 0 && (magnitude < 1e-3 || magnitude >= 1e6)) {
    // enough significant digits that the spacing shows
    const digits = Number.isFinite(spacing) && spacing > 0
      ? Math.min(6, Math.max(0, Math.ceil(Math.log10(magnitude / spacing) - 1e-9))) : 1;
    return (v) => (v === 0 ? "0" : trimExponent(v.toExponential(digits)));
  }
  const decimals = Number.isFinite(spacing) && spacing > 0
    ? Math.min(8, Math.max(0, -Math.floor(Math.log10(spacing) + 1e-9))) : 2;
  return (v) => {
    const text = v.toFixed(decimals);
    return /^-0(\.0*)?$/.test(text) ? text.slice(1) : text;
  };
}

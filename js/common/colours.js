// @ts-check
// Colours for canvas drawing. Which colour data gets is Python's choice (activis/widgets/colours.py,
// the `colours` trait); this only turns CSS colours into bytes, once each.

/** @type {CanvasRenderingContext2D | null} */
let probe = null;
/** @type {Map<string, number[]>} */
const parsed = new Map();

/**
 * Any CSS colour as [r, g, b, a] bytes (hex without a canvas round trip; the rest parsed by the browser).
 * @param {string} colour
 * @returns {number[]}
 */
export function cssRGBA(colour) {
  const known = parsed.get(colour);
  if (known) return known.slice();
  let rgba;
  if (/^#[0-9a-f]{6}$/i.test(colour)) {
    rgba = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16)).concat(255);
  } else {
    if (!probe) {
      const c = document.createElement("canvas");
      c.width = c.height = 1;
      probe = /** @type {CanvasRenderingContext2D} */ (c.getContext("2d", { willReadFrequently: true }));
    }
    probe.clearRect(0, 0, 1, 1);
    probe.fillStyle = "#000";
    probe.fillStyle = colour;
    probe.fillRect(0, 0, 1, 1);
    rgba = Array.from(probe.getImageData(0, 0, 1, 1).data);
  }
  if (parsed.size < 4096) parsed.set(colour, rgba);
  return rgba.slice();
}

/**
 * ImageData is RGBA in memory: as a little-endian uint32 that is 0xAABBGGRR.
 * @param {number} r @param {number} g @param {number} b @param {number} [a]
 */
export const pack = (r, g, b, a = 255) => ((a << 24) | (b << 16) | (g << 8) | r) >>> 0;

/**
 * `rgb` blended over `bg` with weight t, packed.
 * @param {number[]} rgb @param {number[]} bg @param {number} t
 */
export function mix(rgb, bg, t) {
  const [r, g, b] = [0, 1, 2].map((i) => Math.round(rgb[i] * t + bg[i] * (1 - t)));
  return pack(r, g, b);
}

/**
 * The colour at t in [0, 1] along a ramp of hex anchors (the palette's sequential ramp), as CSS.
 * @param {string[] | undefined} anchors @param {number} t
 */
export function rampColour(anchors, t) {
  if (!anchors || !anchors.length) return "#888";
  const x = Math.max(0, Math.min(1, t)) * (anchors.length - 1);
  const k = Math.min(anchors.length - 2, Math.floor(x));
  if (k < 0) return anchors[0];
  const a = cssRGBA(anchors[k]), b = cssRGBA(anchors[k + 1]), f = x - k;
  const [r, g, bl] = [0, 1, 2].map((i) => Math.round(a[i] + (b[i] - a[i]) * f));
  return `rgb(${r}, ${g}, ${bl})`;
}

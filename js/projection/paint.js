// @ts-check
// The projection's pixels: points stamped straight into an ImageData buffer (one uint32 per pixel),
// rings around highlighted points, the hover ring and lasso on the overlay canvas, and the colour
// tables all of it reads. No model and no DOM beyond the canvases it is handed.
import { cssRGBA, pack, mix } from "../common/colours.js";

/**
 * @typedef {{ ax: number, bx: number, ay: number, by: number, W: number, H: number }} PaintTransform
 *   normalised layout coordinates -> device pixels of a W x H image
 */

/** Offsets of a filled disc (or square for tiny sizes) of `size` device pixels. */
function stampOffsets(size) {
  const out = [];
  const r = size / 2;
  const lo = -Math.floor((size - 1) / 2);
  for (let dy = lo; dy < lo + size; dy++) {
    for (let dx = lo; dx < lo + size; dx++) {
      const cx = dx - lo + 0.5 - r, cy = dy - lo + 0.5 - r;
      if (size <= 3 || cx * cx + cy * cy <= r * r + 0.25) out.push(dx, dy);
    }
  }
  return Int32Array.from(out);
}

function stamp(pixels, x, y, col, offs, W, H) {
  for (let k = 0; k < offs.length; k += 2) {
    const xx = x + offs[k], yy = y + offs[k + 1];
    if (xx >= 0 && xx < W && yy >= 0 && yy < H) pixels[yy * W + xx] = col;
  }
}

/**
 * Every point whose layer is `wanted` (all of them when `lay` is null), in paint order (sequential reads).
 * @param {Uint32Array} px @param {PaintTransform} t @param {Float32Array} xy @param {Uint8Array} cs
 * @param {Uint8Array | null} lay @param {number} wanted @param {Uint32Array} colours @param {number} size
 * @param {number} n
 */
export function paintPoints(px, { ax, bx, ay, by, W, H }, xy, cs, lay, wanted, colours, size, n) {
  const offs = stampOffsets(size);
  if (offs.length === 2) { // one pixel per point: the hot loop at a million points
    const xMax = W - 0.5, yMax = H - 0.5;
    for (let o = 0; o < n; o++) {
      if (lay !== null && lay[o] !== wanted) continue;
      const fx = ax * xy[2 * o] + bx, fy = ay * xy[2 * o + 1] + by;
      if (!(fx >= -0.5 && fx < xMax && fy >= -0.5 && fy < yMax)) continue; // also skips NaN
      px[((fy + 0.5) | 0) * W + ((fx + 0.5) | 0)] = colours[cs[o]];
    }
    return;
  }
  for (let o = 0; o < n; o++) {
    if (lay !== null && lay[o] !== wanted) continue;
    const x = Math.round(ax * xy[2 * o] + bx), y = Math.round(ay * xy[2 * o + 1] + by);
    if (!(x > -size && x < W + size && y > -size && y < H + size)) continue; // also skips NaN
    stamp(px, x, y, colours[cs[o]], offs, W, H);
  }
}

/**
 * Highlighted rows on top: a ring in `ring` around the point's own colour.
 * @param {Uint32Array} px @param {PaintTransform} t @param {Float32Array} xy @param {Uint8Array} cs
 * @param {Uint32Array} rank row -> paint position @param {Int32Array} rows @param {number} ring
 * @param {Uint32Array} palette @param {number} size
 */
export function paintRings(px, { ax, bx, ay, by, W, H }, xy, cs, rank, rows, ring, palette, size) {
  const outer = stampOffsets(size + 4), inner = stampOffsets(size + 1);
  for (const row of rows) {
    const o = rank[row];
    const x = Math.round(ax * xy[2 * o] + bx), y = Math.round(ay * xy[2 * o + 1] + by);
    if (!(x > -size - 4 && x < W + size + 4 && y > -size - 4 && y < H + size + 4)) continue;
    stamp(px, x, y, ring, outer, W, H);
    stamp(px, x, y, palette[cs[o]], inner, W, H);
  }
}

/**
 * The overlay in css px: a ring around the hovered point, then the lasso or box being drawn.
 * @param {CanvasRenderingContext2D} octx @param {number} dpr @param {number} cssW @param {number} cssH
 * @param {string} accent @param {{x: number, y: number, r: number} | null} ringAt
 * @param {number[][] | null} path @param {boolean} closed
 */
export function paintOverlay(octx, dpr, cssW, cssH, accent, ringAt, path, closed) {
  octx.setTransform(dpr, 0, 0, dpr, 0, 0);
  octx.clearRect(0, 0, cssW, cssH);
  if (ringAt) {
    octx.beginPath();
    octx.arc(ringAt.x, ringAt.y, ringAt.r, 0, 2 * Math.PI);
    octx.lineWidth = 2;
    octx.strokeStyle = accent;
    octx.stroke();
  }
  if (path && path.length >= 2) {
    octx.beginPath();
    octx.moveTo(path[0][0], path[0][1]);
    for (const [x, y] of path.slice(1)) octx.lineTo(x, y);
    if (closed) octx.closePath();
    octx.lineWidth = 1.5;
    octx.setLineDash([5, 4]);
    octx.strokeStyle = accent;
    octx.stroke();
    octx.setLineDash([]);
  }
}

/**
 * Packed colours of the 256 codes (a code without a colour gets `fallback`): in front, faded (outside
 * the selection) and faint (outside the filter) over the background.
 * @param {string[]} paletteCss @param {string} fallback @param {number[]} bgRGBA
 */
export function colourTables(paletteCss, fallback, bgRGBA) {
  const palette = new Uint32Array(256), faded = new Uint32Array(256), faint = new Uint32Array(256);
  for (let c = 0; c < 256; c++) {
    const rgb = cssRGBA(paletteCss[c] || fallback);
    palette[c] = pack(rgb[0], rgb[1], rgb[2]);
    faded[c] = mix(rgb, bgRGBA, 0.22);
    faint[c] = mix(rgb, bgRGBA, 0.07);
  }
  return { palette, faded, faint };
}

/**
 * FNV-1a over every point's colour: changes whenever what is drawn changes colour.
 * @param {ArrayLike<number> | null} codes @param {Uint32Array} palette @param {number} n
 */
export function colourSignature(codes, palette, n) {
  let hsh = 0x811c9dc5;
  if (!codes) return "0";
  for (let i = 0; i < n; i++) {
    hsh ^= palette[codes[i]];
    hsh = Math.imul(hsh, 16777619) >>> 0;
  }
  return hsh.toString(16);
}

/**
 * Move the points from one layout to the next (ease in and out over `ms`): onStep(current) each
 * animation frame, onEnd() once at the end. Cancel with cancelAnimationFrame(handle.frame).
 * @param {Float32Array} from @param {Float32Array} to @param {number} ms
 * @param {(current: Float32Array) => void} onStep @param {() => void} onEnd
 */
export function morph(from, to, ms, onStep, onEnd) {
  const current = new Float32Array(from); // keep `from` intact while interpolating
  const t0 = performance.now();
  const handle = { frame: 0 };
  const step = () => {
    const t = Math.min(1, (performance.now() - t0) / ms);
    const e = t < 0.5 ? 2 * t * t : 1 - Math.pow(-2 * t + 2, 2) / 2;
    if (t < 1) {
      for (let i = 0; i < current.length; i++) current[i] = from[i] + (to[i] - from[i]) * e;
      onStep(current);
      handle.frame = requestAnimationFrame(step);
    } else {
      onEnd();
    }
  };
  handle.frame = requestAnimationFrame(step);
  return handle;
}

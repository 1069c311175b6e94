// @ts-check
// Painting the matrix's canvases: the marks over the cells (the picked neuron and row, the difference
// row, a linked view's neurons, the hovered cell), the neuron ids above them and the legend's ramp.
import { LUT_SIZE } from "./cells.js";

export const HEADER_H = 20;

/**
 * @typedef {{ R: number, N: number, cellW: number, rowH: number, order: Int32Array, position: Int32Array }} Grid
 *   the cells' layout: column p shows neuron order[p], neuron j sits in column position[j]
 * @typedef {{ sl: number, st: number, W: number, H: number }} Viewport the scroll offsets and visible size (css px)
 * @typedef {{ neuron: number, selRow: number, ref: number, highlighted: number[],
 *   hover: { row: number, col: number } }} Marks what is picked, compared, linked and hovered (-1: nothing)
 * @typedef {(name: string, fallback: string) => string} ThemeColour a theme colour (CSS variable)
 */

/**
 * @param {CanvasRenderingContext2D} ctx @param {Grid} grid @param {Viewport} view @param {Marks} marks
 * @param {ThemeColour} colour
 */
export function drawMarks(ctx, { R, N, cellW, rowH, position }, { sl, st, W, H }, marks, colour) {
  const accent = colour("--av-accent", "#1976d2");
  const fg = colour("--av-fg", "#111");
  const { neuron, selRow, ref, highlighted, hover } = marks;
  const colW = Math.max(cellW, 1);
  ctx.lineWidth = 1.5;
  if (neuron >= 0 && neuron < N) {
    ctx.strokeStyle = accent;
    ctx.strokeRect(position[neuron] * cellW - sl + 0.5, 0.5, colW - 1 + 1, Math.min(H, R * rowH - st) - 1);
  }
  if (selRow >= 0) {
    ctx.strokeStyle = accent;
    ctx.strokeRect(0.5, selRow * rowH - st + 0.5, Math.min(W, N * cellW - sl) - 1, rowH - 1);
  }
  if (ref >= 0) {
    ctx.setLineDash([3, 3]);
    ctx.strokeStyle = fg;
    ctx.strokeRect(0.5, ref * rowH - st + 0.5, Math.min(W, N * cellW - sl) - 1, rowH - 1);
    ctx.setLineDash([]);
  }
  if (cellW >= 2) {
    ctx.setLineDash([2, 2]);
    ctx.strokeStyle = colour("--av-warn", "#e65100");
    for (const j of highlighted) ctx.strokeRect(position[j] * cellW - sl + 0.5, 0.5, colW - 1,
      Math.min(H, R * rowH - st) - 1);
    ctx.setLineDash([]);
  }
  if (hover.row >= 0 && hover.col >= 0) {
    ctx.lineWidth = 1;
    ctx.strokeStyle = fg;
    ctx.strokeRect(hover.col * cellW - sl + 0.5, hover.row * rowH - st + 0.5, colW, rowH - 1);
  }
}

/**
 * Neuron ids above the columns, a linked view's neurons underlined, the picked one pointed at.
 * @param {CanvasRenderingContext2D} headerCtx @param {Grid} grid @param {number} sl @param {number} W
 * @param {Marks} marks @param {ThemeColour} colour
 */
export function drawHeader(headerCtx, { N, cellW, order, position }, sl, W, marks, colour) {
  const dpr = window.devicePixelRatio || 1;
  headerCtx.setTransform(dpr, 0, 0, dpr, 0, 0);
  headerCtx.clearRect(0, 0, W, HEADER_H);
  headerCtx.fillStyle = colour("--av-fg-muted", "#666");
  headerCtx.font = "9px sans-serif";
  headerCtx.textAlign = "center";
  headerCtx.textBaseline = "middle";
  if (!N) return;
  const c0 = Math.max(0, Math.floor(sl / cellW)), c1 = Math.min(N, Math.ceil((sl + W) / cellW));
  // every column's neuron id when there is room, else one id every ~60 px
  const step = cellW >= 18 ? 1 : Math.max(1, Math.ceil(60 / cellW));
  for (let p = Math.ceil(c0 / step) * step; p < c1; p += step) {
    const x = (p + 0.5) * cellW - sl;
    headerCtx.fillText(String(order[p]), x, HEADER_H / 2 + 2);
    if (step > 1) headerCtx.fillRect(x, HEADER_H - 4, 1, 4);
  }
  headerCtx.fillStyle = colour("--av-warn", "#e65100");
  for (const j of marks.highlighted) headerCtx.fillRect(position[j] * cellW - sl, HEADER_H - 3,
    Math.max(cellW, 2), 3);
  const { neuron } = marks;
  if (neuron >= 0 && neuron < N) {
    const x = (position[neuron] + 0.5) * cellW - sl;
    headerCtx.fillStyle = colour("--av-accent", "#1976d2");
    headerCtx.beginPath();
    headerCtx.moveTo(x - 5, 0);
    headerCtx.lineTo(x + 5, 0);
    headerCtx.lineTo(x, 7);
    headerCtx.fill();
  }
}

/**
 * The colour scale's lookup table as the legend's ramp.
 * @param {HTMLCanvasElement} legendCanvas @param {Uint8ClampedArray} lut
 */
export function paintRamp(legendCanvas, lut) {
  const lctx = legendCanvas.getContext("2d");
  const w = legendCanvas.width;
  const img = lctx.createImageData(w, legendCanvas.height);
  for (let x = 0; x < w; x++) {
    const i = Math.round((x / (w - 1)) * (LUT_SIZE - 1));
    for (let y = 0; y < legendCanvas.height; y++) {
      const d = (y * w + x) * 4;
      for (let c = 0; c < 3; c++) img.data[d + c] = lut[i * 4 + c];
      img.data[d + 3] = 255;
    }
  }
  lctx.putImageData(img, 0, 0);
}

// Small SVG chart pieces shared by the evaluation and runs panels: a frame with linear axes,
// polylines from typed arrays, and a horizontal drag on a chart (threshold lines, step brushes).
import { svg } from "../common/dom.js";
import { niceTicks } from "../common/axes.js";
import { tickFormat } from "../common/format.js";

export const MARGIN = { left: 38, right: 8, top: 6, bottom: 28 };

/** An SVG of width x height with axes over [x0, x1] x [y0, y1]; returns {root, x(v), y(v), invertX(px), plot}. */
export function frame(width, height, [x0, x1], [y0, y1], xLabel = "", yLabel = "") {
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  const L = MARGIN.left, R = width - MARGIN.right, T = MARGIN.top, B = height - MARGIN.bottom;
  const sx = (R - L) / ((x1 - x0) || 1), sy = (B - T) / ((y1 - y0) || 1);
  const x = (v) => L + (v - x0) * sx;
  const y = (v) => B - (v - y0) * sy;
  root.appendChild(svg("rect", { x: L, y: T, width: R - L, height: B - T, fill: "none", class: "av-axis" }));
  const xTicks = niceTicks(x0, x1, 5), xLabelOf = tickFormat(xTicks);
  for (const t of xTicks) {
    const tx = svg("text", { x: x(t), y: B + 11, "text-anchor": "middle" });
    tx.textContent = xLabelOf(t);
    root.appendChild(tx);
  }
  const yTicks = niceTicks(y0, y1, 4), yLabelOf = tickFormat(yTicks);
  for (const t of yTicks) {
    const ty = svg("text", { x: L - 3, y: y(t) + 3, "text-anchor": "end" });
    ty.textContent = yLabelOf(t);
    root.appendChild(ty);
  }
  if (xLabel) {
    const t = svg("text", { x: (L + R) / 2, y: height - 3, "text-anchor": "middle" });
    t.textContent = xLabel;
    root.appendChild(t);
  }
  if (yLabel) {
    const t = svg("text", { x: 10, y: (T + B) / 2, "text-anchor": "middle",
      transform: `rotate(-90 10 ${(T + B) / 2})` });
    t.textContent = yLabel;
    root.appendChild(t);
  }
  const plot = svg("g");
  root.appendChild(plot);
  return { root, plot, x, y, left: L, right: R, top: T, bottom: B, invertX: (px) => x0 + (px - L) / sx };
}

/** A polyline through (xs[i], ys[i]) for i in [from, to); non-finite points break the line. */
export function line(f, xs, ys, from, to, attrs) {
  let d = "";
  let pen = false;
  for (let i = from; i < to; i++) {
    const a = xs[i], b = ys[i];
    if (!Number.isFinite(a) || !Number.isFinite(b)) { pen = false; continue; }
    d += `${pen ? "L" : "M"}${f.x(a).toFixed(1)},${f.y(b).toFixed(1)}`;
    pen = true;
  }
  const path = svg("path", { d, fill: "none", ...attrs });
  f.plot.appendChild(path);
  return path;
}

/**
 * Horizontal drags on `target` in data units: onMove(lo, hi, start) while dragging, onEnd(lo, hi, moved).
 * @param {HTMLElement} target @param {any} f
 * @param {{ onStart?: (v: number, e: PointerEvent) => boolean, onMove: Function, onEnd: Function }} handlers
 */
export function horizontalDrag(target, f, { onStart = () => true, onMove, onEnd }) {
  let start = null;
  const at = (e) => {
    const box = target.getBoundingClientRect();
    return f.invertX((e.clientX - box.left) * (Number(target.getAttribute("width")) / box.width || 1));
  };
  target.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    const v = at(e);
    if (!onStart(v, e)) return;
    start = { v, moved: false };
    target.setPointerCapture(e.pointerId);
    e.preventDefault();
  });
  target.addEventListener("pointermove", (e) => {
    if (!start) return;
    const v = at(e);
    start.moved = start.moved || Math.abs(f.x(v) - f.x(start.v)) > 2;
    onMove(Math.min(start.v, v), Math.max(start.v, v), start.v, v);
  });
  const end = (e) => {
    if (!start) return;
    const v = at(e), s = start;
    start = null;
    if (target.hasPointerCapture(e.pointerId)) target.releasePointerCapture(e.pointerId);
    onEnd(Math.min(s.v, v), Math.max(s.v, v), s.moved, s.v, v);
  };
  target.addEventListener("pointerup", end);
  target.addEventListener("pointercancel", end);
}

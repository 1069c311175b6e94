// @ts-check
// Checkpoint frames (activis/widgets/checkpoint_frames.py): a view's data at every checkpoint of a run,
// sent once in the background as one binary array (checkpoints first), so that a move of the timeline
// redraws the view in the page at once. The kernel's own update follows; a view recognises it as a frame
// (the one it already drew, or an earlier one while playing ahead of the kernel) and does not draw again.

/**
 * @typedef {{ data: import("./arrays.js").Typed, shape: number[] }} Decoded
 */

/**
 * The frame of `step` in a (checkpoints, ...) array: a view into it, or null when not held.
 * @param {Decoded | null} frames
 * @param {number[]} steps the checkpoints, in the frames' order
 * @param {number} step
 */
export function frameAt(frames, steps, step) {
  const i = steps.indexOf(step);
  if (!frames || i < 0 || frames.shape[0] !== steps.length) return null;
  const size = frames.data.length / steps.length;
  return frames.data.subarray(i * size, (i + 1) * size);
}

/**
 * Equal lengths and values, NaN equal to NaN, within float32 rounding of the largest magnitude (the kernel's
 * aggregates and the frames' sums add in different orders; positions and codes compare exactly).
 * @param {ArrayLike<number> | null} a
 * @param {ArrayLike<number> | null} b
 */
export function sameValues(a, b) {
  if (!a || !b || a.length !== b.length) return false;
  let scale = 1;
  for (let i = 0; i < a.length; i++) if (Math.abs(a[i]) > scale) scale = Math.abs(a[i]);
  const tol = 1e-5 * scale;
  for (let i = 0; i < a.length; i++) {
    const x = a[i], y = b[i];
    if (Number.isNaN(x) || Number.isNaN(y)) {
      if (Number.isNaN(x) !== Number.isNaN(y)) return false;
    } else if (Math.abs(x - y) > tol) return false;
  }
  return true;
}

/**
 * The checkpoint whose frame holds `data`, or null: how a view tells the kernel's update of a move apart
 * from new data.
 * @param {Decoded | null} frames
 * @param {number[]} steps
 * @param {ArrayLike<number> | null} data
 */
export function stepHolding(frames, steps, data) {
  for (const step of steps) if (sameValues(frameAt(frames, steps, step), data)) return step;
  return null;
}

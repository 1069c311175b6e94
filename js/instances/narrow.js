// @ts-check
// The instance panel narrowed in the page to a brush, from the sample it already holds, while the kernel
// draws a new sample within the brush (activis/widgets/instance_panel.py `filter`). Only the sampled
// instances inside the brush (and the pins, shown whatever the filter) stay; the class totals over the
// brush are not known here, so the narrowed sample says it is `counting` instead of showing wrong ones.

/**
 * @param {any} s a decoded sample (instance_panel.js decodeSample)
 * @param {ArrayLike<number>} brush the brushed instances
 * @param {Set<number>} pinned
 */
export function narrowSample(s, brush, pinned) {
  const inside = new Set(Array.from(brush));
  /** @type {number[]} */
  const at = [];
  for (let i = 0; i < s.n; i++) if (inside.has(s.index[i]) || pinned.has(s.index[i])) at.push(i);
  const pick = (/** @type {any} */ arr) => (arr ? arr.constructor.from(at, (/** @type {number} */ i) => arr[i]) : null);
  /** rows of an (n, ...) array */
  const rowsOf = (/** @type {{data: any, shape: number[]} | null} */ a) => {
    if (!a) return null;
    const width = a.shape.slice(1).reduce((x, y) => x * y, 1);
    const data = new a.data.constructor(at.length * width);
    at.forEach((i, r) => data.set(a.data.subarray(i * width, (i + 1) * width), r * width));
    return { data, shape: [at.length, ...a.shape.slice(1)] };
  };
  const narrowed = {
    ...s, index: pick(s.index), label: pick(s.label), pred: pick(s.pred), confidence: pick(s.confidence),
    labelScore: pick(s.labelScore), numbers: rowsOf(s.numbers), thumbs: rowsOf(s.thumbs),
    texts: s.texts.map((/** @type {{name: string, values: string[]}} */ c) =>
      ({ ...c, values: at.map((i) => c.values[i]) })),
    candidates: brush.length, filtered: true, classTotals: new Int32Array(0), classWrong: new Int32Array(0),
    counting: true, n: at.length, position: new Map(), kept: at,
  };
  at.forEach((i, r) => narrowed.position.set(s.index[i], r));
  return narrowed;
}

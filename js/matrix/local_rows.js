// @ts-check
// A brushed row computed in the page (activis/widgets/matrix_local.py): the kernel sends the shown layer
// once (`page_activations`, in its stored dtype: float16 as its bits, widened here by table once per
// layer), and a brush draws its row at once with the saved page's code; the kernel's row follows and
// replaces it. Without the layer in the page (too large, not sent yet, or another checkpoint's: the page
// moves the checkpoint before the kernel sends that checkpoint's layer) the row waits for the kernel.
import { rowStatistics, uniqueSorted, widenHalf } from "../common/row_statistics.js";
import { formatInteger } from "../common/format.js";

export const BRUSH_KEY = "selection"; // activis/widgets/row_keys.py BRUSH

/**
 * @param {import("../common/view.js").Kit} kit the matrix's kit
 */
export function pageRows(kit) {
  const { model } = kit;
  /** @type {{ values: Float32Array, n: number, k: number, step: number } | null} */
  let layer = null;

  function load() {
    const sent = kit.array("page_activations");
    const dtype = model.get("page_dtype");
    layer = null;
    if (sent && sent.shape.length === 2) {
      const [n, k] = sent.shape;
      const values = dtype === "float16" ? widenHalf(/** @type {Uint16Array} */ (sent.data))
        : /** @type {Float32Array} */ (sent.data);
      layer = { values, n, k, step: model.get("page_step") };
    }
    // "on": rows drawn here first; "off": the layer is too large to send; "pending": not sent yet
    kit.el.dataset.pageRows = layer ? "on" : dtype ? "off" : "pending";
  }
  kit.on("page_activations page_dtype page_step", load);
  load();

  /**
   * The brushed row as the kernel will send it (its meta and the shown statistic's values), or null
   * when the page cannot compute it (no layer here, another layer's or checkpoint's, a baseline only the
   * kernel has).
   * @param {ArrayLike<number>} brush the brush clause's instances
   * @param {number} neurons the neurons of the layer drawn
   * @param {number} step the checkpoint drawn (-1 outside a run)
   */
  function brushRow(brush, neurons, step) {
    if (!layer || layer.k !== neurons || model.get("compared_to")) return null;
    if (step >= 0 && layer.step !== step) return null;
    const members = uniqueSorted(brush);
    if (members.length && members[members.length - 1] >= layer.n) return null;
    const statistic = /** @type {"mean" | "active" | "std"} */ (model.get("statistic"));
    const values = rowStatistics(layer.values, layer.k, members, model.get("threshold"), [statistic])[statistic];
    const n = members.length;
    const row = { key: BRUSH_KEY, label: `selection (${brush.length})`, kind: "indices", size: n,
      description: `${formatInteger(n)} chosen instance${n !== 1 ? "s" : ""}` };
    return values ? { row, values, members } : null;
  }

  return {
    /**
     * The matrix with the brush's row put where the kernel puts it (in place, else last; dropped when the
     * brush is cleared), or null when nothing changes here (the row waits for the kernel).
     * @param {{ raw: ArrayLike<number>, rows: any[], N: number }} matrix the values (rows x N) and rows drawn
     * @param {ArrayLike<number> | null} brush
     * @param {number} [step] the checkpoint drawn (-1, the default: outside a run)
     */
    withBrush({ raw, rows, N }, brush, step = -1) {
      const at = rows.findIndex((r) => r.key === BRUSH_KEY), R = rows.length;
      const values = Float32Array.from(raw);
      if (!brush || !brush.length) {
        if (at < 0) return null;
        values.copyWithin(at * N, (at + 1) * N);
        return { raw: values.subarray(0, (R - 1) * N), rows: rows.filter((_, r) => r !== at), members: null };
      }
      const computed = brushRow(brush, N, step);
      if (!computed) return null;
      const grown = at < 0 ? new Float32Array((R + 1) * N) : values;
      if (at < 0) grown.set(values);
      grown.set(computed.values, (at < 0 ? R : at) * N);
      const next = at < 0 ? [...rows, computed.row] : rows.map((row, r) => (r === at ? computed.row : row));
      return { raw: grown, rows: next, members: computed.members };
    },
  };
}

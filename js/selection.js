// @ts-check
// The shared Selection's own view: a legend of every mark the linked views draw (the subset, a brush
// or filter, the pins, the hover, the colouring), each with the way it is drawn and a button that
// clears it, and one Reset that clears them all. The kernel does the clearing (`Selection.clear`, or
// the explorer's `reset`, which also clears what the views drew themselves: a lasso, a confusion cell).
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";

const CSS = `
.activis-selection { display: flex; flex-wrap: nowrap; gap: 6px; align-items: center; min-height: 28px;
  overflow: hidden; padding: 2px 0; }
.activis-selection .av-sel-chips { display: flex; gap: 6px; align-items: center; overflow-x: auto; flex: 1 1 auto;
  min-width: 0; scrollbar-width: thin; }
.activis-selection .av-sel-chip { display: inline-flex; gap: 4px; align-items: center; white-space: nowrap;
  border: 1px solid var(--av-border-soft); border-radius: 10px; padding: 1px 4px 1px 8px; font-size: 12px; }
.activis-selection .av-sel-how { color: var(--av-fg-muted); font-size: 11px; }
.activis-selection .av-sel-mark { display: inline-block; width: 10px; height: 10px; border-radius: 50%; }
.activis-selection .av-sel-chip button { font: inherit; font-size: 11px; line-height: 1; border: none;
  background: none; color: var(--av-fg-muted); cursor: pointer; padding: 0 2px; }
.activis-selection .av-sel-empty { color: var(--av-fg-muted); font-size: 12px; white-space: nowrap; }
.activis-selection .av-sel-reset { font: inherit; color: var(--av-fg); background: var(--av-bg-alt); flex: 0 0 auto;
  border: 1px solid var(--av-border); border-radius: 3px; padding: 2px 10px; cursor: pointer; }
.activis-selection .av-sel-reset:disabled { opacity: 0.5; cursor: default; }
`;

/** What a brush means, by the view that wrote it. */
const BRUSH_NAMES = { projection: "lasso in the projection", evaluation: "confusion cell or score range",
  matrix: "matrix row", instances: "instance panel", misclassification: "misclassification view" };

/**
 * @param {any} model
 * @returns {{mark: string, label: string, how: string, swatch: string}[]} the marks drawn now
 */
export function marks(model) {
  const n = (/** @type {any} */ v) => (v && v.shape ? v.shape[0] : 0);
  /** @type {{mark: string, label: string, how: string, swatch: string}[]} */
  const out = [];
  const ring = "box-shadow: inset 0 0 0 2px var(--av-fg)";
  if (model.get("subset")) {
    out.push({ mark: "subset", label: `subset ${model.get("subset")} (${n(model.get("subset_indices"))})`,
      how: "ringed", swatch: ring });
  }
  if (model.get("brush")) {
    const source = model.get("brush_source");
    out.push({ mark: "brush", label: `${BRUSH_NAMES[source] || source || "brush"} (${n(model.get("brush"))})`,
      how: "the rest faded; a matrix row", swatch: "background: var(--av-accent)" });
  }
  const pinned = model.get("pinned") || [];
  if (pinned.length) {
    const shown = pinned.slice(0, 3).map((/** @type {number} */ i) => `#${i}`).join(", ");
    out.push({ mark: "pinned", label: `pinned ${shown}${pinned.length > 3 ? ` +${pinned.length - 3}` : ""}`,
      how: "flagged; matrix rows", swatch: "background: var(--av-accent); border-radius: 0" });
  }
  if (model.get("hover") || model.get("hover_instance") >= 0) {
    const one = model.get("hover_instance");
    out.push({ mark: "hover", label: one >= 0 ? `hover #${one}` : `hover (${n(model.get("hover"))})`,
      how: "lit", swatch: ring });
  }
  if (model.get("neuron") >= 0) {
    out.push({ mark: "neuron", label: `colour: neuron ${model.get("neuron")} of ${model.get("layer")}`,
      how: "projection coloured by it", swatch: "background: linear-gradient(90deg, #fde725, #21918c, #440154)" });
  }
  if (model.get("highlight_neurons")) {
    out.push({ mark: "highlight", label: `${n(model.get("highlight_neurons"))} neurons explained`,
      how: "marked matrix columns", swatch: "background: var(--av-warn)" });
  }
  return out;
}

export default defineView({
  name: "selection",
  css: CSS,
  setup(kit) {
    const { model, el } = kit;
    const chips = h("div", { className: "av-sel-chips", role: "list", "aria-label": "what is drawn" });
    const reset = h("button", { className: "av-sel-reset", text: "Reset", title: "clear every selection: subset, "
      + "brush, filter, pins, hover, colouring" });
    el.append(chips, reset);
    const clear = (/** @type {string | null} */ mark) => model.send({ action: "reset", mark });
    kit.listen(reset, "click", () => clear(null));
    const draw = () => {
      const drawn = marks(model);
      chips.replaceChildren(...(drawn.length ? drawn.map((m) => {
        const x = h("button", { text: "×", title: `clear the ${m.mark}`, "aria-label": `clear ${m.mark}` });
        x.addEventListener("click", () => clear(m.mark));
        const swatch = h("span", { className: "av-sel-mark" });
        swatch.setAttribute("style", m.swatch);
        return h("span", { className: "av-sel-chip", role: "listitem", "data-mark": m.mark }, [
          swatch, h("span", { text: m.label }), h("span", { className: "av-sel-how", text: m.how }), x]);
      }) : [h("span", { className: "av-sel-empty", text: "Nothing selected: hover, click, lasso or pick a subset" })]));
      reset.disabled = !drawn.length;
      el.dataset.marks = drawn.map((m) => m.mark).join(" ");
      el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    };
    kit.on("layer neuron brush brush_source hover hover_instance pinned subset subset_indices highlight_neurons",
      draw);
    draw();
  },
});

// @ts-check
// The shared Selection is a model without a view of its own; views reach it through
// js/common/selection.js. Displaying it shows a one-line summary (useful when debugging).
import { defineView } from "./common/view.js";

export default defineView({
  name: "selection",
  setup(kit) {
    const { model, el } = kit;
    const draw = () => {
      const n = (/** @type {any} */ v) => (v && v.shape ? v.shape[0] : 0);
      el.textContent = `layer ${model.get("layer") || "—"} · neuron ${model.get("neuron")} · ` +
        `brushed ${n(model.get("brush"))} (${model.get("brush_source") || "—"}) · ` +
        `pinned ${model.get("pinned").length} · subset ${model.get("subset") || "—"}`;
    };
    kit.on("layer neuron brush brush_source pinned subset", draw);
    draw();
  },
});

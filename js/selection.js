// The shared Selection is a model without a view of its own; views reach it through
// js/common/selection.js. Displaying it shows a one-line summary (useful when debugging).
function render({ model, el }) {
  const draw = () => {
    const n = (v) => (v && v.shape ? v.shape[0] : 0);
    el.textContent = `layer ${model.get("layer") || "—"} · neuron ${model.get("neuron")} · ` +
      `brushed ${n(model.get("brush"))} · pinned ${model.get("pinned").length} · subset ${model.get("subset") || "—"}`;
  };
  model.on("change", draw);
  draw();
}

export default { render };

// @ts-check
// An explorer over a run in a saved page: what activis/widgets/explorer_timeline.py does in the kernel,
// done here over each checkpoint's embedded data (activis/export/checkpoints.py). The timeline's slider,
// a step range brushed in the cockpit and a CKA cell move the checkpoint; a move swaps the activations,
// aligned layouts, predictions, colourings, tooltips and subsets the explorer's links read, then redraws.
// The data map's box and the per-instance ranges are the shared brush. What needs Python is disabled, with a note.
import { decodeArray } from "../common/arrays.js";
import { clausesFor } from "../common/selection.js";

/**
 * @param {import("./runtime.js").StaticManager} manager
 * @param {any} node the explorer's layout node; node.data.checkpoints from checkpoints.py
 * @param {DataView[]} buffers
 * @param {{ reload: (method: string) => void }} links what coordinateExplorer returned
 * @param {HTMLElement} root the explorer's drawn element
 */
export function coordinateCheckpoints(manager, node, buffers, links, root) {
  const data = node.data, run = data.checkpoints;
  const model = (/** @type {string} */ role) => manager.models.get(node.views[role]);
  const timeline = model("timeline"), cockpit = model("cockpit"), cka = model("cka"), dataMap = model("data_map");
  const perSample = model("per_sample");
  const projection = model("projection");
  const sel = manager.models.get(node.selection);
  if (!timeline || !sel) return;
  const steps = /** @type {number[]} */ (run.steps);
  // the latest checkpoint's fields, which a move starts from (a step names only the tooltips it changes,
  // and only the layers whose aligned layouts were computed have positions of their own)
  const base = {
    layers: new Map(data.layers.map((/** @type {any} */ l) => [l.name, { ...l }])),
    instances: { ...data.instances }, hover: data.hover.values.slice(),
  };

  function moveTo(/** @type {number} */ step) {
    const at = run.at[steps.indexOf(step)];
    if (!at) return;
    let aligned = false;
    for (const layer of data.layers) {
      const own = at.layers[layer.name], first = base.layers.get(layer.name);
      layer.activations = own ? own.activations : first.activations;
      layer.dtype = own ? own.dtype : first.dtype;
      layer.positions = own && own.positions !== null ? own.positions : first.positions;
      if (own && own.positions !== null && layer.name === sel.get("layer")) aligned = true;
    }
    Object.assign(data.instances, base.instances, at.instances);
    data.hover.values = base.hover.map((values, j) => at.hover[String(j)] || values);
    for (const [option, colouring] of Object.entries(at.colourings)) {
      const raw = buffers[/** @type {any} */ (colouring).codes];
      const codes = new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
      data.colourings[option] = { ...colouring, codes };
    }
    for (const [name, indices] of Object.entries(at.subsets)) {
      if (data.subsets[name]) data.subsets[name].indices = indices;
    }
    links.reload(aligned ? `aligned · step ${step}` : projection?.get("method") || "");
    if (timeline.get("step") !== step) timeline.set("step", step);
    if (cockpit) cockpit.set("marked_step", step);
    if (cka) cka.set("marked_step", step);
    if (perSample && at.per_sample) {  // the per-instance instruments at this checkpoint
      const values = { dtype: "float32", shape: at.per_sample.shape, buffer: buffers[at.per_sample.values] };
      perSample.setMany({ values, step });
    }
    root.dataset.checkpoint = String(step);
  }

  timeline.on("change:step", () => moveTo(timeline.get("step")));
  if (projection) {  // another layer shown at this checkpoint: its aligned layout, when it has one, says so
    projection.on("change:layer", () => {
      const step = timeline.get("step"), own = run.at[steps.indexOf(step)]?.layers[projection.get("layer")];
      if (own && own.positions !== null) projection.set("shown_method", `aligned · step ${step}`);
    });
  }
  if (cockpit) {
    cockpit.on("change:step_range", () => {  // a brushed step range shows the last checkpoint in it
      const range = cockpit.get("step_range") || [];
      if (range.length !== 2) return;
      const inside = steps.filter((s) => s >= range[0] && s <= range[1]);
      if (inside.length) timeline.set("step", inside[inside.length - 1]);
    });
  }
  if (cka) {
    cka.on("change:picked", () => {
      const picked = cka.get("picked");
      if (!picked || !picked.layer) return;
      sel.set("layer", picked.layer);
      if (steps.includes(picked.step)) timeline.set("step", picked.step);
    });
    sel.on("change:layer", () => cka.set("marked_layer", sel.get("layer")));
  }
  // a box in the data map or a range across a per-instance histogram is the shared brush, as in the notebook
  /** @type {[any, string][]} */
  const brushing = [[dataMap, "data_map"], [perSample, "per_sample"]];
  for (const [view, source] of brushing) {
    if (!view) continue;
    const clauses = clausesFor(sel, source);
    view.on("change:brushed", () => {
      const brushed = decodeArray(view.get("brushed"))?.data;
      sel.setMany(clauses.write("brush", brushed && brushed.length ? brushed : null));
    });
  }
  disableKernelControls(root);
  moveTo(run.shown);
}

/** Buttons of the run's views that ask Python (add the flipped subset, a data-map subset): disabled, with a note. */
function disableKernelControls(/** @type {HTMLElement} */ root) {
  const buttons = root.querySelectorAll(".activis-timeline [data-role=flipped], .activis-data_map button[data-subset]");
  for (const button of Array.from(buttons)) {
    const b = /** @type {HTMLButtonElement} */ (button);
    b.disabled = true;
    b.title = "Adding a subset needs Python: open the notebook to do it. The page shows what was saved.";
    b.classList.add("activis-page-kernel");
  }
}

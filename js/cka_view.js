// @ts-check
// CKAView: layers x checkpoints heatmap of each layer's CKA with itself at the final checkpoint (which layers
// settle first). A click on a cell sets `picked` = {layer, step}; the explorer's layer and checkpoint are
// outlined (marked_layer, marked_step). Each cell is a button-like div with data-layer, data-step, data-value.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { formatNumber } from "./common/format.js";

const CSS = `
.activis-cka { font-size: 11px; overflow: auto; }
.activis-cka .av-cka-grid { display: grid; gap: 1px; align-items: center; }
.activis-cka .av-cka-cell { height: 22px; cursor: pointer; border: 2px solid transparent; box-sizing: border-box;
  display: flex; align-items: center; justify-content: center; font-size: 9px; }
.activis-cka .av-cka-cell[data-marked="true"] { border-color: var(--av-accent); }
.activis-cka .av-cka-head { color: var(--av-fg-muted); text-align: center; white-space: nowrap; overflow: hidden; }
.activis-cka .av-cka-layer { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; padding-right: 4px; }
.activis-cka .av-cka-layer[data-marked="true"] { color: var(--av-accent); font-weight: 600; }
`;

export default defineView({ name: "cka", css: CSS, arrays: ["values"], setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const title = h("div", { text: "CKA with the final checkpoint (layer × step)", style: { fontWeight: "600" } });
  const grid = h("div", { className: "av-cka-grid" });
  el.append(title, grid);

  const draw = kit.frame(() => {
    const layers = /** @type {string[]} */ (model.get("layers"));
    const steps = /** @type {number[]} */ (model.get("steps"));
    const values = kit.array("values")?.data;
    const seq = kit.palette().sequential || ["#f7fbff", "#08306b"];
    grid.style.gridTemplateColumns = `minmax(60px, 120px) repeat(${steps.length}, minmax(24px, 1fr))`;
    const cells = [h("span")];
    for (const s of steps) cells.push(h("span", { className: "av-cka-head", text: String(s) }));
    layers.forEach((layer, li) => {
      cells.push(h("span", { className: "av-cka-layer", text: layer, title: layer,
        "data-marked": String(layer === model.get("marked_layer")) }));
      steps.forEach((step, si) => {
        const v = values ? values[li * steps.length + si] : NaN;
        const k = Math.max(0, Math.min(seq.length - 1, Math.round((v === v ? v : 0) * (seq.length - 1))));
        cells.push(h("div", {
          className: "av-cka-cell", "data-layer": layer, "data-step": String(step), "data-value": v.toFixed(3),
          "data-marked": String(step === model.get("marked_step") && layer === model.get("marked_layer")),
          title: `${layer} · step ${step}: CKA ${formatNumber(v)}`, text: v.toFixed(2),
          style: { background: seq[k], color: k < seq.length / 2 ? "#fff" : "#000" },
          onclick: () => { model.set("picked", { layer, step }); model.save_changes(); },
        }));
      });
    });
    grid.replaceChildren(...cells);
    el.dataset.layers = String(layers.length);
    el.dataset.steps = String(steps.length);
    el.dataset.ready = "1";
  });
  kit.on("layers steps values marked_step marked_layer colours", draw);
  draw();
}

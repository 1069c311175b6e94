// @ts-check
// SliceSuggestions: the slices where the model fails (activis.discover_slices, run in a kernel thread),
// ranked, with a progress bar while the search runs and one click to adopt a slice as a subset.
// Every description comes from data (column names, values): it is set as text, never as markup.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { formatNumber } from "./common/format.js";

/**
 * @typedef {{ name: string, kind: string, description: string, size: number, fraction: number, metric: string,
 *   value: number, overall: number, lift: number, p_adjusted: number, significant: boolean }} Suggestion
 */

const CSS = `
.activis-slices .activis-slices-bar { height: 6px; background: var(--av-bg-alt); border-radius: 3px; overflow: hidden; }
.activis-slices .activis-slices-fill { height: 100%; width: 0; background: var(--av-accent); transition: width 0.15s; }
.activis-slices { display: flex; flex-direction: column; overflow: hidden; }
.activis-slices > * { flex: 0 0 auto; }
.activis-slices .activis-slices-list { overflow-y: auto; border-top: 1px solid var(--av-border-soft);
  flex: 1 1 auto; min-height: 40px; }
/* two lines per slice: what it holds on a line of its own (the whole width: in a narrow panel the numbers
   once squeezed it to one letter per line), then its rank, kind, numbers and Adopt */
.activis-slices .activis-slice-row { display: grid; grid-template-columns: auto auto minmax(0, 1fr) auto;
  column-gap: 8px; row-gap: 1px; align-items: center; padding: 3px 4px;
  border-bottom: 1px solid var(--av-border-soft); }
.activis-slices .activis-slice-description { grid-column: 1 / -1; font-family: var(--av-code-font); font-size: 11px;
  overflow-wrap: break-word; min-width: 0; }
.activis-slices .activis-slice-numbers { color: var(--av-fg-muted); font-size: 11px; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; min-width: 0; }
.activis-slices .activis-slice-kind { font-size: 10px; color: var(--av-fg-muted);
  border: 1px solid var(--av-border-soft);
  border-radius: 3px; padding: 0 3px; }
.activis-slices .activis-slices-note { color: var(--av-fg-muted); font-size: 11px; min-height: 1.2em; }
`;

/** @param {number} p */
function formatP(p) {
  return p < 1e-4 ? p.toExponential(0) : p.toPrecision(2);
}

export default defineView({
  name: "slices",
  css: CSS,
  setup(kit) {
    const { model, el } = kit;
    const runBtn = h("button", { text: "Find slices", class: "activis-slices-run" });
    const stopBtn = h("button", { text: "Stop", class: "activis-slices-stop" });
    const scope = h("span", { className: "activis-slices-scope", style: { color: "var(--av-fg-muted)",
      fontSize: "11px" } });
    const fill = h("div", { className: "activis-slices-fill" });
    const bar = h("div", { className: "activis-slices-bar", role: "progressbar", "aria-valuemin": "0",
      "aria-valuemax": "100" }, [fill]);
    const summary = h("div", { className: "activis-slices-summary", style: { fontSize: "12px", minHeight: "1.2em" } });
    const note = h("div", { className: "activis-slices-note" });
    const list = h("div", { className: "activis-slices-list" });
    el.append(h("div", { className: "activis-toolbar" }, [runBtn, stopBtn, scope]), bar, summary, note, list);

    kit.listen(runBtn, "click", () => model.send({ action: "run" }));
    kit.listen(stopBtn, "click", () => model.send({ action: "stop" }));

    function drawState() {
      const state = model.get("state");
      const progress = Math.round(100 * (state === "running" ? model.get("progress") : state === "idle" ? 0 : 1));
      fill.style.width = `${progress}%`;
      bar.setAttribute("aria-valuenow", String(progress));
      bar.style.visibility = state === "idle" ? "hidden" : "visible";
      runBtn.disabled = state === "running";
      stopBtn.disabled = state !== "running";
      const message = model.get("message");
      note.textContent = state === "running" ? `searching: ${message}` : message;
      note.style.color = state === "failed" || message.startsWith("error") ? "var(--av-warn)" : "var(--av-fg-muted)";
      summary.textContent = state === "running" || state === "idle" ? "" : model.get("summary");
      const layer = model.get("layer");
      scope.textContent = layer ? `metadata and activations at ${layer}` : "metadata columns";
      el.dataset.state = state;
      el.dataset.progress = String(progress);
    }

    function drawList() {
      el.style.height = `${model.get("height")}px`;
      const adopted = model.get("adopted");
      /** @type {Suggestion[]} */
      const items = model.get("items");
      const rows = items.map((item, index) => {
        const adopt = h("button", { text: "Adopt", title: "add as a subset: a matrix row, a highlight in every view",
          class: "activis-slice-adopt" });
        adopt.addEventListener("click", () => model.send({ action: "adopt", index })); // goes with its row
        const numbers = `${item.size} · ${item.metric} ${formatNumber(item.value)} vs ${formatNumber(item.overall)}`
          + ` (×${item.lift.toFixed(1)}) · p=${formatP(item.p_adjusted)}`;
        const row = h("div", { className: "activis-slice-row", "data-index": String(index), "data-name": item.name,
          "data-size": String(item.size) }, [
          h("span", { text: item.description, className: "activis-slice-description" }),
          h("span", { text: String(index + 1), style: { color: "var(--av-fg-muted)", minWidth: "1.5em" } }),
          h("span", { text: item.kind === "activations" ? "activations" : "metadata",
            className: "activis-slice-kind" }),
          h("span", { text: numbers, className: "activis-slice-numbers", title: numbers }),
          adopt,
        ]);
        if (item.name === adopted) row.setAttribute("data-adopted", "true");
        return row;
      });
      list.replaceChildren(...rows);
      el.dataset.count = String(rows.length);
      el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    }

    kit.on("state progress message summary layer", drawState);
    kit.on("items adopted height", drawList);
    drawState();
    drawList();
  },
});

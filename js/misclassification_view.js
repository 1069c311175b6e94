// @ts-check
// MisclassificationView: why one instance was classified as it was, at one layer.
// A heading that says which instance, which classes and which layer; then one row per neuron (the
// highest by score) with three bars that share a zero line: score, departure and evidence. Bars
// toward the compared class take its colour, bars back toward the true class take the true class's.
// Everything arrives computed from Python (activis.analysis.explain_instance); names from data are
// set through textContent only.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";
import { formatNumber } from "./common/format.js";

/**
 * @typedef {{ index: number, layer: string, correct: boolean, confidence: number, true_class: number,
 *   true_name: string, pred_class: number, pred_name: string, compared_class: number, compared_name: string,
 *   neuron_kind: string, neurons: number, toward: number, log_likelihood_ratio: number, message: string }} Facts
 * @typedef {{ index: number, layer: string, top: number, facts: Facts | {}, status: string,
 *   selected_neuron: number, height: number }} WhyModel
 */

const CSS = `
.activis-why { display: flex; flex-direction: column; gap: 6px; overflow: hidden; }
.activis-why > * { flex: none; }
.activis-why .av-why-title { font-weight: 600; font-size: 13px; }
.activis-why .av-why-sub { color: var(--av-fg-muted); font-size: 11px; }
.activis-why .av-why-status { color: var(--av-fg-muted); font-style: italic; padding: 8px 0; }
.activis-why .av-why-status[data-error="true"] { color: var(--av-warn); font-style: normal; }
.activis-why .av-why-swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 3px 0 6px;
  vertical-align: middle; }
.activis-why .av-why-grid { display: grid; grid-template-columns: 84px repeat(3, minmax(90px, 1fr)); column-gap: 10px;
  row-gap: 2px; overflow: auto; align-content: start; flex: 1 1 auto; min-height: 0; }
.activis-why .av-why-head { font-size: 11px; color: var(--av-fg-muted); white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; border-bottom: 1px solid var(--av-border-soft); padding-bottom: 2px;
  position: sticky; top: 0; background: var(--av-bg); z-index: 1; }
.activis-why .av-why-row { display: contents; cursor: pointer; }
.activis-why .av-why-label { font-size: 11px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  padding: 0 2px;
  line-height: 16px; }
.activis-why .av-why-row:hover > *, .activis-why .av-why-row[data-selected="true"] > * { background: var(--av-bg-alt); }
.activis-why .av-why-row[data-selected="true"] .av-why-label { color: var(--av-accent); font-weight: 600; }
.activis-why .av-why-cell { position: relative; height: 16px; }
.activis-why .av-why-zero { position: absolute; left: 50%; top: 0; bottom: 0; width: 1px;
  background: var(--av-border); }
.activis-why .av-why-bar { position: absolute; top: 3px; height: 10px; border-radius: 1px; }
.activis-why .av-why-value { position: absolute; top: 0; font-size: 10px; line-height: 16px;
  color: var(--av-fg-muted); }
.activis-why .av-why-legend { display: flex; flex-wrap: wrap; gap: 4px 10px; font-size: 11px;
  color: var(--av-fg-muted); }
`;

const MEASURES = [
  { key: "scores", name: "score", title: "score: departure × separation, the ranking" },
  { key: "departures", name: "departure (σ)",
    title: "departure: standard deviations moved from the true class's mean toward the compared class's" },
  { key: "evidences", name: "evidence", title: "evidence: the neuron's term in log p(x | compared) − log p(x | true)" },
];

/** @param {any} facts @returns {facts is Facts} */
const explained = (facts) => Boolean(facts) && facts.index !== undefined;

export default defineView({
  name: "why",
  css: CSS,
  arrays: ["neuron_ids", ...MEASURES.map((m) => m.key)],
  source: "misclassification",
  setup(kit) {
    const { model, el } = kit;
    const title = h("div", { className: "av-why-title" });
    const sub = h("div", { className: "av-why-sub" });
    const heading = h("div", { className: "av-why-heading" }, [title, sub]);
    const status = h("div", { className: "av-why-status" });
    const grid = h("div", { className: "av-why-grid", role: "table" });
    const legend = h("div", { className: "av-why-legend" });
    el.append(heading, status, grid, legend);

    /** @type {import("./common/selection.js").SharedSelection | null} */
    let shared = null;
    /** @type {{ row: HTMLElement, neuron: number }[]} */
    let rowEls = [];

    const save = (/** @type {Record<string, any>} */ changes) => {
      for (const [k, v] of Object.entries(changes)) model.set(k, v);
      model.save_changes();
    };
    const swatch = (/** @type {number} */ k) => {
      const s = h("span", { className: "av-why-swatch" });
      s.style.background = kit.classColour(k);
      return s;
    };
    /** A run of text and class swatches: strings become text nodes, numbers a swatch of that class. */
    const line = (/** @type {HTMLElement} */ node, /** @type {(string | number)[]} */ parts) => {
      node.replaceChildren(...parts.map((p) => (typeof p === "number" ? swatch(p) : document.createTextNode(p))));
    };

    function drawHeading(/** @type {any} */ facts) {
      if (!explained(facts)) {
        title.textContent = "Why was it misclassified?";
        sub.textContent = `layer ${model.get("layer")}`;
        return;
      }
      const verdict = facts.correct ? "correctly classified as" : "predicted";
      line(title, [`Instance #${facts.index} · true `, facts.true_class, `${facts.true_name} · ${verdict} `,
        facts.pred_class, `${facts.pred_name} (confidence ${formatNumber(facts.confidence)}) · layer ${facts.layer}`]);
      const kind = facts.neuron_kind || "unit";
      const ids = kit.array("neuron_ids");
      const shown = ids ? ids.data.length : 0;
      const against = facts.correct ? `the runner-up ${facts.compared_name}` : facts.compared_name;
      sub.textContent = `The ${shown} of ${facts.neurons} ${kind}s that moved it most from the mean of ` +
        `${facts.true_name} toward ${against} (${facts.toward} of ${facts.neurons} moved toward it; ` +
        `log-likelihood ratio ${formatNumber(facts.log_likelihood_ratio)}).`;
    }

    function drawLegend(/** @type {any} */ facts) {
      if (!explained(facts)) { legend.replaceChildren(); return; }
      const towardCompared = h("span");
      line(towardCompared, [facts.compared_class, `toward ${facts.compared_name}`]);
      const towardTrue = h("span");
      line(towardTrue, [facts.true_class, `back toward ${facts.true_name} (true class)`]);
      legend.replaceChildren(towardCompared, towardTrue);
    }

    /** One measure's bar from the zero line: right and in the compared class's colour when positive. */
    function bar(/** @type {number} */ value, /** @type {number} */ extent, /** @type {Facts} */ facts) {
      const cell = h("div", { className: "av-why-cell", role: "cell" });
      cell.appendChild(h("div", { className: "av-why-zero" }));
      if (value === value && extent > 0) {
        const half = Math.min(1, Math.abs(value) / extent) * 50;
        const b = h("div", { className: "av-why-bar" });
        b.style.width = `${half.toFixed(2)}%`;
        b.style.left = value >= 0 ? "50%" : `${(50 - half).toFixed(2)}%`;
        b.style.background = kit.classColour(value >= 0 ? facts.compared_class : facts.true_class);
        cell.appendChild(b);
      }
      const text = h("span", { className: "av-why-value" });
      text.textContent = formatNumber(value);
      // the number sits on the side away from the bar
      if (value >= 0) text.style.right = "52%"; else text.style.left = "52%";
      cell.appendChild(text);
      return cell;
    }

    function drawBars(/** @type {any} */ facts) {
      const ids = kit.array("neuron_ids");
      const columns = MEASURES.map((m) => kit.array(m.key));
      rowEls = [];
      if (!explained(facts) || !ids || columns.some((c) => !c)) {
        grid.replaceChildren();
        return 0;
      }
      const values = columns.map((c) => /** @type {import("./common/arrays.js").Decoded} */ (c).data);
      const kind = facts.neuron_kind || "unit";
      const heads = [h("div", { className: "av-why-head", role: "columnheader", text: kind })];
      for (const m of MEASURES) heads.push(h("div", { className: "av-why-head", role: "columnheader",
        text: m.name, title: m.title }));
      const peak = (v) => Array.prototype.reduce.call(v, (a, x) => (x === x ? Math.max(a, Math.abs(x)) : a), 0);
      const extents = values.map(peak);
      const rows = [];
      for (let i = 0; i < ids.data.length; i++) {
        const neuron = ids.data[i];
        const own = values.map((v) => v[i]);
        const label = h("div", { className: "av-why-label", role: "rowheader" });
        label.textContent = `${kind} ${neuron}`;
        const row = h("div", { className: "av-why-row", role: "row", "data-neuron": String(neuron) },
          [label, ...own.map((v, c) => bar(v, extents[c], facts))]);
        row.title = `${kind} ${neuron}: score ${formatNumber(own[0])}, departure ${formatNumber(own[1])} σ, ` +
          `evidence ${formatNumber(own[2])} (click to pick it in every view)`;
        row.addEventListener("click", () => pick(neuron)); // goes with the row at the next draw
        rows.push(row);
        rowEls.push({ row, neuron });
      }
      grid.replaceChildren(...heads, ...rows);
      markSelected();
      return rows.length;
    }

    function pick(/** @type {number} */ neuron) {
      const next = model.get("selected_neuron") === neuron ? -1 : neuron;
      save({ selected_neuron: next });
      if (shared && shared.get("neuron") !== next) shared.set({ neuron: next });
    }

    function markSelected() {
      const selected = model.get("selected_neuron");
      for (const { row, neuron } of rowEls) row.dataset.selected = String(neuron === selected);
    }

    function draw() {
      const facts = model.get("facts");
      const message = model.get("status");
      status.textContent = message;
      status.style.display = message ? "" : "none";
      status.dataset.error = String(Boolean(message) && model.get("index") >= 0);
      drawHeading(facts);
      const bars = drawBars(facts);
      drawLegend(facts);
      el.style.height = `${model.get("height")}px`; // the bars scroll inside it; heading and legend stay
      el.dataset.index = String(model.get("index"));
      el.dataset.layer = explained(facts) ? facts.layer : "";
      el.dataset.bars = String(bars);
      el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    }

    // one message from Python changes several traits at once: draw once, after all of them are set
    let pending = false;
    const schedule = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => { pending = false; draw(); });
    };
    kit.on("facts neuron_ids scores departures evidences status colours height", schedule);
    kit.on("selected_neuron", markSelected);
    // the shared neuron marks its bar (a neuron picked in the matrix shows here too)
    kit.selection((sel) => {
      shared = sel;
      const neuron = sel.get("neuron");
      if (typeof neuron === "number" && neuron !== model.get("selected_neuron")) save({ selected_neuron: neuron });
    });
    draw();
  },
});

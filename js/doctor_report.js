// @ts-check
// DoctorReport: the training doctor's findings, most severe first. Clicking a finding selects its node
// (selected_finding, selected_node); a node selected elsewhere (a linked GraphView) lists its findings.
// Every text here comes from the model or the data (names, messages): textContent only, never HTML.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";

const CSS = `
.activis-doctor { display: flex; flex-direction: column; }
.activis-doctor-list { overflow-y: auto; flex: 1; border: 1px solid var(--av-border-soft); }
.activis-doctor-row { padding: 6px 8px; border-bottom: 1px solid var(--av-border-soft); cursor: pointer; }
.activis-doctor-row:hover { background: var(--av-bg-alt); }
.activis-doctor-row[data-selected="true"] { box-shadow: inset 3px 0 0 var(--av-accent); background: var(--av-bg-alt); }
.activis-doctor-sev { display: inline-block; min-width: 58px; font-weight: 600; text-transform: uppercase;
  font-size: 11px; }
.activis-doctor-title { font-weight: 600; }
.activis-doctor-place { color: var(--av-fg-muted); margin-left: 6px; font-family: var(--av-code-font);
  font-size: 12px; }
.activis-doctor-line { margin: 2px 0 0 64px; }
.activis-doctor-evidence { color: var(--av-fg-muted); font-family: var(--av-code-font); font-size: 12px; }
.activis-doctor-change::before { content: "try: "; color: var(--av-fg-muted); }
.activis-doctor-symptom { color: var(--av-fg-muted); font-size: 12px; }
.activis-doctor-symptom::before { content: "symptom: "; }
.activis-doctor-skipped { color: var(--av-fg-muted); font-size: 12px; padding: 4px 0; }
`;

/**
 * One finding as a row.
 * @param {any} f the finding (see activis/widgets/doctor_report.py)
 * @param {boolean} selected
 * @param {string} colour the severity's colour from the palette
 * @param {() => void} onClick
 */
function row(f, selected, colour, onClick) {
  const head = h("div", {}, [
    h("span", { className: "activis-doctor-sev", "data-severity": f.severity, text: f.severity,
      style: { color: colour } }),
    h("span", { className: "activis-doctor-title", text: f.title }),
    h("span", { className: "activis-doctor-place", text: f.place + (f.step >= 0 ? ` · from step ${f.step}` : "") }),
  ]);
  const lines = [h("div", { className: "activis-doctor-line activis-doctor-message", text: f.message })];
  if (f.evidence) lines.push(h("div", { className: "activis-doctor-line activis-doctor-evidence", text: f.evidence }));
  if (f.change) lines.push(h("div", { className: "activis-doctor-line activis-doctor-change", text: f.change }));
  for (const s of f.symptoms || []) {
    lines.push(h("div", { className: "activis-doctor-line activis-doctor-symptom", text: s }));
  }
  const el = h("div", {
    className: "activis-doctor-row", "data-index": String(f.index), "data-severity": f.severity,
    "data-node": f.node, "data-selected": selected ? "true" : "false", onClick,
  }, [head, ...lines]);
  el.title = f.node ? `select ${f.node} in the graph` : "";
  return el;
}

export default defineView({
  name: "doctor",
  css: CSS,
  setup(kit) {
    const { model, el } = kit;
    const summary = h("span", { className: "activis-doctor-summary" });
    const filterNote = h("span", { className: "activis-doctor-filter", style: { color: "var(--av-fg-muted)" } });
    const showAll = h("button", { text: "Show all", title: "List every finding (clears the selected node)" });
    const toolbar = h("div", { className: "activis-toolbar" }, [summary, filterNote, showAll]);
    const list = h("div", { className: "activis-doctor-list" });
    const skipped = h("details", { className: "activis-doctor-skipped" });
    el.append(toolbar, list, skipped);

    const select = (/** @type {number} */ index) => {
      model.set("selected_finding", index);
      model.save_changes();
    };

    function draw() {
      el.style.height = `${model.get("height")}px`;
      /** @type {any[]} */
      const findings = model.get("findings") || [];
      const node = model.get("selected_node");
      const chosen = model.get("selected_finding");
      const atNode = node ? findings.filter((f) => (f.keys || []).includes(node)) : [];
      const shown = atNode.length ? atNode : findings;
      const colours = kit.palette().severity || {};
      summary.textContent = model.get("summary");
      filterNote.textContent = node ? (atNode.length ? ` · ${atNode.length} at ${node}` : ` · none at ${node}`) : "";
      showAll.style.display = node ? "" : "none";
      list.replaceChildren(...shown.map((f) => row(f, f.index === chosen || atNode.includes(f),
        colours[f.severity] || "var(--av-fg)", () => select(f.index))));
      if (!findings.length) list.append(h("div", { className: "activis-doctor-row", text: "No findings." }));
      /** @type {{check: string, reason: string}[]} */
      const skips = model.get("skipped") || [];
      skipped.replaceChildren(h("summary", { text: `${skips.length} checks skipped or failed` }),
        ...skips.map((s) => h("div", { text: `${s.check}: ${s.reason}` })));
      skipped.style.display = skips.length ? "" : "none";
      el.dataset.shown = String(shown.length);
      el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
    }

    kit.listen(showAll, "click", () => {
      model.set("selected_node", "");
      model.set("selected_finding", -1);
      model.save_changes();
    });
    kit.on("findings skipped summary selected_node selected_finding height colours", draw);
    draw();
  },
});

// @ts-check
// SubsetPanel: list the store's subsets with their sizes; define new ones live; pick one.
// Every request goes to Python (Subsets.add checks and persists it); errors come back in `status`.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";

/**
 * @typedef {{ name: string, definition: string, size: number, fraction: number }} SubsetItem
 * @typedef {{ items: SubsetItem[], active: string, status: string, class_names: string[], columns: string[],
 *   height: number }} SubsetPanelModel
 */

const CSS = `
.activis-subsets .av-muted { color: var(--av-fg-muted); }
/* wide enough for their placeholders (they were cut: "name (optional", "… pred ==") */
.activis-subsets .activis-subset-name-input { width: 11em; flex: 0 0 auto; }
.activis-subsets .activis-subset-query { flex: 1 1 auto; min-width: 22em; }
.activis-subsets .activis-subset-hint { color: var(--av-fg-muted); font-size: 11px; padding: 2px 0; }
.activis-subsets .activis-subset-status { font-size: 12px; min-height: 1.2em; color: var(--av-fg-muted); }
.activis-subsets .activis-subset-status[data-error="true"] { color: var(--av-warn); }
/* a column of the view's height: the list takes what the form and hint leave, never more (it once ran
   under the next view when the hint wrapped) */
.activis-subsets { display: flex; flex-direction: column; overflow: hidden; }
.activis-subsets > * { flex: 0 0 auto; }
.activis-subsets .activis-subset-list { overflow-y: auto; border-top: 1px solid var(--av-border-soft);
  flex: 1 1 auto; min-height: 40px; }
.activis-subsets .activis-subset-row { display: flex; gap: 8px; align-items: center; padding: 3px 4px; cursor: pointer;
  border-bottom: 1px solid var(--av-border-soft); }
.activis-subsets .activis-subset-row[data-active="true"] { background: var(--av-bg-alt);
  outline: 1px solid var(--av-accent); }
.activis-subsets .activis-subset-name { font-weight: 600; min-width: 8em; }
.activis-subsets .activis-subset-definition { color: var(--av-fg-muted); flex: 1; font-family: var(--av-code-font);
  font-size: 11px; }
.activis-subsets .activis-subset-bar { display: inline-block; height: 6px; background: var(--av-accent); opacity: 0.6;
  margin-right: 6px; }
.activis-subsets .activis-subset-size { min-width: 4em; text-align: right; }
.activis-subsets .activis-subset-remove { padding: 0 6px; }
`;

export default defineView({ name: "subsets", css: CSS, setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const nameInput = h("input", { type: "text", placeholder: "name (optional)", "aria-label": "subset name",
    class: "activis-subset-name-input" });
  const exprInput = h("input", {
    type: "text", placeholder: "query, e.g. label == 9 and pred == 4", "aria-label": "subset query",
    class: "activis-subset-query",
  });
  const addBtn = h("button", { text: "Add", class: "activis-subset-add" });
  const form = h("div", { className: "activis-toolbar" }, [nameInput, exprInput, addBtn]);

  const trueSel = h("select", { "aria-label": "true class", class: "activis-subset-true" });
  const predSel = h("select", { "aria-label": "predicted class", class: "activis-subset-pred" });
  const pairBtn = h("button", { text: "Add true → predicted", class: "activis-subset-pair" });
  const classBtn = h("button", { text: "One per class", class: "activis-subset-classes" });
  const missBtn = h("button", { text: "Misclassified / correct", class: "activis-subset-missed" });
  const quick = h("div", { className: "activis-toolbar" }, [
    h("span", { text: "true", className: "av-muted" }), trueSel,
    h("span", { text: "predicted", className: "av-muted" }), predSel, pairBtn, classBtn, missBtn,
  ]);
  const hint = h("div", { className: "activis-subset-hint" });
  const status = h("div", { className: "activis-subset-status" });
  const list = h("div", { className: "activis-subset-list" });
  el.append(form, quick, hint, status, list);

  const send = (/** @type {object} */ content) => model.send(content);

  addBtn.addEventListener("click", () => {
    const expression = exprInput.value.trim();
    if (!expression) return;
    send({ action: "add", name: nameInput.value.trim(), expression });
  });
  exprInput.addEventListener("keydown", (ev) => { if (ev.key === "Enter") addBtn.click(); });
  pairBtn.addEventListener("click", () => {
    send({ action: "confusion", true: Number(trueSel.value), pred: Number(predSel.value) });
  });
  classBtn.addEventListener("click", () => send({ action: "by_class" }));
  missBtn.addEventListener("click", () => send({ action: "misclassified" }));

  function drawClasses() {
    const names = model.get("class_names");
    for (const sel of [trueSel, predSel]) {
      sel.replaceChildren(...names.map((n, i) => h("option", { value: String(i), text: n })));
    }
    if (names.length > 1) predSel.value = "1";
    hint.textContent = `columns: ${model.get("columns").join(", ")} · operators: == != < <= > >= and or not in`;
  }

  function drawList() {
    el.style.height = `${model.get("height")}px`;
    const active = model.get("active");
    const rows = model.get("items").map((/** @type {SubsetItem} */ item) => {
      const remove = h("button", { text: "×", title: "delete this subset", class: "activis-subset-remove" });
      remove.addEventListener("click", (ev) => { ev.stopPropagation(); send({ action: "remove", name: item.name }); });
      const bar = h("span", { className: "activis-subset-bar",
        style: { width: `${Math.max(1, Math.round(item.fraction * 60))}px` } });
      const attrs = { className: "activis-subset-row", "data-name": item.name, "data-size": String(item.size) };
      const row = h("div", attrs, [
        h("span", { text: item.name, className: "activis-subset-name" }),
        h("span", { text: item.definition, className: "activis-subset-definition" }),
        bar,
        h("span", { text: String(item.size), className: "activis-subset-size" }),
        remove,
      ]);
      if (item.name === active) row.setAttribute("data-active", "true");
      row.addEventListener("click", () => {
        model.set("active", item.name === model.get("active") ? "" : item.name);
        model.save_changes();
      });
      return row;
    });
    list.replaceChildren(...rows);
    el.dataset.count = String(rows.length);
    el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
  }

  function drawStatus() {
    const text = model.get("status");
    status.textContent = text;
    status.dataset.error = String(text.startsWith("error"));
    el.dataset.status = text;
  }

  kit.on("class_names columns", drawClasses);
  kit.on("items active height", drawList);
  kit.on("status", drawStatus);
  drawClasses();
  drawStatus();
  drawList();
}

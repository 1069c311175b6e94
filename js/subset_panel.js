// SubsetPanel: list the store's subsets with their sizes; define new ones live; pick one.
// Every request goes to Python (Subsets.add checks and persists it); errors come back in `status`.
import { applyTheme } from "./common/theme.js";
import { h } from "./common/dom.js";

function render({ model, el }) {
  applyTheme(el);
  el.classList.add("activis-subsets");

  const nameInput = h("input", { type: "text", placeholder: "name (optional)", "aria-label": "subset name", style: { width: "9em" } });
  const exprInput = h("input", {
    type: "text", placeholder: "query, e.g. label == 9 and pred == 4", "aria-label": "subset query",
    class: "activis-subset-query", style: { flex: "1", minWidth: "16em" },
  });
  const addBtn = h("button", { text: "Add", class: "activis-subset-add" });
  const form = h("div", { className: "activis-toolbar" }, [nameInput, exprInput, addBtn]);

  const trueSel = h("select", { "aria-label": "true class", class: "activis-subset-true" });
  const predSel = h("select", { "aria-label": "predicted class", class: "activis-subset-pred" });
  const pairBtn = h("button", { text: "Add true → predicted", class: "activis-subset-pair" });
  const classBtn = h("button", { text: "One per class", class: "activis-subset-classes" });
  const missBtn = h("button", { text: "Misclassified / correct", class: "activis-subset-missed" });
  const quick = h("div", { className: "activis-toolbar" }, [
    h("span", { text: "true", style: { color: "var(--av-fg-muted)" } }), trueSel,
    h("span", { text: "predicted", style: { color: "var(--av-fg-muted)" } }), predSel, pairBtn, classBtn, missBtn,
  ]);
  const hint = h("div", { className: "activis-subset-hint", style: { color: "var(--av-fg-muted)", fontSize: "11px", padding: "2px 0" } });
  const status = h("div", { className: "activis-subset-status", style: { fontSize: "12px", minHeight: "1.2em" } });
  const list = h("div", { className: "activis-subset-list", style: { overflowY: "auto", borderTop: "1px solid var(--av-border-soft)" } });
  el.append(form, quick, hint, status, list);

  function send(content) {
    model.send(content);
  }

  addBtn.addEventListener("click", () => {
    const expression = exprInput.value.trim();
    if (!expression) return;
    send({ action: "add", name: nameInput.value.trim(), expression });
  });
  exprInput.addEventListener("keydown", (ev) => { if (ev.key === "Enter") addBtn.click(); });
  pairBtn.addEventListener("click", () => send({ action: "confusion", true: Number(trueSel.value), pred: Number(predSel.value) }));
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
    list.style.maxHeight = `${Math.max(80, model.get("height") - 120)}px`;
    const active = model.get("active");
    const rows = model.get("items").map((item) => {
      const remove = h("button", { text: "×", title: "delete this subset", class: "activis-subset-remove", style: { padding: "0 6px" } });
      remove.addEventListener("click", (ev) => { ev.stopPropagation(); send({ action: "remove", name: item.name }); });
      const bar = h("span", { style: {
        display: "inline-block", height: "6px", width: `${Math.max(1, Math.round(item.fraction * 60))}px`,
        background: "var(--av-accent)", opacity: "0.6", marginRight: "6px",
      } });
      const row = h("div", {
        className: "activis-subset-row", "data-name": item.name, "data-size": String(item.size),
        style: {
          display: "flex", gap: "8px", alignItems: "center", padding: "3px 4px", cursor: "pointer",
          borderBottom: "1px solid var(--av-border-soft)",
          background: item.name === active ? "var(--av-bg-alt)" : "transparent",
          outline: item.name === active ? "1px solid var(--av-accent)" : "none",
        },
      }, [
        h("span", { text: item.name, className: "activis-subset-name", style: { fontWeight: "600", minWidth: "8em" } }),
        h("span", { text: item.definition, style: { color: "var(--av-fg-muted)", flex: "1", fontFamily: "var(--av-code-font)", fontSize: "11px" } }),
        bar,
        h("span", { text: String(item.size), className: "activis-subset-size", style: { minWidth: "4em", textAlign: "right" } }),
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
    status.style.color = text.startsWith("error") ? "var(--av-warn)" : "var(--av-fg-muted)";
    el.dataset.status = text;
  }

  model.on("change:class_names", drawClasses);
  model.on("change:columns", drawClasses);
  model.on("change:items", drawList);
  model.on("change:active", drawList);
  model.on("change:height", drawList);
  model.on("change:status", drawStatus);
  drawClasses();
  drawStatus();
  drawList();
}

export default { render };

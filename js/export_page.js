// @ts-check
// The runtime of a page written by activis.save_html: every view module bundled in, the models rebuilt
// from the embedded state, the notebook's layout drawn again, and an Explorer's links coordinated here
// (js/export/explorer.js) since there is no kernel. No request leaves the page.
import activation_matrix from "./activation_matrix.js";
import cka_view from "./cka_view.js";
import cockpit_panel from "./cockpit_panel.js";
import data_map_view from "./data_map_view.js";
import doctor_report from "./doctor_report.js";
import evaluation_panel from "./evaluation_panel.js";
import graph_view from "./graph_view.js";
import instance_panel from "./instance_panel.js";
import misclassification_view from "./misclassification_view.js";
import projection_view from "./projection_view.js";
import runs_panel from "./runs_panel.js";
import sample_quantities_view from "./sample_quantities_view.js";
import selection from "./selection.js";
import slice_suggestions from "./slice_suggestions.js";
import subset_panel from "./subset_panel.js";
import timeline_view from "./timeline_view.js";
import { coordinateCheckpoints } from "./export/checkpoints.js";
import { coordinateExplorer } from "./export/explorer.js";
import { readBuffers, StaticManager, StaticModel, withBuffers } from "./export/runtime.js";

/** @type {Record<string, {render: Function}>} */
const MODULES = {
  activation_matrix, cka_view, cockpit_panel, data_map_view, doctor_report, evaluation_panel, graph_view,
  instance_panel, misclassification_view, projection_view, runs_panel, sample_quantities_view, selection,
  slice_suggestions, subset_panel, timeline_view,
};

function h(/** @type {string} */ tag, /** @type {string} */ className, /** @type {string} */ text = "") {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

function applyStyle(/** @type {HTMLElement} */ node, /** @type {Record<string, string>} */ style) {
  for (const [key, value] of Object.entries(style || {})) node.style.setProperty(key, value);
}

/**
 * Draw one node of the notebook's layout.
 * @param {any} node
 * @param {StaticManager} manager
 * @param {DataView[]} buffers
 * @returns {HTMLElement}
 */
function build(node, manager, buffers) {
  if (node.kind === "view") {
    const el = h("div", "activis-page-view");
    applyStyle(el, node.style);
    const model = manager.models.get(node.model);
    const module = model && MODULES[model.get("__module")];
    if (!model || !module) {
      el.append(h("div", "activis-page-kernel", "(a view this page cannot draw)"));
    } else {
      module.render({ model, el });
    }
    return el;
  }
  if (node.kind === "box") {
    const el = h("div", "activis-page-box");
    el.style.flexDirection = node.direction;
    applyStyle(el, node.style);
    for (const child of node.children) el.append(build(child, manager, buffers));
    return el;
  }
  if (node.kind === "tabs" || node.kind === "stack") return buildTabs(node, manager, buffers);
  if (node.kind === "explorer") {
    const el = build(node.child, manager, buffers);
    const links = coordinateExplorer(manager, node, buffers);
    if (links && node.data.checkpoints) coordinateCheckpoints(manager, node, buffers, links, el);
    return el;
  }
  if (node.kind === "kernel") {  // a control that runs Python: shown, and disabled
    const button = /** @type {HTMLButtonElement} */ (h("button", "activis-page-kernel", node.text || ""));
    button.disabled = true;
    button.title = "This control needs the notebook's kernel.";
    applyStyle(button, node.style);
    return button;
  }
  const el = h("div", "activis-page-text", node.text || "");
  applyStyle(el, node.style);
  return el;
}

function buildTabs(/** @type {any} */ node, /** @type {StaticManager} */ manager, /** @type {DataView[]} */ buffers) {
  const el = h("div", "activis-page-tabs");
  applyStyle(el, node.style);
  const bar = h("div", "activis-page-tabbar");
  const panes = node.children.map((/** @type {any} */ child) => build(child, manager, buffers));
  const show = (/** @type {number} */ k) => {
    panes.forEach((/** @type {HTMLElement} */ pane, /** @type {number} */ i) => {
      pane.style.display = i === k ? "" : "none";
    });
    Array.from(bar.children).forEach((b, i) => b.setAttribute("aria-selected", String(i === k)));
  };
  node.titles.forEach((/** @type {string} */ title, /** @type {number} */ i) => {
    const button = h("button", "", title);
    button.addEventListener("click", () => show(i));
    bar.append(button);
  });
  if (node.kind === "tabs") el.append(bar);
  el.append(...panes);
  show(node.selected || 0);
  return el;
}

function main() {
  const root = document.getElementById("activis-page");
  const source = document.getElementById("activis-state");
  if (!root || !source) return;
  const payload = JSON.parse(source.textContent || "{}");
  const buffers = readBuffers(payload);
  const manager = new StaticManager();
  for (const [id, spec] of Object.entries(payload.models)) {
    const state = withBuffers(spec.state, buffers);
    state.__module = spec.module;
    manager.models.set(id, new StaticModel(id, state, manager));
  }
  const header = h("div", "activis-page-header");
  header.append(h("h1", "", payload.title || "activis"), h("span", "activis-page-note", payload.note || ""));
  const toast = h("div", "activis-page-toast");
  let timer = 0;
  manager.toast = (text) => {
    toast.textContent = text;
    toast.style.display = "block";
    clearTimeout(timer);
    timer = window.setTimeout(() => { toast.style.display = "none"; }, 4000);
  };
  root.append(header, build(payload.layout, manager, buffers), toast);
  // for scripts and tests that drive the page: the models, as a kernel would see them
  Object.assign(window, { activisPage: { models: manager.models } });
  root.dataset.ready = "true";
}

main();

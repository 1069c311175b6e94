// @ts-check
// GraphView: the model's computation graph as a left-to-right DAG (dagre layout, SVG drawing).
// Modules start collapsed to their top level; double-click (or the +/- badge) expands one. Markers
// (from the training doctor, say) are text badges on the nodes they name.
import dagre from "@dagrejs/dagre";
import { defineView } from "./common/view.js";
import { h, svg, makeTooltip } from "./common/dom.js";
import { formatInteger } from "./common/format.js";

/**
 * @typedef {{ severity: "error" | "warning" | "note", count: number, title: string }} Marker
 * @typedef {{ name: string, op: string, target: string, kind: string, module_path: string, inputs: string[],
 *   shape: number[] | null, dtype?: string, num_params: number, capturable?: boolean }} GraphNode
 * @typedef {{ path: string, type: string, children: string[], num_params: number }} GraphModule
 * @typedef {{ nodes: GraphNode[], modules: GraphModule[], method?: string }} Graph
 * @typedef {{ graph: Graph, selected_layer: string, expanded: string[], captured_layers: string[],
 *   markers: Record<string, Marker>, layout_ms: number, height: number }} GraphModel
 */

const SEVERITY_RANK = { note: 1, warning: 2, error: 3 };
const SEVERITY_SIGN = { note: "i", warning: "!", error: "\u2716" };

const NODE_H = 30;
const CHAR_W = 7;
const HIDDEN_OPS = new Set(["get_attr"]);

/** A node's output shape; its first size is the example's batch when the node is batch-first (capturable):
 * shown as N, since the model takes any batch (the example's size said nothing about the model). */
function shapeText(node) {
  const shape = node && node.shape;
  if (!shape) return "—";
  return node.capturable && shape.length ? `[N, ${shape.slice(1).join(", ")}]`.replace(", ]", "]") + " (N: batch)"
    : `[${shape.join(", ")}]`;
}

/** Which box a node is drawn in: the shallowest collapsed module around it, or itself.
 * A module call is a node of its own once its parent is expanded (a module called twice is two nodes). */
function displayKey(node, expanded) {
  const parts = node.module_path ? node.module_path.split(".") : [];
  const depth = node.op === "call_module" ? parts.length - 1 : parts.length;
  for (let i = 1; i <= depth; i++) {
    const prefix = parts.slice(0, i).join(".");
    if (!expanded.has(prefix)) return `module:${prefix}`;
  }
  return node.name;
}

/** The visible graph for a set of expanded modules: items, edges and cluster boxes. */
export function visibleGraph(graph, expanded) {
  const modules = new Map(graph.modules.map((m) => [m.path, m]));
  const items = new Map();
  const keyOf = new Map();
  for (const node of graph.nodes) {
    if (HIDDEN_OPS.has(node.op)) continue;
    const key = displayKey(node, expanded);
    if (key.startsWith("module:")) {
      const path = key.slice(7);
      if (!items.has(key)) items.set(key, { key, type: "module", path, module: modules.get(path), nodes: [] });
      items.get(key).nodes.push(node);
    } else {
      items.set(key, { key, type: "node", node, nodes: [node] });
    }
    keyOf.set(node.name, key);
  }
  for (const item of items.values()) {
    // a module box shows its output: the last node inside it
    if (item.type === "module") item.node = item.nodes[item.nodes.length - 1];
    const parentPath = item.type === "module" ? parentOf(item.path) : clusterOf(item.node, expanded);
    item.cluster = parentPath && expanded.has(parentPath) ? parentPath : null;
  }
  const edges = new Map();
  for (const node of graph.nodes) {
    const dst = keyOf.get(node.name);
    if (!dst) continue;
    for (const src of node.inputs) {
      const s = keyOf.get(src);
      if (s && s !== dst) edges.set(`${s}->${dst}`, [s, dst]);
    }
  }
  const clusters = [...expanded].filter((p) => modules.has(p) && isVisibleCluster(p, expanded));
  return { items, edges: [...edges.values()], clusters, modules };
}

function parentOf(path) {
  const i = path.lastIndexOf(".");
  return i < 0 ? "" : path.slice(0, i);
}

function clusterOf(node, expanded) {
  // the innermost expanded module that contains the node (call_module nodes sit in their parent)
  let path = node.op === "call_module" ? parentOf(node.module_path) : node.module_path;
  while (path && !expanded.has(path)) path = parentOf(path);
  return path || null;
}

function isVisibleCluster(path, expanded) {
  let p = parentOf(path);
  while (p) {
    if (!expanded.has(p)) return false;
    p = parentOf(p);
  }
  return true;
}

function itemLabel(item) {
  if (item.type === "module") {
    const last = item.path.split(".").pop();
    return `${last}: ${item.module ? item.module.type : "module"}`;
  }
  const n = item.node;
  if (n.op === "call_module") return `${n.target.split(".").pop()}: ${n.kind}`;
  if (n.op === "placeholder") return `input ${n.name}`;
  if (n.op === "output") return "output";
  return n.kind;
}

function itemLayer(item) {
  // what selected_layer becomes when the item is clicked
  return item.type === "module" ? item.path : item.node.name;
}

function tooltipLines(item) {
  const n = item.node;
  if (item.type === "module") {
    const m = item.module;
    return [
      `module ${item.path}`,
      `type: ${m ? m.type : "?"}`,
      `nodes inside: ${item.nodes.length}`,
      `output shape: ${shapeText(n)}`,
      `parameters: ${formatInteger(m ? m.num_params : 0)}`,
      "double-click to expand",
    ];
  }
  return [
    n.name,
    `op: ${n.op}  ${n.target}`,
    `module: ${n.module_path || "(model)"}`,
    `output shape: ${shapeText(n)}${n.dtype ? " " + n.dtype : ""}`,
    `parameters: ${formatInteger(n.num_params)}`,
  ];
}

// Dagre's compound (cluster) layout costs about 3x its flat layout; past this many boxes the
// flat layout is used and clusters are drawn as the bounding boxes of their members.
const COMPOUND_LIMIT = 150;
const CLUSTER_PAD = 10;

/** Lay out the visible graph; returns {g, clusterBoxes: Map(path -> {x, y, width, height})}. */
function layout(vis) {
  const compound = vis.items.size <= COMPOUND_LIMIT;
  const g = new dagre.graphlib.Graph({ compound, multigraph: false });
  g.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 36, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  if (compound) {
    for (const path of vis.clusters) g.setNode(`cluster:${path}`, { label: path, paddingTop: 18 });
    for (const path of vis.clusters) {
      const parent = parentOf(path);
      if (parent && vis.clusters.includes(parent)) g.setParent(`cluster:${path}`, `cluster:${parent}`);
    }
  }
  for (const item of vis.items.values()) {
    item.label = itemLabel(item);
    g.setNode(item.key, { width: Math.max(60, item.label.length * CHAR_W + 20), height: NODE_H });
    if (compound && item.cluster) g.setParent(item.key, `cluster:${item.cluster}`);
  }
  for (const [s, d] of vis.edges) g.setEdge(s, d);
  dagre.layout(g);
  const clusterBoxes = new Map();
  if (compound) {
    for (const path of vis.clusters) {
      const c = g.node(`cluster:${path}`);
      if (c) clusterBoxes.set(path, { x: c.x - c.width / 2, y: c.y - c.height / 2, width: c.width, height: c.height });
    }
    return { g, clusterBoxes };
  }
  const extents = new Map();
  for (const item of vis.items.values()) {
    const n = g.node(item.key);
    for (let path = item.cluster; path; path = parentOf(path)) {
      const depth = item.cluster.split(".").length - path.split(".").length + 1;
      const pad = CLUSTER_PAD * depth;
      const e = extents.get(path) || { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
      e.x0 = Math.min(e.x0, n.x - n.width / 2 - pad);
      e.y0 = Math.min(e.y0, n.y - n.height / 2 - pad - 8);
      e.x1 = Math.max(e.x1, n.x + n.width / 2 + pad);
      e.y1 = Math.max(e.y1, n.y + n.height / 2 + pad);
      extents.set(path, e);
    }
  }
  for (const [path, e] of extents) {
    clusterBoxes.set(path, { x: e.x0, y: e.y0, width: e.x1 - e.x0, height: e.y1 - e.y0 });
  }
  return { g, clusterBoxes };
}

/**
 * The markers an item shows: its own (node name or module path) and, for a collapsed module, those of
 * everything inside it. One badge: the worst severity, the summed count, every title.
 * @param {any} item
 * @param {Record<string, Marker>} markers
 * @returns {Marker | null}
 */
export function itemMarker(item, markers) {
  const found = [];
  const keys = new Set(item.type === "module" ? [item.path] : [item.node.name]);
  for (const n of item.nodes) {
    keys.add(n.name);
    if (n.op === "call_module") keys.add(n.target);
  }
  if (item.type === "module") {
    for (const path of Object.keys(markers)) if (path.startsWith(item.path + ".")) keys.add(path);
  }
  for (const key of keys) if (markers[key]) found.push(markers[key]);
  if (!found.length) return null;
  const worst = found.reduce((a, b) => (SEVERITY_RANK[b.severity] > SEVERITY_RANK[a.severity] ? b : a));
  return {
    severity: worst.severity,
    count: found.reduce((sum, m) => sum + (m.count || 0), 0),
    title: found.map((m) => m.title).filter(Boolean).join("\n"),
  };
}

export default defineView({
  name: "graph",
  setup(kit) {
    const { model, el } = kit;
    const toolbar = h("div", { className: "activis-toolbar" });
    const btnFit = h("button", { text: "Fit", title: "Fit the graph to the view" });
    const btnExpand = h("button", { text: "Expand all" });
    const btnCollapse = h("button", { text: "Collapse all" });
    const info = h("span", { className: "activis-graph-info", style: { color: "var(--av-fg-muted)" } });
    toolbar.append(btnFit, btnExpand, btnCollapse, info);
    const frame = h("div", {
      className: "activis-graph-frame",
      style: { position: "relative", overflow: "hidden", border: "1px solid var(--av-border-soft)", cursor: "grab" },
    });
    const root = svg("svg", { width: "100%", height: "100%", class: "activis-graph-svg" });
    const viewport = svg("g", { class: "activis-viewport" });
    const defs = svg("defs");
    const arrow = svg("marker", {
      id: `av-arrow-${model.cid}`, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "6", markerHeight: "6",
      orient: "auto-start-reverse",
    });
    arrow.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "var(--av-fg-muted)" }));
    defs.appendChild(arrow);
    root.append(defs, viewport);
    frame.appendChild(root);
    el.append(toolbar, frame);
    const tooltip = makeTooltip(el);

    let view = { x: 0, y: 0, k: 1 };
    let bounds = { width: 1, height: 1 };
    /** @type {Map<string, {grp: SVGElement, rect: SVGElement, item: any, pos: any}>} */
    const itemEls = new Map();

    function applyView() {
      viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    }

    function fit() {
      const w = frame.clientWidth || 800;
      const hgt = frame.clientHeight || model.get("height");
      const k = Math.min(1.5, w / bounds.width, hgt / bounds.height);
      view = { k, x: (w - bounds.width * k) / 2, y: (hgt - bounds.height * k) / 2 };
      applyView();
    }

    const expandedSet = () => new Set(model.get("expanded"));

    function toggleModule(/** @type {string} */ path) {
      const exp = expandedSet();
      if (exp.has(path)) {
        for (const p of [...exp]) if (p === path || p.startsWith(path + ".")) exp.delete(p);
      } else {
        exp.add(path);
      }
      model.set("expanded", [...exp]);
      model.save_changes();
    }

    let selectedHere = false; // a click in this view must not pan it; a selection from Python does

    function select(/** @type {string} */ layer) {
      selectedHere = true;
      model.set("selected_layer", layer);
      model.save_changes();
    }

    /** A text badge at the node's top right: a sign and the count, in the severity's colour. */
    function drawMarker(/** @type {SVGElement} */ grp, /** @type {Marker} */ marker, /** @type {number} */ width) {
      const colour = kit.palette().severity?.[marker.severity] || "var(--av-warn)";
      const label = `${SEVERITY_SIGN[marker.severity] || "!"} ${marker.count}`;
      const w = 10 + label.length * 6.5;
      const badge = svg("g", { class: "activis-marker", transform: `translate(${width - w + 6},-8)` });
      badge.append(svg("rect", { width: w, height: 15, rx: 7, fill: colour }));
      const text = svg("text", { x: w / 2, y: 11, "text-anchor": "middle", "font-size": "10", fill: "#fff",
        "font-weight": "600" });
      text.textContent = label;
      badge.appendChild(text);
      grp.setAttribute("data-marker-severity", marker.severity);
      grp.setAttribute("data-marker-count", String(marker.count));
      grp.appendChild(badge);
    }

    function draw() {
      const graph = model.get("graph");
      frame.style.height = `${model.get("height") - 34}px`;
      viewport.replaceChildren();
      itemEls.clear();
      if (!graph || !graph.nodes) return;
      const t0 = performance.now();
      const vis = visibleGraph(graph, expandedSet());
      const { g, clusterBoxes } = layout(vis);
      const layoutMs = performance.now() - t0;

      const clusterLayer = svg("g", { class: "activis-clusters" });
      const edgeLayer = svg("g", { class: "activis-edges" });
      const nodeLayer = svg("g", { class: "activis-nodes" });
      viewport.append(clusterLayer, edgeLayer, nodeLayer);

      for (const path of vis.clusters) {
        const c = clusterBoxes.get(path);
        if (!c) continue;
        const grp = svg("g", { class: "activis-cluster", "data-key": `cluster:${path}` });
        const rect = svg("rect", {
          x: c.x, y: c.y, width: c.width, height: c.height, rx: 6,
          fill: "var(--av-bg-alt)", "fill-opacity": "0.35", stroke: "var(--av-border)", "stroke-dasharray": "4 3",
        });
        const title = svg("text", { x: c.x + 6, y: c.y + 12, "font-size": "11", fill: "var(--av-fg-muted)" });
        const mod = vis.modules.get(path);
        title.textContent = `− ${path}${mod ? ": " + mod.type : ""}`;
        title.style.cursor = "pointer";
        title.addEventListener("click", (ev) => { ev.stopPropagation(); toggleModule(path); });
        grp.append(rect, title);
        clusterLayer.appendChild(grp);
      }

      for (const e of g.edges()) {
        const pts = g.edge(e).points;
        const d = pts.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
        edgeLayer.appendChild(svg("path", {
          d, fill: "none", stroke: "var(--av-fg-muted)", "stroke-width": "1.2",
          "marker-end": `url(#av-arrow-${model.cid})`,
        }));
      }

      const captured = new Set(model.get("captured_layers"));
      const markers = model.get("markers") || {};
      let marked = 0;
      for (const item of vis.items.values()) {
        const pos = g.node(item.key);
        const grp = svg("g", {
          class: "activis-node", "data-key": item.key, "data-type": item.type, "data-layer": itemLayer(item),
          transform: `translate(${pos.x - pos.width / 2},${pos.y - pos.height / 2})`,
        });
        const isModule = item.type === "module";
        const isCaptured = item.nodes.some((n) => captured.has(n.name)) || (isModule && captured.has(item.path));
        if (isCaptured) grp.setAttribute("data-captured", "true");
        const rect = svg("rect", {
          width: pos.width, height: pos.height, rx: isModule ? 4 : 12,
          fill: isModule ? "var(--av-bg-alt)" : "var(--av-node)",
          stroke: "var(--av-border)", "stroke-width": isModule ? "1.5" : "1",
        });
        const text = svg("text", {
          x: pos.width / 2, y: pos.height / 2 + 4, "text-anchor": "middle", "font-size": "12", fill: "var(--av-fg)",
        });
        text.textContent = item.label; // names from the model: text, never markup
        grp.append(rect, text);
        if (isModule) {
          const badge = svg("text", {
            x: 4, y: 11, "font-size": "11", fill: "var(--av-fg-muted)", class: "activis-expand",
          });
          badge.textContent = "+";
          badge.addEventListener("click", (ev) => { ev.stopPropagation(); toggleModule(item.path); });
          grp.appendChild(badge);
        }
        if (isCaptured) {
          grp.appendChild(svg("circle", {
            cx: pos.width - 6, cy: 6, r: 3.5, fill: "var(--av-accent)", class: "activis-captured-dot",
          }));
        }
        const marker = itemMarker(item, markers);
        if (marker) { drawMarker(grp, marker, pos.width); marked++; }
        grp.style.cursor = "pointer";
        grp.addEventListener("click", (ev) => { ev.stopPropagation(); select(itemLayer(item)); });
        grp.addEventListener("dblclick", (ev) => {
          ev.stopPropagation();
          if (isModule) toggleModule(item.path);
          else if (item.node.module_path && item.node.op !== "call_module") toggleModule(item.node.module_path);
        });
        grp.addEventListener("mousemove", (ev) => {
          const box = el.getBoundingClientRect();
          const lines = tooltipLines(item);
          if (marker) lines.push(...marker.title.split("\n").map((t) => `${marker.severity}: ${t}`));
          tooltip.show(lines, ev.clientX - box.left, ev.clientY - box.top);
        });
        grp.addEventListener("mouseleave", () => tooltip.hide());
        nodeLayer.appendChild(grp);
        itemEls.set(item.key, { grp, rect, item, pos });
      }
      const gg = g.graph();
      bounds = { width: gg.width || 1, height: gg.height || 1 };
      highlight();
      fit();
      el.dataset.visibleNodes = String(vis.items.size);
      el.dataset.visibleEdges = String(g.edges().length);
      el.dataset.markedNodes = String(marked);
      el.dataset.layoutMs = layoutMs.toFixed(1);
      el.dataset.rendered = String(Number(el.dataset.rendered || 0) + 1);
      info.textContent = `${vis.items.size} boxes · ${graph.nodes.length} nodes · layout ${layoutMs.toFixed(0)} ms` +
        (graph.method === "hooks" ? " · recorded with hooks (not traceable)" : "");
      model.set("layout_ms", layoutMs);
      model.save_changes();
    }

    /** Centre the view on a box, zooming in to a readable scale if needed. */
    function focusOn(/** @type {{x: number, y: number}} */ pos) {
      const w = frame.clientWidth || 800;
      const hgt = frame.clientHeight || model.get("height");
      const k = Math.max(view.k, 1);
      view = { k, x: w / 2 - pos.x * k, y: hgt / 2 - pos.y * k };
      applyView();
    }

    function onSelectedChange() {
      const hit = highlight();
      if (hit && !selectedHere) focusOn(hit.pos);
      selectedHere = false;
    }

    function highlight() {
      const layer = model.get("selected_layer");
      let found = null;
      for (const entry of itemEls.values()) {
        const { grp, rect, item } = entry;
        const hit = layer !== "" && (itemLayer(item) === layer ||
          item.nodes.some((n) => n.name === layer || (n.op === "call_module" && n.target === layer)));
        rect.setAttribute("stroke", hit ? "var(--av-accent)" : "var(--av-border)");
        rect.setAttribute("stroke-width", hit ? "3" : item.type === "module" ? "1.5" : "1");
        if (hit) {
          grp.setAttribute("data-selected", "true");
          found = entry;
        } else {
          grp.removeAttribute("data-selected");
        }
      }
      el.dataset.selected = found ? layer : "";
      return found;
    }

    // zoom and pan
    /** @type {{x: number, y: number, vx: number, vy: number} | null} */
    let drag = null;
    kit.listen(frame, "wheel", (ev) => {
      ev.preventDefault();
      const box = frame.getBoundingClientRect();
      const mx = ev.clientX - box.left, my = ev.clientY - box.top;
      const factor = Math.exp(-ev.deltaY * 0.0015);
      const k = Math.min(8, Math.max(0.05, view.k * factor));
      view = { k, x: mx - ((mx - view.x) * k) / view.k, y: my - ((my - view.y) * k) / view.k };
      applyView();
    }, { passive: false });
    kit.listen(frame, "mousedown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y };
      frame.style.cursor = "grabbing";
    });
    kit.listen(window, "mousemove", (ev) => {
      if (!drag) return;
      view = { ...view, x: drag.vx + ev.clientX - drag.x, y: drag.vy + ev.clientY - drag.y };
      applyView();
    });
    kit.listen(window, "mouseup", () => { drag = null; frame.style.cursor = "grab"; });

    btnFit.addEventListener("click", fit);
    btnExpand.addEventListener("click", () => {
      const graph = model.get("graph");
      model.set("expanded", graph.modules.filter((m) => m.path && m.children.length).map((m) => m.path));
      model.save_changes();
    });
    btnCollapse.addEventListener("click", () => { model.set("expanded", []); model.save_changes(); });

    kit.on("graph expanded height captured_layers markers colours", draw);
    kit.on("selected_layer", onSelectedChange);
    draw();
    // the first draw can happen before the element is attached (zero size): fit once it has one
    kit.frame(fit)();
  },
});

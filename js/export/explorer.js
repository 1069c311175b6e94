// @ts-check
// An Explorer's links in a saved page: what activis/widgets/explorer.py does in the kernel, done here
// over the embedded data. The views themselves are unchanged; this answers the traits they write
// (a layer, a neuron, a lasso, a hover, a pin, a subset) with the traits the kernel would send back.
import { decodeArray } from "../common/arrays.js";
import { formatInteger, formatNumber } from "../common/format.js";
import { clauseEvents, clausesFor } from "../common/selection.js";
import { continuousColouring, rowStatistics, serialised, sortNeurons, uniqueSorted, widenHalf } from "./stats.js";

const BRUSH = "selection", HOVER = "hover", SUBSET = "subset:", INSTANCE = "instance:";
const KERNEL_NOTE = "Explaining a pinned instance needs Python: the saved page shows its matrix row only.";

/**
 * @param {import("./runtime.js").StaticManager} manager
 * @param {any} node the layout node {views, selection, data}
 * @param {DataView[]} buffers
 * @returns {{ reload: (method: string) => void } | undefined} what a checkpoint move calls
 */
export function coordinateExplorer(manager, node, buffers) {
  const data = node.data;
  const model = (/** @type {string} */ role) => manager.models.get(node.views[role]);
  const sel = manager.models.get(node.selection);
  const matrix = model("matrix"), projection = model("projection"), instances = model("instances");
  const subsetPanel = model("subsets"), graph = model("graph"), why = model("why");
  if (!sel || !matrix || !projection || !instances) return;
  const n = data.n;
  const float32 = (/** @type {number} */ k) => new Float32Array(buffers[k].buffer, buffers[k].byteOffset,
    buffers[k].byteLength / 4);
  const int32 = (/** @type {number} */ k) => new Int32Array(buffers[k].buffer, buffers[k].byteOffset,
    buffers[k].byteLength / 4);
  /** @type {Map<string, any>} */
  const layers = new Map(data.layers.map((/** @type {any} */ l) => [l.name, l]));
  /** @type {Map<string, {label: string, indices: Int32Array}>} */
  const custom = new Map();
  /** @type {Map<string, Float32Array>} */
  const widened = new Map();
  /** A layer's activations as float32 (float16 layers are widened once, on first use). */
  const activations = (/** @type {any} */ layer) => {
    if (layer.dtype !== "float16") return float32(layer.activations);
    if (!widened.has(layer.name)) {
      const b = buffers[layer.activations];
      widened.set(layer.name, widenHalf(new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2)));
    }
    return /** @type {Float32Array} */ (widened.get(layer.name));
  };
  const subsetIndices = (/** @type {string} */ name) => {
    const s = data.subsets[name];
    return s ? int32(s.indices) : null;
  };

  // ---------------------------------------------------------------- the matrix
  function rowIndices(/** @type {string} */ key) {
    if (custom.has(key)) return custom.get(key)?.indices ?? null;
    if (key.startsWith(SUBSET)) return subsetIndices(key.slice(SUBSET.length));
    if (key.startsWith(INSTANCE)) {
      const i = Number(key.slice(INSTANCE.length));
      return Number.isInteger(i) && i >= 0 && i < n ? Int32Array.of(i) : null;
    }
    return null;
  }
  function rowMeta(/** @type {string} */ key, /** @type {number} */ size) {
    const mine = custom.get(key);
    if (mine) {
      const description = `${formatInteger(size)} chosen instance${size !== 1 ? "s" : ""}`;
      return { key, label: mine.label, kind: "indices", size, description };
    }
    if (key.startsWith(SUBSET)) {
      const name = key.slice(SUBSET.length);
      return { key, label: name, kind: "subset", size, description: data.subsets[name]?.description || "" };
    }
    const index = Number(key.slice(INSTANCE.length));
    return { key, label: instanceLabel(index), kind: "instance", size: 1, description: `instance ${index}` };
  }
  function instanceLabel(/** @type {number} */ i) {
    const table = data.hover;
    const field = (/** @type {string} */ title) => {
      const j = table.titles.indexOf(title);
      return j >= 0 ? table.values[j][i] : "";
    };
    const label = int32(data.instances.label)[i], pred = int32(data.instances.pred)[i];
    const mark = label === pred ? "✓" : "✗";
    return `#${i} ${mark} true ${field("true class")} → pred ${field("prediction")}`;
  }
  function refreshMatrix() {
    const layer = layers.get(matrix.get("layer"));
    if (!layer) return;
    const keys = (matrix.get("row_keys") || []).filter((/** @type {string} */ k) => rowIndices(k) !== null);
    const values = activations(layer);
    const statistic = matrix.get("statistic") || "mean";
    const out = new Float32Array(keys.length * layer.neurons);
    const rows = keys.map((/** @type {string} */ key, /** @type {number} */ r) => {
      const indices = rowIndices(key) || new Int32Array(0);
      const stats = rowStatistics(values, layer.neurons, indices, data.threshold);
      out.set(stats[statistic] || stats.mean, r * layer.neurons);
      return rowMeta(key, indices.length);
    });
    const members = keys.map((/** @type {string} */ k) => rowIndices(k) || new Int32Array(0));
    const offsets = new Int32Array(keys.length + 1);
    members.forEach((m, r) => { offsets[r + 1] = offsets[r] + m.length; });
    const flat = new Int32Array(offsets[keys.length]);
    members.forEach((m, r) => flat.set(m, offsets[r]));
    matrix.setMany({
      row_keys: keys, neuron_kind: layer.neuron_kind, rows,
      values: serialised(out, [keys.length, layer.neurons]),
      row_members: keys.length ? serialised(flat, [flat.length]) : null,
      row_offsets: keys.length ? serialised(offsets, [offsets.length]) : null,
      selected_neuron: matrix.get("selected_neuron") >= layer.neurons ? -1 : matrix.get("selected_neuron"),
    });
    refreshOrder();
  }
  function refreshOrder() {
    const keys = matrix.get("row_keys") || [];
    const decoded = decodeArray(matrix.get("values"));
    const k = decoded ? decoded.shape[1] : 0;
    const mode = matrix.get("order_mode"), by = keys.indexOf(matrix.get("sort_by_row"));
    let order = Int32Array.from({ length: k }, (_, i) => i);
    if (mode === "sort" && by >= 0 && decoded) {
      const row = decoded.data.slice(by * k, (by + 1) * k);
      const ref = keys.indexOf(matrix.get("difference_to"));
      if (ref >= 0) for (let j = 0; j < k; j++) row[j] -= decoded.data[ref * k + j];
      order = sortNeurons(row);
    }
    matrix.set("neuron_order", serialised(order, [k]));
  }
  function addRow(/** @type {string} */ key) {
    const keys = matrix.get("row_keys") || [];
    if (!keys.includes(key)) matrix.set("row_keys", [...keys, key]);
    else refreshMatrix();
  }
  function removeRow(/** @type {string} */ key) {
    const keys = matrix.get("row_keys") || [];
    if (keys.includes(key)) matrix.set("row_keys", keys.filter((/** @type {string} */ k) => k !== key));
  }
  function setCustomRow(/** @type {string} */ key, /** @type {string} */ label, /** @type {ArrayLike<number>} */ idx) {
    custom.set(key, { label, indices: uniqueSorted(idx) });
    addRow(key);
  }

  // ---------------------------------------------------------------- the projection's colours
  function recolour() {
    const by = projection.get("color_by");
    if (by === "neuron") {
      const layer = layers.get(projection.get("layer"));
      if (!layer) return;
      const neuron = projection.get("neuron");
      const values = activations(layer), column = new Float64Array(n);
      for (let i = 0; i < n; i++) column[i] = values[i * layer.neurons + neuron];
      const c = continuousColouring(column, `neuron ${neuron} of ${layer.name}`, data.ramps);
      projection.setMany({ palette: c.palette, legend: c.legend, color_codes: serialised(c.codes, [n]) });
      return;
    }
    const colouring = data.colourings[by];
    if (!colouring) return;
    projection.setMany({ palette: colouring.palette, legend: colouring.legend,
      color_codes: serialised(Uint8Array.from(colouring.codes), [colouring.codes.length]) });
  }
  function hoverDetails(/** @type {number} */ index) {
    if (index < 0 || index >= n) return;
    const fields = data.hover.titles.map((/** @type {string} */ t, /** @type {number} */ j) =>
      [t, data.hover.values[j][index]]);
    if (projection.get("color_by") === "neuron") {
      const layer = layers.get(projection.get("layer"));
      const neuron = projection.get("neuron");
      const value = activations(layer)[index * layer.neurons + neuron];
      fields.splice(Math.min(4, fields.length), 0, [`neuron ${neuron}`, formatNumber(value)]);
    }
    projection.set("hover_details", { index, fields });
  }

  // ---------------------------------------------------------------- the instance panel
  const table = data.instances;
  function instanceSample(/** @type {ArrayLike<number> | null} */ within) {
    const label = int32(table.label), pred = int32(table.pred);
    const conf = float32(table.confidence);
    const pinned = new Set(instances.get("pinned") || []);
    let shown;
    if (!within) shown = Array.from(int32(table.sample));
    else {
      const candidates = uniqueSorted(within);
      const wrong = Array.from(candidates).filter((i) => label[i] !== pred[i]);
      const right = Array.from(candidates).filter((i) => label[i] === pred[i]);
      const room = Math.max(0, table.max_instances - wrong.length);
      const step = right.length > room ? right.length / Math.max(room, 1) : 1;
      const kept = room ? right.filter((_, j) => Math.floor(j % step) === 0).slice(0, room) : [];
      shown = [...wrong.slice(0, table.max_instances), ...kept];
    }
    for (const p of pinned) if (!shown.includes(p)) shown.push(p);
    const index = Int32Array.from(shown).sort();
    const cand = within ? uniqueSorted(within) : null;
    const nClasses = Math.max(instances.get("class_names").length, ...Array.from(label).map((v) => v + 1), 1);
    const totals = new Int32Array(nClasses), wrongs = new Int32Array(nClasses);
    const count = (/** @type {number} */ i) => {
      if (label[i] < 0) return;
      totals[label[i]]++;
      if (label[i] !== pred[i]) wrongs[label[i]]++;
    };
    if (cand) cand.forEach(count); else for (let i = 0; i < n; i++) count(i);
    const pick = (/** @type {any} */ arr, /** @type {any} */ Ctor) => Ctor.from(index, (i) => arr[i]);
    /** @type {Record<string, any>} */
    const sample = {
      index: serialised(index, [index.length]),
      label: serialised(pick(label, Int32Array), [index.length]),
      pred: serialised(pick(pred, Int32Array), [index.length]),
      confidence: serialised(pick(conf, Float32Array), [index.length]),
      total: n, candidates: cand ? cand.length : n, filtered: !!within,
      class_totals: serialised(totals, [nClasses]), class_wrong: serialised(wrongs, [nClasses]),
      ...cards(index),
    };
    if (table.label_score !== undefined) {
      sample.label_score = serialised(pick(float32(table.label_score), Float32Array), [index.length]);
    }
    instances.set("_sample", sample);
    sendSortKeys();
  }
  function cards(/** @type {Int32Array} */ index) {
    const c = table.cards;
    /** @type {Record<string, any>} */
    const out = {
      number_names: c.number_names, number_integer: c.number_integer, features_left_out: c.features_left_out,
      texts: c.texts.map((/** @type {any} */ t) => ({ name: t.name, values: Array.from(index, (i) => t.values[i]) })),
      numbers: null,
    };
    if (table.numbers !== null) {
      const all = buffers[table.numbers], width = table.number_columns;
      const src = new Float64Array(all.buffer, all.byteOffset, all.byteLength / 8);
      const rows = new Float64Array(index.length * width);
      index.forEach((i, r) => rows.set(src.subarray(i * width, (i + 1) * width), r * width));
      out.numbers = { dtype: "float64", shape: [index.length, width], buffer: new DataView(rows.buffer) };
    }
    if (table.thumbs !== undefined) {
      const [th, tw, ch] = table.thumb_shape, size = th * tw * ch, all = buffers[table.thumbs];
      const src = new Uint8Array(all.buffer, all.byteOffset, all.byteLength);
      const thumbs = new Uint8Array(index.length * size);
      index.forEach((i, r) => thumbs.set(src.subarray(i * size, (i + 1) * size), r * size));
      out.thumbs = serialised(thumbs, [index.length, th, tw, ch]);
    }
    return out;
  }
  /** @type {{values: Float32Array, label: string} | null} */
  let sortValues = null;
  function sendSortKeys() {
    const raw = decodeArray(instances.get("_sample")?.index);
    if (!sortValues || !raw) { instances.setMany({ _sort_keys: null, sort_label: "" }); return; }
    const values = sortValues.values;
    const keys = Float32Array.from(raw.data, (i) => values[i]);
    instances.setMany({ _sort_keys: serialised(keys, [keys.length]), sort_label: sortValues.label });
  }

  /** Clear one mark of the shared selection (or all), and what the views drew for it, as Explorer.reset does. */
  function reset(/** @type {string | null} */ mark) {
    const every = mark === null;
    /** @type {Record<string, Record<string, any>>} */
    const cleared = {
      subset: { subset: "", subset_indices: null }, brush: { brush: null, brush_source: "" }, pinned: { pinned: [] },
      hover: { hover: null, hover_source: "", hover_instance: -1 }, neuron: { neuron: -1 },
      highlight: { highlight_neurons: null, highlight_neurons_layer: "", highlight_neurons_source: "" },
    };
    for (const [name, values] of Object.entries(cleared)) if (every || mark === name) sel.setMany(values);
    if ((every || mark === "subset") && subsetPanel) subsetPanel.set("active", "");
    if (every || mark === "subset") matrix.set("selected_row", "");
    if (every || mark === "neuron") matrix.set("selected_neuron", -1);
    if (every || mark === "brush") projection.set("selected_indices", null);
  }

  /** The finished layout of the layer shown, whatever the notebook's job had reached when it was saved
   * (or a checkpoint's aligned layout, named by `method`). */
  function showLayout(method = projection.get("method")) {
    const layer = layers.get(projection.get("layer"));
    if (!layer) return;
    const positions = float32(layer.positions);
    projection.setMany({ positions: serialised(positions, [positions.length / 2, 2]), n_neurons: layer.neurons,
      shown_method: method, status: "done", stage: "", progress: 1, error: "" });
  }

  // ---------------------------------------------------------------- the links (explorer.py's LINKS)
  // the kernel's side of each view's clauses (Selection.clause in Python): one resolver, js/common/selection.js
  const asMatrix = clausesFor(sel, "matrix"), asInstances = clausesFor(sel, "instances");
  const asProjection = clausesFor(sel, "projection");
  function refreshBrushRow() {
    const brushed = asMatrix.clause("brush");
    if (!brushed || !brushed.length) { removeRow(BRUSH); return; }
    setCustomRow(BRUSH, `selection (${uniqueSorted(brushed).length})`, brushed);
  }
  function setLayer(/** @type {string} */ layer) {
    if (layer && layers.has(layer) && layer !== sel.get("layer")) sel.set("layer", layer);
  }
  sel.on("change:layer", () => {
    const name = sel.get("layer"), layer = layers.get(name);
    if (!layer) return;
    matrix.set("layer", name);
    if (projection.get("layer") !== name) projection.set("layer", name);
    if (graph && data.graph_layers[graph.get("selected_layer")] !== name) graph.set("selected_layer", layer.node);
    sel.set("neuron", -1);
    refreshBrushRow();
  });
  matrix.on("change:layer", () => { setLayer(matrix.get("layer")); refreshMatrix(); });
  projection.on("change:layer", () => {
    const layer = layers.get(projection.get("layer"));
    if (!layer) return;
    showLayout();
    if (projection.get("neuron") >= layer.neurons) projection.set("neuron", 0);
    if (projection.get("color_by") === "neuron") recolour();
    setLayer(layer.name);
  });
  if (graph) graph.on("change:selected_layer", () => setLayer(data.graph_layers[graph.get("selected_layer")]));
  showLayout();
  // the legend's chips and Reset ask Python (Selection.clear, Explorer.reset); here the page answers
  sel.send = (/** @type {any} */ content) => {
    if (!content || content.action !== "reset") { manager.needsKernel(sel, content); return; }
    reset(content.mark ?? null);
  };
  matrix.on("change:row_keys", refreshMatrix);
  matrix.on("change:statistic", refreshMatrix);
  matrix.on("change:order_mode change:sort_by_row change:difference_to", refreshOrder);
  matrix.on("change:selected_neuron", () => sel.set("neuron", matrix.get("selected_neuron")));
  if (why) why.on("change:selected_neuron", () => sel.set("neuron", why.get("selected_neuron")));
  sel.on("change:neuron", () => {
    const neuron = sel.get("neuron"), layer = layers.get(sel.get("layer"));
    if (neuron >= 0 && layer) {
      projection.setMany({ neuron, color_by: "neuron" });
      const values = activations(layer), column = new Float32Array(n);
      for (let i = 0; i < n; i++) column[i] = values[i * layer.neurons + neuron];
      sortValues = { values: column, label: `${layer.name} · neuron ${neuron}` };
    } else {
      projection.set("color_by", "label");
      sortValues = null;
    }
    recolour();
    sendSortKeys();
  });
  projection.on("change:color_by change:neuron", recolour);
  projection.on("change:hovered_index", () => {
    hoverDetails(projection.get("hovered_index"));
    sel.set("hover_instance", projection.get("hovered_index"));
  });
  instances.on("change:hovered_index", () => sel.set("hover_instance", instances.get("hovered_index")));
  sel.on("change:hover_instance", () => {
    const index = sel.get("hover_instance");
    if (index >= 0) setCustomRow(HOVER, `hover #${index}`, [index]);
    else removeRow(HOVER);
  });
  projection.on("change:selected_indices", () => {
    const raw = decodeArray(projection.get("selected_indices"));
    const indices = raw ? raw.data : new Int32Array(0);
    if (indices.length === 1 && !projection.get("lasso")) {
      const pinned = sel.get("pinned") || [];
      if (!pinned.includes(indices[0])) sel.set("pinned", [...pinned, indices[0]]);
    } else {
      sel.setMany(asProjection.write("brush", indices.length ? indices : null));
    }
  });
  instances.on("change:pinned", () => sel.set("pinned", [...(instances.get("pinned") || [])]));
  sel.on("change:pinned", () => {
    const pinned = sel.get("pinned") || [];
    if (JSON.stringify(instances.get("pinned")) !== JSON.stringify(pinned)) instances.set("pinned", [...pinned]);
    const keys = (matrix.get("row_keys") || []).filter((/** @type {string} */ k) =>
      !k.startsWith(INSTANCE) || pinned.includes(Number(k.slice(INSTANCE.length))));
    for (const i of pinned) if (!keys.includes(INSTANCE + i)) keys.push(INSTANCE + i);
    matrix.set("row_keys", keys);
    if (why && pinned.length) manager.toast(KERNEL_NOTE);
  });
  sel.on(clauseEvents("brush"), () => {
    instanceSample(asInstances.clause("brush"));
    refreshBrushRow();
  });
  if (subsetPanel) {
    subsetPanel.on("change:active", () => {
      const name = subsetPanel.get("active"), indices = name ? subsetIndices(name) : null;
      sel.setMany({ subset: name, subset_indices: indices ? serialised(indices, [indices.length]) : null });
      if (name && indices) addRow(SUBSET + name);
    });
  }
  matrix.on("change:selected_row", () => {
    const key = matrix.get("selected_row") || "";
    if (key.startsWith(SUBSET) && subsetPanel && subsetPanel.get("active") !== key.slice(SUBSET.length)) {
      subsetPanel.set("active", key.slice(SUBSET.length));
    }
  });
  return {
    /** The embedded data moved to another checkpoint: redraw what reads it, as the kernel's set_store does. */
    reload(/** @type {string} */ method) {
      widened.clear();
      const name = subsetPanel ? subsetPanel.get("active") : "", indices = name ? subsetIndices(name) : null;
      if (indices) sel.set("subset_indices", serialised(indices, [indices.length]));
      refreshMatrix();
      showLayout(method);
      recolour();
      if (sel.get("neuron") >= 0) sel.emit("change:neuron", sel.get("neuron"));
      instanceSample(asInstances.clause("brush"));
    },
  };
}

// @ts-check
// The page's stand-in for a kernel's widget models: each model holds the state Python sent, fires the
// same change events, and resolves "IPY_MODEL_<id>" references, so every view renders unchanged. A
// message a view sends to Python (add a subset, run slice discovery) has nobody to answer it: the page
// says so instead of failing silently.

/** @typedef {{ models: Record<string, {module: string, state: any}>, layout: any, buffers: number[][],
 *   title: string, note: string }} Payload */

/** The embedded buffers, decoded once: buffer k is a DataView into one ArrayBuffer. */
export function readBuffers(/** @type {Payload} */ payload) {
  const text = document.getElementById("activis-buffers")?.textContent?.trim() || "";
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return payload.buffers.map(([offset, length]) => new DataView(bytes.buffer, offset, length));
}

/** Replace every {"$buffer": k} in a state with the buffer itself. */
export function withBuffers(value, /** @type {DataView[]} */ buffers) {
  if (Array.isArray(value)) return value.map((v) => withBuffers(v, buffers));
  if (value && typeof value === "object") {
    if (typeof value.$buffer === "number" && Object.keys(value).length === 1) return buffers[value.$buffer];
    /** @type {Record<string, any>} */
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = withBuffers(v, buffers);
    return out;
  }
  return value;
}

/** Whether a new trait value equals the old, as traitlets decides (lists and dicts by value, arrays by identity). */
export function sameValue(/** @type {any} */ a, /** @type {any} */ b) {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => sameValue(v, b[i]));
  if (!a || !b || typeof a !== "object" || typeof b !== "object" || Array.isArray(a) || Array.isArray(b)) return false;
  if (a instanceof DataView || b instanceof DataView || Object.getPrototypeOf(a) !== Object.prototype) return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => k in b && sameValue(a[k], b[k]));
}

export class StaticModel {
  /**
   * @param {string} id
   * @param {Record<string, any>} state
   * @param {StaticManager} manager
   */
  constructor(id, state, manager) {
    this.cid = id;
    this.state = state;
    this.widget_manager = manager;
    /** @type {Map<string, Set<Function>>} */
    this.listeners = new Map();
  }

  get(/** @type {string} */ name) { return this.state[name]; }

  /** Set a trait as Python or a view would: listeners of `change:<name>` and `change` run once. */
  set(/** @type {string} */ name, /** @type {any} */ value) {
    if (sameValue(this.state[name], value)) return;
    this.state[name] = value;
    this.emit(`change:${name}`, value);
    this.emit("change", value);
  }

  /** Several traits at once, then one `change` (as a kernel update of several traits does). */
  setMany(/** @type {Record<string, any>} */ values) {
    const changed = Object.keys(values).filter((k) => !sameValue(this.state[k], values[k]));
    for (const k of changed) this.state[k] = values[k];
    for (const k of changed) this.emit(`change:${k}`, values[k]);
    if (changed.length) this.emit("change", null);
  }

  save_changes() {}

  send(/** @type {any} */ content) { this.widget_manager.needsKernel(this, content); }

  on(/** @type {string} */ event, /** @type {Function} */ fn) {
    for (const name of event.split(/\s+/).filter(Boolean)) {
      if (!this.listeners.has(name)) this.listeners.set(name, new Set());
      this.listeners.get(name)?.add(fn);
    }
  }

  off(/** @type {string} */ event, /** @type {Function} */ fn) {
    for (const name of event.split(/\s+/).filter(Boolean)) this.listeners.get(name)?.delete(fn);
  }

  emit(/** @type {string} */ event, /** @type {any} */ value) {
    for (const fn of Array.from(this.listeners.get(event) || [])) {
      try { fn(this, value); } catch (err) { console.error("activis page:", err); }
    }
  }
}

export class StaticManager {
  constructor() {
    /** @type {Map<string, StaticModel>} */
    this.models = new Map();
    /** @type {(text: string) => void} */
    this.toast = () => {};
  }

  async get_model(/** @type {string} */ id) { return this.models.get(id); }

  needsKernel(/** @type {StaticModel} */ _model, /** @type {any} */ content) {
    const action = content && typeof content === "object" && content.action ? ` (${content.action})` : "";
    this.toast(`This needs Python${action}: open the notebook to do it. The page shows what was saved.`);
  }
}

// @ts-check
// Views of one explorer share a Selection model (activis/widgets/selection.py). A view's
// `shared_selection` trait holds a reference ("IPY_MODEL_<id>"); the view reads and writes the shared
// model here, in the browser, so cross-highlighting needs no round trip through the kernel.
//
// The cross-filter rule (Mosaic's): a view follows every clause but its own. `clause(name)` applies it,
// so no view spells another view's name: it gets null for a clause it wrote itself.
import { decodeArray, encodeArray } from "./arrays.js";

/** Clauses that carry instance indices and the name of the view that wrote them (`<clause>_source`). */
export const CLAUSES = ["brush", "hover"];

/**
 * @typedef {object} SharedSelection
 * @property {(name: string) => any} get a trait of the shared Selection
 * @property {(name: string) => ArrayLike<number> | null} indices an index trait, decoded
 * @property {(name: string) => ArrayLike<number> | null} clause a clause's indices, or null when this view wrote it
 * @property {(name: string) => boolean} mine whether this view wrote the clause
 * @property {(values: Record<string, any>) => void} set write traits and sync
 * @property {(name: string, typed: ArrayLike<number> | null) => void} setClause write a clause as this view
 * @property {() => void} dispose stop following
 */

/**
 * Resolve the shared selection and call onChange(selection) now and after every change.
 * @param {any} model the view's model
 * @param {string} source the view's name in the selection's clauses
 * @param {(sel: SharedSelection) => void} onChange
 * @returns {Promise<SharedSelection | null>}
 */
export async function connectSelection(model, source, onChange) {
  const ref = model.get("shared_selection");
  if (!ref || !model.widget_manager) return null;
  const shared = await model.widget_manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
  // decoded once per value: a view can tell an unchanged clause by identity
  const decoded = new WeakMap();
  const indices = (/** @type {string} */ name) => {
    const raw = shared.get(name);
    if (!raw) return null;
    if (!decoded.has(raw)) decoded.set(raw, decodeArray(raw)?.data ?? null);
    return decoded.get(raw);
  };
  const mine = (/** @type {string} */ name) => shared.get(`${name}_source`) === source;
  /** @type {SharedSelection} */
  const api = {
    get: (name) => shared.get(name),
    indices,
    mine,
    clause: (name) => (mine(name) ? null : indices(name)),
    set(values) {
      for (const [k, v] of Object.entries(values)) shared.set(k, v);
      shared.save_changes();
    },
    setClause(name, typed) {
      this.set({
        [name]: typed ? encodeArray(Int32Array.from(typed), "int32") : null,
        [`${name}_source`]: source,
      });
    },
    dispose: () => shared.off("change", handler),
  };
  const handler = () => onChange(api);
  shared.on("change", handler);
  onChange(api);
  return api;
}

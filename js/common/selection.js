// @ts-check
// Views of one explorer share a Selection model (activis/widgets/selection.py). A view's
// `shared_selection` trait holds a reference ("IPY_MODEL_<id>"); the view reads and writes the shared
// model here, in the browser, so cross-highlighting needs no round trip through the kernel.
//
// The cross-filter rule (Mosaic's): a view follows every clause but its own. `clausesFor` is the one
// place that applies it, for the live views (`connectSelection`) and for the saved page's links
// (js/export/explorer.js) alike: a view declares its name (`source`) once and gets null for a clause
// it wrote itself; no view compares `<clause>_source` with its own name.
import { decodeArray, encodeArray } from "./arrays.js";

/** Clauses that carry instance indices and the name of the view that wrote them (`<clause>_source`). */
export const CLAUSES = ["brush", "hover"];

/**
 * @typedef {object} Clauses a Selection's clauses as one view (`source`) sees them
 * @property {(name: string) => ArrayLike<number> | null} clause the clause as this view follows it:
 *   null when this view wrote it (Mosaic's `selection.predicate(client)`)
 * @property {(name: string) => ArrayLike<number> | null} own this view's own clause, null when another
 *   view's replaced it (Mosaic's `selection.valueFor(source)`): what the view keeps drawing as its mark
 * @property {(name: string, typed: ArrayLike<number> | null) => Record<string, any>} write the traits that
 *   make `typed` this view's clause (null: the clause cleared, by this view)
 * @property {(name: string) => Record<string, any> | null} clear the traits that clear this view's own
 *   clause, null when the clause is another view's (a view never clears a clause it did not write)
 */

/**
 * The one resolver of "every clause but mine" over a Selection model (live, or a saved page's stand-in).
 * @param {{get(name: string): any}} model the Selection's model
 * @param {string} source the view's name in the clauses
 * @param {(raw: any) => ArrayLike<number> | null} [decode] a clause's indices from the trait's value
 * @returns {Clauses}
 */
export function clausesFor(model, source, decode = (raw) => decodeArray(raw)?.data ?? null) {
  const written = (/** @type {string} */ name) => model.get(`${name}_source`) === source;
  /** @type {Clauses["write"]} */
  // the owner first: a view that follows the clause never sees the new indices under the old owner
  const write = (name, typed) => ({
    [`${name}_source`]: source,
    [name]: typed ? encodeArray(Int32Array.from(typed), "int32") : null,
  });
  return {
    clause: (name) => (written(name) ? null : decode(model.get(name))),
    own: (name) => (written(name) ? decode(model.get(name)) : null),
    write,
    clear: (name) => (written(name) ? write(name, null) : null),
  };
}

/** The model events of a clause changing: its indices or its owner (`sel.on(clauseEvents("brush"), fn)`). */
export const clauseEvents = (/** @type {string} */ name) => `change:${name} change:${name}_source`;

/**
 * @typedef {object} SharedSelection
 * @property {(name: string) => any} get a trait of the shared Selection
 * @property {(name: string) => ArrayLike<number> | null} indices an index trait, decoded
 * @property {(name: string) => ArrayLike<number> | null} clause a clause's indices, or null when this view wrote it
 * @property {(name: string) => ArrayLike<number> | null} own this view's clause, or null when it is another's
 * @property {(values: Record<string, any>) => void} set write traits and sync
 * @property {(name: string, typed: ArrayLike<number> | null) => void} setClause write a clause as this view
 * @property {(name: string) => void} clearClause clear this view's own clause (another view's stays)
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
  const decode = (/** @type {any} */ raw) => {
    if (!raw) return null;
    if (!decoded.has(raw)) decoded.set(raw, decodeArray(raw)?.data ?? null);
    return decoded.get(raw);
  };
  const rule = clausesFor(shared, source, decode);
  /** @type {SharedSelection} */
  const api = {
    get: (name) => shared.get(name),
    indices: (name) => decode(shared.get(name)),
    clause: rule.clause,
    own: rule.own,
    set(values) {
      for (const [k, v] of Object.entries(values)) shared.set(k, v);
      shared.save_changes();
    },
    setClause(name, typed) { this.set(rule.write(name, typed)); },
    clearClause(name) {
      const cleared = rule.clear(name);
      if (cleared) this.set(cleared);
    },
    dispose: () => shared.off("change", handler),
  };
  const handler = () => onChange(api);
  shared.on("change", handler);
  onChange(api);
  return api;
}

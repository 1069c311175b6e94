// Views of one explorer share a Selection model (activis/widgets/selection.py). A view's
// `shared_selection` trait holds a reference ("IPY_MODEL_<id>"); the view reads and writes the shared
// model here, in the browser, so cross-highlighting needs no round trip through the kernel.
import { decodeArray, encodeArray } from "./arrays.js";

/** Resolve the shared selection and call onChange(selection) now and after every change. */
export async function connectSelection(model, onChange) {
  const ref = model.get("shared_selection");
  if (!ref || !model.widget_manager) return null;
  const shared = await model.widget_manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
  const handler = () => onChange(api);
  const api = {
    get: (name) => shared.get(name),
    indices: (name) => { const v = decodeArray(shared.get(name)); return v ? v.data : null; },
    set(values) {
      for (const [k, v] of Object.entries(values)) shared.set(k, v);
      shared.save_changes();
    },
    setIndices(name, source, typed) {
      const values = { [name]: typed ? encodeArray(Int32Array.from(typed), "int32") : null };
      values[`${name}_source`] = source;
      this.set(values);
    },
    dispose: () => shared.off("change", handler),
  };
  shared.on("change", handler);
  onChange(api);
  return api;
}

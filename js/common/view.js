// @ts-check
/**
 * The view kit: what every activis view needs and none should write again.
 *
 * A view file declares itself once and keeps only what it alone draws:
 *
 *   import { defineView } from "./common/view.js";
 *   export default defineView({
 *     name: "graph",                  // the root gets the classes "activis-root activis-graph"
 *     css: CSS,                       // the view's stylesheet, injected once per page
 *     arrays: ["values"],             // binary traits: kit.array("values") -> {data, shape} | null
 *     source: "matrix",               // its name in the shared Selection (views that link)
 *     setup(kit) {                    // build the DOM, draw, return nothing or a last cleanup
 *       const draw = kit.frame(() => { ... });   // coalesced into one animation frame
 *       kit.on("values height", draw);           // trait changes, detached on dispose
 *       kit.onTheme(draw); kit.onResize(kit.el, draw);
 *       const ctx = kit.canvas(canvasEl, width, height); // sized for the device pixel ratio
 *       kit.classColour(3);                      // the palette Python sent (activis/widgets/colours.py)
 *       kit.selection((sel) => sel.clause("brush")); // every clause but mine (Mosaic's rule)
 *     },
 *   });
 *
 * Everything registered through the kit (trait listeners, DOM listeners, observers, frames, the
 * shared selection) is released when the view is removed.
 */
import { decodeArray } from "./arrays.js";
import { applyTheme, themeColor } from "./theme.js";
import { connectSelection } from "./selection.js";
import { enablePng } from "./png.js";

/**
 * @typedef {import("./arrays.js").Decoded} Decoded
 * @typedef {import("./selection.js").SharedSelection} SharedSelection
 * @typedef {{ get(name: string): any, set(name: string, value: any): void, save_changes(): void,
 *   send(content: any): void, on(event: string, fn: Function): void, off(event: string, fn: Function): void,
 *   cid?: string, widget_manager?: any }} AnyModel
 * @typedef {{ classes: string[], runs: string[], severity: Record<string, string>, missing: string,
 *   correctness: string[], sequential: string[], matrix: Record<string, {light: string[], dark: string[]}> }} Palette
 */

/**
 * @typedef {object} Kit
 * @property {AnyModel} model
 * @property {HTMLElement} el
 * @property {(name: string) => Decoded | null} array decoded binary trait (cached until it changes)
 * @property {(names: string, fn: () => void) => void} on follow trait changes ("a b c")
 * @property {(target: EventTarget, type: string, fn: (ev: any) => void, options?: AddEventListenerOptions) => void}
 *   listen a DOM listener removed on dispose
 * @property {(fn: () => void) => () => void} frame coalesce calls of fn into one animation frame
 * @property {(fn: () => void) => void} onTheme call fn when JupyterLab switches theme
 * @property {(target: Element, fn: (size: {width: number, height: number}) => void) => void} onResize call
 *   fn(size) (once per frame) when target resizes, with the size the observer saw; never for a hidden (0) box
 * @property {(canvas: HTMLCanvasElement, width: number, height: number) => CanvasRenderingContext2D} canvas
 *   size a canvas for the device pixel ratio; the context draws in CSS pixels
 * @property {(name: string, fallback: string) => string} colour a resolved theme colour (CSS variable)
 * @property {() => Palette} palette the palette Python sent
 * @property {(k: number) => string} classColour the colour of class k (missing colour for k < 0 or unknown)
 * @property {(onChange: (sel: SharedSelection | null) => void) => void} selection follow the shared Selection:
 *   onChange(selection) now and after each of its changes, onChange(null) when the view has none
 * @property {() => boolean} dark whether the page uses a dark theme
 * @property {(fn: () => void) => void} cleanup run fn on dispose
 */

/**
 * @typedef {object} ViewSpec
 * @property {string} name
 * @property {string} [css]
 * @property {string[]} [arrays]
 * @property {string} [source]
 * @property {(kit: Kit) => (void | (() => void))} setup
 */

const injected = new Set();
// JupyterLab marks the theme on <body>; the CSS variables views read change with it
const THEME_ATTRIBUTES = ["data-jp-theme-light", "data-jp-theme-name"];

/** Add a view's stylesheet to the page once. */
export function injectCss(name, css) {
  const id = `activis-style-${name}`;
  if (injected.has(id) || document.getElementById(id)) return;
  const style = document.createElement("style");
  style.id = id;
  style.textContent = css;
  document.head.appendChild(style);
  injected.add(id);
}

/**
 * Declare a view; returns the anywidget module ({render}).
 * @param {ViewSpec} spec
 */
export function defineView(spec) {
  return {
    /** @param {{model: AnyModel, el: HTMLElement}} args */
    render({ model, el }) {
      const kit = createKit(model, el, spec);
      let last;
      try {
        last = spec.setup(kit);
      } catch (err) {
        kit.dispose();
        throw err;
      }
      if (typeof last === "function") kit.cleanup(last);
      enablePng(model, el, spec.name, (css) => injectCss("png-button", css), kit.cleanup);
      return () => kit.dispose();
    },
  };
}

/**
 * @param {AnyModel} model
 * @param {HTMLElement} el
 * @param {ViewSpec} spec
 * @returns {Kit & {dispose: () => void}}
 */
function createKit(model, el, spec) {
  applyTheme(el);
  el.classList.add(`activis-${spec.name}`);
  if (spec.css) injectCss(spec.name, spec.css);
  /** @type {(() => void)[]} */
  const disposers = [];
  const cleanup = (/** @type {() => void} */ fn) => { disposers.push(fn); };
  const on = (/** @type {string} */ names, /** @type {() => void} */ fn) => {
    for (const name of names.split(/\s+/).filter(Boolean)) {
      const event = `change:${name}`;
      model.on(event, fn);
      cleanup(() => model.off(event, fn));
    }
  };

  /** @type {Map<string, Decoded | null>} */
  const decoded = new Map();
  for (const name of spec.arrays || []) on(name, () => decoded.delete(name));
  const array = (/** @type {string} */ name) => {
    if (!decoded.has(name)) decoded.set(name, decodeArray(model.get(name)));
    return decoded.get(name) ?? null;
  };

  const frame = (/** @type {() => void} */ fn) => {
    let id = 0;
    cleanup(() => { if (id) cancelAnimationFrame(id); });
    return () => {
      if (id) return;
      id = requestAnimationFrame(() => { id = 0; fn(); });
    };
  };

  const onTheme = (/** @type {() => void} */ fn) => {
    const observer = new MutationObserver(fn);
    observer.observe(document.body, { attributes: true, attributeFilter: THEME_ATTRIBUTES });
    cleanup(() => observer.disconnect());
  };

  // The size comes from the observer's entry, not from reading the box when the frame runs: while
  // JupyterLab swaps its theme stylesheet a box reads 0 x 0 for a moment without the observer ever
  // reporting it, and a view that sized its canvas to that read stayed 1 x 1 (no later change to
  // report). A hidden box (0 wide or high) keeps what it drew; showing it again reports its size.
  const onResize = (/** @type {Element} */ target,
    /** @type {(size: {width: number, height: number}) => void} */ fn) => {
    /** @type {{width: number, height: number} | null} */
    let size = null;
    const run = frame(() => { if (size) fn(size); });
    const observer = new ResizeObserver((entries) => {
      const box = entries[entries.length - 1].contentRect;
      if (box.width > 0 && box.height > 0) { size = { width: box.width, height: box.height }; run(); }
    });
    observer.observe(target);
    cleanup(() => observer.disconnect());
  };

  const listen = (/** @type {EventTarget} */ target, /** @type {string} */ type, /** @type {any} */ fn,
    /** @type {AddEventListenerOptions | undefined} */ options) => {
    target.addEventListener(type, fn, options);
    cleanup(() => target.removeEventListener(type, fn, options));
  };

  const canvas = (/** @type {HTMLCanvasElement} */ c, /** @type {number} */ width, /** @type {number} */ height) => {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(0, Math.round(width * dpr)), hgt = Math.max(0, Math.round(height * dpr));
    if (c.width !== w) c.width = w;
    if (c.height !== hgt) c.height = hgt;
    c.style.width = `${width}px`;
    c.style.height = `${height}px`;
    const ctx = /** @type {CanvasRenderingContext2D} */ (c.getContext("2d"));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  };

  const palette = () => /** @type {Palette} */ (model.get("colours") || {});
  const classColour = (/** @type {number} */ k) => {
    const p = palette();
    return (k >= 0 && p.classes && p.classes[k]) || p.missing || "#9e9e9e";
  };

  const selection = (/** @type {(sel: SharedSelection | null) => void} */ onChange) => {
    /** @type {SharedSelection | null} */
    let shared = null;
    let generation = 0;
    const attach = async () => {
      const mine = ++generation;
      if (shared) shared.dispose();
      shared = null;
      const next = await connectSelection(model, spec.source || spec.name, onChange);
      if (mine !== generation) { if (next) next.dispose(); return; }
      shared = next;
      el.dataset.linked = String(!!shared);
      if (!shared) onChange(null);
    };
    on("shared_selection", attach);
    cleanup(() => { generation++; if (shared) shared.dispose(); });
    attach();
  };

  return {
    model, el, array, on, listen, frame, onTheme, onResize, canvas, palette, classColour, selection, cleanup,
    colour: (name, fallback) => themeColor(el, name, fallback),
    dark: () => document.body.dataset.jpThemeLight === "false",
    dispose() {
      while (disposers.length) {
        const fn = disposers.pop();
        try { if (fn) fn(); } catch (err) { console.warn("activis: cleanup failed", err); }
      }
    },
  };
}

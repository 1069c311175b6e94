// @ts-check
// Every view as a PNG at the device pixel ratio: a corner button (bottom right, shown on hover)
// downloads it, and view.save_png(path) in Python asks for it ({kit: "png"}) and gets the image back.
// html-to-image (MIT) draws the view's DOM, SVG and canvases into one image; doing that by hand means
// cloning styles and canvases ourselves.
import { toPng } from "html-to-image";

const BUTTON_CSS = `
.activis-png-button { position: absolute; bottom: 2px; right: 2px; z-index: 20; font-size: 10px; padding: 0 4px;
  opacity: 0; pointer-events: none; border: 1px solid var(--av-border, #bbb); background: var(--av-bg, #fff);
  color: var(--av-fg, #111); border-radius: 3px; cursor: pointer; }
.activis-root:hover > .activis-png-button { opacity: 0.8; pointer-events: auto; }
`;

/** The view's pixels as a PNG data URL, on the view's own background colour. */
export function viewPng(/** @type {HTMLElement} */ el) {
  const background = getComputedStyle(el).backgroundColor || "#fff";
  return toPng(el, {
    pixelRatio: window.devicePixelRatio || 1,
    backgroundColor: background,
    filter: (node) => !(node instanceof HTMLElement && node.classList.contains("activis-png-button")),
  });
}

/**
 * Add the PNG button and answer Python's requests.
 * @param {import("./view.js").AnyModel} model
 * @param {HTMLElement} el
 * @param {string} name the view's name, for the file name
 * @param {(css: string) => void} injectCss
 * @param {(fn: () => void) => void} cleanup
 */
export function enablePng(model, el, name, injectCss, cleanup) {
  injectCss(BUTTON_CSS);
  if (name === "selection") return; // the selection's legend bar: its Reset sits where the button would
  const button = document.createElement("button");
  button.className = "activis-png-button";
  button.textContent = "PNG";
  button.title = "Save this view as a PNG image";
  button.addEventListener("click", async () => {
    const link = document.createElement("a");
    link.download = `activis-${name}.png`;
    link.href = await viewPng(el);
    link.click();
  });
  el.append(button);
  const onMessage = async (/** @type {any} */ msg) => {
    if (!msg || msg.kit !== "png") return;
    try {
      const url = await viewPng(el);
      model.send({ kit: "png", id: msg.id, data: url.slice(url.indexOf(",") + 1) });
    } catch (err) {
      model.send({ kit: "png", id: msg.id, error: String(err) });
    }
  };
  model.on("msg:custom", onMessage);
  cleanup(() => { model.off("msg:custom", onMessage); button.remove(); });
}

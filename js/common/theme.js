// @ts-check
// One theme for every view: JupyterLab's CSS variables, with fallbacks outside JupyterLab.
// Light and dark follow automatically because the variables change with the Lab theme.
const CSS = `
.activis-root {
  --av-bg: var(--jp-layout-color0, #fff);
  --av-bg-alt: var(--jp-layout-color2, #eee);
  --av-fg: var(--jp-ui-font-color0, #111);
  --av-fg-muted: var(--jp-ui-font-color2, #666);
  --av-border: var(--jp-border-color1, #bbb);
  --av-border-soft: var(--jp-border-color2, #ddd);
  --av-accent: var(--jp-brand-color1, #1976d2);
  --av-warn: var(--jp-warn-color0, #e65100);
  --av-node: var(--jp-layout-color1, #fafafa);
  --av-font: var(--jp-ui-font-family, system-ui, sans-serif);
  --av-code-font: var(--jp-code-font-family, monospace);
  font-family: var(--av-font);
  font-size: var(--jp-ui-font-size1, 13px);
  color: var(--av-fg);
  background: var(--av-bg);
  position: relative;
  box-sizing: border-box;
}
.activis-root * { box-sizing: border-box; }
/* one line whatever the state: a toolbar that wrapped moved the view under the mouse when a label grew */
.activis-toolbar { display: flex; gap: 6px; align-items: center; padding: 4px 0; flex-wrap: nowrap;
  overflow-x: auto; overflow-y: hidden; scrollbar-width: thin; min-height: 32px; }
.activis-toolbar > * { flex: 0 0 auto; }
.activis-toolbar input::placeholder { font-size: 0.92em; }
.activis-toolbar button, .activis-toolbar select, .activis-toolbar input {
  font: inherit; color: var(--av-fg); background: var(--av-bg-alt);
  border: 1px solid var(--av-border); border-radius: 3px; padding: 2px 8px; cursor: pointer;
}
.activis-toolbar button[aria-pressed="true"] { border-color: var(--av-accent); color: var(--av-accent); }
/* the explorer's "Full width": over the whole notebook panel (JupyterLab's panel contains a fixed box), at its
   full width, scrolling inside; its rows keep their heights (a flex column would squeeze them) */
.activis-explorer.activis-explorer-full { position: fixed !important; inset: 0; z-index: 10000; overflow: auto;
  background: var(--jp-layout-color0, #fff); padding: 8px; box-sizing: border-box; }
.activis-explorer.activis-explorer-full > * { flex: 0 0 auto !important; }
.activis-tooltip {
  position: absolute; pointer-events: none; z-index: 10; display: none;
  background: var(--av-bg); color: var(--av-fg); border: 1px solid var(--av-border);
  border-radius: 3px; padding: 4px 6px; font-size: 12px; white-space: pre; max-width: 480px;
  box-shadow: 0 1px 4px rgba(0,0,0,0.25);
}
.activis-legend {
  display: flex; gap: 8px; flex-wrap: wrap; align-items: center; font-size: 11px; color: var(--av-fg-muted);
}
.activis-legend .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 3px; vertical-align: middle; }
`;

let injected = false;

/** Add the shared stylesheet once per page and mark `el` as an activis view root. */
export function applyTheme(el) {
  if (!injected && !document.getElementById("activis-theme")) {
    const style = document.createElement("style");
    style.id = "activis-theme";
    style.textContent = CSS;
    document.head.appendChild(style);
  }
  injected = true;
  el.classList.add("activis-root");
}

/** Read a resolved theme colour (for canvas drawing, which cannot use CSS variables directly). */
export function themeColor(el, name, fallback) {
  const v = getComputedStyle(el).getPropertyValue(name).trim();
  return v || fallback;
}

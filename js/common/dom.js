// @ts-check
// Small DOM helpers. Text that comes from data (module, class, feature names) is only ever set
// through textContent, never innerHTML: a name like <img onerror=...> must show as text.

export function h(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "className") node.className = v;
    else if (k === "style") Object.assign(node.style, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2).toLowerCase(), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.appendChild(c);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

/** A tooltip inside `root`; show(lines, x, y) with lines as plain strings. */
export function makeTooltip(root) {
  const tip = h("div", { className: "activis-tooltip" });
  root.appendChild(tip);
  return {
    el: tip,
    show(lines, x, y) {
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      const box = root.getBoundingClientRect();
      const left = Math.min(x + 12, Math.max(0, box.width - tip.offsetWidth - 4));
      tip.style.left = `${left}px`;
      tip.style.top = `${y + 12}px`;
    },
    hide() {
      tip.style.display = "none";
    },
  };
}

// RunsPanel: the shared instruments and evaluation metrics of several runs, one chart each, one
// line per run in the run's colour, the step where two runs part marked by a dashed rule, sudden
// jumps of a metric (activis.evaluation.volatility) circled. Drag
// across any chart to pick a step range (step_range, as in the cockpit panel): every chart zooms to
// it and the summary table shows each run's mean over it; double-click resets. Run names,
// configuration values and series names are data: they reach the page only through textContent.
import { defineView } from "./common/view.js";
import { h, svg, makeTooltip } from "./common/dom.js";
import { frame, line, horizontalDrag } from "./evaluation/chart.js";
import { formatNumber } from "./common/format.js";

const CSS = `
.activis-runs { overflow-y: auto; }
.activis-runs .av-grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px; }
.activis-runs .av-card { border: 1px solid var(--av-border-soft); border-radius: 4px; padding: 2px 4px; min-width: 0; }
.activis-runs .av-card h4 { margin: 0; font-size: 12px; font-weight: 600; overflow: hidden;
  text-overflow: ellipsis; white-space: nowrap; }
.activis-runs svg text { fill: var(--av-fg-muted); font-size: 10px; }
.activis-runs .av-axis { stroke: var(--av-border); }
.activis-runs .av-brush { fill: var(--av-accent); fill-opacity: 0.15; stroke: var(--av-accent); }
.activis-runs .av-parting { stroke: var(--av-warn); stroke-dasharray: 4 3; }
.activis-runs table { border-collapse: collapse; font-size: 11px; margin: 6px 0; }
.activis-runs td, .activis-runs th { padding: 1px 6px; border-bottom: 1px solid var(--av-border-soft);
  text-align: left; white-space: nowrap; }
.activis-runs th.av-differs, .activis-runs td.av-differs { color: var(--av-accent); font-weight: 600; }
.activis-runs .av-chip { margin-right: 8px; }
.activis-runs .av-card { position: relative; }
.activis-runs path[data-run] { pointer-events: none; }
.activis-runs circle[data-jump] { cursor: help; pointer-events: all; }
.activis-runs .av-hover-rule { stroke: var(--av-fg-muted); stroke-width: 1; pointer-events: none; }
.activis-runs .av-jump-key { display: inline-block; width: 9px; height: 9px; border: 1.5px solid var(--av-fg-muted);
  border-radius: 50%; margin-right: 3px; vertical-align: middle; }
`;

function setup(kit) {
  const { model, el } = kit;
  const legend = h("div", { className: "activis-legend" });
  const tooltip = makeTooltip(el);
  const reset = h("button", { text: "All steps", "data-role": "reset" });
  const rangeInfo = h("span", { className: "av-info" });
  const toolbar = h("div", { className: "activis-toolbar" }, [h("strong", { text: "Runs" }), legend, reset, rangeInfo]);
  const grid = h("div", { className: "av-grid" });
  const configTable = h("table", { "data-role": "configs" });
  const meansTable = h("table", { "data-role": "means" });
  const scroll = (table) => h("div", { style: { overflowX: "auto" } }, [table]);
  el.append(toolbar, grid, h("h4", { text: "Configuration (the settings in which the runs differ first)" }),
    scroll(configTable), h("h4", { text: "Mean over the steps shown" }), scroll(meansTable));

  function drawCharts() {
    const runs = model.get("run_names") || [], colors = kit.palette().runs || [];
    const series = model.get("series_names") || [];
    const steps = kit.array("steps");
    const values = kit.array("values");
    const T = steps ? steps.data.length : 0;
    const range = model.get("step_range") || [];
    let x0 = T ? steps.data[0] : 0, x1 = T ? steps.data[T - 1] : 1;
    if (range.length === 2) [x0, x1] = range;
    if (x1 <= x0) x1 = x0 + 1;
    const W = Math.max(160, Math.floor((grid.clientWidth - 12) / 3) - 10), H = 150;
    // the kernel sends at most two points per pixel of this width
    if (model.get("chart_width") !== W) { model.set("chart_width", W); model.save_changes(); }
    const stepsF = steps ? Float64Array.from(steps.data) : new Float64Array(0);
    const cards = [];
    series.forEach((name, s) => {
      let lo = Infinity, hi = -Infinity;
      for (let r = 0; r < runs.length; r++) {
        for (let t = 0; t < T; t++) {
          const v = values.data[(r * series.length + s) * T + t], st = stepsF[t];
          if (Number.isFinite(v) && st >= x0 && st <= x1) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
        }
      }
      if (!(hi >= lo)) { lo = 0; hi = 1; }
      if (hi === lo) { lo -= 0.5 * (Math.abs(lo) || 1); hi += 0.5 * (Math.abs(hi) || 1); }
      const f = frame(W, H, [x0, x1], [lo, hi + (hi - lo) * 0.05], "step", "");
      const clip = `av-runs-clip-${s}-${Math.random().toString(36).slice(2)}`;
      const defs = svg("defs");
      const cp = svg("clipPath", { id: clip });
      cp.appendChild(svg("rect", { x: f.left, y: f.top, width: f.right - f.left, height: f.bottom - f.top }));
      defs.appendChild(cp);
      f.root.insertBefore(defs, f.root.firstChild);
      f.plot.setAttribute("clip-path", `url(#${clip})`);
      let points = 0, flagged = 0;
      /** @type {SVGElement[]} */
      const marks = []; // drawn last, above the brush layer: they answer the mouse
      const jumps = kit.array("jumps");
      for (let r = 0; r < runs.length; r++) {
        const at = (r * series.length + s) * T;
        const ys = values.data.subarray(at, at + T);
        for (let t = 0; t < T; t++) if (Number.isFinite(ys[t])) points++;
        line(f, stepsF, ys, 0, T, { stroke: colors[r] || "#888", "stroke-width": 1.5, "data-run": String(r) });
        for (let t = 0; jumps && t < T; t++) { // a sudden jump (activis.run.volatility)
          if (!jumps.data[at + t] || stepsF[t] < x0 || stepsF[t] > x1) continue;
          const mark = svg("circle", { cx: f.x(stepsF[t]), cy: f.y(ys[t]), r: 4.5, fill: "transparent",
            stroke: colors[r] || "#888", "stroke-width": 2, "data-jump": String(runs[r]) });
          const change = t > 0 && Number.isFinite(ys[t - 1]) ? ys[t] - ys[t - 1] : NaN;
          mark.dataset.tip = `${runs[r]}: sudden jump at step ${stepsF[t]}\n${name} ${formatNumber(ys[t])}` +
            (Number.isFinite(change) ? ` (${change > 0 ? "+" : ""}${formatNumber(change)} in one step)` : "");
          marks.push(mark);
          flagged++;
        }
      }
      for (const p of model.get("partings") || []) {
        if (p.step < x0 || p.step > x1) continue;
        const rule = svg("line", { class: "av-parting", x1: f.x(p.step), x2: f.x(p.step), y1: f.top,
          y2: f.bottom, "data-step": String(p.step) });
        const title = svg("title");
        title.textContent = `${p.a} and ${p.b} part at step ${p.step}`;
        rule.appendChild(title);
        f.plot.appendChild(rule);
      }
      const brush = svg("rect", { class: "av-brush", y: f.top, height: f.bottom - f.top, width: 0,
        visibility: "hidden" });
      f.root.appendChild(brush);
      f.root.appendChild(svg("rect", { x: f.left, y: f.top, width: f.right - f.left, height: f.bottom - f.top,
        fill: "transparent", "data-role": "brush" }));
      const hoverRule = svg("line", { class: "av-hover-rule", y1: f.top, y2: f.bottom, visibility: "hidden" });
      const top = svg("g", { "clip-path": `url(#${clip})` });
      top.append(hoverRule, ...marks);
      f.root.appendChild(top);
      const card = h("div", { className: "av-card", "data-series": name, "data-points": String(points),
        "data-jumps": String(flagged) },
        [h("h4", { text: name, title: name }), f.root]);
      hoverValues(card, f, hoverRule, name, s, stepsF, T, runs, x0, x1);
      horizontalDrag(f.root, f, {
        onMove: (a, b) => {
          brush.setAttribute("x", f.x(a)); brush.setAttribute("width", Math.max(0, f.x(b) - f.x(a)));
          brush.setAttribute("visibility", "visible");
        },
        onEnd: (a, b, moved) => {
          brush.setAttribute("visibility", "hidden");
          if (!moved) return;
          model.set("step_range", [Math.round(a), Math.round(b)]);
          model.save_changes();
        },
      });
      f.root.addEventListener("dblclick", resetRange);
      cards.push(card);
    });
    grid.replaceChildren(...cards);
    legend.replaceChildren(...runs.map((name, r) => h("span", { className: "av-chip", "data-run": String(r) },
      [h("span", { className: "swatch", style: { background: colors[r] || "#888" } }), h("span", { text: name })])),
    h("span", { className: "av-chip", "data-role": "jump-key", title: "a change in level that stands out from the "
      + "curve's own noise (a drop, a shift, a spike, a divergence), in the run's colour; hover a ring for its "
      + "step and size" },
    [h("span", { className: "av-jump-key" }), h("span", { text: "sudden jump" })]));
    rangeInfo.textContent = range.length === 2 ? `steps ${range[0]}–${range[1]}` : "all steps";
    el.dataset.range = range.join(",");
    el.dataset.steps = String(T); // how many steps the charts span: grows while a run trains
  }

  /** Hovering a chart shows every run's value at the nearest step, and a ring its jump. */
  function hoverValues(card, f, rule, name, s, stepsF, T, runs, x0, x1) {
    const values = kit.array("values");
    const series = model.get("series_names") || [];
    card.addEventListener("pointermove", (/** @type {PointerEvent} */ e) => {
      const target = /** @type {Element} */ (e.target);
      const box = el.getBoundingClientRect();
      const at = [e.clientX - box.left + el.scrollLeft, e.clientY - box.top + el.scrollTop];
      if (target instanceof SVGElement && target.dataset.tip) {
        tooltip.show([target.dataset.tip], at[0], at[1]);
        return;
      }
      const r0 = f.root.getBoundingClientRect();
      const px = (e.clientX - r0.left) * (Number(f.root.getAttribute("width")) / r0.width || 1);
      if (!T || px < f.left || px > f.right) { tooltip.hide(); rule.setAttribute("visibility", "hidden"); return; }
      const step = f.invertX(px);
      let best = -1;
      for (let t = 0; t < T; t++) {
        if (stepsF[t] < x0 || stepsF[t] > x1) continue;
        if (best < 0 || Math.abs(stepsF[t] - step) < Math.abs(stepsF[best] - step)) best = t;
      }
      if (best < 0) return;
      rule.setAttribute("x1", f.x(stepsF[best])); rule.setAttribute("x2", f.x(stepsF[best]));
      rule.setAttribute("visibility", "visible");
      const lines = [`step ${stepsF[best]} · ${name}`];
      runs.forEach((run, r) => {
        const v = values ? values.data[(r * series.length + s) * T + best] : NaN;
        lines.push(`${run}: ${formatNumber(v)}`);
      });
      tooltip.show(lines, at[0], at[1]);
      el.dataset.hoverStep = String(stepsF[best]);
    });
    card.addEventListener("pointerleave", () => { tooltip.hide(); rule.setAttribute("visibility", "hidden"); });
  }

  function drawTables() {
    const columns = model.get("config_columns") || [], rows = model.get("config_rows") || [];
    const differs = new Set(model.get("config_differs") || []);
    const cls = (c) => (differs.has(c) ? "av-differs" : "");
    configTable.replaceChildren(h("tr", {}, columns.map((c) => h("th", { text: c, className: cls(c) }))),
      ...rows.map((row) => h("tr", {}, row.map((v, i) => h("td", { text: v, className: cls(columns[i]) })))));
    const runs = model.get("run_names") || [], series = model.get("series_names") || [];
    const means = kit.array("range_means");
    meansTable.replaceChildren(h("tr", {}, ["run", ...series].map((c) => h("th", { text: c }))),
      ...runs.map((name, r) => h("tr", {}, [h("td", { text: name }),
        ...series.map((_, s) => h("td", { text: formatNumber(means ? means.data[r * series.length + s] : NaN) }))])));
  }

  function resetRange() {
    model.set("step_range", []);
    model.save_changes();
  }

  const draw = () => { drawCharts(); drawTables(); el.dataset.ready = "1"; };
  const redraw = kit.frame(draw);
  kit.listen(reset, "click", resetRange);
  kit.on("run_names colours series_names steps values jumps partings config_rows config_columns step_range " +
    "range_means height", redraw);
  kit.onResize(grid, redraw);
  kit.onTheme(redraw);
  el.style.maxHeight = `${model.get("height")}px`;
  draw();
}

export default defineView({ name: "runs", css: CSS, arrays: ["steps", "values", "jumps", "range_means"], setup });

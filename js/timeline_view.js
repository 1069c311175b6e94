// @ts-check
// TimelineView: a checkpoint slider with play/pause. Ticks mark the checkpoint steps (spaced by step);
// dragging the slider or clicking a tick sets `step` (snapped to a checkpoint); play walks through the
// checkpoints every `interval` ms and stops at the last. "Δ since" picks `compare_to` (-1: none), the
// checkpoint the explorer shows differences from. The root carries data-step, data-steps and
// data-compare-to, each tick data-step, for tests and tools. In an explorer the step is also written to the
// shared Selection's `checkpoint`, so that the matrix and projection redraw from the frames they hold
// (js/common/checkpoint_frames.js) before the kernel has answered.
import { defineView } from "./common/view.js";
import { h } from "./common/dom.js";

/** @typedef {{ steps: number[], step: number, playing: boolean, interval: number, height: number,
 *   compare_to: number }} TimelineModel */

const CSS = `
.activis-timeline { display: flex; align-items: center; gap: 8px; padding: 4px 8px; font-size: 12px; }
.activis-timeline button { font: inherit; min-width: 56px; cursor: pointer; }
.activis-timeline .av-track { position: relative; flex: 1 1 auto; height: 36px; min-width: 120px; }
.activis-timeline input[type=range] { position: absolute; left: 0; right: 0; top: 0; width: 100%; margin: 0; }
.activis-timeline .av-tick { position: absolute; top: 20px; transform: translateX(-50%); font-size: 10px;
  color: var(--av-fg-muted); cursor: pointer; padding: 0 2px; border-top: 2px solid var(--av-border); }
.activis-timeline .av-tick[data-current="true"] { color: var(--av-accent); border-top-color: var(--av-accent);
  font-weight: 600; }
.activis-timeline .av-step { min-width: 80px; font-variant-numeric: tabular-nums; }
`;

export default defineView({ name: "timeline", css: CSS, setup });

/** @param {import("./common/view.js").Kit} kit */
function setup(kit) {
  const { model, el } = kit;
  const play = h("button", { "data-role": "play", title: "Play through the checkpoints" });
  const slider = /** @type {HTMLInputElement} */ (h("input", { type: "range", "data-role": "slider" }));
  const ticks = h("div");
  const track = h("div", { className: "av-track" }, [slider, ticks]);
  const label = h("span", { className: "av-step", "data-role": "step-label" });
  const compare = /** @type {HTMLSelectElement} */ (h("select", { "data-role": "compare",
    title: "Show each matrix row as its change since this checkpoint, and mark the instances whose prediction "
      + "changed" }));
  compare.addEventListener("change", () => { model.set("compare_to", Number(compare.value)); model.save_changes(); });
  const flipped = h("button", { text: "+ flipped", "data-role": "flipped",
    title: "Add the subset of instances whose prediction changed between the compared checkpoint (or the first) "
      + "and this one", onclick: () => model.send({ flipped: true }) });
  el.append(play, track, label, compare, flipped);

  const steps = () => /** @type {number[]} */ (model.get("steps"));
  /** @type {import("./common/selection.js").SharedSelection | null} */
  let shared = null; // an explorer's Selection: its views holding every checkpoint redraw from its checkpoint
  kit.selection((sel) => { shared = sel; });
  const setStep = (/** @type {number} */ step) => {
    if (step === model.get("step")) return;
    if (shared) shared.set({ checkpoint: step }); // the page's views move now, the kernel follows
    model.set("step", step);
    model.save_changes();
  };
  /** @type {ReturnType<typeof setInterval> | null} */
  let timer = null;

  function draw() {
    const s = steps();
    const first = s[0] ?? 0;
    const last = s[s.length - 1] ?? 0;
    slider.min = String(first);
    slider.max = String(last);
    slider.step = "any";
    slider.value = String(model.get("step"));
    ticks.replaceChildren(...s.map((step) => h("span", {
      className: "av-tick", text: String(step), "data-step": String(step),
      "data-current": String(step === model.get("step")),
      style: { left: `${last > first ? ((step - first) / (last - first)) * 100 : 50}%` },
      onclick: () => setStep(step),
    })));
    label.textContent = `step ${model.get("step")} · ${s.indexOf(model.get("step")) + 1}/${s.length}`;
    play.textContent = model.get("playing") ? "❚❚ pause" : "▶ play";
    const against = model.get("compare_to");
    compare.replaceChildren(h("option", { value: "-1", text: "no difference" }),
      ...s.map((step) => h("option", { value: String(step), text: `Δ since step ${step}` })));
    compare.value = String(against);
    el.dataset.compareTo = String(against);
    el.dataset.step = String(model.get("step"));
    el.dataset.steps = s.join(",");
    el.dataset.ready = "1";
  }

  slider.addEventListener("input", () => {
    const value = Number(slider.value);
    let best = steps()[0];
    for (const s of steps()) if (Math.abs(s - value) < Math.abs(best - value)) best = s;
    setStep(best);
  });
  kit.listen(slider, "change", () => { slider.value = String(model.get("step")); });

  function advance() {
    const s = steps();
    const i = s.indexOf(model.get("step"));
    if (i >= s.length - 1) {
      model.set("playing", false);
      model.save_changes();
      return;
    }
    setStep(s[i + 1]);
  }
  function follow() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    if (model.get("playing")) timer = setInterval(advance, Math.max(50, model.get("interval")));
  }
  play.addEventListener("click", () => {
    const s = steps();
    if (!model.get("playing") && model.get("step") === s[s.length - 1]) setStep(s[0]); // replay from the start
    model.set("playing", !model.get("playing"));
    model.save_changes();
  });
  kit.cleanup(() => { if (timer !== null) clearInterval(timer); });
  kit.on("steps step playing compare_to", draw);
  kit.on("playing interval", follow);
  draw();
  follow();
}

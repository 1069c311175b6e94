// @ts-check
// The cockpit's instruments: which card shows which quantities, and the small statistics the
// charts need (smoothing, the log-scale test, the median). No DOM here.

/**
 * @typedef {{ key: string, title: string, kind: string, series?: string[], log?: boolean, layerwise?: boolean,
 *   metrics?: boolean, unit?: string, needs?: string[] }} Instrument
 * @typedef {{ steps: ArrayLike<number>, series: Map<string, ArrayLike<number>>, names: string[], layer: string,
 *   range: number[], tracked: Set<string> }} CockpitData one draw's view of the model
 */

export const KNOWN = new Set(["Loss", "GradNorm", "Distance", "UpdateSize", "NormTest", "InnerTest", "OrthoTest",
  "HessMaxEV", "HessTrace", "TICDiag", "TICTrace", "Alpha", "lr", "MeanGSNR", "CABS", "EarlyStopping"]);
// a positive series whose largest value is this many times its median reads on a log scale
const SPIKY = 100;

// key, title, kind, series shown, the y axis' label; "metrics" adds the user's own logged numbers
/** @type {Instrument[]} */
export const INSTRUMENTS = [
  { key: "alpha", title: "Step size α", kind: "alpha", needs: ["Alpha"] },
  { key: "gauge", title: "Gradient tests", kind: "gauge", needs: ["NormTest", "InnerTest", "OrthoTest"] },
  { key: "maxev", title: "Max eigenvalue", kind: "line", series: ["HessMaxEV"], log: true, unit: "λmax of H" },
  { key: "distance", title: "Distance & update size", kind: "line", series: ["Distance", "UpdateSize"],
    layerwise: true, unit: "L2 norm" },
  { key: "tests", title: "Gradient tests over steps", kind: "line", series: ["NormTest", "InnerTest", "OrthoTest"],
    unit: "test ratio" },
  { key: "trace", title: "Hessian trace", kind: "line", series: ["HessTrace"], layerwise: true, unit: "tr(H)" },
  { key: "gradnorm", title: "Gradient norm", kind: "line", series: ["GradNorm"], layerwise: true, unit: "‖∇L‖₂" },
  { key: "hist1d", title: "Gradient histogram", kind: "hist1d", needs: ["GradHist1d"] },
  { key: "tic", title: "TIC", kind: "line", series: ["TICDiag", "TICTrace"], unit: "TIC" },
  { key: "loss", title: "Loss & accuracy", kind: "line", series: ["Loss"], metrics: true, unit: "loss" },
  { key: "hist2d", title: "Gradient × parameter histogram", kind: "hist2d", needs: ["GradHist2d"] },
  { key: "lr", title: "Learning rate", kind: "line", series: ["lr"], unit: "learning rate" },
  { key: "other", title: "Other signals", kind: "line", series: ["MeanGSNR", "CABS", "EarlyStopping"],
    unit: "value" },
];

export function ema(/** @type {ArrayLike<number>} */ values, alpha = 0.2) {
  // the reference's smoothing: exponential moving average over the finite values
  const out = new Float64Array(values.length).fill(NaN);
  let acc = NaN;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    acc = Number.isFinite(acc) ? alpha * v + (1 - alpha) * acc : v;
    out[i] = acc;
  }
  return out;
}

/** Whether positive values spike far above their median (a diverging loss): they read on a log scale. */
export function spiky(/** @type {ArrayLike<number>[]} */ arrays) {
  const values = [];
  for (const a of arrays) for (let i = 0; i < a.length; i++) if (Number.isFinite(a[i])) values.push(a[i]);
  if (values.length < 3 || values.some((v) => v <= 0)) return false;
  values.sort((a, b) => a - b);
  return values[values.length - 1] > SPIKY * values[Math.floor(values.length / 2)];
}

export function median(arr) {
  const s = [...arr].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Whether the run's configuration tracks what an instrument shows (the loss card always shows). */
export function isTracked(/** @type {Instrument} */ inst, /** @type {CockpitData} */ d) {
  if (inst.metrics) return true;
  const needs = inst.needs || inst.series || [];
  return needs.some((name) => d.tracked.has(name));
}

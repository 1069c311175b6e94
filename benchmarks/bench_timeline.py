"""What switching the explorer's checkpoint costs, in the kernel and in the page, and what a brush costs.

    .venv/bin/python benchmarks/bench_timeline.py              # 10,000 instances x 10 checkpoints
    .venv/bin/python benchmarks/bench_timeline.py --quick      # 2,000 instances
    .venv/bin/python benchmarks/bench_timeline.py --no-browser # the kernel part only
    .venv/bin/python benchmarks/bench_timeline.py --switch-only --repeat 7  # the page's switch, no brushes

An MLP 64-128-64-10 on random blobs is captured at 10 checkpoints by `activis.Checkpoints`. Then
`explorer.checkpoint = step` (the matrix, the instance panel and the projection's colours moved to
`store.at(step)`, the aligned layout shown) is timed against the baseline a user without the timeline
would pay: a new `ActivationMatrix` and `InstancePanel` over `store.at(step)` (no projection at all),
alternating the two per step. The aligned layouts are computed before timing (they run in a thread).
Target (#23): switching <= 100 ms per checkpoint at 10,000 x 10 in the kernel, and not slower than the baseline.

The browser part (JupyterLab + Chromium, `conftest.lab_page`) opens the same explorer in a notebook and
times in the page, from the event to the repaint: a click on a timeline tick until the matrix and the
projection have both drawn the new checkpoint (the projection's first frame of its move; the end of the
move and the kernel's follow-up, which draws nothing again, are printed too; the page draws from the
frames each view holds, `activis/widgets/checkpoint_frames.py`, received before timing), and a box
brushed in the data map (and a range across the per-instance loss) until the projection, the matrix and the
instance panel have drawn the brushed instances. The baseline, measured in the same page, is the round trip
any kernel-backed view pays: a value typed into one ipywidgets IntText that a Python observer copies into
another, until that one shows it. Each event starts from an idle kernel (2 s after the one before).
Target (#23): switching and brushing <= 100 ms in the page.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import torch

from activis import ActivationMatrix, Checkpoints, Explorer, InstancePanel, Subsets, open_store


def make_store(root: pathlib.Path, n: int, checkpoints: int):
    torch.manual_seed(0)
    y = torch.arange(n) % 10
    x = torch.randn(10, 64)[y] * 2 + torch.randn(n, 64)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    probe = Checkpoints(model, (x, y), root, every=1)
    for step in range(checkpoints):
        probe(step)
        batch = torch.randint(0, n, (256,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return open_store(root / "probe")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--switch-only", action="store_true", help="time the checkpoint switch, not the brushes")
    args = parser.parse_args()
    n = 2_000 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(pathlib.Path(tmp) / "run", n, 10)
        kernel_part(store, n)
        if not args.no_browser:
            browser_part(pathlib.Path(tmp), n, args.repeat, args.switch_only)


def kernel_part(store, n: int) -> None:
    explorer = Explorer(store, method="pca", projection_params={"n_epochs": 20})
    explorer.timeline.wait_for_layouts()
    switch, follow, fresh = [], [], []
    for step in store.checkpoints[-2::-1] + store.checkpoints[1:]:
        # as in a kernel, the other views (why, evaluation, slices, instruments, graph) follow after the
        # matrix, projection and instance panel have been sent: timed apart
        explorer.timeline._followers_pending = True
        t0 = time.perf_counter()
        explorer.checkpoint = step
        switch.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        explorer.timeline._follow_checkpoint()
        follow.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        at = store.at(step)
        ActivationMatrix(at, explorer.selection.layer, subsets=Subsets(at)).close()
        InstancePanel(at).close()
        fresh.append(time.perf_counter() - t0)
    s, f = statistics.median(switch), statistics.median(fresh)
    print(f"{n:,} instances x {len(store.checkpoints)} checkpoints: switching {s * 1e3:.1f} ms (median of "
          f"{len(switch)}), fresh matrix + instance panel {f * 1e3:.1f} ms; ratio {s / f:.2f}; the other views "
          f"follow in {statistics.median(follow) * 1e3:.1f} ms more")
    print(f"target <= 100 ms: {'met' if s <= 0.1 else 'NOT met'}; not slower than fresh: "
          f"{'met' if s <= f else 'NOT met'}")


SETUP = """
import ipywidgets as widgets
from activis import Explorer, open_store
ex = Explorer(open_store("run/probe"), method="pca", projection_params={"n_epochs": 20})
ex.timeline.wait_for_layouts()
echo_in, echo_out = widgets.IntText(0), widgets.IntText(0)
echo_in.add_class("bench-echo-in"); echo_out.add_class("bench-echo-out")
echo_in.observe(lambda c: setattr(echo_out, "value", c["new"]), "value")
widgets.VBox([widgets.HBox([echo_in, echo_out]), ex])
"""

# in the page: run `act`, then poll every animation frame until `done()`; the milliseconds in between
UNTIL = """
  const until = async (act, done, limit = 20000) => {
    const t0 = performance.now();
    act();
    while (!done()) {
      if (performance.now() - t0 > limit) return -1;
      await new Promise((r) => requestAnimationFrame(r));
    }
    return performance.now() - t0;
  };
"""

ROUND_TRIP = """
(value) => {""" + UNTIL + """
  const input = document.querySelector(".bench-echo-in input"), out = document.querySelector(".bench-echo-out input");
  return until(() => { input.value = String(value); input.dispatchEvent(new Event("change", { bubbles: true }));
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true })); },
    () => out.value === String(value));
}"""

SWITCH = """
async (step) => {""" + UNTIL + """
  const root = document.querySelector(".activis-explorer");
  const matrix = root.querySelector(".activis-matrix"), proj = root.querySelector(".activis-projection");
  const tick = root.querySelector(`.activis-timeline .av-tick[data-step='${step}']`);
  const m0 = matrix.dataset.rendered, p0 = proj.dataset.rendered;
  const f0 = matrix.dataset.followed;
  let handled = 0;  // the click's own work in the page, before the browser can paint
  const painted = await until(() => { const t = performance.now(); tick.click(); handled = performance.now() - t; },
    () => matrix.dataset.rendered !== m0 && proj.dataset.shownMethod === `aligned · step ${step}`
      && proj.dataset.rendered !== p0);
  const t0 = performance.now() - painted;  // the click
  let settled = -1, followed = -1;  // the projection's move ends; the kernel's update arrives (drawn no second time)
  await until(() => {}, () => {
    const now = performance.now() - t0;
    if (settled < 0 && proj.dataset.animating !== "true") settled = now;
    if (followed < 0 && matrix.dataset.followed !== f0) followed = now;
    return settled >= 0 && followed >= 0;
  });
  return [painted, settled, followed, handled];
}"""

# a brush drawn with pointer events on a canvas (page coordinates), until every other view has drawn it
BRUSH = """
async ([selector, from, to]) => {""" + UNTIL + """
  const root = document.querySelector(".activis-explorer");
  const canvas = root.querySelector(selector), box = canvas.getBoundingClientRect();
  const matrix = root.querySelector(".activis-matrix"), proj = root.querySelector(".activis-projection");
  const panel = root.querySelector(".activis-instances");
  const m0 = matrix.dataset.rendered, p0 = proj.dataset.filtered, i0 = panel.dataset.rendered;
  const at = (type, [x, y]) => canvas.dispatchEvent(new PointerEvent(type, { bubbles: true, pointerId: 1, button: 0,
    clientX: box.left + x * box.width, clientY: box.top + y * box.height }));
  // the first draws come from the page (the matrix's row, the panel narrowed); then the kernel's replace them
  const kernel = {}, t0 = performance.now();
  const watch = (el, key, from) => new MutationObserver(() => {
    if (kernel[key] === undefined && el.dataset[from] === "kernel") kernel[key] = performance.now() - t0;
  }).observe(el, { attributes: true, attributeFilter: ["data-rendered", "data-rows-from"] });
  watch(matrix, "matrix", "rowsFrom");
  watch(panel, "panel", "sampleFrom");
  const ms = await until(() => { at("pointerdown", from); at("pointermove", to); at("pointerup", to); },
    () => proj.dataset.filtered !== p0 && matrix.dataset.rendered !== m0 && panel.dataset.rendered !== i0);
  const by = [matrix.dataset.rowsFrom, panel.dataset.sampleFrom].join("/");
  await until(() => {}, () => kernel.matrix !== undefined && kernel.panel !== undefined);
  return [ms, Number(proj.dataset.filtered), Math.max(kernel.matrix, kernel.panel), by];
}"""


# each event starts from an idle kernel: what the one before left for later (the evaluation panel's
# comparison of a brush, the views that follow a checkpoint) is not counted in the next one
IDLE_MS = 2000


def browser_part(root: pathlib.Path, n: int, repeat: int, switch_only: bool = False) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
    from conftest import lab_page
    from jupyter_page import open_cells, run_cell

    with lab_page(root, width=1400, height=900, timeout=600_000) as (lab, page):
        panel = open_cells(page, lab, "bench.ipynb", [SETUP])
        cell = run_cell(panel, 0, timeout=900_000)
        cell.locator(".activis-projection[data-shown-method='aligned · step 9']").wait_for(timeout=600_000)
        cell.locator(".activis-data_map[data-ready]").wait_for()
        for view in ("matrix", "projection"):  # each checkpoint's frames, sent in the background
            cell.locator(f".activis-{view}[data-frames='10']").wait_for(timeout=120_000)
        load_before = os.getloadavg()
        trips = [page.evaluate(ROUND_TRIP, value) for value in range(1, repeat + 4)][3:]  # warm first
        switches, settled, followed, handled = [], [], [], []
        for step in [5, 9, 2, 8, 0, 9, 4][:max(repeat, 2)]:
            page.wait_for_timeout(IDLE_MS)
            painted, done, follow, work = page.evaluate(SWITCH, step)
            switches.append(painted)
            settled.append(done)
            followed.append(follow)
            handled.append(work)
        brushes, sizes = {"data map": [], "per-instance loss": []}, {}
        confirmed, drawn_by = {"data map": [], "per-instance loss": []}, {}
        # two boxes each (fractions of the canvas), both over instances: a box over none clears the brush,
        # which the instance panel can only redraw from the kernel's new sample (a round trip, not a brush)
        boxes = {"data map": ("canvas[data-role='map']", [[0.1, 0.75], [0.35, 0.9]], [[0.1, 0.05], [0.6, 0.9]]),
                 "per-instance loss": ("canvas[data-quantity='loss']", [[0.5, 0.1], [0.98, 0.9]],
                                       [[0.3, 0.1], [0.98, 0.9]])}
        for name, (selector, small, large) in boxes.items() if not switch_only else ():
            for i in range(repeat):
                page.wait_for_timeout(IDLE_MS)
                ms, size, kernel_ms, by = page.evaluate(BRUSH, [selector, *(small if i % 2 else large)])
                brushes[name].append(ms)
                confirmed[name].append(kernel_ms)
                sizes.setdefault(name, []).append(size)
                drawn_by.setdefault(name, []).append(by)
        load_after = os.getloadavg()
    trip = statistics.median(trips)
    switch, settle = statistics.median(switches), statistics.median(settled)
    print(f"in the page ({n:,} instances, medians; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after): kernel round trip (IntText echo) {trip:.1f} ms  {[round(v) for v in trips]}")
    print(f"  switch checkpoint (tick click -> matrix and projection drawn): {switch:.1f} ms, ratio to the round "
          f"trip {switch / trip:.2f}; projection's move ends at {settle:.1f} ms; the kernel's follow-up arrives at "
          f"{statistics.median(followed):.1f} ms (the click's own work {statistics.median(handled):.1f} ms); target "
          f"<= 100 ms: {'met' if switch <= 100 else 'NOT met'}  {[round(v, 1) for v in switches]}")
    for name, values in brushes.items() if not switch_only else ():
        b = statistics.median(values)
        print(f"  {name} brush ({'/'.join(f'{s:,}' for s in sorted(set(sizes[name])))} instances -> projection, "
              f"matrix, instance panel drawn): {b:.1f} ms, "
              f"ratio {b / trip:.2f}; target <= 100 ms: {'met' if b <= 100 else 'NOT met'}  "
              f"{[round(v) for v in values]}; matrix/panel drawn by the {', '.join(sorted(set(drawn_by[name])))}, "
              f"the kernel's replacing them at {statistics.median(confirmed[name]):.1f} ms")


if __name__ == "__main__":
    main()

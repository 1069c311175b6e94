"""Projection: cold-start UMAP against umap-learn, PCA at 100,000 x 512, bytes sent, drawing in the page.

    .venv/bin/python benchmarks/bench_projection.py                 # everything (~5 min on 2 cores)
    .venv/bin/python benchmarks/bench_projection.py cold pca        # only some parts
    parts: cold, pca, browser, responsive

cold     Fresh-process time to a UMAP layout of 10,000 x 256 synthetic activations (10 classes):
         ``umap.UMAP().fit_transform`` in one fresh process against ``project(store, layer,
         "umap").wait()`` in another, same run; prints the speed-up (target >= 3x) and layout
         quality for both: kNN label agreement (k=10, in 2D) and trustworthiness (k=10, 3,000
         instances). Both sides are timed the same way: ``--repeat`` runs each, interleaved, each
         in a fresh process with numba's disk cache as the earlier runs left it, the best of each
         side compared. Ours also runs once with an empty numba cache (the very first run on a
         machine: the SGD kernel compiles once). ``--rows`` shrinks the data for a quick run.
pca      PCA layout of 100,000 x 512 (float16 store, nothing cached) against scikit-learn's
         randomized PCA of the same array loaded into memory; then the bytes per point a
         ProjectionView sends (target <= 12) against the same data as JSON lists.
responsive  How late 10 ms sleeps of the notebook's thread wake while a UMAP layout computes in its job's
         thread, against the same sleeps with nothing running (target: median lag within 50 ms of idle).
browser  In JupyterLab + Chromium, measured in the page: first draw of 100,000 points, a highlight
         update of 10,000 of them (target <= 50 ms), a redraw per pan/zoom step, and 1,000,000
         points; the baseline draws the same 100,000 points the naive way (fillRect per point).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve()
TESTS = HERE.parent.parent / "tests"


def activations(n, d, classes=10, seed=0):
    """ReLU activations of a layer that sees 10 classes on a 12-dimensional manifold, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    z = rng.standard_normal((classes, 12))[y] * 2.5 + rng.standard_normal((n, 12))
    x = np.maximum(z @ (rng.standard_normal((12, d)) / np.sqrt(12)) + 0.3 * rng.standard_normal((n, d)), 0)
    return x.astype(np.float32), y


def make_store(path, x, y):
    from activis.store import write_store

    logits = np.eye(int(y.max()) + 1)[y] * 2.0
    return write_store(path, {"fc": x}, labels=y, outputs=logits, overwrite=True)


# ----------------------------------------------------------------------------- children (fresh processes)
def child(kind: str, folder: str) -> None:
    t0 = time.perf_counter()
    folder_path = pathlib.Path(folder)
    if kind == "plain":
        import umap

        x = np.load(folder_path / "x.npy")
        t1 = time.perf_counter()
        layout = umap.UMAP().fit_transform(x)
    else:
        from activis.projection import project
        from activis.store import open_store

        store = open_store(folder_path / "store")
        t1 = time.perf_counter()
        layout = project(store, "fc", "umap").wait()
    np.save(folder_path / f"layout-{kind}.npy", np.asarray(layout, dtype=np.float32))
    print(json.dumps({"imports_s": t1 - t0, "fit_s": time.perf_counter() - t1}))


def run_child(kind: str, folder: pathlib.Path, env=None) -> dict:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(HERE), "--child", kind, str(folder)], capture_output=True, text=True,
                         env=env, check=False)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{out.stderr[-3000:]}")
    info = json.loads(out.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, **info, "layout": np.load(folder / f"layout-{kind}.npy")}


def quality(layout, x, y, seed=0):
    from sklearn.manifold import trustworthiness
    from sklearn.neighbors import NearestNeighbors

    idx = NearestNeighbors(n_neighbors=11).fit(layout).kneighbors(layout)[1][:, 1:]
    agreement = float((y[idx] == y[:, None]).mean())
    sample = np.random.default_rng(seed).choice(len(x), min(3000, len(x)), replace=False)
    trust = float(trustworthiness(x[sample], layout[sample], n_neighbors=10))
    return agreement, trust


def bench_cold(rows: int = 10_000, repeat: int = 2) -> None:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-umap-"))
    try:
        x, y = activations(rows, 256)
        store = make_store(folder / "store", x, y)
        np.save(folder / "x.npy", np.asarray(store.activations("fc"), dtype=np.float32))  # the same values
        x = np.load(folder / "x.npy")

        def ours(kind, env=None):
            shutil.rmtree(store.section("projections"), ignore_errors=True)
            return run_child(kind, folder, env)

        empty_cache = folder / "numba-cache"
        print(f"cold UMAP, {rows:,} x 256, each in a fresh process (wall time includes interpreter start and imports)")
        ours_runs, plain_runs = [], []
        for _ in range(repeat):  # interleaved, so that load from other processes falls on both sides
            ours_runs.append(ours("ours"))
            plain_runs.append(run_child("plain", folder))
        first = ours("ours", env={**os.environ, "NUMBA_CACHE_DIR": str(empty_cache)})
        warm = min(ours_runs, key=lambda r: r["wall_s"])
        plain = min(plain_runs, key=lambda r: r["wall_s"])
        q_plain, q_ours, q_first = (quality(r["layout"], x, y) for r in (plain, warm, first))
        for name, r, q in ((f"umap.UMAP().fit_transform, best of {repeat}", plain, q_plain),
                           (f"activis, best of {repeat}", warm, q_ours),
                           ("activis, empty numba cache", first, q_first)):
            print(f"  {name:34s} {r['wall_s']:7.1f} s  (imports {r['imports_s']:5.1f} s, fit {r['fit_s']:6.1f} s)"
                  f"   kNN label agreement {q[0]:.3f}   trustworthiness {q[1]:.3f}")
        every = {side: ", ".join(f"{r['wall_s']:.1f}" for r in runs) for side, runs in (("ours", ours_runs),
                                                                                        ("plain", plain_runs))}
        print(f"  every run, in order: activis {every['ours']} s; umap-learn {every['plain']} s")
        print(f"  SPEED-UP (best of {repeat} each, same caches): {plain['wall_s'] / warm['wall_s']:.1f}x   "
              "(target >= 3x)")
        print(f"  SPEED-UP (very first run):   {plain['wall_s'] / first['wall_s']:.1f}x")
        print(f"  quality, activis - umap-learn: kNN agreement {q_ours[0] - q_plain[0]:+.3f}, "
              f"trustworthiness {q_ours[1] - q_plain[1]:+.3f}   (target: not worse)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- PCA and bytes per point
def bench_pca() -> None:
    from sklearn.decomposition import PCA

    from activis.projection import project
    from activis.widgets.projection_view import ProjectionView

    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-pca-"))
    try:
        x, y = activations(100_000, 512)
        store = make_store(folder / "store", x, y)
        del x
        ours_s, base_s = [], []
        for _ in range(3):  # alternate, so that load from other processes falls on both
            shutil.rmtree(store.section("projections"), ignore_errors=True)
            t0 = time.perf_counter()
            positions = project(store, "fc", "pca").wait()
            ours_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            reference = PCA(2, svd_solver="randomized", random_state=0).fit_transform(
                np.asarray(store.activations("fc"), dtype=np.float32))
            base_s.append(time.perf_counter() - t0)
        corr = min(abs(np.corrcoef(positions[:, c], reference[:, c])[0, 1]) for c in range(2))
        ours, base = statistics.median(ours_s), statistics.median(base_s)
        print("PCA layout, 100,000 x 512 (float16 store; median of 3)")
        print(f"  activis project(..., 'pca')           {ours:6.2f} s   (exact; streams the memory map)")
        print(f"  scikit-learn randomized PCA in memory {base:6.2f} s   (loads the array as float32 first)")
        print(f"  RATIO scikit-learn / activis: {base / ours:.2f}x   layouts agree: |corr| >= {corr:.4f}")

        view = ProjectionView(store, "fc", "pca")
        while view.shown_method != "pca":
            time.sleep(0.05)
        state = view.get_state()
        binary = sum(v["buffer"].nbytes for v in state.values() if isinstance(v, dict) and "buffer" in v)
        other = len(json.dumps({k: v for k, v in state.items() if not (isinstance(v, dict) and "buffer" in v)}))
        n = store.n_instances
        per_point = (binary + other) / n
        as_json = len(json.dumps({"x": positions[:, 0].tolist(), "y": positions[:, 1].tolist(),
                                  "label": y.tolist()})) / n
        print(f"  BYTES PER POINT sent by ProjectionView: {per_point:.2f} (binary {binary / n:.2f} + JSON state "
              f"{other / n:.3f})   target <= 12")
        print(f"  the same positions and labels as JSON lists: {as_json:.1f} bytes per point "
              f"({as_json / per_point:.1f}x more)")
        view.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- browser
NAIVE_FILLRECT = """([n]) => {
  const canvas = document.createElement('canvas');
  canvas.width = 850; canvas.height = 540;
  const ctx = canvas.getContext('2d');
  const colours = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7',
                   '#9c755f', '#bab0ac'];
  const xs = new Float32Array(n).map(() => Math.random() * 840);
  const ys = new Float32Array(n).map(() => Math.random() * 530);
  const t0 = performance.now();
  for (let i = 0; i < n; i++) { ctx.fillStyle = colours[i % 10]; ctx.fillRect(xs[i], ys[i], 3, 3); }
  ctx.getImageData(0, 0, 1, 1);  // wait until the drawing is done
  return performance.now() - t0;
}"""


def wait_rendered_after(page, root, action, timeout=60_000):
    before = int(root.get_attribute("data-rendered") or 0)
    action()
    page.wait_for_function("([el, n]) => Number(el.dataset.rendered) > n", arg=[root.element_handle(), before],
                           timeout=timeout)


def measure_view(page, lab, name, n, dims, highlight_rounds=6):
    from jupyter_page import open_cells, run_cell

    panel = open_cells(page, lab, name, [
        "import numpy as np, time\nfrom activis.store import open_store\n"
        "from activis.widgets.projection_view import ProjectionView\n"
        f"view = ProjectionView(open_store('store_{n}'), 'fc', 'pca', height=600)\nview",
        # 10,000 and 9,999 in turn, so that each update is visible in data-highlighted
        "k = 9_999 if view.highlighted_indices is not None and len(view.highlighted_indices) == 10_000 else 10_000\n"
        "view.highlight(np.random.default_rng().choice(view.store.n_instances, k, replace=False))",
    ])
    t0 = time.perf_counter()
    run_cell(panel, 0)
    root = panel.locator(f".activis-projection[data-points='{n}']")
    root.wait_for(timeout=300_000)
    cell_to_drawn = time.perf_counter() - t0
    first = float(root.get_attribute("data-first-draw-ms"))
    highlights = []
    for _ in range(highlight_rounds):
        before = root.get_attribute("data-highlighted")
        run_cell(panel, 1)
        page.wait_for_function("([el, b]) => el.dataset.highlighted !== b", arg=[root.element_handle(), before])
        highlights.append(float(root.get_attribute("data-highlight-ms")))
    box = root.locator("canvas.av-proj-points").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    frames = []
    for i in range(16):  # zoom in then out, one redraw per wheel step
        wait_rendered_after(page, root, lambda i=i: page.mouse.wheel(0, -120 if i < 8 else 120))
        frames.append(float(root.get_attribute("data-draw-ms")))
    return {"cell_to_drawn_s": cell_to_drawn, "first_draw_ms": first, "highlight_ms": highlights,
            "frame_ms": frames}


def bench_browser() -> None:
    sys.path.insert(0, str(TESTS))
    from conftest import lab_page

    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-proj-browser-"))
    for n, d in ((100_000, 32), (1_000_000, 8)):
        x, y = activations(n, d)
        store = make_store(root / f"store_{n}", x, y)
        from activis.projection import project

        project(store, "fc", "pca").wait()  # cached: the browser part measures drawing, not PCA
    try:
        with lab_page(root, timeout=300_000) as (lab, page):
            small = measure_view(page, lab, "bench_100k.ipynb", 100_000, 32)
            naive = [page.evaluate(NAIVE_FILLRECT, [100_000]) for _ in range(5)]
            lab.shutdown_kernels()
            big = measure_view(page, lab, "bench_1m.ipynb", 1_000_000, 8, highlight_rounds=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours_frame = statistics.median(small["frame_ms"])
    print("ProjectionView in JupyterLab + headless Chromium (no GPU), times measured in the page")
    print(f"  100,000 points: first draw {small['first_draw_ms']:.1f} ms (cell run to drawn: "
          f"{small['cell_to_drawn_s']:.2f} s, kernel and transfer included)")
    print(f"  100,000 points: HIGHLIGHT UPDATE of 10,000: median {statistics.median(small['highlight_ms']):.1f} ms, "
          f"max {max(small['highlight_ms']):.1f} ms   (target <= 50 ms)")
    print(f"  100,000 points: redraw per pan/zoom step median {ours_frame:.1f} ms, max {max(small['frame_ms']):.1f} ms")
    print(f"  naive fillRect per point, 100,000 points: median {statistics.median(naive):.1f} ms   "
          f"RATIO naive / ours: {statistics.median(naive) / ours_frame:.1f}x")
    print(f"  1,000,000 points: first draw {big['first_draw_ms']:.1f} ms (cell run to drawn "
          f"{big['cell_to_drawn_s']:.2f} s); redraw per pan/zoom step median "
          f"{statistics.median(big['frame_ms']):.1f} ms; highlight of 10,000 "
          f"{statistics.median(big['highlight_ms']):.1f} ms")


def _sleep_lags(count: int, until=lambda: False) -> list[float]:
    """How late 10 ms sleeps of this thread wake, ``count`` times or until ``until()``."""
    lags = []
    while len(lags) < count and not until():
        t = time.perf_counter()
        time.sleep(0.01)
        lags.append(time.perf_counter() - t - 0.01)
    return lags


def bench_responsive() -> None:
    from activis import project

    x, y = activations(1200, 16, classes=4)
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(pathlib.Path(tmp) / "store", x, y)
        project(store, "fc", "umap", n_epochs=10).wait(600)  # compiled and cached before anything is measured
        idle = _sleep_lags(50)
        job = project(store, "fc", "umap", n_epochs=3000, random_state=11)
        busy = _sleep_lags(300, until=lambda: job.done)
        job.cancel()
    print("10 ms sleeps of the notebook's thread, idle and while a UMAP layout runs in its thread")
    print(f"  median lag idle {statistics.median(idle) * 1000:.2f} ms, during the layout "
          f"{statistics.median(busy) * 1000:.2f} ms over {len(busy)} sleeps")
    print(f"  EXTRA LAG during the layout: {(statistics.median(busy) - statistics.median(idle)) * 1000:.2f} ms "
          "(target < 50 ms)")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="cold: instances of the UMAP data")
    parser.add_argument("--repeat", type=int, default=2, help="cold: runs of each side")
    args, rest = parser.parse_known_args()
    parts = {"cold": lambda: bench_cold(args.rows, args.repeat), "pca": bench_pca, "browser": bench_browser,
             "responsive": bench_responsive}
    unknown = set(rest) - set(parts)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(parts)}")
    for part in rest or parts:
        parts[part]()


if __name__ == "__main__":
    main()

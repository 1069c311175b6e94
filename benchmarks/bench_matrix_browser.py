"""ActivationMatrix in JupyterLab + Chromium: draw a 100 x 1,024 matrix and re-sort it, timed in the page.

Times come from the view itself (``data-draw-ms``: new values to pixels on the canvas;
``data-sort-ms``: a new neuron order to pixels, no kernel involved) and, for the paint the user
waits for, up to the next animation frame. The baseline, measured in the same page, draws the
same 102,400 cells the naive way (one fillRect per cell). Needs Debian's chromium. Run:

    .venv/bin/python benchmarks/bench_matrix_browser.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from test_browser_activation_matrix import make_store, rendered_after, row_label  # noqa: E402

from conftest import lab_page  # noqa: E402
from jupyter_page import open_cells, run_cell  # noqa: E402

NAIVE_FILLRECT = """([rows, cols]) => {
  const canvas = document.createElement('canvas');
  canvas.width = 900; canvas.height = 400;
  const ctx = canvas.getContext('2d');
  const values = new Float32Array(rows * cols).map(() => Math.random());
  const w = canvas.width / cols, h = canvas.height / rows;
  const t0 = performance.now();
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    const v = Math.round(255 * (1 - values[r * cols + c]));
    ctx.fillStyle = `rgb(${v},${v},255)`;
    ctx.fillRect(c * w, r * h, w, h);
  }
  ctx.getImageData(0, 0, 1, 1);  // wait for the drawing to be done
  return performance.now() - t0;
}"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-matrix-"))
    make_store(root / "store", n=2000, n_neurons=1024, n_classes=10)
    with lab_page(root) as (lab, page):
        panel = open_cells(page, lab, "bench.ipynb", [
            "from activis.store import open_store\nfrom activis.widgets.activation_matrix import ActivationMatrix\n"
            "m = ActivationMatrix(open_store('store'), 'fc')\nfor i in range(90):\n    m.add_instance(i)\nm",
            "m.statistic = 'std' if m.statistic == 'mean' else 'mean'",
        ])
        t0 = time.perf_counter()
        view = run_cell(panel, 0).locator(".activis-matrix[data-rows='100']")
        view.wait_for()
        first = float(view.get_attribute("data-draw-ms"))
        print(f"first view: cell run to drawn matrix {time.perf_counter() - t0:.2f} s "
              f"(building 100 rows in Python included); in-page draw {first:.1f} ms")

        draws, draw_frames = [], []
        for _ in range(args.repeat):  # new values from Python: decode, scale, image, labels
            rendered_after(page, view, lambda: run_cell(panel, 1))
            draws.append(float(view.get_attribute("data-draw-ms")))
            page.wait_for_function("(el) => el.dataset.drawMsFrame !== undefined", arg=view.element_handle())
            draw_frames.append(float(view.get_attribute("data-draw-ms-frame")))

        sorts, sort_frames = [], []
        keys = ["subset:true two", "instance:5", "subset:true zero", "instance:40", "subset:true one"]
        for i in range(args.repeat):
            label = row_label(view, keys[i % len(keys)])
            label.scroll_into_view_if_needed()
            label.hover()
            rendered_after(page, view, label.locator(".av-sort").click)
            sorts.append(float(view.get_attribute("data-sort-ms")))
            page.wait_for_timeout(50)
            sort_frames.append(float(view.get_attribute("data-sort-ms-frame")))

        naive = statistics.median(page.evaluate(NAIVE_FILLRECT, [100, 1024]) for _ in range(3))

    draw, sort = statistics.median(draws), statistics.median(sorts)
    print(f"draw 100 x 1,024 (median of {len(draws)}): {draw:.1f} ms, to next frame "
          f"{statistics.median(draw_frames):.1f} ms  (target 200 ms: {draw / 200:.2f} of it)")
    print(f"re-sort by a row (median of {len(sorts)}):  {sort:.1f} ms, to next frame "
          f"{statistics.median(sort_frames):.1f} ms  (target 50 ms: {sort / 50:.2f} of it)")
    print(f"baseline, one fillRect per cell in the same page: {naive:.1f} ms  -> draw ratio {draw / naive:.2f}, "
          f"re-sort ratio {sort / naive:.2f}")


if __name__ == "__main__":
    main()

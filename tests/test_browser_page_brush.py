"""A brush answers in the page first, the kernel confirms (#28 item 2, #23's brush speed), in a real JupyterLab.

For every brush kind (a lasso in the projection, a box in the data map, a range across the per-instance loss)
the first draws of the matrix and the instance panel after the brush are recorded as they happen (a mutation
observer runs right after the task that drew, before any message from the kernel can be handled): the
matrix's "selection" row must be there, computed from the layer the page holds, and the instance panel
narrowed to the brushed instances of its sample. The kernel is held busy by a cell waiting for a file
meanwhile (the screenshot shows the page's own state); once let go, its row replaces the page's and must
hold the same values (and paint the same pixels), and its sample within the brush replaces the narrowed
one. No timing is asserted (bench_crossfilter.py and bench_timeline.py measure it)."""

import pathlib

import numpy as np
import pytest
from test_browser_timeline import drag

from conftest import ARTIFACTS
from jupyter_page import open_cells, read_result, run_cell

pytestmark = pytest.mark.browser

EXPLORER = """
import json, numpy as np, tempfile
from activis.store import write_store
from activis.widgets.explorer import Explorer
rng = np.random.default_rng(1)
n, k = 3000, 6
labels = rng.integers(0, k, n)
acts = np.maximum(rng.normal(size=(k, 24))[labels] * 3 + rng.normal(size=(n, 24)), 0)
outputs = (np.eye(k)[labels] * 3 + rng.normal(size=(n, k))).astype(np.float32)
store = write_store(tempfile.mkdtemp() + "/brush", {"hidden": acts}, labels=labels, outputs=outputs)
ex = Explorer(store, method="pca", max_instances=400)
ex
"""

TIMELINE = f"""
import sys, json, numpy as np
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
from timeline_run import make_run
import activis
run = activis.open_run(make_run("page-brush-run"))
ex = activis.Explorer(run.store, run=run, method="pca", max_instances=60)
ex
"""

# the kernel busy until the test lets it go: comm messages from the page wait behind this cell
HOLD = """import os, time
while not os.path.exists("release"):
    time.sleep(0.02)
os.remove("release")"""

# before the brush: what the instance panel shows; after: the kernel's brush, row and sample
BEFORE = 'shown_before = ex.instances.shown.copy(); print("RESULT " + json.dumps(len(shown_before)))'
AFTER = """row = ex.matrix.values[ex.matrix.row_keys.index("selection")] if "selection" in ex.matrix.row_keys else None
brush = ex.selection.brush
print("RESULT " + json.dumps({"brush": None if brush is None else len(brush), "source": ex.selection.brush_source,
    "row": None if row is None else [float(v) for v in row], "statistic": ex.matrix.statistic,
    "kept": int(np.isin(shown_before, brush).sum()) if brush is not None else None,
    "filter": None if ex.instances.filter_indices is None else len(ex.instances.filter_indices),
    "shown_in_brush": bool(np.isin(ex.instances.shown, brush).all()) if brush is not None else None}))"""

# what the matrix and the instance panel drew first after the brush, recorded as they drew it (a mutation
# observer runs right after the task that drew, before any message from the kernel can be handled)
FIRST_DRAWS = """([matrix, panel]) => {
  const first = {};
  window.__first = first;
  const rowPixels = () => {
    const keys = [...matrix.querySelectorAll('.av-row')].map((d) => d.dataset.key);
    const r = keys.indexOf('selection'), rowH = Number(matrix.dataset.rowH);
    const canvas = matrix.querySelector('canvas.av-canvas'), dpr = window.devicePixelRatio || 1;
    return Array.from(canvas.getContext('2d').getImageData(0, Math.floor((r * rowH + rowH / 2) * dpr),
      canvas.width, 1).data);
  };
  const seen = (el, key, record) => new MutationObserver(() => {
    if (!first[key]) first[key] = record();
  }).observe(el, { attributes: true, attributeFilter: ['data-rendered', 'data-rows-from'] });
  seen(matrix, 'matrix', () => ({ from: matrix.dataset.rowsFrom, row: matrix.activisRow('selection'),
    pixels: rowPixels(), label: matrix.querySelector(".av-row[data-key='selection']")?.innerText }));
  seen(panel, 'panel', () => ({ from: panel.dataset.sampleFrom, drawn: Number(panel.dataset.drawn),
    groups: [...panel.querySelectorAll('.av-ip-group')].map((g) => g.innerText) }));
  window.__rowPixels = rowPixels;
}"""


def hold_kernel(panel, index):
    """Run the HOLD cell and return once the kernel is busy in it."""
    cell = panel.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputPrompt").click()
    panel.page.keyboard.press("Shift+Enter")
    cell.locator(".jp-InputPrompt").filter(has_text="[*]").wait_for()


def page_then_kernel(page, lab, panel, cell, brush, *, screenshot=None):
    """Brush with the kernel held; check what the page drew first, alone; let the kernel go; check it agrees."""
    matrix, inst = cell.locator(".activis-matrix").first, cell.locator(".activis-instances").first
    read_result(run_cell(panel, 2))  # shown_before
    hold_kernel(panel, 1)
    page.evaluate(FIRST_DRAWS, [matrix.element_handle(), inst.element_handle()])
    brush()
    page.wait_for_function("() => window.__first.matrix && window.__first.panel")
    first = page.evaluate("() => window.__first")
    # the page alone: the matrix drew a selection row from the layer it holds, the panel narrowed to the brush
    assert first["matrix"]["from"] == "page" and first["matrix"]["row"] is not None
    assert first["panel"]["from"] == "page"
    assert all("shown of" not in g for g in first["panel"]["groups"])  # the totals over the brush: not known yet
    if screenshot:
        matrix.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / screenshot))
    # the kernel: its row replaces the page's, with the same values and the same pixels
    (pathlib.Path(lab.root_dir) / "release").write_text("")
    page.wait_for_function("(el) => el.dataset.rowsFrom === 'kernel' && el.activisRow('selection') !== null",
                           arg=matrix.element_handle())
    page.wait_for_function("(el) => el.dataset.sampleFrom === 'kernel'", arg=inst.element_handle())
    kernel = read_result(run_cell(panel, 3))
    assert kernel["brush"] and kernel["filter"] == kernel["brush"] and kernel["shown_in_brush"]
    np.testing.assert_allclose(first["matrix"]["row"], kernel["row"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(matrix.evaluate("(el) => el.activisRow('selection')"), kernel["row"], rtol=0, atol=0)
    assert first["matrix"]["label"] == matrix.locator(".av-row[data-key='selection']").inner_text()
    page_pixels = np.asarray(first["matrix"]["pixels"])
    kernel_pixels = np.asarray(page.evaluate("window.__rowPixels()"))
    assert page_pixels.shape == kernel_pixels.shape and np.mean(page_pixels == kernel_pixels) > 0.99  # a colour
    assert len(set(page_pixels[0::4])) > 1  # level may flip on a 1e-7 difference; the row is painted, not blank
    # the page showed exactly the instances of its sample inside the brush
    assert first["panel"]["drawn"] == kernel["kept"]
    return kernel


def test_lasso_in_the_projection_draws_the_row_in_the_page_first(lab, page):
    page.set_viewport_size({"width": 1400, "height": 900})
    panel = open_cells(page, lab, "page_brush.ipynb", [EXPLORER, HOLD, BEFORE, AFTER])
    cell = run_cell(panel, 0, timeout=240_000)
    proj = cell.locator(".activis-projection[data-shown-method='pca']")
    matrix, inst = cell.locator(".activis-matrix[data-page-rows='on']"), cell.locator(".activis-ip[data-rendered]")
    for view in (proj, matrix, inst):
        view.wait_for(timeout=120_000)
    proj.locator("button[data-mode='lasso']").click()
    points = proj.locator("canvas.av-proj-points")

    def lasso():
        points.scroll_into_view_if_needed()
        box = points.bounding_box()
        w, h = box["width"], box["height"]
        drag(page, box, [(w * 0.3, h * 0.3), (w * 0.75, h * 0.3), (w * 0.75, h * 0.75), (w * 0.3, h * 0.75),
                         (w * 0.3, h * 0.31)])

    kernel = page_then_kernel(page, lab, panel, cell, lasso, screenshot="page-brush-lasso.png")
    assert kernel["source"] == "projection"


def test_data_map_box_and_loss_range_draw_the_row_in_the_page_first(lab, page):
    page.set_viewport_size({"width": 1400, "height": 900})
    panel = open_cells(page, lab, "page_brush_run.ipynb", [TIMELINE, HOLD, BEFORE, AFTER])
    cell = run_cell(panel, 0, timeout=300_000)
    data_map, per_sample = cell.locator(".activis-data_map[data-ready]"), cell.locator(".activis-per_sample")
    for view in (data_map, cell.locator(".activis-matrix[data-page-rows='on']"),
                 cell.locator(".activis-instances[data-rendered]")):
        view.wait_for(timeout=120_000)
    data_map.locator("xpath=self::*[@data-linked='true']").wait_for()
    per_sample.first.locator("xpath=self::*[@data-linked='true']").wait_for()

    def box():
        canvas = data_map.locator("canvas[data-role='map']")
        canvas.scroll_into_view_if_needed()
        b = canvas.bounding_box()
        drag(page, b, [(42, 12), (b["width"] * 0.6, b["height"] - 32)])

    assert page_then_kernel(page, lab, panel, cell, box)["source"] == "data_map"

    def loss_range():
        canvas = per_sample.first.locator("canvas[data-quantity='loss']")
        canvas.scroll_into_view_if_needed()
        b = canvas.bounding_box()
        drag(page, b, [(b["width"] * 0.3, b["height"] / 2), (b["width"] - 9, b["height"] / 2)])

    assert page_then_kernel(page, lab, panel, cell, loss_range)["source"] == "per_sample"

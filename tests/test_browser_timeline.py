"""The Explorer over a run in a real JupyterLab (#23): a checkpoint click moves the matrix, the projection and the
cockpit's mark; a box brushed in the data map filters the projection."""

import pathlib

import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

SETUP = f"""
import sys, json
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
from timeline_run import make_run
import activis
run = activis.open_run(make_run("timeline-run"))
ex = activis.Explorer(run.store, run=run, method="pca", projection_params={{"n_epochs": 30}})
ex.timeline.wait_for_layouts(timeout=600)
ex
"""

STATE = """print("RESULT " + json.dumps({
    "checkpoint": ex.checkpoint, "marked": ex.cockpit.marked_step,
    "brush": None if ex.selection.brush is None else len(ex.selection.brush),
    "source": ex.selection.brush_source,
    "filter": None if ex.instances.filter_indices is None else len(ex.instances.filter_indices),
}))"""


def test_checkpoint_click_and_data_map_brush(lab, page):
    panel = open_cells(page, lab, "timeline.ipynb", [SETUP, STATE])
    cell = run_cell(panel, 0, timeout=300_000)
    # every view drawn, the projection on the latest checkpoint's aligned layout, the cockpit marking it
    ready = {name: cell.locator(selector) for name, selector in {
        "timeline": ".activis-timeline[data-ready]", "matrix": ".activis-matrix[data-rendered]",
        "proj": ".activis-projection[data-shown-method='aligned · step 15']",
        "data_map": ".activis-data_map[data-ready]", "cockpit": ".activis-cockpit[data-marked-step='15']",
        "cka": ".activis-cka[data-ready]"}.items()}
    for view in ready.values():
        view.wait_for(timeout=120_000)
    timeline, matrix, proj, data_map = ready["timeline"], ready["matrix"], ready["proj"], ready["data_map"]
    data_map.locator("xpath=self::*[@data-linked='true']").wait_for()
    pixels = "(c) => c.toDataURL()"
    before = matrix.locator("canvas.av-canvas").evaluate(pixels)

    # 1. a click on checkpoint 0 in the timeline moves the explorer, the projection and the cockpit's mark
    timeline.locator(".av-tick[data-step='0']").click()
    state = python_result(panel, 1, lambda r: r["checkpoint"] == 0)
    assert state["marked"] == 0
    cell.locator(".activis-projection[data-shown-method='aligned · step 0']").wait_for()
    cell.locator(".activis-cockpit[data-marked-step='0'] line.av-marked-step").first.wait_for(state="attached")
    cell.locator(".activis-timeline[data-step='0']").wait_for()
    page.wait_for_function("([el, old]) => el.toDataURL() !== old",
                           arg=[matrix.locator("canvas.av-canvas").element_handle(), before])

    # 2. a box brushed in the data map is the selection's brush: the projection filters to it
    canvas = data_map.locator("canvas[data-role='map']")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 42, box["y"] + 12)  # the left half: low variability, not every instance
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.6, steps=8)
    page.mouse.move(box["x"] + box["width"] * 0.35, box["y"] + box["height"] - 32, steps=8)
    page.mouse.up()
    state = python_result(panel, 1, lambda r: r["source"] == "data_map" and (r["brush"] or 0) > 0)
    brushed = state["brush"]
    assert state["filter"] == brushed and brushed < 120
    page.wait_for_function("([el, n]) => el.dataset.filtered === String(n)",
                           arg=[cell.locator(".activis-projection").element_handle(), brushed])
    assert data_map.get_attribute("data-brushed") == str(brushed)
    cell.locator(".activis-timeline-row").screenshot(path=str(ARTIFACTS / "timeline.png"))
    proj.page.locator(".activis-projection").first.screenshot(path=str(ARTIFACTS / "timeline-projection.png"))

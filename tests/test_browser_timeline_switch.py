"""Switching the checkpoint of an Explorer over a run in a real JupyterLab (#23): the page first.

The matrix and the projection hold every checkpoint's rows, layout and colours (`checkpoint_frames`), so a
tick clicked in the timeline redraws them while the kernel is still busy; the kernel's follow-up then draws
nothing again, and Python ends on the same checkpoint and values. What the page drew from its frames is
compared, pixel by pixel, with what it draws from the kernel's own values of that checkpoint. A move made
from Python moves the page too, drawn once."""

import pathlib

import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

SETUP = f"""
import sys, json
import numpy as np
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
from timeline_run import make_run
import activis
run = activis.open_run(make_run("switch-run"))
ex = activis.Explorer(run.store, run=run, method="pca", projection_params={{"n_epochs": 30}})
ex.timeline.wait_for_layouts(timeout=600)
ex.projection.color_by = "pred"
ex
"""

BUSY = "import time; time.sleep(8)"

STATE = """
i = ex.timeline.steps.index(ex.checkpoint)
print("RESULT " + json.dumps({
    "checkpoint": ex.checkpoint, "selection": ex.selection.checkpoint, "timeline": ex.timeline.view.step,
    "matrix_is_frame": bool(np.allclose(ex.matrix.values, ex.matrix.checkpoint_values[i], rtol=1e-5, atol=1e-6)),
    "positions_are_frame": bool(np.array_equal(ex.projection.positions, ex.projection.checkpoint_positions[i])),
    "codes_are_frame": bool(np.array_equal(ex.projection.color_codes, ex.projection.checkpoint_codes[i])),
}))"""

MOVE_FROM_PYTHON = "ex.checkpoint = 10"

# the kernel draws step 5 from its own values: the frames dropped, then a move away and back
KERNEL_DRAWS_5 = """
with ex.matrix.hold_sync(), ex.projection.hold_sync():
    ex.matrix.checkpoint_values = None
    ex.projection.checkpoint_positions = ex.projection.checkpoint_codes = None
ex.checkpoint = 0
ex.checkpoint = 5
"""

# the pixels drawn, kept in the page under a name: the matrix's canvas and the projection's points
SNAP = """(name) => {
  const grab = (canvas) => canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const root = document.querySelector(".activis-explorer");
  window.avSnaps = { ...window.avSnaps, [name]: { matrix: grab(root.querySelector(".activis-matrix canvas.av-canvas")),
    projection: grab(root.querySelector(".activis-projection canvas.av-proj-points")) } };
}"""

# per view, the fraction of channel values of two snapshots that differ by more than 3 levels (float rounding
# between the kernel's aggregates and the frames' sums can move a cell's colour by one level)
DIFFERING = """([a, b]) => {
  const out = {};
  for (const view of ["matrix", "projection"]) {
    const x = window.avSnaps[a][view], y = window.avSnaps[b][view];
    if (x.length !== y.length) { out[view] = 1; continue; }
    let count = 0;
    for (let i = 0; i < x.length; i++) if (Math.abs(x[i] - y[i]) > 3) count++;
    out[view] = count / x.length;
  }
  return out;
}"""

KERNEL_BUSY = """() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"""


def differing(page, a, b):
    return page.evaluate(DIFFERING, [a, b])


def test_a_tick_redraws_the_matrix_and_projection_before_the_kernel_and_its_follow_up_draws_nothing(lab, page):
    page.set_viewport_size({"width": 1400, "height": 900})
    panel = open_cells(page, lab, "switch.ipynb", [SETUP, BUSY, STATE, MOVE_FROM_PYTHON, KERNEL_DRAWS_5])
    cell = run_cell(panel, 0, timeout=300_000)
    matrix, proj, timeline = (cell.locator(f".activis-{name}").first for name in ("matrix", "projection", "timeline"))
    # the frames arrive in the background, after the first frame
    matrix.locator("xpath=self::*[@data-frames='4']").wait_for(timeout=60_000)
    proj.locator("xpath=self::*[@data-frames='4']").wait_for(timeout=60_000)
    proj.locator("xpath=self::*[@data-shown-method='aligned · step 15']").wait_for()
    page.wait_for_function("() => !document.querySelector('.activis-projection').dataset.animating")
    page.evaluate(SNAP, "step 15")
    rendered = {"matrix": matrix.get_attribute("data-rendered"), "proj": proj.get_attribute("data-rendered")}

    # 1. the kernel busy with a cell: a tick click still moves the matrix and the projection
    busy = panel.locator(".jp-Cell").nth(1)
    busy.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(f"{KERNEL_BUSY} === 'busy'")
    timeline.locator(".av-tick[data-step='5']").click()
    for view in (matrix, proj):
        view.locator("xpath=self::*[@data-checkpoint='5']").wait_for()
    proj.locator("xpath=self::*[@data-shown-method='aligned · step 5']").wait_for()
    page.wait_for_function("() => !document.querySelector('.activis-projection').dataset.animating")
    assert page.evaluate(KERNEL_BUSY) == "busy"  # drawn from the page's frames, the kernel not yet asked
    assert "aligned · step 5" in proj.locator(".av-proj-info").inner_text()  # what the user reads says so too
    assert int(matrix.get_attribute("data-rendered")) == int(rendered["matrix"]) + 1
    page.evaluate(SNAP, "page step 5")
    moved = differing(page, "page step 5", "step 15")
    assert moved["matrix"] > 0.01 and moved["projection"] > 0.01  # step 5's rows, layout and predictions
    proj.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "timeline-switch.png"))  # the page at 1400 x 900 after the switch
    rendered = {"matrix": matrix.get_attribute("data-rendered"), "proj": proj.get_attribute("data-rendered")}

    # 2. the kernel follows: Python on step 5 with the frames' values, and nothing drawn a second time
    state = python_result(panel, 2, lambda r: r["checkpoint"] == 5, timeout=60)
    assert state == {"checkpoint": 5, "selection": 5, "timeline": 5, "matrix_is_frame": True,
                     "positions_are_frame": True, "codes_are_frame": True}
    matrix.locator("xpath=self::*[@data-followed]").wait_for()
    proj.locator("xpath=self::*[@data-followed]").wait_for()
    page.wait_for_timeout(300)  # nothing else is coming: the follow-up has been handled
    assert {"matrix": matrix.get_attribute("data-rendered"), "proj": proj.get_attribute("data-rendered")} == rendered
    page.evaluate(SNAP, "followed")
    assert differing(page, "followed", "page step 5") == {"matrix": 0, "projection": 0}

    # 3. a move from Python moves the page, the matrix drawn once
    run_cell(panel, 3)
    for view in (matrix, proj):
        view.locator("xpath=self::*[@data-checkpoint='10']").wait_for()
    proj.locator("xpath=self::*[@data-shown-method='aligned · step 10']").wait_for()
    assert python_result(panel, 2)["selection"] == 10
    page.wait_for_timeout(300)
    assert int(matrix.get_attribute("data-rendered")) == int(rendered["matrix"]) + 1

    # 4. what the frames drew is what the kernel's own values of step 5 draw
    run_cell(panel, 4)
    proj.locator("xpath=self::*[@data-shown-method='aligned · step 5']").wait_for()
    page.wait_for_function("() => !document.querySelector('.activis-projection').dataset.animating")
    page.wait_for_timeout(300)
    page.evaluate(SNAP, "kernel step 5")
    same = differing(page, "kernel step 5", "page step 5")
    assert same["matrix"] < 0.002 and same["projection"] < 0.002, same

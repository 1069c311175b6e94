"""The page a newcomer sees, in a real JupyterLab at 1400 x 900: the explorer's four main views on one
screen, readable side panels, a theme switch survived, one reset, the evaluation panel agreeing with
`evaluate()`. Each test saves a screenshot of what it checked under test-artifacts/ (for a reviewer to
look at; not a golden image)."""

import pytest

from activis.widgets.format import format_number
from conftest import ARTIFACTS
from jupyter_page import change_theme, open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 900}

SETUP = """
import json, numpy as np
from activis.demo import digits_store
from activis.widgets.explorer import Explorer
model, store = digits_store("digits.activis")
ex = Explorer(store, method="pca")
ex
"""
SLICES = """ex.slice_suggestions.run(wait=True)
print("RESULT " + json.dumps({"n": len(ex.slice_suggestions.report)}))"""
SELECTION = """s = ex.selection
print("RESULT " + json.dumps({"brush": None if s.brush is None else len(s.brush), "pinned": s.pinned,
    "subset": s.subset, "subset_indices": s.subset_indices is not None, "neuron": s.neuron,
    "hover": s.hover is not None, "hover_instance": s.hover_instance,
    "highlight": s.highlight_neurons is not None, "color_by": ex.projection.color_by,
    "filter": ex.instances.filter_indices is not None, "active": ex.subset_panel.active,
    "proj_selected": 0 if ex.projection.selected_indices is None else len(ex.projection.selected_indices),
    "rows": ex.matrix.row_keys, "shown": int(ex.instances.shown[0])}))"""
MAIN_VIEWS = {"graph": ".activis-graph[data-rendered]", "matrix": ".activis-matrix[data-rendered]",
              "projection": ".activis-projection[data-shown-method='pca']", "instances": ".activis-ip[data-rendered]"}

BOXES_JS = """(sels) => Object.fromEntries(Object.entries(sels).map(([k, s]) => {
  const b = document.querySelector(s).getBoundingClientRect();
  return [k, {top: b.top, bottom: b.bottom, left: b.left, right: b.right, width: b.width, height: b.height}];
}))"""
CANVAS_JS = """(el) => {
  const c = el.querySelector('canvas.av-proj-points'), f = el.querySelector('.av-proj-frame');
  const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const bg = data.slice(0, 4).join();  // the corner is background
  let drawn = 0;
  for (let i = 0; i < data.length; i += 4 * 7) if (data.slice(i, i + 4).join() !== bg) drawn++;
  return {w: c.width, h: c.height, fw: Math.floor(f.clientWidth * devicePixelRatio),
          fh: Math.floor(f.clientHeight * devicePixelRatio), drawn};
}"""


def open_explorer(page, lab, name, extra=()):
    page.set_viewport_size(VIEWPORT)
    panel = open_cells(page, lab, name, [SETUP, *extra])
    cell = run_cell(panel, 0, timeout=240_000)
    views = {k: cell.locator(s) for k, s in MAIN_VIEWS.items()}
    for view in views.values():
        view.wait_for(timeout=120_000)
    return panel, cell, views


def scroll_to_top_of(page, locator):
    """Scroll the notebook so that ``locator``'s top is at the top of the notebook's visible area."""
    locator.evaluate("(el) => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)  # the notebook's windowing settles (no assertion depends on it)


def assert_projection_drawn(proj):
    canvas = proj.evaluate(CANVAS_JS)
    assert abs(canvas["w"] - canvas["fw"]) <= 1 and abs(canvas["h"] - canvas["fh"]) <= 1, canvas
    assert canvas["w"] > 100 and canvas["drawn"] > 50, canvas


def test_explorer_fits_one_screen_and_survives_a_theme_switch(lab, page):
    panel, cell, views = open_explorer(page, lab, "page_layout.ipynb", [SLICES])
    explorer = cell.locator(".activis-explorer")
    scroll_to_top_of(page, explorer)
    viewport = page.evaluate("() => ({w: innerWidth, h: innerHeight})")
    boxes = page.evaluate(BOXES_JS, {k: f".activis-explorer {s}" for k, s in MAIN_VIEWS.items()})
    page.screenshot(path=str(ARTIFACTS / "page_explorer_1400x900.png"))
    for name, box in boxes.items():  # all four at once, each mostly inside the window
        visible = min(box["bottom"], viewport["h"]) - max(box["top"], 0)
        assert box["width"] > 300 and visible > 0.6 * box["height"], (name, box, viewport)
    # the matrix uses the width it has: more than 12 px a unit at 64 units (fc1)
    ex_box = explorer.bounding_box()
    assert boxes["matrix"]["width"] > 0.95 * ex_box["width"]

    # the side panels are tabs: the slice suggestions, readable (a line per description, not a letter)
    assert read_result(run_cell(panel, 1, timeout=240_000))["n"] > 0
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Slices").click()
    slices = cell.locator(".activis-slices[data-state='done']")
    slices.wait_for()
    descriptions = slices.locator(".activis-slice-description")
    widths = [b["width"] for b in descriptions.evaluate_all("(els) => els.map((e) => e.getBoundingClientRect())")]
    assert widths and min(widths) > 200, widths
    # nothing in the slice panel runs past its box (the subset list once ran under Find slices)
    inside = slices.evaluate("""(el) => { const b = el.getBoundingClientRect();
        return [...el.querySelectorAll('.activis-slices-list, .activis-toolbar')].every((c) => {
          const r = c.getBoundingClientRect(); return r.bottom <= b.bottom + 1 && r.top >= b.top - 1; }); }""")
    assert inside
    slices.scroll_into_view_if_needed()
    slices.screenshot(path=str(ARTIFACTS / "page_slices.png"))

    # a theme switch and back: the projection's canvas is its frame's size, with points drawn
    proj = views["projection"]
    change_theme(page, True)
    page.wait_for_function("(el) => el.querySelector('canvas.av-proj-points').width > 1", arg=proj.element_handle())
    assert_projection_drawn(proj)
    scroll_to_top_of(page, explorer)
    page.screenshot(path=str(ARTIFACTS / "page_explorer_dark.png"))
    change_theme(page, False)
    page.wait_for_function("(el) => el.querySelector('canvas.av-proj-points').width > 1", arg=proj.element_handle())
    assert_projection_drawn(proj)
    # hidden and shown again (another tab, then back): still drawn
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Subsets").click()
    proj.evaluate("(el) => { el.closest('.activis-explorer').style.display = 'none'; }")
    page.wait_for_timeout(100)
    proj.evaluate("(el) => { el.closest('.activis-explorer').style.display = ''; }")
    page.wait_for_function("(el) => el.querySelector('canvas.av-proj-points').width > 1", arg=proj.element_handle())
    assert_projection_drawn(proj)
    scroll_to_top_of(page, explorer)
    page.screenshot(path=str(ARTIFACTS / "page_explorer_after_theme.png"))


def test_one_reset_clears_every_selection(lab, page):
    panel, cell, views = open_explorer(page, lab, "page_reset.ipynb", [SELECTION])
    matrix, proj, inst = views["matrix"], views["projection"], views["instances"]
    legend = cell.locator(".activis-selection[data-rendered]")
    # a subset, a pin, a neuron colouring and a lasso, all at once
    cell.locator(".activis-explorer-side .activis-subset-row[data-name='true 3']").click()
    first = python_result(panel, 1)["shown"]
    pos = inst.evaluate(f"(el) => el.activisLocate({first})")
    page.mouse.click(pos["x"], pos["y"])
    cell_w = float(matrix.get_attribute("data-cell-w"))
    row_h = float(matrix.get_attribute("data-row-h"))
    matrix.locator("canvas.av-canvas").click(position={"x": 2.5 * cell_w, "y": 0.5 * row_h})
    proj.locator("button[data-mode='box']").click()
    box = proj.locator("canvas.av-proj-points").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.8, steps=8)
    page.mouse.up()
    state = python_result(panel, 1, lambda r: r["subset"] and r["pinned"] and r["neuron"] >= 0 and r["brush"])
    page.wait_for_function("(el) => ['subset', 'brush', 'pinned', 'neuron'].every((m) => "
                           "el.dataset.marks.split(' ').includes(m))", arg=legend.element_handle())
    scroll_to_top_of(page, cell.locator(".activis-explorer"))
    page.screenshot(path=str(ARTIFACTS / "page_selection_legend.png"))

    legend.get_by_role("button", name="Reset").click()
    state = python_result(panel, 1, lambda r: not (r["subset"] or r["pinned"] or r["brush"] or r["active"]
                                                   or r["proj_selected"]) and r["neuron"] < 0
                          and r["color_by"] == "label")
    assert state == {**state, "brush": None, "pinned": [], "subset": "", "subset_indices": False, "neuron": -1,
                     "hover": False, "hover_instance": -1, "highlight": False, "color_by": "label",
                     "filter": False, "active": "", "proj_selected": 0}, state
    assert not [k for k in state["rows"] if k.startswith("instance:") or k == "selection"], state["rows"]
    page.wait_for_function("(el) => el.dataset.marks === ''", arg=legend.element_handle())
    page.wait_for_function("(el) => el.dataset.colorBy === 'label'", arg=proj.element_handle())
    scroll_to_top_of(page, cell.locator(".activis-explorer"))
    page.screenshot(path=str(ARTIFACTS / "page_after_reset.png"))


EVAL = """
import json, numpy as np
import activis
from activis.demo import digits_store
from activis.widgets.evaluation_panel import EvaluationPanel
model, store = digits_store("digits.activis")
printed = activis.evaluate(store).summary["accuracy"]
panel = EvaluationPanel(store)
panel
"""


def test_evaluation_panel_opens_on_what_evaluate_prints(lab, page):
    page.set_viewport_size(VIEWPORT)
    panel = open_cells(page, lab, "page_eval.ipynb", [EVAL, 'print("RESULT " + json.dumps(printed))'])
    cell = run_cell(panel, 0, timeout=240_000)
    view = cell.locator(".activis-eval[data-ready='1']")
    view.wait_for()
    printed = read_result(run_cell(panel, 1))
    assert view.get_attribute("data-threshold") == "argmax"
    assert float(view.get_attribute("data-accuracy")) == pytest.approx(printed, abs=1e-12)
    shown = view.locator("tr[data-metric='accuracy'] td").nth(1).inner_text()
    assert shown == format_number(printed), (shown, printed)
    # ten classes: at least every diagonal cell shows its count
    assert int(view.get_attribute("data-counts-shown")) >= 10
    # the metrics table fits its card: no sideways scroll
    table = view.locator(".av-table")
    assert table.evaluate("(el) => el.scrollWidth <= el.clientWidth + 1")
    view.scroll_into_view_if_needed()
    view.screenshot(path=str(ARTIFACTS / "page_evaluation.png"))

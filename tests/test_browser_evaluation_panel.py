"""EvaluationPanel in a real JupyterLab: drawing, threshold drag, and every coordination path."""

import json

import pytest

from conftest import ARTIFACTS, PAGE_GUARD
from jupyter_page import open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"
SETUP = f'''
import json, numpy as np
from activis.widgets.evaluation_panel import EvaluationPanel
from activis.widgets.selection import Selection
rng = np.random.default_rng(0)
y = rng.integers(0, 3, 600)
logits = rng.normal(size=(600, 3)) + 1.6 * np.eye(3)[y]
probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
sel = Selection()
panel = EvaluationPanel(labels=y, scores=probs, class_names=["cat", {XSS!r}, "bird"], selection=sel, focus=1,
                       threshold=0.5)  # a threshold to drag (without one the panel opens on argmax)
panel
'''
STATE = '''e = panel.evaluation()
print("RESULT " + json.dumps({"threshold": panel.threshold, "counts": e.confusion().to_numpy().ravel().tolist(),
    "cell": panel.selected_cell, "range": panel.selected_range, "source": sel.brush_source,
    "brush": None if sel.brush is None else sorted(int(i) for i in sel.brush),
    "compared": panel.compared_label, "compared_n": panel.compared_n,
    "accuracy": float(np.mean(e.predictions == y))}))'''
FACTS = '''print("RESULT " + json.dumps({
    "cell_1_0": np.flatnonzero((y == 1) & (panel.evaluation().predictions == 0)).tolist(),
    "in_range": lambda_range(*panel.selected_range) if panel.selected_range else []}))'''
ELSEWHERE = 'sel.set_brush(np.arange(0, 200), "projection")'


def view_of(cell):
    return cell.locator(".activis-eval[data-ready='1']")


def grab_threshold(page, view):
    """Press the mouse on the threshold line of the score distributions; returns where (x, y)."""
    rule = view.locator("[data-chart='dist'] [data-role='threshold']")
    rule.scroll_into_view_if_needed()
    box = rule.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    return x, y


def test_panel_draws_and_follows_the_threshold_and_selections(lab, page, request):
    panel = open_cells(page, lab, "evaluation_panel.ipynb", [
        SETUP, STATE,
        "def lambda_range(lo, hi):\n    s = probs[:, 1]\n    return np.flatnonzero((s >= lo) & (s <= hi)).tolist()",
        FACTS, ELSEWHERE,
    ])
    cell = run_cell(panel, 0)
    run_cell(panel, 2)
    view = view_of(cell)
    view.wait_for()
    view.locator("xpath=self::*[@data-linked='true']").wait_for()
    # every chart drew: three class curves plus micro on ROC and PR, calibration points
    for chart in ("roc", "pr"):
        assert view.locator(f"[data-chart='{chart}']").get_attribute("data-curves") == "4"
    assert int(view.locator("[data-chart='calibration']").get_attribute("data-points")) > 3
    # class names from data are text, never markup
    assert view.locator("img").count() == 0
    assert view.locator(".av-cm-label[data-axis='true']").nth(1).text_content() == XSS
    assert view.locator("select[data-role='focus'] option").nth(1).text_content() == XSS
    assert view.locator("tr[data-class='1'] td").first.text_content() == XSS
    state = read_result(run_cell(panel, 1))
    assert json.loads(view.get_attribute("data-counts")) == state["counts"]
    assert float(view.get_attribute("data-accuracy")) == pytest.approx(state["accuracy"])
    view.screenshot(path=str(ARTIFACTS / "evaluation_panel.png"))

    # drag the threshold: the confusion counts follow in the page, and Python agrees once it lands
    x, y = grab_threshold(page, view)
    for step in range(1, 4):
        page.mouse.move(x - 8 * step, y)
    page.mouse.up()
    moved = float(view.get_attribute("data-threshold"))
    assert 0.3 < moved < 0.49
    state = python_result(panel, 1, lambda r: abs(r["threshold"] - moved) < 1e-9)
    assert abs(state["threshold"] - moved) < 1e-9
    assert json.loads(view.get_attribute("data-counts")) == state["counts"]
    assert int(view.get_attribute("data-updates")) >= 4  # the first draw and one recount per move

    # click the confusion cell (true <img...>, predicted cat): those instances are brushed for every view
    canvas = view.locator("[data-chart='confusion'] canvas")
    cbox = canvas.bounding_box()
    side = cbox["width"] / 3
    canvas.click(position={"x": 0.5 * side, "y": 1.5 * side})
    state = python_result(panel, 1, lambda r: r["cell"] == [1, 0] and r["source"] == "evaluation")
    facts = read_result(run_cell(panel, 3))
    assert state["cell"] == [1, 0] and state["source"] == "evaluation"
    assert state["brush"] == facts["cell_1_0"] and len(facts["cell_1_0"]) > 5
    assert state["compared"] == ""  # our own brush is not "a selection made elsewhere"

    # brush a score range over the distributions: the instances with the focus score in it
    drag = view.locator("[data-chart='dist'] [data-role='drag']")
    drag.scroll_into_view_if_needed()
    dbox = drag.bounding_box()
    yy = dbox["y"] + dbox["height"] / 2
    page.mouse.move(dbox["x"] + dbox["width"] * 0.7, yy)
    page.mouse.down()
    page.mouse.move(dbox["x"] + dbox["width"] * 0.8, yy)
    page.mouse.move(dbox["x"] + dbox["width"] * 0.95, yy)
    page.mouse.up()
    state = python_result(panel, 1, lambda r: len(r["range"]) == 2 and r["cell"] == [])
    lo, hi = state["range"]
    assert 0.6 < lo < hi <= 1.0
    facts = read_result(run_cell(panel, 3))
    assert state["brush"] == facts["in_range"] and len(facts["in_range"]) > 5 and state["source"] == "evaluation"

    # a selection made elsewhere: its metrics appear beside the whole set's, its ROC over the curves
    run_cell(panel, 4)
    view.locator("xpath=self::*[@data-compared='selection (projection)']").wait_for()
    header = view.locator("table tr").first.locator("th")
    assert header.count() == 3 and header.nth(2).text_content() == "selection (projection) (200)"
    assert view.locator("[data-chart='roc']").get_attribute("data-curves") == "5"
    # and its scores over the distributions (the rows of instances 0..199)
    view.locator("[data-chart='dist'][data-compared='200']").wait_for()
    assert view.locator("[data-chart='dist'] [data-role='brush']").get_attribute("visibility") == "hidden"
    guard = request.node.stash[PAGE_GUARD]  # nothing left 127.0.0.1 (the guard fails the test otherwise, too)
    assert guard.blocked == []
    assert all(line.startswith("websocket: ws://127.0.0.1:") for line in guard.log if line.startswith("websocket"))


EXPLORER = '''
import json, numpy as np
from activis import write_store
from activis.widgets.explorer import Explorer
rng = np.random.default_rng(1)
y = rng.integers(0, 3, 400)
logits = (rng.normal(size=(400, 3)) + 1.2 * np.eye(3)[y]).astype(np.float32)
store = write_store("explorer_eval.activis", {"h": rng.normal(size=(400, 6)).astype(np.float32)}, labels=y,
                    outputs=logits, class_names=["a", "b", "c"], overwrite=True)
ex = Explorer(store, method="pca")
ex
'''
EX_STATE = '''pred = ex.evaluation.evaluation().predictions
print("RESULT " + json.dumps({"cell": ex.evaluation.selected_cell, "source": ex.selection.brush_source,
    "filter": None if ex.instances.filter_indices is None else sorted(ex.instances.filter_indices.tolist()),
    "expected": np.flatnonzero((y == 2) & (pred == 0)).tolist(), "rows": ex.matrix.row_keys}))'''


def test_confusion_cell_filters_the_explorers_views(lab, page):
    panel = open_cells(page, lab, "explorer_evaluation.ipynb", [EXPLORER, EX_STATE])
    cell = run_cell(panel, 0, timeout=240_000)
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Evaluation").click()  # a tab of the side panels
    view = view_of(cell)
    view.wait_for(timeout=120_000)
    view.locator("xpath=self::*[@data-linked='true']").wait_for()
    inst = cell.locator(".activis-ip[data-rendered]")
    inst.wait_for()
    canvas = view.locator("[data-chart='confusion'] canvas")
    canvas.scroll_into_view_if_needed()
    side = canvas.bounding_box()["width"] / 3
    canvas.click(position={"x": 0.5 * side, "y": 2.5 * side})  # true c, predicted a
    state = python_result(panel, 1, lambda r: r["cell"] == [2, 0] and r["filter"] is not None)
    assert state["source"] == "evaluation" and len(state["expected"]) > 3
    assert state["filter"] == state["expected"]  # the instance panel shows exactly that cell
    assert "selection" in state["rows"]  # and the matrix has it as a row
    page.wait_for_function("([el, n]) => Number(el.dataset.drawn) === n",
                           arg=[inst.element_handle(), len(state["expected"])])

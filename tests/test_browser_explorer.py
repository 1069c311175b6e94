"""The Explorer in a real JupyterLab: every coordination path between the views, end to end on the demo."""


import numpy as np
import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

SETUP = """
import json, numpy as np
from activis.demo import digits_store
from activis.analysis import confusion_pairs
from activis.widgets.explorer import Explorer
model, store = digits_store("digits.activis")
ex = Explorer(store, method="pca")
ex
"""

STATE = """print("RESULT " + json.dumps({
    "layers": [ex.selection.layer, ex.matrix.layer, ex.projection.layer],
    "neuron": ex.selection.neuron, "color_by": ex.projection.color_by, "proj_neuron": ex.projection.neuron,
    "pinned": ex.selection.pinned, "rows": ex.matrix.row_keys,
    "filter": None if ex.instances.filter_indices is None else len(ex.instances.filter_indices),
    "narrowed": None if ex.instances.filter_indices is None else min(ex.instances.max_instances, len(
        set(ex.instances.filter_indices.tolist()) | set(ex.selection.pinned))),
    "brush": None if ex.selection.brush is None else len(ex.selection.brush),
    "subset": ex.selection.subset, "hover_source": ex.selection.hover_source,
    "sort_label": ex.instances.sort_label,
    "proj_selected": None if ex.projection.selected_indices is None else len(ex.projection.selected_indices),
    "lasso": ex.projection.lasso is not None,
    "why": None if ex.last_explanation is None else ex.last_explanation.index,
}))"""

FACTS = """pairs = confusion_pairs(store)
top = pairs.iloc[0]
mis = int(top["examples"][0])
print("RESULT " + json.dumps({"true": int(top["true"]), "pred": int(top["pred"]), "mis": mis,
    "n_true3": int((store.instances.label == 3).sum()),
    "shown": ex.instances.shown[:5].tolist(), "conv2_neurons": store.activations("conv2").shape[1]}))"""

RANKING = """ranking = ex.explain(mis)
print("RESULT " + json.dumps({"columns": list(ranking.columns), "first": int(ranking.index[0]),
    "n": len(ranking), "score_sorted": bool((np.diff(ranking["score"].dropna().to_numpy()) <= 1e-9).all()),
    "message": ex.last_explanation.message}))"""


def test_explorer_coordination(lab, page):
    panel = open_cells(page, lab, "explorer.ipynb", [SETUP, STATE, FACTS, RANKING])
    cell = run_cell(panel, 0, timeout=240_000)
    graph = cell.locator(".activis-graph[data-rendered]")
    matrix = cell.locator(".activis-matrix[data-rendered]")
    proj = cell.locator(".activis-projection[data-shown-method='pca']")
    inst = cell.locator(".activis-ip[data-rendered]")
    subsets = cell.locator(".activis-subsets[data-rendered]")
    for view in (graph, matrix, proj, inst, subsets):
        view.wait_for(timeout=120_000)
    matrix.locator("xpath=self::*[@data-linked='true']").wait_for()
    inst.locator("xpath=self::*[@data-linked='true']").wait_for()
    facts = read_result(run_cell(panel, 2))

    # 1. a click on a graph node switches the matrix and the projection to that layer
    graph.locator(".activis-node[data-key='module:conv2']").click()
    state = python_result(panel, 1, lambda r: r["layers"] == ["conv2"] * 3)
    assert state["layers"] == ["conv2"] * 3
    page.wait_for_function("([el, n]) => el.dataset.neurons === String(n)",
                           arg=[matrix.element_handle(), facts["conv2_neurons"]])

    # 2. hovering a matrix row lights up its instances in the projection and the instance panel
    row_h = float(matrix.get_attribute("data-row-h"))
    cell_w = float(matrix.get_attribute("data-cell-w"))
    matrix.locator("canvas.av-canvas").hover(position={"x": 2.5 * cell_w, "y": 3.5 * row_h})  # row "true 3"
    page.wait_for_function("(el) => Number(el.dataset.highlightedDrawn || 0) > 0", arg=inst.element_handle())
    page.wait_for_function("([el, n]) => Number(el.dataset.highlighted || 0) === n",
                           arg=[proj.element_handle(), facts["n_true3"]])
    assert python_result(panel, 1, lambda r: r["hover_source"] == "matrix")["hover_source"] == "matrix"
    page.mouse.move(0, 0)

    # 3. a click on an instance square pins it as a matrix row; its analysis appears
    mis = facts["mis"]
    pos = inst.evaluate(f"(el) => el.activisLocate({mis})")
    page.mouse.click(pos["x"], pos["y"])
    state = python_result(panel, 1, lambda r: r["pinned"] == [mis] and f"instance:{mis}" in r["rows"])
    assert state["pinned"] == [mis] and f"instance:{mis}" in state["rows"] and state["why"] == mis
    why = cell.locator(f".activis-why[data-index='{mis}']")
    why.wait_for()
    assert why.locator(".av-why-title").text_content().startswith(f"Instance #{mis} ")
    # hovering another instance gives a temporary row, which goes away with the mouse
    # (watched in the page: running a check cell would scroll the notebook away from the mouse)
    page.mouse.move(0, 0)
    other = next(i for i in facts["shown"] if i != mis)
    pos2 = inst.evaluate(f"(el) => el.activisLocate({other})")
    page.mouse.move(pos2["x"], pos2["y"])
    hover_row = matrix.locator(".av-row[data-key='hover']")
    hover_row.filter(has_text=f"hover #{other}").wait_for()
    # the layout held: the new row moved nothing, the square is still under the mouse (so no other hover follows)
    assert inst.evaluate(f"(el) => el.activisLocate({other})") == pytest.approx(pos2, abs=0.5)
    assert hover_row.inner_text(timeout=2_000).startswith(f"hover #{other}")
    page.mouse.move(0, 0)
    hover_row.wait_for(state="detached")

    # 4. a lasso in the projection adds a "selection" row and narrows the instance panel
    proj.locator("button[data-mode='lasso']").click()
    proj.locator("canvas.av-proj-points").scroll_into_view_if_needed()
    box = proj.locator("canvas.av-proj-points").bounding_box()
    cx, cy = box["width"] / 2, box["height"] / 2  # the map is fitted: its middle is full of points
    r = 0.2 * min(box["width"], box["height"])
    angles = np.linspace(0, 2 * np.pi, 24)
    page.mouse.move(box["x"] + cx + r, box["y"] + cy)
    page.mouse.down()
    for a in angles[1:]:
        page.mouse.move(box["x"] + cx + r * np.cos(a), box["y"] + cy + r * np.sin(a))
    page.mouse.up()
    state = python_result(panel, 1, lambda r: "selection" in r["rows"] and r["filter"])
    assert "selection" in state["rows"] and state["brush"] == state["filter"] > 0, state
    # the panel narrows to the brushed instances and the pinned one, always shown: all of them, no more
    page.wait_for_function("([el, n]) => Number(el.dataset.drawn) === n",
                           arg=[inst.element_handle(), state["narrowed"]])
    # every clause but its own: the lasso does not fade the projection that drew it
    assert proj.get_attribute("data-filtered") == "" and int(proj.get_attribute("data-selected")) == state["brush"]
    drawn_before = int(inst.get_attribute("data-drawn"))
    # the projection's Clear clears the brush everywhere: the matrix row, the panel's filter, the Selection
    proj.get_by_role("button", name="Clear", exact=True).click()
    state = python_result(panel, 1, lambda r: r["brush"] is None)
    assert state["filter"] is None and "selection" not in state["rows"] and state["proj_selected"] == 0, state
    matrix.locator(".av-row[data-key='selection']").wait_for(state="detached")
    page.wait_for_function("([el, n]) => Number(el.dataset.drawn) > n", arg=[inst.element_handle(), drawn_before])

    # 5. a click on a neuron column colours the projection by it and sorts the instance panel
    matrix.locator("canvas.av-canvas").click(position={"x": 4.5 * cell_w, "y": 0.5 * row_h})
    state = python_result(panel, 1, lambda r: r["color_by"] == "neuron")
    assert state["neuron"] == state["proj_neuron"] == 4 and "4" in state["sort_label"]
    page.wait_for_function("(el) => el.dataset.colorBy === 'neuron'", arg=proj.element_handle())

    # 6. picking a subset in the subset panel (a side tab; pinning showed the misclassification tab) highlights
    # it everywhere
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Subsets").click()
    subsets.locator(".activis-subset-row[data-name='true 3']").click()
    state = python_result(panel, 1, lambda r: r["subset"] == "true 3")
    page.wait_for_function("([el, n]) => Number(el.dataset.highlighted || 0) === n",
                           arg=[proj.element_handle(), facts["n_true3"]])
    page.wait_for_function("(el) => Number(el.dataset.highlightedDrawn || 0) > 0", arg=inst.element_handle())
    # a screenshot of the whole explorer (for the README): a viewport tall enough to hold it
    page.set_viewport_size({"width": 1500, "height": 1500})
    explorer = cell.locator(".activis-explorer")
    explorer.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    explorer.screenshot(path=str(ARTIFACTS / "explorer.png"))

    # the scenario users bring: the most frequent mistake, one instance, compared with both classes
    ranking = read_result(run_cell(panel, 3))
    assert ranking["n"] > 0 and ranking["score_sorted"]
    assert {"value", "true_mean", "compared_mean", "score"} <= set(ranking["columns"])
    assert ranking["message"].startswith(f"Instance {mis} ")

"""The Explorer over a run in a real JupyterLab (#23): every link between the checkpoint, instance and layer
dimensions, in both directions, driven by the mouse where a user would drive it.

Step dimension: a range brushed in a cockpit instrument moves the checkpoint (the difference since the
range's first shows in the matrix, flipped predictions in the instance panel); a tick clicked in the timeline
marks its step in the cockpit, a linked RunsPanel, the CKA heatmap and the per-instance instruments.
Instance dimension: a box in the data map filters the projection, the matrix and the instance panel; a range
across the per-instance loss does the same; a lasso in the projection rings the data map. Layer dimension:
a CKA cell selects its layer and checkpoint; a doctor finding with a step moves both. Text from data (a
finding's title) is shown as text."""

import pathlib

import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

TITLE = "<img src=x onerror=\"document.title='pwned'\"> vanishing"

SETUP = f"""
import sys, json
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
from timeline_run import make_run
import activis
run = activis.open_run(make_run("timeline-run"))
run.add_finding({{"step": 4, "check": "vanishing", "severity": "warning", "title": {TITLE!r}, "where": "0",
                 "node": "_0"}})
ex = activis.Explorer(run.store, run=run, method="pca", projection_params={{"n_epochs": 30}})
ex.timeline.wait_for_layouts(timeout=600)
runs = activis.RunsPanel([run.path], height=260)
ex.timeline.link_runs_panel(runs)
ex
"""

STATE = """print("RESULT " + json.dumps({
    "checkpoint": ex.checkpoint, "marked": ex.cockpit.marked_step, "runs_marked": runs.marked_step,
    "compare_to": ex.timeline.view.compare_to, "range": ex.cockpit.step_range, "layer": ex.selection.layer,
    "brush": None if ex.selection.brush is None else len(ex.selection.brush),
    "source": ex.selection.brush_source,
    "filter": None if ex.instances.filter_indices is None else len(ex.instances.filter_indices),
    "changed": None if ex.instances.marked_indices is None else len(ex.instances.marked_indices),
}))"""


def drag(page, box, points):
    page.mouse.move(box["x"] + points[0][0], box["y"] + points[0][1])
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(box["x"] + x, box["y"] + y, steps=6)
    page.mouse.up()


def test_every_link_between_the_timeline_instruments_and_views(lab, page):
    page.set_viewport_size({"width": 1400, "height": 900})
    show_finding = "ex.timeline.show_finding(run.findings.iloc[0])"
    panel = open_cells(page, lab, "timeline.ipynb", [SETUP, "runs", STATE, show_finding])
    cell = run_cell(panel, 0, timeout=300_000)
    runs_cell = run_cell(panel, 1)
    views = {name: cell.locator(selector) for name, selector in {
        "timeline": ".activis-timeline[data-ready]", "matrix": ".activis-matrix[data-rendered]",
        "proj": ".activis-projection[data-shown-method='aligned · step 15']",
        "data_map": ".activis-data_map[data-ready]", "cockpit": ".activis-cockpit[data-marked-step='15']",
        "cka": ".activis-cka[data-ready]", "per_sample": ".activis-per_sample[data-step='15']",
        "instances": ".activis-instances[data-rendered]", "graph": ".activis-graph[data-rendered]"}.items()}
    for view in views.values():
        view.wait_for(timeout=120_000)
    runs_cell.locator(".activis-runs[data-marked-step='15'] line.av-marked-step").first.wait_for(state="attached")
    # from here on, the views by name alone (their state attributes change)
    timeline, matrix, data_map, cockpit, instances, per_sample = (cell.locator(f".activis-{name}").first for name in (
        "timeline", "matrix", "data_map", "cockpit", "instances", "per_sample"))
    data_map.locator("xpath=self::*[@data-linked='true']").wait_for()
    per_sample.locator("xpath=self::*[@data-linked='true']").wait_for()

    # 1. instrument brush -> checkpoint: a range over the loss chart shows its last checkpoint, with the
    #    difference since its first in the matrix and the flipped predictions marked in the instance panel
    brush = cockpit.locator(".av-card[data-instrument='loss'] [data-role='brush']")
    brush.scroll_into_view_if_needed()
    box = brush.bounding_box()
    drag(page, box, [(box["width"] * 0.15, box["height"] / 2), (box["width"] * 0.8, box["height"] / 2)])
    state = python_result(panel, 2, lambda r: len(r["range"]) == 2)
    first, last = state["range"]
    inside = [s for s in (0, 5, 10, 15) if first <= s <= last]
    assert len(inside) >= 2 and state["checkpoint"] == inside[-1] and state["compare_to"] == inside[0]
    cell.locator(f".activis-timeline[data-step='{inside[-1]}'][data-compare-to='{inside[0]}']").wait_for()
    cell.locator(f".activis-matrix[data-compared-to='step {inside[0]}'][data-scale='diverging']").wait_for()
    if state["changed"]:
        page.wait_for_function("(el) => Number(el.dataset.markedDrawn) > 0", arg=instances.element_handle())
    runs_cell.locator(f".activis-runs[data-marked-step='{inside[-1]}']").wait_for()

    # 2. checkpoint -> instrument marks: a tick clicked marks step 0 in every instrument
    timeline.locator(".av-tick[data-step='0']").click()
    state = python_result(panel, 2, lambda r: r["checkpoint"] == 0)
    assert state["marked"] == state["runs_marked"] == 0
    cell.locator(".activis-projection[data-shown-method='aligned · step 0']").wait_for()
    cell.locator(".activis-cockpit[data-marked-step='0'] line.av-marked-step[data-step='0']").first.wait_for(
        state="attached")
    runs_cell.locator(".activis-runs[data-marked-step='0'] line.av-marked-step[data-step='0']").first.wait_for(
        state="attached")
    cell.locator(".activis-cka .av-cka-cell[data-step='0'][data-marked='true']").wait_for()
    cell.locator(".activis-per_sample[data-step='0']").wait_for()
    timeline.locator("select[data-role='compare']").select_option("-1")  # plain rows again
    cell.locator(".activis-matrix[data-compared-to='']").wait_for()

    # 3. data-map brush -> projection, matrix and instance panel
    canvas = data_map.locator("canvas[data-role='map']")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    drag(page, box, [(42, 12), (box["width"] * 0.2, box["height"] * 0.6), (box["width"] * 0.35, box["height"] - 32)])
    state = python_result(panel, 2, lambda r: r["source"] == "data_map" and (r["brush"] or 0) > 0)
    brushed = state["brush"]
    assert state["filter"] == brushed and brushed < 120
    page.wait_for_function("([el, n]) => el.dataset.filtered === String(n)",
                           arg=[cell.locator(".activis-projection").element_handle(), brushed])
    matrix.locator(".av-row[data-key='selection']").filter(has_text=f"selection ({brushed})").wait_for()
    page.wait_for_function("([el, n]) => el.dataset.drawn === String(n)", arg=[instances.element_handle(), brushed])
    assert data_map.get_attribute("data-brushed") == str(brushed)
    page.wait_for_function("([el, n]) => el.dataset.highlighted === String(n)",
                           arg=[per_sample.element_handle(), brushed])  # overlaid in the instruments too
    cell.locator(".activis-timeline-row").screenshot(path=str(ARTIFACTS / "timeline.png"))

    # 4. per-instance instrument brush -> the same views: the highest losses
    loss = per_sample.locator("canvas[data-quantity='loss']")
    loss.scroll_into_view_if_needed()
    box = loss.bounding_box()
    drag(page, box, [(box["width"] * 0.55, box["height"] / 2), (box["width"] - 9, box["height"] / 2)])
    state = python_result(panel, 2, lambda r: r["source"] == "per_sample" and (r["brush"] or 0) > 0)
    brushed = state["brush"]
    assert state["filter"] == brushed and per_sample.get_attribute("data-brushed") == str(brushed)
    page.wait_for_function("([el, n]) => el.dataset.filtered === String(n)",
                           arg=[cell.locator(".activis-projection").element_handle(), brushed])
    page.wait_for_function("([el, n]) => el.dataset.highlighted === String(n)",
                           arg=[data_map.element_handle(), brushed])
    per_sample.screenshot(path=str(ARTIFACTS / "timeline-per-sample.png"))

    # 5. projection lasso (a box) -> the data map rings the instances
    projection = cell.locator(".activis-projection")
    projection.scroll_into_view_if_needed()
    projection.locator("button[data-mode='box']").click()
    plot = projection.locator("canvas").first.bounding_box()
    drag(page, plot, [(plot["width"] * 0.2, plot["height"] * 0.2), (plot["width"] * 0.8, plot["height"] * 0.8)])
    state = python_result(panel, 2, lambda r: r["source"] == "projection" and (r["brush"] or 0) > 0)
    page.wait_for_function("([el, n]) => el.dataset.highlighted === String(n)",
                           arg=[data_map.element_handle(), state["brush"]])
    projection.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "timeline-explorer.png"))  # the page at 1400 x 900, as a user sees it

    # 6. CKA cell -> layer and checkpoint
    target = cell.locator(".activis-cka .av-cka-cell[data-layer='1'][data-step='10']")
    target.scroll_into_view_if_needed()
    target.click()
    state = python_result(panel, 2, lambda r: r["checkpoint"] == 10 and r["layer"] == "1")
    cell.locator(".activis-timeline[data-step='10']").wait_for()
    cell.locator(".activis-graph[data-selected='_1']").wait_for()
    cell.locator(".activis-cka .av-cka-cell[data-layer='1'][data-step='10'][data-marked='true']").wait_for()

    # 7. a finding with a step -> its nearest checkpoint and its layer, in the graph too
    run_cell(panel, 3)
    state = python_result(panel, 2, lambda r: r["checkpoint"] == 5 and r["layer"] == "0")
    cell.locator(".activis-timeline[data-step='5']").wait_for()
    graph = cell.locator(".activis-graph[data-selected='_0']")
    graph.wait_for()

    # 8. text from data stays text: the finding's title in the marker's tooltip
    node = graph.locator("[data-marker-severity='warning']").first
    node.scroll_into_view_if_needed()
    node.hover()
    graph.locator(".activis-tooltip").filter(has_text="<img src=x").wait_for()
    assert page.locator("img[src='x']").count() == 0 and page.title() != "pwned"
    graph.screenshot(path=str(ARTIFACTS / "timeline-graph-finding.png"))

"""The Explorer, the cockpit panel and the evaluation panel in Notebook 7 (the `notebook` package), not JupyterLab.

The same server serves both front-ends; these open the notebook at /notebooks/... and check that each view
draws and that its links reach Python there too.
"""

import pytest
from test_browser_cockpit_panel import SETUP as COCKPIT_SETUP
from test_browser_evaluation_panel import SETUP as EVALUATION_SETUP
from test_browser_evaluation_panel import STATE as EVALUATION_STATE
from test_browser_explorer import SETUP as EXPLORER_SETUP
from test_browser_explorer import STATE as EXPLORER_STATE

from conftest import ARTIFACTS, PAGE_GUARD
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _notebook7_own_error(request, page):
    # Notebook 7.6 itself raises "Cannot read properties of undefined (reading 'schema')" in its own bundle
    # on opening any notebook (an empty one on a bare `jupyter notebook` server too); any other error fails
    request.node.stash[PAGE_GUARD].forgive_frontend_errors("/static/notebook/")


def test_explorer_links_in_notebook7(lab, page):
    panel = open_cells(page, lab, "nb7_explorer.ipynb", [EXPLORER_SETUP, EXPLORER_STATE], frontend="notebook")
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    cell = run_cell(panel, 0, timeout=240_000)
    graph = cell.locator(".activis-graph[data-rendered]")
    matrix = cell.locator(".activis-matrix[data-rendered]")
    for view in (graph, matrix, cell.locator(".activis-projection[data-shown-method='pca']"),
                 cell.locator(".activis-ip[data-rendered]")):
        view.wait_for(timeout=120_000)
    graph.locator(".activis-node[data-key='module:conv2']").click()
    assert python_result(panel, 1, lambda r: r["layers"] == ["conv2"] * 3)["layers"] == ["conv2"] * 3
    matrix.locator("xpath=self::*[@data-linked='true']").wait_for()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "notebook7_explorer.png"))


def test_cockpit_panel_draws_in_notebook7(lab, page):
    panel = open_cells(page, lab, "nb7_cockpit.ipynb", [
        COCKPIT_SETUP + "model, opt, cockpit = make('economy')\ntrain(model, opt, cockpit, 12)\n"
        "panel = CockpitPanel(cockpit)\npanel"], frontend="notebook")
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-cockpit[data-ready='1'][data-steps='12']")
    view.wait_for()
    assert int(view.locator(".av-card[data-instrument='loss']").get_attribute("data-points")) > 0
    view.screenshot(path=str(ARTIFACTS / "notebook7_cockpit.png"))


def test_evaluation_panel_agrees_with_python_in_notebook7(lab, page):
    panel = open_cells(page, lab, "nb7_evaluation.ipynb", [EVALUATION_SETUP, EVALUATION_STATE], frontend="notebook")
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-eval[data-ready='1']")
    view.wait_for()
    state = python_result(panel, 1)
    assert float(view.get_attribute("data-accuracy")) == pytest.approx(state["accuracy"])
    view.screenshot(path=str(ARTIFACTS / "notebook7_evaluation.png"))

"""Stacked layers in a real JupyterLab: the explorer's matrix and the stacked ones show the same rows, a layer
added from the page's "+ layer…", a brush row in every panel, and rows computed in the background arriving."""

import numpy as np
import pytest

from activis import write_store
from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

SETUP = """
import json, numpy as np
from activis.store import open_store
from activis.widgets import matrix_deferred
from activis.widgets.explorer import Explorer
matrix_deferred.DEFER_VALUES = 0  # every layer counts as large: its rows come from the background thread
store = open_store("stack_store")
ex = Explorer(store, method="pca", layers=["conv"])
ex
"""
STATE = """print("RESULT " + json.dumps({"layers": ex.stack.layers, "rows": ex.matrix.row_keys,
    "panel_rows": [p.row_keys for p in ex.stack.panels],
    "progress": [m.progress for m in (ex.matrix, *ex.stack.panels)]}))"""
BRUSH = 'ex.selection.set_brush(np.arange(0, 600, 3), "projection")'


def make_store(path):
    rng = np.random.default_rng(2)
    n = 600
    labels = rng.integers(0, 4, n)
    layers = {name: np.maximum(rng.standard_normal((n, width)) + labels[:, None] * rng.random(width), 0)
              .astype(np.float32) for name, width in (("conv", 48), ("fc1", 32), ("fc2", 24))}
    outputs = (np.eye(4)[labels] * 3 + rng.standard_normal((n, 4))).astype(np.float32)
    write_store(path, layers, labels=labels, outputs=outputs, class_names=["ant", "bee", "cat", "dog"])


def row_keys(matrix):
    return matrix.evaluate("(el) => [...el.querySelectorAll('.av-row')].map((r) => r.dataset.key)")


def test_stacked_layers_share_rows(lab, page):
    make_store(lab.root_dir / "stack_store")
    page.set_viewport_size({"width": 1400, "height": 900})
    panel = open_cells(page, lab, "stack.ipynb", [SETUP, STATE, BRUSH])
    cell = run_cell(panel, 0, timeout=240_000)
    matrices = cell.locator(".activis-matrix[data-rendered]")
    matrices.nth(1).wait_for(timeout=120_000)
    state = python_result(panel, 1, lambda r: r["progress"] == ["", ""])  # the background rows arrived
    assert state["layers"] == ["fc2", "conv"] and state["panel_rows"] == [state["rows"]]
    for i in range(2):
        page.wait_for_function("(el) => el.dataset.progress === '' && el.querySelectorAll('.av-row').length > 0",
                               arg=matrices.nth(i).element_handle())
    assert row_keys(matrices.nth(0)) == row_keys(matrices.nth(1)) == state["rows"]

    # "+ layer…" in the explorer's bar stacks one more layer
    cell.locator(".activis-stack-add select").select_option("fc1")
    matrices.nth(2).wait_for(timeout=60_000)
    state = python_result(panel, 1, lambda r: len(r["layers"]) == 3 and r["progress"] == ["", "", ""])
    assert state["layers"] == ["fc2", "conv", "fc1"]

    # a brush in the kernel: its row in every panel
    run_cell(panel, 2)
    state = python_result(panel, 1, lambda r: "selection" in r["rows"])
    for i in range(3):
        page.wait_for_function("([el, keys]) => JSON.stringify([...el.querySelectorAll('.av-row')]"
                               ".map((r) => r.dataset.key)) === JSON.stringify(keys)",
                               arg=[matrices.nth(i).element_handle(), state["rows"]])

    cell.locator(".activis-explorer").evaluate("(el) => el.scrollIntoView({ block: 'start' })")
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "matrix_stack.png"))

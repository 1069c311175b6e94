"""Suggested slices in the Explorer, in a real JupyterLab: search with progress, list, adopt -> matrix row."""

import pytest

from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"

SETUP = f'''
import json, tempfile, numpy as np, pandas as pd
from activis.store import write_store
from activis.subsets import Subsets
from activis.widgets.explorer import Explorer
rng = np.random.default_rng(0)
n = 3000
meta = pd.DataFrame({{"age": rng.integers(0, 90, n), "city": rng.choice(["rome", "oslo", {XSS!r}], n),
                      "height": rng.normal(170, 10, n)}})
planted = ((meta.age > 60) & (meta.city == {XSS!r})).to_numpy()
labels = rng.integers(0, 3, n)
wrong = rng.random(n) < np.where(planted, 0.6, 0.05)
outputs = np.eye(3, dtype=np.float32)[np.where(wrong, (labels + 1) % 3, labels)] * 4
acts = rng.normal(size=(n, 8)).astype(np.float32)
store = write_store(tempfile.mkdtemp() + "/s", {{"fc": acts}}, labels=labels, outputs=outputs, metadata=meta,
                    class_names=["a", "b", "c"])
subsets = Subsets(store)
ex = Explorer(store, subsets=subsets, method="pca")
ex
'''
CHECK = '''s = ex.slice_suggestions
report = s.report
first = report[0] if report is not None and len(report) else None
print("RESULT " + json.dumps({"state": s.state, "adopted": s.adopted, "active": ex.subset_panel.active,
    "subset": ex.selection.subset, "rows": ex.matrix.row_keys,
    "first": None if first is None else first.name,
    "exact": None if first is None or first.name not in subsets else
        bool(np.array_equal(subsets.indices(first.name), first.members)),
    "highlighted": None if ex.selection.subset_indices is None else len(ex.selection.subset_indices),
    "size": None if first is None else first.size}))'''

RECORD_STATES = """(el) => {
  window.__sliceStates = [];
  const seen = () => window.__sliceStates.push([el.dataset.state, Number(el.dataset.progress)]);
  new MutationObserver(seen).observe(el, { attributes: true, attributeFilter: ["data-state", "data-progress"] });
}"""


def test_suggested_slices_adopt_into_the_explorer(lab, page):
    panel = open_cells(page, lab, "slice_suggestions.ipynb", [SETUP, CHECK])
    cell = run_cell(panel, 0, timeout=240_000)
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Slices").click()  # a tab of the side panels
    view = cell.locator(".activis-slices[data-rendered]")
    view.wait_for(timeout=120_000)
    matrix = cell.locator(".activis-matrix[data-rendered]")
    matrix.wait_for(timeout=120_000)
    assert view.get_attribute("data-state") == "idle" and view.get_attribute("data-count") == "0"
    assert view.locator(".activis-slices-scope").text_content() == "metadata and activations at fc"

    # the search runs in a kernel thread: the bar moves, then the ranked list comes
    page.evaluate(RECORD_STATES, view.element_handle())
    view.locator(".activis-slices-run").click()
    page.wait_for_function("(el) => el.dataset.state === 'done'", arg=view.element_handle(), timeout=120_000)
    states = page.evaluate("() => window.__sliceStates")
    assert any(s == "running" and 0 < p < 100 for s, p in states), states  # progress shown while running
    assert view.get_attribute("data-progress") == "100"
    assert int(view.get_attribute("data-count")) >= 1
    first = view.locator(".activis-slice-row").first
    description = first.locator(".activis-slice-description").text_content()
    assert XSS in description and "age" in description  # the planted slice, its value shown as text
    assert view.locator("img").count() == 0
    assert "holm" in view.locator(".activis-slices-summary").text_content()

    # adopt: a subset with exactly the slice's members, a matrix row, the highlight in every view
    first.locator(".activis-slice-adopt").click()
    result = python_result(panel, 1, lambda r: r["adopted"] == r["first"] and f"subset:{r['first']}" in r["rows"])
    assert result["exact"] and result["active"] == result["first"] == result["subset"]
    assert result["highlighted"] == result["size"]
    has_row = "([el, key]) => Array.from(el.querySelectorAll('.av-row')).some((d) => d.dataset.key === key)"
    page.wait_for_function(has_row, arg=[matrix.element_handle(), f"subset:{result['first']}"])
    page.wait_for_function("(el) => el.querySelector('.activis-slice-row[data-adopted=true]') !== null",
                           arg=view.element_handle())
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Subsets").click()
    subset_row = cell.locator(".activis-subset-row[data-active='true'] .activis-subset-name")
    subset_row.wait_for()
    assert subset_row.text_content() == result["first"]

"""SubsetPanel in a real JupyterLab: define by query, by class, by confusion pair; pick; delete; errors."""

import pytest

from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"

SETUP = f'''
import json, tempfile, numpy as np, pandas as pd
from activis.store import write_store
from activis.subsets import Subsets
from activis.widgets.subset_panel import SubsetPanel
rng = np.random.default_rng(0)
n = 300
labels = rng.integers(0, 3, n)
outputs = rng.normal(size=(n, 3)).astype(np.float32)
store = write_store(tempfile.mkdtemp() + "/s", {{"fc": rng.random((n, 4))}}, labels=labels, outputs=outputs,
                    class_names=["cat", "dog", {XSS!r}], metadata=pd.DataFrame({{"age": rng.integers(0, 90, n)}}))
subsets = Subsets(store)
panel = SubsetPanel(subsets)
panel
'''
CHECK = '''print("RESULT " + json.dumps({"names": subsets.names, "active": panel.active, "status": panel.status,
    "sizes": {k: subsets.size(k) for k in subsets.names},
    "expected": int(((store.instances.label == 1) & (store.instances.pred == 2)).sum()),
    "old": int((store.instances.age > 60).sum())}))'''


def test_subset_panel(lab, page):
    panel = open_cells(page, lab, "subset_panel.ipynb", [SETUP, CHECK])
    view = run_cell(panel, 0).locator(".activis-subsets[data-rendered]")
    view.wait_for()
    assert view.get_attribute("data-count") == "0"

    # a query typed in the panel
    view.locator("input[aria-label='subset name']").fill("old")
    view.locator(".activis-subset-query").fill("age > 60")
    view.locator(".activis-subset-add").click()
    view.locator(".activis-subset-row[data-name='old']").wait_for()

    # a bad query: the error names the valid columns, nothing is added
    view.locator("input[aria-label='subset name']").fill("")
    view.locator(".activis-subset-query").fill("agee > 3")
    view.locator(".activis-subset-query").press("Enter")
    page.wait_for_function("(el) => (el.dataset.status || '').startsWith('error')", arg=view.element_handle())
    assert "age" in view.get_attribute("data-status") and view.get_attribute("data-count") == "1"

    # true -> predicted pair and one subset per class (class names are text, never markup)
    view.locator(".activis-subset-true").select_option("1")
    view.locator(".activis-subset-pred").select_option("2")
    view.locator(".activis-subset-pair").click()
    pair = view.locator(".activis-subset-row").filter(has_text="true dog, pred")
    pair.wait_for()
    assert pair.locator(".activis-subset-name").text_content() == f"true dog, pred {XSS}"
    view.locator(".activis-subset-classes").click()
    page.wait_for_function("(el) => el.dataset.count === '5'", arg=view.element_handle())
    assert view.locator("img").count() == 0
    assert view.locator(".activis-subset-true option").nth(2).text_content() == XSS

    # pick one: Python sees it
    view.locator(".activis-subset-row[data-name='old']").click()
    result = python_result(panel, 1, lambda r: r["active"] == "old")
    assert result["active"] == "old"
    assert result["sizes"]["old"] == result["old"]
    assert result["sizes"][f"true dog, pred {XSS}"] == result["expected"]
    assert int(pair.get_attribute("data-size")) == result["expected"]
    view.locator(".activis-subset-row[data-name='old'][data-active='true']").wait_for()

    # delete: gone from the panel and from the store's subsets
    view.locator(".activis-subset-row[data-name='old'] .activis-subset-remove").click()
    page.wait_for_function("(el) => el.dataset.count === '4'", arg=view.element_handle())
    result = python_result(panel, 1, lambda r: "old" not in r["names"])
    assert "old" not in result["names"] and result["active"] == ""

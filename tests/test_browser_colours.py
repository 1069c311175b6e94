"""One palette: class k has the same colour in every view of an explorer, with 12 and with 25 classes."""

import pytest

from activis.widgets.colours import class_colours
from jupyter_page import open_cells, read_result, run_cell

pytestmark = pytest.mark.browser

SETUP = """
import json, tempfile
import numpy as np
from activis.store import write_store
from activis.widgets.explorer import Explorer

def explorer(n_classes, n=600):
    rng = np.random.default_rng(n_classes)
    labels = np.arange(n) % n_classes
    outputs = np.eye(n_classes, dtype=np.float32)[labels] * 3 + rng.standard_normal((n, n_classes)).astype(np.float32)
    acts = rng.standard_normal((n, 8)).astype(np.float32) + labels[:, None]
    store = write_store(tempfile.mkdtemp() + "/s", {"fc": acts}, labels=labels, outputs=outputs,
                        class_names=[f"class {k}" for k in range(n_classes)])
    return Explorer(store, method="pca", max_instances=n)

ex12, ex25 = explorer(12), explorer(25)
"""

# the colour each view shows for each class, read from the page (computed CSS colours: rgb(...))
COLOURS = """(root) => {
  const read = (view, sel, attr) => Object.fromEntries([...view.querySelectorAll(sel)].map(
    (e) => [e.getAttribute(attr), getComputedStyle(e.querySelector('.swatch')).backgroundColor]));
  return {
    projection: read(root.querySelector('.activis-projection'), '.av-proj-legend .entry', 'data-code'),
    instances: read(root.querySelector('.activis-ip'), '.av-ip-legend-item', 'data-class'),
  };
}"""


def rgb(hex_colour):
    return "rgb({}, {}, {})".format(*(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)))


@pytest.mark.parametrize("n_classes", [12, 25])
def test_class_colours_agree_across_views(lab, page, n_classes):
    panel = open_cells(page, lab, f"colours_{n_classes}.ipynb", [
        SETUP + f"ex = ex{n_classes}\nex",
        'print("RESULT " + json.dumps({"palette": ex.colours["classes"], '
        '"views": [v.colours["classes"] for v in ex.views]}))',
    ])
    cell = run_cell(panel, 0, timeout=240_000)
    cell.locator(".activis-projection[data-shown-method='pca']").wait_for(timeout=120_000)
    cell.locator(".activis-ip[data-rendered]").wait_for()
    kernel = read_result(run_cell(panel, 1))
    want = class_colours(n_classes)
    assert kernel["palette"] == want and all(v == want for v in kernel["views"])  # one palette for all views
    shown = cell.locator(".activis-explorer").evaluate(COLOURS)
    for view in ("projection", "instances"):
        assert sorted(map(int, shown[view])) == list(range(n_classes)), (view, shown[view])
    for k in range(n_classes):
        assert shown["projection"][str(k)] == shown["instances"][str(k)] == rgb(want[k]), k
    # class k keeps its colour whatever the number of classes
    assert class_colours(25)[:12] == class_colours(12)

"""ActivationMatrix in a real JupyterLab: render, sort, cluster, click -> Python, Python -> rows, XSS, theme."""

import json

import numpy as np
import pytest

from activis.store import LayerSpec, write_store
from conftest import ARTIFACTS, TIMINGS
from jupyter_page import change_theme, open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=window.__xss=1>"
CLASSES = ["zero", "one", "two", XSS]
TOP_OF_TWO = 40   # the neuron that fires most for class "two"
TWINS = (5, 50)   # two identical neurons: clustering must put them side by side


def make_store(path, n=400, n_neurons=64, n_classes=4, seed=0):
    """Class c drives neurons 16c..16c+15; one neuron per class stands out; two neurons are twins."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % n_classes
    acts = rng.random((n, n_neurons)).astype(np.float32) * 0.2
    for c in range(n_classes):
        block = slice(16 * c, 16 * c + 16)
        acts[labels == c, block] += rng.random(16).astype(np.float32) + 0.5
    acts[labels == 2, TOP_OF_TWO] += 3.0
    acts[:, TWINS[1]] = acts[:, TWINS[0]]
    outputs = np.eye(n_classes, dtype=np.float32)[labels] * 4 + rng.standard_normal((n, n_classes)).astype(np.float32)
    return write_store(path, {"fc": acts, "signed": acts - 0.6}, labels=labels, outputs=outputs,
                       class_names=(CLASSES + [f"class {c}" for c in range(4, n_classes)])[:n_classes], overwrite=True,
                       layer_specs={"fc": LayerSpec(n_neurons, "float32"), "signed": LayerSpec(n_neurons, "float32")})


SETUP = f"""
import json
import numpy as np
from activis.store import open_store
from activis.subsets import Subsets
from activis.widgets.activation_matrix import ActivationMatrix
store = open_store("matrix_store")
subsets = Subsets(store)
subsets.add({XSS!r} + " as a subset", "label == 1 and confidence > 0.5")
m = ActivationMatrix(store, "fc", subsets=subsets)
hovered_rows = []  # every hover Python saw: running a check cell moves the mouse away, ending the hover
m.observe(lambda change: hovered_rows.append(change["new"]), "hovered_row")
m"""
CHECK = """print("RESULT " + json.dumps({
    "selected_neuron": m.selected_neuron, "selected_row": m.selected_row, "row_keys": m.row_keys,
    "order_mode": m.order_mode, "sort_by_row": m.sort_by_row, "order": m.neuron_order.tolist(),
    "hovered_rows": hovered_rows, "selected_indices": len(m.selected_indices)}))"""


def rendered_after(page, view, action):
    """Do ``action`` and wait until the view has drawn again."""
    before = int(view.get_attribute("data-rendered"))
    action()
    page.wait_for_function("([el, n]) => Number(el.dataset.rendered) > n", arg=[view.element_handle(), before])


def row_label(view, key):
    return view.locator(".av-row").filter(has=view.page.locator(f"xpath=self::*[@data-key={json.dumps(key)}]"))


def click_cell(view, column, row):
    """Click the centre of a matrix cell by its column position and row index."""
    cell_w = float(view.get_attribute("data-cell-w"))
    row_h = float(view.get_attribute("data-row-h"))
    view.locator("canvas.av-canvas").click(position={"x": (column + 0.5) * cell_w, "y": (row + 0.5) * row_h})


def test_activation_matrix_round_trip(lab, page):
    make_store(lab.root_dir / "matrix_store")
    panel = open_cells(page, lab, "activation_matrix.ipynb", [
        SETUP, CHECK,
        "m.add_instance(7)",
        f"m.add_subset({XSS!r} + ' as a subset')",
        "m.layer = 'signed'",
    ])
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-matrix[data-rendered]")
    view.wait_for()
    assert view.get_attribute("data-rows") == "4"      # one row per true class by default
    assert view.get_attribute("data-neurons") == "64"
    assert view.get_attribute("data-scale") == "sequential"  # non-negative layer
    assert float(view.get_attribute("data-draw-ms")) > 0

    # class names from data are text: the row label shows the markup literally, nothing runs
    texts = view.locator(".av-row .av-text").all_text_contents()
    assert texts == [f"true {c}" for c in CLASSES]
    assert view.locator("img").count() == 0
    assert page.evaluate("() => window.__xss") is None

    # sort by the "true two" row: done in the browser, mirrored in Python
    label = row_label(view, "subset:true two")
    label.hover()
    rendered_after(page, view, label.locator(".av-sort").click)
    assert view.get_attribute("data-order-mode") == "sort"
    assert view.get_attribute("data-first-neuron") == str(TOP_OF_TWO)
    result = python_result(panel, 1, lambda r: r["order_mode"] == "sort" and r["order"][:1] == [TOP_OF_TWO])
    assert result["sort_by_row"] == "subset:true two"
    js_order = [int(v) for v in view.get_attribute("data-order").split(",")]
    assert js_order == result["order"]  # the browser's sort equals activis.subsets.sort_neurons

    # cluster: the order comes from Python; the twin neurons end up side by side
    rendered_after(page, view, view.locator("button[data-mode='cluster']").click)
    page.wait_for_function("(el) => el.dataset.orderMode === 'cluster' && !el.querySelector('.av-info')"
                           ".textContent.includes('clustering')", arg=view.element_handle())
    result = python_result(panel, 1, lambda r: r["order_mode"] == "cluster")
    page.wait_for_function("([el, o]) => el.dataset.order === o", arg=[view.element_handle(),
                                                                        ",".join(map(str, result["order"]))])
    order = result["order"]
    assert sorted(order) == list(range(64))
    assert abs(order.index(TWINS[0]) - order.index(TWINS[1])) == 1

    # back to index order; a click on a cell of the second row picks neuron 12, not the row
    rendered_after(page, view, view.locator("button[data-mode='index']").click)
    click_cell(view, 12, 1)
    result = python_result(panel, 1, lambda r: r["selected_neuron"] == 12)
    assert result["selected_row"] == "" and result["selected_indices"] == 0
    assert view.get_attribute("data-selected-neuron") == "12"
    # the row is picked by its label
    row_label(view, "subset:true one").locator(".av-text").click()
    result = python_result(panel, 1, lambda r: r["selected_row"] == "subset:true one")
    assert result["selected_indices"] == 100 and result["selected_neuron"] == 12

    # hover shows row, neuron, value and rank
    cell_w = float(view.get_attribute("data-cell-w"))
    row_h = float(view.get_attribute("data-row-h"))
    view.locator("canvas.av-canvas").hover(position={"x": (TOP_OF_TWO + 0.5) * cell_w, "y": 2.5 * row_h})
    tip = view.locator(".activis-tooltip")
    tip.wait_for(state="visible")
    text = tip.text_content()
    assert "true two" in text and f"unit {TOP_OF_TWO}" in text and "rank 1 of 64" in text and "mean activation" in text
    python_result(panel, 1, lambda r: "subset:true two" in r["hovered_rows"])

    # rows added from Python are drawn; the subset whose name is markup shows as text
    rendered_after(page, view, lambda: run_cell(panel, 2))
    assert view.get_attribute("data-rows") == "5"
    assert view.locator(".av-row .av-text").last.text_content().startswith("#7 ")
    rendered_after(page, view, lambda: run_cell(panel, 3))
    assert view.locator(".av-row .av-text").last.text_content() == f"{XSS} as a subset"
    assert view.locator("img").count() == 0

    # remove a row from the UI: Python's row_keys follow
    label = row_label(view, "instance:7")
    label.hover()
    rendered_after(page, view, label.locator(".av-remove").click)
    assert view.get_attribute("data-rows") == "5"
    result = python_result(panel, 1, lambda r: "instance:7" not in r["row_keys"])
    assert "instance:7" not in result["row_keys"]

    # add a row from the UI: pin an instance by number
    view.locator("input[aria-label='instance index']").fill("3")
    rendered_after(page, view, lambda: view.locator("input[aria-label='instance index']").press("Enter"))
    assert view.get_attribute("data-rows") == "6"

    # difference mode and a signed layer both use the diverging scale
    label = row_label(view, "subset:true zero")
    label.hover()
    rendered_after(page, view, label.locator(".av-diff").click)
    assert view.get_attribute("data-scale") == "diverging"
    rendered_after(page, view, label.locator(".av-diff").click)
    assert view.get_attribute("data-scale") == "sequential"
    rendered_after(page, view, lambda: run_cell(panel, 4))
    assert view.get_attribute("data-scale") == "diverging"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view.screenshot(path=str(ARTIFACTS / "activation_matrix_light.png"))

    # follows the JupyterLab theme: the legend's zero end is the (dark) background
    def zero_colour():
        return page.evaluate("""(el) => {
            const c = el.querySelector('canvas.av-legend'); const d = c.getContext('2d').getImageData(80, 5, 1, 1).data;
            return [d[0], d[1], d[2]]; }""", view.element_handle())
    light = zero_colour()
    change_theme(page, dark=True)
    page.wait_for_function("([el, c]) => { const d = el.querySelector('canvas.av-legend').getContext('2d')"
                           ".getImageData(80, 5, 1, 1).data; return d[0] !== c[0] || d[1] !== c[1]; }",
                           arg=[view.element_handle(), light])
    dark = zero_colour()
    assert sum(light) > 600 and sum(dark) < 200, (light, dark)
    view.screenshot(path=str(ARTIFACTS / "activation_matrix_dark.png"))
    change_theme(page, dark=False)


def test_activation_matrix_100_rows_1024_neurons(lab, page):
    """The size the issue names: drawn and re-sorted in the page, timings recorded."""
    make_store(lab.root_dir / "matrix_store_big", n=2000, n_neurons=1024, n_classes=10)
    panel = open_cells(page, lab, "activation_matrix_big.ipynb", [
        "from activis.store import open_store\nfrom activis.widgets.activation_matrix import ActivationMatrix\n"
        "store = open_store('matrix_store_big')\n"
        "m = ActivationMatrix(store, 'fc')\nfor i in range(90):\n    m.add_instance(i)\nm",
        "m.selected_neuron = 1000",
    ])
    view = run_cell(panel, 0).locator(".activis-matrix[data-rows='100']")
    view.wait_for()
    assert view.get_attribute("data-neurons") == "1024"
    draw_ms = float(view.get_attribute("data-draw-ms"))
    sort_times = []
    for key in ("subset:true two", "instance:5", "subset:true zero"):
        label = row_label(view, key)
        label.scroll_into_view_if_needed()
        label.hover()
        rendered_after(page, view, label.locator(".av-sort").click)
        sort_times.append(float(view.get_attribute("data-sort-ms")))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view.screenshot(path=str(ARTIFACTS / "activation_matrix_100x1024.png"))

    # zoomed in, a neuron selected from Python is scrolled into view
    fit_w = float(view.get_attribute("data-cell-w"))
    for _ in range(3):
        view.get_by_role("button", name="+", exact=True).click()
    assert float(view.get_attribute("data-cell-w")) == pytest.approx(8 * fit_w, rel=0.01)
    run_cell(panel, 1)
    page.wait_for_function("""(el) => {
        const s = el.querySelector('.av-scroller'), w = Number(el.dataset.cellW);
        const x = el.dataset.order.split(',').indexOf('1000') * w;
        return el.dataset.selectedNeuron === '1000' && x >= s.scrollLeft && x + w <= s.scrollLeft + s.clientWidth;
    }""", arg=view.element_handle())
    TIMINGS["matrix_100x1024_draw_ms"] = draw_ms
    TIMINGS["matrix_100x1024_sort_ms"] = sort_times
    # generous bounds: catch a pathological regression, not machine noise (benchmarks/ has the figures)
    assert draw_ms < 2000 and max(sort_times) < 1000, (draw_ms, sort_times)


def test_activation_matrix_links_through_a_shared_selection(lab, page):
    """With an explorer's Selection attached, hover/click write it and its neuron/layer drive the matrix."""
    make_store(lab.root_dir / "matrix_store_linked")
    panel = open_cells(page, lab, "activation_matrix_linked.ipynb", [
        "import json\nfrom activis.store import open_store\nfrom activis.widgets.selection import Selection\n"
        "from activis.widgets.activation_matrix import ActivationMatrix\n"
        "sel = Selection()\nm = ActivationMatrix(open_store('matrix_store_linked'), 'fc', shared_selection=sel)\n"
        "hovers = []\nsel.observe(lambda c: hovers.append([] if c['new'] is None else c['new'].tolist()), 'hover')\nm",
        'print("RESULT " + json.dumps({"hovers": hovers, '
        '"hover_source": sel.hover_source, "neuron": sel.neuron, "subset": sel.subset, '
        '"subset_n": 0 if sel.subset_indices is None else len(sel.subset_indices), '
        '"m_neuron": m.selected_neuron, "m_layer": m.layer}))',
        "sel.neuron = 9\nsel.layer = 'signed'",
    ])
    view = run_cell(panel, 0).locator(".activis-matrix[data-linked='true']")
    view.wait_for()
    cell_w = float(view.get_attribute("data-cell-w"))
    row_h = float(view.get_attribute("data-row-h"))
    canvas = view.locator("canvas.av-canvas")

    # hovering the "true two" row lights up exactly its instances, written by the matrix in the
    # browser, once per row however the mouse moves along it; leaving the matrix clears it
    for x in (20.5, 21.5, 30.5):
        canvas.hover(position={"x": x * cell_w, "y": 2.5 * row_h})
    result = python_result(panel, 1, lambda r: r["hover_source"] == "matrix" and len(r["hovers"]) >= 2)
    assert result["hovers"] == [list(range(2, 400, 4)), []]

    # clicking a cell of "true zero" shares its neuron and leaves the class alone; its label shares the class
    canvas.click(position={"x": 3.5 * cell_w, "y": 0.5 * row_h})
    result = python_result(panel, 1, lambda r: r["neuron"] == 3)
    assert result["subset"] == "" and result["m_neuron"] == 3
    row_label(view, "subset:true zero").locator(".av-text").click()
    result = python_result(panel, 1, lambda r: r["subset"] == "true zero")
    assert result["subset_n"] == 100 and result["m_neuron"] == 3

    # another view's choice of neuron and layer drives the matrix
    rendered_after(page, view, lambda: run_cell(panel, 2))
    page.wait_for_function("(el) => el.dataset.selectedNeuron === '9'", arg=view.element_handle())
    result = python_result(panel, 1, lambda r: r["m_neuron"] == 9 and r["m_layer"] == "signed")
    assert result["m_layer"] == "signed" and view.get_attribute("data-scale") == "diverging"

"""The misclassification view in a real JupyterLab, inside an Explorer: placeholder, pin, layer switch, matrix link."""

import numpy as np
import pytest

from activis.store import LayerSpec, write_store
from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=window.__xss=1>"
CLASSES = ["cat", XSS, "<b>bird</b>"]


def make_store(path, n=240, seed=0):
    """Three classes; instance 7 (a cat) is predicted as class 1 and sits halfway toward it on neurons 2 and 5."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    fc1 = rng.normal(size=(n, 12)).astype(np.float32) * 0.3
    fc1[labels == 1, 2] += 3.0
    fc1[labels == 1, 5] += 2.0
    fc2 = rng.normal(size=(n, 6)).astype(np.float32) * 0.3
    fc2[labels == 1, 4] += 2.5
    outputs = np.eye(3, dtype=np.float32)[labels] * 4 + rng.normal(size=(n, 3)).astype(np.float32) * 0.2
    mistaken = 6  # index 6 has label 0
    fc1[mistaken, [2, 5]] = [2.5, 1.8]
    fc2[mistaken, 4] = 2.0
    outputs[mistaken] = [0.0, 5.0, 0.0]
    write_store(path, {"fc1": fc1, "fc2": fc2}, labels=labels, outputs=outputs, class_names=CLASSES, overwrite=True,
                layer_specs={"fc1": LayerSpec(12, "float32"), "fc2": LayerSpec(6, "float32")})
    return mistaken


SETUP = """
import json
from activis.store import open_store
from activis.analysis import explain_instance
from activis.widgets.explorer import Explorer
store = open_store("why_store")
ex = Explorer(store, method="pca")
ex"""
CHECK = """shown = ex.why.explanation
print("RESULT " + json.dumps({
    "layer": ex.selection.layer, "pinned": ex.selection.pinned, "neuron": ex.selection.neuron,
    "index": ex.why.index, "explained_layer": None if shown is None else shown.layer,
    "colours": ex.colours["classes"], "same_colours": all(v.colours == ex.colours for v in ex.views),
    "expected": {layer: explain_instance(store, p, layer).neurons.index[:12].tolist()
                 for p in ex.selection.pinned[-1:] for layer in store.layers},
}))"""


def drawn_after(page, view, action):
    before = int(view.get_attribute("data-rendered"))
    action()
    page.wait_for_function("([el, n]) => Number(el.dataset.rendered) > n", arg=[view.element_handle(), before])


def bar_neurons(why):
    return [int(n) for n in why.locator(".av-why-row").evaluate_all("(rows) => rows.map((r) => r.dataset.neuron)")]


def test_misclassification_view(lab, page):
    mistaken = make_store(lab.root_dir / "why_store")
    panel = open_cells(page, lab, "why.ipynb", [SETUP, CHECK])
    cell = run_cell(panel, 0, timeout=240_000)
    why = cell.locator(".activis-why[data-rendered]")
    matrix = cell.locator(".activis-matrix[data-rendered]")
    inst = cell.locator(".activis-ip[data-rendered]")
    for view in (matrix, inst):
        view.wait_for(timeout=120_000)
    cell.locator(".activis-explorer-side .lm-TabBar-tab", has_text="Why misclassified").click()  # a side tab
    why.wait_for(timeout=120_000)
    for view in (why, matrix, inst):
        view.locator("xpath=self::*[@data-linked='true']").wait_for()

    # nothing pinned: it says what to do, and draws no bars
    assert why.get_attribute("data-index") == "-1" and why.get_attribute("data-bars") == "0"
    assert "Pin an instance" in why.locator(".av-why-status").text_content()
    assert matrix.get_attribute("data-highlighted-neurons") == ""

    # pinning the misclassified instance (a click on its square) replaces the placeholder with its bars
    pos = inst.evaluate(f"(el) => el.activisLocate({mistaken})")
    page.mouse.click(pos["x"], pos["y"])
    page.wait_for_function(f"(el) => el.dataset.index === '{mistaken}' && el.dataset.layer === 'fc2'",
                           arg=why.element_handle())
    assert not why.locator(".av-why-status").is_visible()
    state = python_result(panel, 1, lambda r: r["pinned"] == [mistaken] and r["index"] == mistaken)
    assert state["explained_layer"] == "fc2" and state["layer"] == "fc2"
    assert bar_neurons(why) == state["expected"]["fc2"]  # best score first, as explain_instance ranks them
    assert why.get_attribute("data-bars") == "6"
    # the heading says which instance, which classes and which layer; class names are text, never markup
    title = why.locator(".av-why-title").text_content()
    assert title.startswith(f"Instance #{mistaken} · true {CLASSES[0]} · predicted {XSS} (confidence"), title
    assert title.endswith("· layer fc2")
    assert why.locator("img").count() == 0 and why.locator("b").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert f"toward {XSS}" in why.locator(".av-why-legend").text_content()
    # class colours are the explorer's one palette: the predicted class's swatch and its bars
    assert state["same_colours"]
    rgb = "rgb({}, {}, {})".format(*(int(state["colours"][1][i:i + 2], 16) for i in (1, 3, 5)))
    swatches = why.locator(".av-why-title .av-why-swatch").evaluate_all(
        "(els) => els.map((e) => getComputedStyle(e).backgroundColor)")
    assert swatches[1] == rgb
    assert why.locator(".av-why-row").first.locator(".av-why-bar").first.evaluate(
        "(e) => getComputedStyle(e).backgroundColor") == rgb
    # every bar has its three measures; the top neuron moved toward the compared class (a positive score)
    top = why.locator(".av-why-row").first
    assert top.locator(".av-why-cell").count() == 3 and top.locator(".av-why-bar").count() == 3
    assert top.get_attribute("data-neuron") == "4"
    # its neurons are marked in the matrix, through the shared selection
    page.wait_for_function("([el, want]) => el.dataset.highlightedNeurons === want",
                           arg=[matrix.element_handle(), ",".join(map(str, state["expected"]["fc2"]))])

    # a layer switch in the matrix re-explains the same instance at the new layer
    drawn_after(page, why, lambda: matrix.locator("select[aria-label='layer']").select_option("fc1"))
    page.wait_for_function("(el) => el.dataset.layer === 'fc1'", arg=why.element_handle())
    state = python_result(panel, 1, lambda r: r["explained_layer"] == "fc1")
    assert state["layer"] == "fc1" and why.get_attribute("data-index") == str(mistaken)
    assert why.locator(".av-why-title").text_content().endswith("· layer fc1")
    assert bar_neurons(why) == state["expected"]["fc1"] and why.get_attribute("data-bars") == "12"
    assert set(bar_neurons(why)[:2]) == {2, 5}
    page.wait_for_function("([el, want]) => el.dataset.highlightedNeurons === want",
                           arg=[matrix.element_handle(), ",".join(map(str, state["expected"]["fc1"]))])

    # a click on a bar picks its neuron in every view
    why.locator(".av-why-row[data-neuron='5'] .av-why-label").click()
    state = python_result(panel, 1, lambda r: r["neuron"] == 5)
    assert state["neuron"] == 5
    page.wait_for_function("(el) => el.dataset.selectedNeuron === '5'", arg=matrix.element_handle())
    why.locator(".av-why-row[data-neuron='5'][data-selected='true']").wait_for()
    why.screenshot(path=str(ARTIFACTS / "misclassification_view.png"))

    # unpinning the instance brings the placeholder back and clears the matrix's marks
    inst_pos = inst.evaluate(f"(el) => el.activisLocate({mistaken})")
    page.mouse.click(inst_pos["x"], inst_pos["y"])
    page.wait_for_function("(el) => el.dataset.index === '-1'", arg=why.element_handle())
    assert why.locator(".av-why-status").is_visible() and why.get_attribute("data-bars") == "0"
    page.wait_for_function("(el) => el.dataset.highlightedNeurons === ''", arg=matrix.element_handle())
    assert read_result(run_cell(panel, 1))["pinned"] == []

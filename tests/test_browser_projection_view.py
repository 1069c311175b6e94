"""ProjectionView in a real JupyterLab + headless Chromium: drawing, colours, highlight, lasso, hover.

The `page` fixture fails a test on any page error or any request leaving 127.0.0.1.
"""

import json

import numpy as np
import pytest

from conftest import ARTIFACTS
from jupyter_page import change_theme, open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"


def make_store_cell(path, n, method, extra="", spread=4.0, setup=""):
    """Notebook source: a clustered store (one class name is markup) and a view of it."""
    return f"""\
import json, numpy as np, pandas as pd
from activis.store import write_store
from activis.widgets.projection_view import ProjectionView
rng = np.random.default_rng(0)
n = {n}
y = rng.integers(0, 4, n)
X = (rng.standard_normal((4, 16))[y] * {spread} + rng.standard_normal((n, 16))).astype(np.float32)
logits = np.eye(4)[y] * 2 + rng.standard_normal((n, 4))
names = ["cat", "dog", {XSS!r}, "bird"]
meta = pd.DataFrame({{"source": np.where(np.arange(n) % 3 == 0, "camera", "scan")}})
store = write_store({path!r}, {{"fc": X, "relu": np.maximum(X, 0)}}, labels=y, outputs=logits,
                    class_names=names, metadata=meta, overwrite=True)
view = ProjectionView(store, "fc", {method!r}, height=460{extra})
{setup}
view"""


def view_root(panel):
    return panel.locator(".activis-projection")


def canvas_stats(page, panel):
    """Distinct colours drawn and how many pixels have the theme's text colour (highlight rings)."""
    return view_root(panel).evaluate("""(root) => {
      const c = root.querySelector('canvas.av-proj-points');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      const probe = document.createElement('canvas').getContext('2d');
      probe.fillStyle = getComputedStyle(root).getPropertyValue('--av-fg').trim(); probe.fillRect(0, 0, 1, 1);
      const fg = probe.getImageData(0, 0, 1, 1).data;
      const colours = new Set(); let ring = 0;
      for (let i = 0; i < d.length; i += 4) {
        colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        if (d[i] === fg[0] && d[i + 1] === fg[1] && d[i + 2] === fg[2]) ring++;
      }
      return {colours: colours.size, ring};
    }""")


def test_umap_arrives_after_pca_colours_and_highlight(lab, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    check = ('print("RESULT " + json.dumps({"status": view.status, "shown": view.shown_method, '
             '"preview": view.job.preview is not None, "n": int(len(view.positions))}))')
    panel = open_cells(page, lab, "projection_umap.ipynb", [
        make_store_cell("proj_umap_store", 3000, "umap", extra=', params={"n_epochs": 150}'),
        check,
        'view.color_by = "neuron"; view.neuron = 2',
        "view.highlight(np.arange(0, 3000, 300))",
    ])
    run_cell(panel, 0)
    root = view_root(panel)
    # the UMAP layout is computed in a thread; its result must reach the browser on its own
    panel.locator(".activis-projection[data-shown-method='umap']:not([data-animating])").wait_for(timeout=120_000)
    assert root.get_attribute("data-points") == "3000"
    assert root.get_attribute("data-shown-history") == "pca,umap"  # PCA first, then moved to UMAP
    result = python_result(panel, 1, lambda r: r["status"] == "done")
    assert result == {"status": "done", "shown": "umap", "preview": True, "n": 3000}

    # names from the data are text: the markup shows literally and nothing was injected
    legend = root.locator(".av-proj-legend")
    assert XSS in legend.inner_text()
    assert root.locator("img").count() == 0
    assert not dialogs

    before = canvas_stats(page, panel)
    signature = root.get_attribute("data-color-signature")
    run_cell(panel, 2)
    panel.locator(".activis-projection[data-color-by='neuron']").wait_for()
    page.wait_for_function("([el, sig]) => el.dataset.colorSignature !== sig", arg=[root.element_handle(), signature])
    after = canvas_stats(page, panel)
    assert after["colours"] > before["colours"] + 20  # a continuous scale instead of 4 classes
    assert "neuron 2 of fc" in legend.inner_text()
    assert root.locator(".av-proj-gradient").count() == 1

    run_cell(panel, 3)
    panel.locator(".activis-projection[data-highlighted='10']").wait_for()
    ringed = canvas_stats(page, panel)
    assert ringed["ring"] > before["ring"] + 10 * 8  # every highlighted point got a ring
    assert float(root.get_attribute("data-highlight-ms")) < 50
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root.screenshot(path=str(ARTIFACTS / "projection_view_neuron_highlight.png"))

    # the map follows the JupyterLab theme (restored afterwards: the server's settings are shared)
    corner = ("([el]) => Array.from(el.querySelector('canvas.av-proj-points').getContext('2d')"
              ".getImageData(1, 1, 1, 1).data).slice(0, 3).reduce((a, b) => a + b)")
    assert page.evaluate(corner, [root.element_handle()]) > 600  # light background
    try:
        change_theme(page, dark=True)
        page.wait_for_function(f"(args) => ({corner})(args) < 200", arg=[root.element_handle()], timeout=30_000)
        assert root.locator(".av-proj-legend").evaluate("(e) => getComputedStyle(e).color") != "rgb(0, 0, 0)"
    finally:
        change_theme(page, dark=False)


def inside_even_odd(points, poly):
    """The even-odd rule exactly as the view evaluates it (same operations, float64)."""
    x, y = points[:, 0].astype(np.float64), points[:, 1].astype(np.float64)
    inside = np.zeros(len(points), dtype=bool)
    m = len(poly)
    j = m - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(m):
            xi, yi, xj, yj = poly[i, 0], poly[i, 1], poly[j, 0], poly[j, 1]
            crosses = (yi > y) != (yj > y)
            inside ^= crosses & (x < (xj - xi) * (y - yi) / (yj - yi) + xi)
            j = i
    return np.flatnonzero(inside)


def drag(page, box, path):
    page.mouse.move(box["x"] + float(path[0][0]), box["y"] + float(path[0][1]))
    page.mouse.down()
    for x, y in path[1:]:
        page.mouse.move(box["x"] + float(x), box["y"] + float(y))
    page.mouse.up()


def test_lasso_box_hover_and_click_reach_python(lab, page):
    state = ('print("RESULT " + json.dumps({"selected": view.selection.tolist(), "hovers": hovers, '
             '"lasso": None if view.lasso is None else view.lasso.tolist(), "positions": view.positions.tolist(), '
             '"labels": store.instances["label"].tolist()}))')
    record_hovers = 'hovers = []; view.observe(lambda c: hovers.append(c["new"]), "hovered_index")'
    panel = open_cells(page, lab, "projection_lasso.ipynb",
                       [make_store_cell("proj_lasso_store", 800, "pca", spread=1.0, setup=record_hovers), state])
    run_cell(panel, 0)
    root = view_root(panel)
    panel.locator(".activis-projection[data-shown-method='pca'][data-points='800']").wait_for()
    data = read_result(run_cell(panel, 1))
    positions = np.array(data["positions"], dtype=np.float32)
    t = json.loads(root.get_attribute("data-view"))
    px = np.stack([t["ax"] * positions[:, 0] + t["bx"], t["ay"] * positions[:, 1] + t["by"]], axis=1)
    box = root.locator("canvas.av-proj-points").bounding_box()

    # hover an isolated instance of the class whose name is markup: the tooltip shows it as text
    gaps = np.sqrt(((px[:, None] - px[None]) ** 2).sum(-1))
    np.fill_diagonal(gaps, np.inf)
    labels = np.array(data["labels"])
    ok = (gaps.min(1) > 9) & (labels == 2) & (px[:, 0] > 20) & (px[:, 0] < box["width"] - 20) \
        & (px[:, 1] > 20) & (px[:, 1] < box["height"] - 20)
    target = int(np.flatnonzero(ok)[0])
    hover_at = (box["x"] + float(px[target, 0]) + 1, box["y"] + float(px[target, 1]) + 1)
    page.mouse.move(*hover_at)
    tip = root.locator(".activis-tooltip")
    tip.filter(has_text="prediction:").wait_for()
    text = tip.inner_text()
    assert text.startswith(f"#{target}\n") and f"true class: {XSS}" in text and "source: " in text
    assert root.locator("img").count() == 0
    assert target in python_result(panel, 1, lambda r: target in r["hovers"])["hovers"]

    # click selects exactly that instance
    page.mouse.click(*hover_at)
    clicked = python_result(panel, 1, lambda r: r["selected"] == [target])
    assert clicked["selected"] == [target] and clicked["lasso"] is None

    # lasso: a non-convex star around the middle of the map
    root.locator("button[data-mode='lasso']").click()
    cx, cy = np.median(px[:, 0]), np.median(px[:, 1])
    angles = np.linspace(0, 2 * np.pi, 41)[:-1]
    radius = np.where(np.arange(40) % 2 == 0, 0.45, 0.2) * min(box["width"], box["height"])
    path = np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], axis=1).round(1)
    drag(page, box, path.tolist())
    result = python_result(panel, 1, lambda r: r["selected"] != [target] and r["lasso"] is not None)
    lasso = np.array(result["lasso"])
    # the polygon Python got is the one drawn with the mouse (in layout coordinates) ...
    drawn = np.stack([(path[:, 0] - t["bx"]) / t["ax"], (path[:, 1] - t["by"]) / t["ay"]], axis=1)
    assert lasso.shape == drawn.shape and np.abs(lasso - drawn).max() * abs(t["ax"]) < 1.0
    # ... and the selection is exactly the instances inside it
    expected = inside_even_odd(positions, lasso)
    assert 0 < len(expected) < len(positions)
    assert result["selected"] == expected.tolist()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root.screenshot(path=str(ARTIFACTS / "projection_view_lasso.png"))

    # box: a rectangle over the left half
    root.locator("button[data-mode='box']").click()
    x0, y0, x1, y1 = 15.0, 15.0, box["width"] / 2, box["height"] - 15
    drag(page, box, [[x0, y0], [x1 / 2, y1 / 2], [x1, y1]])
    result = python_result(panel, 1, lambda r: r["selected"] != expected.tolist())
    rect = np.array(result["lasso"])
    assert rect.shape == (4, 2)
    xs, ys = sorted(rect[:, 0]), sorted(rect[:, 1])
    inside = np.flatnonzero((positions[:, 0] > xs[0]) & (positions[:, 0] < xs[-1])
                            & (positions[:, 1] > ys[0]) & (positions[:, 1] < ys[-1]))
    assert result["selected"] == inside.tolist() == inside_even_odd(positions, rect).tolist()
    assert int(root.get_attribute("data-selected")) == len(inside)

    # a legend entry selects its class; Esc clears
    root.locator(".av-proj-legend .entry[data-code='1']").click()
    dogs = np.flatnonzero(labels == 1).tolist()
    result = python_result(panel, 1, lambda r: r["selected"] == dogs)
    assert result["selected"] == dogs and result["lasso"] is None
    root.locator(".av-proj-frame").press("Escape")
    assert python_result(panel, 1, lambda r: r["selected"] == [])["selected"] == []


def test_follows_an_explorers_shared_selection_in_the_browser(lab, page):
    link = "from activis.widgets.selection import Selection\nsel = Selection(layer='fc')\nview.shared_selection = sel"
    panel = open_cells(page, lab, "projection_shared.ipynb", [
        make_store_cell("proj_shared_store", 500, "pca", setup=link),
        'sel.set_hover([1, 2, 3], "matrix")',
        'sel.set_brush(np.arange(100), "instances")',
        'sel.set_brush(np.arange(50), "projection")',
        'sel.set_hover(None, "matrix"); sel.subset_indices = np.arange(7, dtype=np.int32); view.highlight([9])',
        "sel.hover_instance = 42",
    ])
    run_cell(panel, 0)
    root = view_root(panel)
    panel.locator(".activis-projection[data-linked='true'][data-points='500']").wait_for()
    run_cell(panel, 1)  # another view's hover lights its instances up here
    panel.locator(".activis-projection[data-highlighted='3']").wait_for()
    run_cell(panel, 2)  # another view's brush fades everything outside it
    panel.locator(".activis-projection[data-filtered='100']").wait_for()
    faded = canvas_stats(page, panel)["colours"]
    run_cell(panel, 3)  # this view's own brush never filters itself
    panel.locator(".activis-projection[data-filtered='']").wait_for()
    assert canvas_stats(page, panel)["colours"] < faded  # no faded copies of the class colours left
    run_cell(panel, 4)  # the active subset is lit while nothing is hovered
    panel.locator(".activis-projection[data-highlighted='7']").wait_for()
    run_cell(panel, 5)
    panel.locator(".activis-projection[data-linked-hover='42']").wait_for()
    assert root.get_attribute("data-selected") == "0"

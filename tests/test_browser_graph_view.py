"""GraphView in a real JupyterLab: render, expand, click -> Python, Python -> highlight, XSS, scale."""

import json

import pytest

from conftest import ARTIFACTS, TIMINGS
from jupyter_page import change_theme, open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"

MODEL = f'''
import json, torch
from torch import nn
from activis import extract_graph, GraphView

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.relu, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1)
    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.conv1(x))) + x)

class Net(nn.Module):
    def __init__(self, blocks=2):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.add_module({XSS!r}, nn.Identity())
        self.layer1 = nn.Sequential(*[Block(4) for _ in range(blocks)])
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(4, 3)
    def forward(self, x):
        x = getattr(self, {XSS!r})(self.stem(x))
        return self.fc(torch.flatten(self.pool(self.layer1(x)), 1))
'''

CHECK = 'print("RESULT " + json.dumps({"selected": w.selected_layer, "expanded": w.expanded, "events": events}))'


def visible(view):
    return int(view.get_attribute("data-visible-nodes"))


def redrawn_after(page, view, action):
    """Do ``action`` and wait until the view has drawn again."""
    before = int(view.get_attribute("data-rendered"))
    action()
    page.wait_for_function("([el, n]) => Number(el.dataset.rendered) > n", arg=[view.element_handle(), before])


def test_graph_view_round_trip(lab, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    panel = open_cells(page, lab, "graph_view.ipynb", [
        MODEL + "g = extract_graph(Net(), torch.randn(2, 3, 8, 8))\nevents = []\n"
        "w = GraphView(g)\nw.observe(lambda c: events.append(c['new']), names='selected_layer')\nw",
        CHECK,
        "w.selected_layer = 'stem'",
        "w.captured_layers = ['fc', 'layer1_1_relu_1']",
    ])
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-graph[data-rendered]")
    view.wait_for()
    # collapsed to top level: x, stem, the XSS module, layer1, pool, flatten, fc, output
    assert visible(view) == 8
    assert view.locator(".activis-node[data-type='module']").count() == 1

    # a module name from the model is text, never markup
    xss_node = view.locator(".activis-node[data-layer='_img_src_x_onerror_alert_1_'] text").first
    assert xss_node.text_content() == f"{XSS}: Identity"
    assert view.locator("img").count() == 0

    # double-click expands layer1 into its two blocks; Python sees the expansion
    redrawn_after(page, view, view.locator(".activis-node[data-key='module:layer1']").dblclick)
    assert visible(view) == 9
    assert view.locator(".activis-cluster[data-key='cluster:layer1']").count() == 1
    # expanding a block shows its children (conv1, relu, conv2, add, relu again)
    redrawn_after(page, view, view.locator(".activis-node[data-key='module:layer1.0']").dblclick)
    assert visible(view) == 9 - 1 + 5

    # hover shows full name, operation, shape and parameter count
    view.locator(".activis-node[data-layer='fc']").hover()
    tip = view.locator(".activis-tooltip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    # the example batch of 2 is not part of the model: the batch dimension shows as N
    assert "op: call_module  fc" in text and "output shape: [N, 3] (N: batch)" in text and "parameters: 15" in text

    # click a node: Python observes selected_layer
    view.locator(".activis-node[data-layer='fc']").click()
    result = python_result(panel, 1, lambda r: r["selected"] == "fc")
    # a double-click on a module also selects it (its first click), so each selection arrived once
    assert result["selected"] == "fc" and result["events"] == ["layer1", "layer1.0", "fc"]
    assert sorted(result["expanded"]) == ["layer1", "layer1.0"]
    view.locator(".activis-node[data-layer='fc'][data-selected='true']").wait_for()

    # select from Python: the node is highlighted in the DOM
    run_cell(panel, 2)
    view.locator(".activis-node[data-layer='stem'][data-selected='true']").wait_for()
    assert view.locator(".activis-node[data-selected='true']").count() == 1

    # captured layers are marked
    run_cell(panel, 3)
    view.locator(".activis-node[data-layer='fc'][data-captured='true']").wait_for()
    assert view.locator(".activis-node[data-captured='true']").count() == 2  # fc and the layer1.1 box

    # collapse from the cluster title
    redrawn_after(page, view, view.locator(".activis-cluster[data-key='cluster:layer1'] text").click)
    assert visible(view) == 8
    view.screenshot(path=str(ARTIFACTS / "graph_view.png"))
    assert dialogs == []

    # follows the JupyterLab theme: switching to dark changes the drawn colours
    fill = "(el) => getComputedStyle(el.querySelector('.activis-node rect')).fill"
    light = view.evaluate(fill)
    change_theme(page, dark=True)
    page.wait_for_function(f"([el, light]) => ({fill})(el) !== light", arg=[view.element_handle(), light])
    view.screenshot(path=str(ARTIFACTS / "graph_view_dark.png"))
    change_theme(page, dark=False)


def test_graph_view_500_nodes_layout_time(lab, page):
    panel = open_cells(page, lab, "graph_view_big.ipynb", [
        MODEL + "g = extract_graph(Net(blocks=100), torch.randn(2, 3, 8, 8))\n"
        "w = GraphView(g, height=600)\nw.expand_all()\nw",
        'print("RESULT " + json.dumps({"nodes": len(g.nodes), "shown": sum(n.op != "get_attr" for n in g.nodes),'
        ' "layout_ms": w.layout_ms, "selected": w.selected_layer}))',
        "w.selected_layer = 'fc'",
    ])
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-graph[data-rendered]")
    view.wait_for()
    result = python_result(panel, 1, lambda r: r["layout_ms"] > 0)
    assert result["nodes"] >= 500
    assert visible(view) == result["shown"]
    layout_ms = float(view.get_attribute("data-layout-ms"))
    TIMINGS["graph_500_layout_ms"] = layout_ms
    (ARTIFACTS / "graph_layout.json").write_text(json.dumps({"nodes": result["nodes"], "layout_ms": layout_ms}))
    print(f"layout of {result['nodes']} nodes: {layout_ms:.0f} ms")
    assert abs(result["layout_ms"] - layout_ms) < 1.0  # the figure reached Python too
    # a selection from Python pans to the (tiny, fitted) node; then a click and a zoom answer promptly
    run_cell(panel, 2)
    view.locator(".activis-node[data-layer='fc'][data-selected='true']").wait_for(timeout=5_000)
    view.locator(".activis-node[data-layer='pool']").click()
    view.locator(".activis-node[data-layer='pool'][data-selected='true']").wait_for(timeout=5_000)
    assert python_result(panel, 1, lambda r: r["selected"] == "pool")["selected"] == "pool"
    viewport = view.locator(".activis-viewport")
    before = viewport.get_attribute("transform")
    box = view.locator(".activis-graph-frame").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)
    page.wait_for_function("([el, t]) => el.getAttribute('transform') !== t", arg=[viewport.element_handle(), before],
                           timeout=5_000)
    assert layout_ms < 5_000


def test_graph_view_markers(lab, page):
    """Markers (the doctor's contract) are text badges: on the node, summed up on a collapsed module."""
    panel = open_cells(page, lab, "graph_view_markers.ipynb", [
        MODEL + "g = extract_graph(Net(), torch.randn(2, 3, 8, 8))\nw = GraphView(g)\nw",
        f"w.markers = {{'fc': {{'severity': 'error', 'count': 2, 'title': {XSS!r}}},"
        " 'layer1.0.conv1': {'severity': 'warning', 'count': 1, 'title': 'dead units'},"
        " 'layer1.1': {'severity': 'note', 'count': 3, 'title': 'slow'}}",
        "w.expand('layer1')",
        "w.markers = {}",
    ])
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-graph[data-rendered]")
    view.wait_for()
    assert view.get_attribute("data-marked-nodes") == "0"
    assert view.locator(".activis-marker").count() == 0

    run_cell(panel, 1)
    fc = view.locator(".activis-node[data-layer='fc'][data-marker-severity='error']")
    fc.wait_for()
    assert fc.get_attribute("data-marker-count") == "2"
    assert fc.locator(".activis-marker text").text_content() == "\u2716 2"
    # the collapsed layer1 holds a warning and a note: one badge, the worst severity, the counts summed
    layer1 = view.locator(".activis-node[data-key='module:layer1']")
    assert layer1.get_attribute("data-marker-severity") == "warning"
    assert layer1.get_attribute("data-marker-count") == "4"
    assert view.get_attribute("data-marked-nodes") == "2"
    # the badge is drawn in the severity colour the palette sent
    colours = view.evaluate("(el) => [...el.querySelectorAll('.activis-marker rect')]"
                            ".map((r) => r.getAttribute('fill'))")
    assert sorted(colours) == sorted(["#d32f2f", "#ef8f00"])
    # a title from data is text in the tooltip, never markup
    fc.hover()
    tip = view.locator(".activis-tooltip")
    tip.wait_for(state="visible")
    assert f"error: {XSS}" in tip.inner_text()
    assert view.locator("img").count() == 0

    # expanded, each block carries its own marker
    redrawn_after(page, view, lambda: run_cell(panel, 2))
    view.locator(".activis-node[data-key='module:layer1.0'][data-marker-severity='warning']").wait_for()
    assert view.locator(".activis-node[data-key='module:layer1.1']").get_attribute("data-marker-count") == "3"
    view.screenshot(path=str(ARTIFACTS / "graph_view_markers.png"))

    redrawn_after(page, view, lambda: run_cell(panel, 3))
    assert view.locator(".activis-marker").count() == 0
    assert view.get_attribute("data-marked-nodes") == "0"

"""DoctorReport in a real JupyterLab: it renders, a finding click selects its node in GraphView, a node
click lists its findings, nodes show their markers, and names from the model stay text."""

import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"

MODEL = f'''
import json, torch
from torch import nn
from activis import checkup, extract_graph, GraphView, DoctorReport

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.out = nn.Linear(8, 8), nn.Linear(8, 3)
        self.add_module({XSS!r}, nn.Linear(8, 8))
    def forward(self, x):
        h = torch.relu(self.fc1(x)).detach()  # fc1 gets no gradient
        h = h + getattr(self, {XSS!r})(x) * 0.0  # an all-zero gradient for the module named like HTML
        return self.out(h)

torch.manual_seed(0)
model = Net()
x, y = torch.randn(120, 8), torch.randint(0, 3, (120,))
report = checkup(model, (x, y), nn.CrossEntropyLoss(), checks=["gradient_coverage"])
gv = GraphView(extract_graph(model, x[:2]))
rv = DoctorReport(report).link(gv)
display(gv, rv)
'''

CHECK = ('print("RESULT " + json.dumps({"layer": gv.selected_layer, "node": rv.selected_node, '
         '"finding": rv.selected_finding, "nodes": [f["node"] for f in rv.findings]}))')


def test_doctor_report_and_graph_view_linked(lab, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    panel = open_cells(page, lab, "doctor_report.ipynb", [MODEL, CHECK])
    cell = run_cell(panel, 0)
    report = cell.locator(".activis-doctor[data-rendered]")
    graph = cell.locator(".activis-graph[data-rendered]")
    report.wait_for()
    graph.wait_for()
    nodes = python_result(panel, 1)["nodes"]
    assert nodes[0] == "detach" and len(nodes) == 2

    # the report renders every finding: severity, title, place, message, evidence and change to try
    rows = report.locator(".activis-doctor-row")
    assert rows.count() == 2
    first = rows.nth(0)
    assert first.locator(".activis-doctor-sev").text_content() == "error"
    assert first.locator(".activis-doctor-title").text_content() == "The gradient is cut"  # the cause, by place
    assert "fc1.weight" in first.locator(".activis-doctor-message").text_content()
    assert "no_gradient = 2" in first.locator(".activis-doctor-evidence").text_content()
    assert first.locator(".activis-doctor-change").text_content()

    # names from the model are text, never markup
    second = rows.nth(1)
    assert f"{XSS}.weight" in second.locator(".activis-doctor-message").text_content()
    assert page.locator("img[src='x']").count() == 0 and dialogs == []

    # nodes with findings carry their marker as text
    marked = graph.locator(".activis-node[data-marker-severity]")
    assert marked.count() == 2
    detach = graph.locator(".activis-node[data-layer='detach']")
    assert detach.get_attribute("data-marker-severity") == "error"
    assert detach.get_attribute("data-marker-count") == "1"
    assert detach.locator(".activis-marker text").text_content().endswith(" 1")

    # clicking a finding selects its node in GraphView (and Python sees it)
    first.click()
    graph.locator(".activis-node[data-layer='detach'][data-selected='true']").wait_for()
    result = python_result(panel, 1, lambda r: r["layer"] == "detach")
    assert result["layer"] == "detach" and result["finding"] == 0

    # clicking a node in GraphView lists its findings
    xss_node = graph.locator(".activis-node[data-marker-severity='warning']")
    xss_node.click()
    page.wait_for_function("(el) => el.dataset.shown === '1'", arg=report.element_handle())
    assert report.locator(".activis-doctor-row[data-selected='true']").count() == 1
    assert XSS in report.locator(".activis-doctor-row").nth(0).text_content()
    result = python_result(panel, 1, lambda r: r["node"] != "detach")
    assert result["node"] == result["layer"] and result["node"] != "detach"
    report.screenshot(path=str(ARTIFACTS / "doctor_report.png"))

    # show all lists every finding again and clears the selection
    report.locator("button", has_text="Show all").click()
    page.wait_for_function("(el) => el.dataset.shown === '2'", arg=report.element_handle())
    assert python_result(panel, 1, lambda r: r["layer"] == "")["layer"] == ""

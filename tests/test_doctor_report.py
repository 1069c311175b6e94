"""DoctorReport in Python: it shows a checkup's report or a running cockpit's findings, links to GraphView
(markers and the selected node, both ways) and switches a CockpitPanel to the layer of a finding."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from doctor_cases import MLP, digits
from torch import nn

from activis import Cockpit, CockpitPanel, DoctorReport, GraphView, checkup, extract_graph
from activis.widgets.doctor_report import with_cockpit

warnings.filterwarnings("ignore", category=UserWarning)


def planted():
    torch.manual_seed(0)
    model = MLP(64, 10, bug="skip_layer")
    X, y = digits()
    return model, checkup(model, (X, y), nn.CrossEntropyLoss(), checks=["gradient_coverage"])


def test_report_view_links_findings_and_graph_both_ways():
    model, report = planted()
    graph_view = GraphView(extract_graph(model, torch.from_numpy(digits()[0][:2])))
    view = DoctorReport(report).link(graph_view)
    assert graph_view.markers == {"fc2": {"severity": "error", "count": 1, "title": "Parameters without gradient"}}
    assert [f["node"] for f in view.findings] == ["fc2"] and "fc2" in view.findings[0]["keys"]
    view.selected_finding = 0  # clicking a finding selects its node
    assert graph_view.selected_layer == "fc2"
    graph_view.selected_layer = "fc1"  # clicking a node selects it in the report
    assert view.selected_node == "fc1"


def test_live_findings_reach_the_view_and_the_cockpit_panel_follows_a_click():
    X, y = (torch.from_numpy(a) for a in digits(300))
    model = MLP(64, 10)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    cockpit = Cockpit(model, ["Loss", "GradNorm", "UpdateSize"], optimizer=opt, doctor=True)
    view = DoctorReport(cockpit)
    panel = CockpitPanel(cockpit)
    box = with_cockpit(panel, view)
    assert box.children == (panel, view) and view.findings == []
    for step in range(40):
        if step == 20:  # fc2 frozen mid-run
            model.fc2.requires_grad_(False)
        idx = torch.randint(0, len(X), (64,))
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(X[idx]), y[idx], reduction="none"))
        opt.step()
    cockpit.close()
    assert len(view.findings) == len(cockpit.doctor.report().diagnoses) > 0
    i = next(f["index"] for f in view.findings if f["node"] == "fc2")
    assert view.findings[i]["cause"] == "frozen_layer" and view.findings[i]["title"].startswith("A layer stopped")
    assert view.findings[i]["step"] == 20  # the first step whose update left it out
    view.selected_finding = i
    assert panel.layer == "fc2" and panel.step_range[0] == view.findings[i]["step"]


def test_report_view_rejects_other_sources():
    with pytest.raises(TypeError, match="DoctorReport shows a Report"):
        DoctorReport(nn.Linear(2, 2))

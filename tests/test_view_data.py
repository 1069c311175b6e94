"""view.data(): every view gives what it shows now as a DataFrame, read from its backend objects."""

import importlib
import pkgutil

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import activis
import activis.widgets as widgets_package
from activis.store import LayerSpec, write_store
from activis.subsets import Subsets
from activis.widgets._base import View
from activis.widgets.activation_matrix import ActivationMatrix
from activis.widgets.instance_panel import InstancePanel
from activis.widgets.matrix_stack import MatrixStack
from activis.widgets.misclassification_view import MisclassificationView
from activis.widgets.projection_view import ProjectionView
from activis.widgets.sample_quantities_view import SampleQuantitiesView
from activis.widgets.slice_suggestions import SliceSuggestions
from activis.widgets.subset_panel import SubsetPanel
from activis.widgets.timeline_view import TimelineView


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(0)
    labels = np.arange(300) % 3
    camera = np.arange(300) % 4 == 0  # the camera's instances are mostly misclassified: a slice to find
    acts = (rng.random((300, 6)) + 3 * np.outer(labels == 1, np.eye(6)[4])).astype(np.float32)
    outputs = (np.eye(3)[np.where(camera, (labels + 1) % 3, labels)] * 2 + rng.standard_normal((300, 3)))
    meta = pd.DataFrame({"source": np.where(camera, "camera", "scan")})
    return write_store(tmp_path_factory.mktemp("data") / "s", {"fc": acts, "conv": acts[:, :4] * 2}, labels=labels,
                       outputs=outputs.astype(np.float32), class_names=["a", "b", "c"], metadata=meta,
                       layer_specs={"fc": LayerSpec(6, "float32"), "conv": LayerSpec(4, "float32", "channel")})


def test_every_view_declares_data():
    for info in pkgutil.iter_modules(widgets_package.__path__):
        importlib.import_module(f"activis.widgets.{info.name}")
    views, pending = [], list(View.__subclasses__())
    while pending:
        views.append(pending.pop())
        pending += views[-1].__subclasses__()
    views = [view for view in views if "_esm" in vars(view)]  # the views drawn, not shared bases (LiveView)
    assert len(views) >= 15
    for view in views:
        assert view.data is not View.data, f"{view.__name__} does not give data()"


def test_matrix_rows_are_the_stores_subset_means_in_the_order_drawn(store):
    m = ActivationMatrix(store, "fc")
    m.add_rows_from_indices("lasso", "my lasso", [0, 3, 5])
    m.sort_by("true b")
    frame = m.data()
    order = m.current_order()
    assert order[0] == 4 and list(frame.columns[6:]) == [f"unit {k}" for k in order]
    assert frame["row"].tolist() == m.row_keys and frame["label"].tolist()[-1] == "my lasso"
    assert frame["kind"].tolist() == ["subset"] * 3 + ["indices"] and frame["size"].tolist() == [100, 100, 100, 3]
    acts = np.asarray(store.activations("fc"))
    np.testing.assert_allclose(frame.iloc[1, 6:].to_numpy(float), acts[store.instances.label == 1].mean(0)[order],
                               rtol=1e-5)
    np.testing.assert_allclose(frame.iloc[3, 6:].to_numpy(float), acts[[0, 3, 5]].mean(0)[order], rtol=1e-5)
    assert (frame["shown"] == "mean").all() and (frame["layer"] == "fc").all()
    m.difference_to = "subset:true a"
    m.statistic = "std"
    frame = m.data()
    assert frame["shown"].iloc[0] == "std minus row 'true a'"
    m.cluster()
    assert list(m.data().columns[6:]) == [f"unit {k}" for k in m.neuron_order]
    np.testing.assert_allclose(frame.iloc[0, 6:].to_numpy(float), 0, atol=1e-6)
    m.close()


def test_projection_frame_has_positions_colours_and_the_lasso(store):
    view = ProjectionView(store, "fc", method="pca", color_by="source")
    positions = np.random.default_rng(1).random((store.n_instances, 2)).astype(np.float32)
    view.show_layout(positions, "aligned")
    view.select([2, 7])
    view.highlight([7, 9])
    frame = view.data()
    assert len(frame) == store.n_instances and frame["instance"].tolist() == list(range(store.n_instances))
    np.testing.assert_array_equal(frame[["x", "y"]].to_numpy(np.float32), positions)
    assert (frame["method"] == "aligned").all()
    assert frame.loc[frame["selected"], "instance"].tolist() == [2, 7]
    assert frame.loc[frame["highlighted"], "instance"].tolist() == [7, 9]
    assert frame["colour: source"].tolist() == store.instances["source"].tolist()
    assert frame["label"].iloc[1] == "b" and not frame["faded"].any()
    view.color_by = "neuron"
    view.neuron = 4
    view.filter([1, 2])
    frame = view.data()
    np.testing.assert_array_equal(frame["colour: neuron 4 of fc"], np.asarray(store.activations("fc"))[:, 4])
    assert frame.loc[~frame["faded"], "instance"].tolist() == [1, 2]
    view.close()


def test_instance_panel_gives_the_instances_drawn_with_their_fields(store):
    panel = InstancePanel(store, max_instances=50)
    panel.pin(299)
    panel.highlight([299, 3])
    panel.sort_by_neuron("fc", 4)
    frame = panel.data()
    assert frame["instance"].tolist() == panel.shown.tolist() and 299 in frame["instance"].tolist()
    row = frame.set_index("instance").loc[299]
    assert row["pinned"] and row["highlighted"] and row["source"] == store.instances["source"].iloc[299]
    assert row["label_name"] == "c" and frame["pinned"].sum() == 1
    assert frame["sorted by: fc · neuron 4"].tolist() == np.asarray(store.activations("fc"))[panel.shown, 4].tolist()


def test_graph_nodes_with_capture_and_markers():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    graph = activis.extract_graph(model, torch.zeros(2, 4))
    view = activis.GraphView(graph, captured_layers=["_0"], selected_layer="_2")
    view.markers = {"_0": {"severity": "warning", "count": 2, "title": "dead units"},
                    "1": {"severity": "error", "count": 1, "title": "no gradient"}}  # a module's marker
    frame = view.data()
    assert frame["name"].tolist() == [n.name for n in graph.nodes] == ["input_1", "_0", "_1", "_2", "output"]
    nodes = frame.set_index("name")
    assert nodes.loc["_0", "captured"] and frame["captured"].sum() == 1
    assert nodes.loc["_0", ["marker", "marker_count", "marker_title"]].tolist() == ["warning", 2, "dead units"]
    assert nodes.loc["_1", ["op", "module", "marker"]].tolist() == ["call_module", "1", "error"]
    assert nodes.loc["_2", "selected"] and frame["selected"].sum() == 1 and nodes.loc["_2", "shape"] == (2, 2)


def test_why_view_gives_its_bars(store):
    view = MisclassificationView(store, "fc", top=3)
    assert view.data().empty and "neuron" in view.data().columns
    view.index = int(np.flatnonzero(~store.instances["correct"].to_numpy())[0])
    frame = view.data()
    shown = view.explanation.neurons.head(3)
    assert frame["neuron"].tolist() == shown.index.tolist() == view.neuron_ids.tolist()
    np.testing.assert_array_equal(frame["score"], shown["score"])
    assert (frame["instance"] == view.index).all() and (frame["true_class"] == view.facts["true_name"]).all()


def test_slices_subsets_timeline_and_quantities(store):
    subsets = Subsets(store)
    suggestions = SliceSuggestions(subsets, options={"columns": ["source"]})
    assert suggestions.data().empty
    suggestions.run(wait=True)
    frame = suggestions.data()
    assert len(frame) == len(suggestions.report) >= 1
    assert frame["suggestion"].tolist() == list(range(len(frame)))
    assert frame["size"].tolist() == [s.size for s in suggestions.report]
    assert {"value", "overall", "lift", "p_adjusted", "description"} <= set(frame.columns)

    panel = SubsetPanel(subsets)
    subsets.by_class()
    subsets.add("camera", "source == 'camera'")
    panel.active = "camera"
    frame = panel.data().set_index("name")
    assert frame.loc["camera", "size"] == 75 and frame.loc["camera", "active"] and frame["active"].sum() == 1
    assert frame.loc["true a", "fraction"] == pytest.approx(1 / 3)

    timeline = TimelineView([0, 5, 10], step=5, compare_to=0)
    assert timeline.data().to_dict("list") == {"step": [0, 5, 10], "current": [False, True, False],
                                               "compared_to": [True, False, False]}

    quantities = pd.DataFrame({"loss": [0.1, 2.0, 0.5], "grad_norm": [0.2, 1.2, 0.4]})
    view = SampleQuantitiesView(quantities, step=10)
    view.brush("loss", 0.4, 3)
    frame = view.data()
    assert frame["instance"].tolist() == [0, 1, 2] and frame["loss"].tolist() == [0.1, 2.0, 0.5]
    assert frame["brushed"].tolist() == [False, True, True] and (frame["step"] == 10).all()


def test_doctor_report_gives_its_findings():
    from test_doctor_report import planted

    _, report = planted()
    view = activis.DoctorReport(report)
    view.selected_finding = 0
    frame = view.data()
    assert len(frame) == len(report.diagnoses) == 1
    first = frame.iloc[0]
    lead = report.diagnoses[0]
    assert first["severity"] == lead.severity == "error" and first["title"] == lead.title
    assert first["place"] == lead.lead.place_text() and first["node"] == "fc2" and first["selected"]
    assert {"cause", "step", "evidence"} <= set(frame.columns)


def test_stacked_layers_give_one_block_of_rows_per_layer(store):
    stack = MatrixStack(ActivationMatrix(store, "fc"), ["conv"])
    stack.panels[0].deferred.wait()
    frame = stack.data()
    assert frame["layer"].tolist() == ["fc"] * 3 + ["conv"] * 3 and frame["row"].tolist()[3:] == stack.matrix.row_keys
    conv = np.asarray(store.activations("conv"))
    np.testing.assert_allclose(frame.loc[5, [f"channel {k}" for k in range(4)]].to_numpy(float),
                               conv[store.instances.label == 2].mean(0), rtol=1e-5)
    assert frame.loc[3:, ["unit 4", "unit 5"]].isna().all().all()  # conv has 4 channels, fc 6 units
    stack.close()

"""The Explorer's coordination in the kernel (the browser paths are in test_browser_explorer.py)."""

import numpy as np
import pytest

from activis.demo import digits_store
from activis.widgets.explorer import Explorer, LayerNotCaptured, store_layer_for


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return digits_store(tmp_path_factory.mktemp("demo") / "digits.activis")[1]


def test_graph_names_map_to_captured_layers(store):
    graph = store.graph
    assert store_layer_for(store, graph, "fc1") == "fc1"  # a captured layer by its own name
    assert store_layer_for(store, graph, store.manifest["layers"]["conv2"]["node"]) == "conv2"  # by graph node
    with pytest.raises(LayerNotCaptured, match="captured layers: conv1, conv2, fc1, fc2"):
        store_layer_for(store, graph, "x")


def test_uncaptured_graph_node_is_reported_and_loses_nothing(store):
    ex = Explorer(store, method="pca")
    ex.graph_view.selected_layer = "x"
    assert "was not captured" in ex.status.value and ex.selection.layer == "fc2"
    ex.matrix.layer = "fc1"  # another view switches layer: the graph follows, no error
    assert ex.selection.layer == ex.projection.layer == "fc1"
    assert ex.graph_view.selected_layer == store.manifest["layers"]["fc1"]["node"]


def test_brush_pin_and_subset_pick(store):
    ex = Explorer(store, method="pca")
    brushed = np.arange(40, 90)
    ex.selection.set_brush(brushed, "projection")
    assert "selection" in ex.matrix.row_keys and len(ex.instances.filter_indices) == 50
    ex.selection.set_brush(None, "projection")
    assert "selection" not in ex.matrix.row_keys and ex.instances.filter_indices is None

    wrong = int(np.flatnonzero(~store.instances["correct"].to_numpy())[0])
    ex.instances.pinned = [wrong]
    assert ex.selection.pinned == [wrong] and f"instance:{wrong}" in ex.matrix.row_keys
    assert ex.last_explanation.index == wrong
    ex.matrix.remove_row(f"instance:{wrong}")  # unpinned everywhere
    assert ex.selection.pinned == [] and ex.instances.pinned == []

    ex.subset_panel.active = "true 3"
    assert len(ex.selection.subset_indices) == int((store.instances.label == 3).sum())

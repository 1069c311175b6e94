"""The Explorer's coordination in the kernel (the browser paths are in test_browser_explorer.py)."""

import ipywidgets as widgets
import numpy as np
import pytest

from activis.demo import digits_store
from activis.widgets import row_keys
from activis.widgets.explorer import Explorer, LayerNotCaptured, store_layer_for
from activis.widgets.links import Link
from activis.widgets.selection import INSTANCES, MATRIX, PROJECTION


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


def _select_in_projection(ex, indices, lasso=None):
    """What the projection's browser sends in one message: the selected points and the lasso that made them."""
    with ex.projection.hold_trait_notifications():
        ex.projection.lasso = lasso
        ex.projection.selected_indices = np.asarray(indices, np.int32)


def test_cross_filter_through_the_views(store):
    """Each view follows every clause but its own, through the sources real views write."""
    ex = Explorer(store, method="pca")
    sel = ex.selection
    lassoed = np.arange(100, 160)
    _select_in_projection(ex, lassoed, lasso=np.array([[0, 0], [1, 0], [1, 1]], np.float64))
    assert sel.brush_source == PROJECTION and sel.brush.tolist() == lassoed.tolist()
    assert sel.clause("brush", PROJECTION) is None  # the lasso never filters the projection itself
    assert ex.projection.filter_indices is None
    assert sel.clause("brush", INSTANCES).tolist() == ex.instances.filter_indices.tolist() == lassoed.tolist()
    assert sel.clause("brush", MATRIX) is not None and ex.matrix.row_keys[-1] == row_keys.BRUSH
    assert ex.matrix.rows[-1]["size"] == 60

    # the projection's Clear (selected nothing, no lasso) clears the brush in every view
    _select_in_projection(ex, [])
    assert sel.brush is None and ex.instances.filter_indices is None
    assert row_keys.BRUSH not in ex.matrix.row_keys

    # a legend pick (many points, no lasso) brushes as well; a click on one point pins it, keeping the brush
    _select_in_projection(ex, np.arange(0, 30))
    assert len(ex.instances.filter_indices) == 30
    _select_in_projection(ex, [7])
    assert sel.pinned == [7] and len(ex.instances.filter_indices) == 30

    # an instance hovered in the projection or the instance panel is a temporary matrix row
    ex.projection.hovered_index = 12
    assert ex.matrix.row_keys[-1] == row_keys.HOVER and ex.matrix.rows[-1]["label"] == "hover #12"
    ex.projection.hovered_index = -1
    ex.instances.hovered_index = 13
    assert ex.matrix.rows[-1]["label"] == "hover #13"
    ex.instances.hovered_index = -1
    assert row_keys.HOVER not in ex.matrix.row_keys


def test_every_link_is_in_the_table_and_a_user_can_add_one(store):
    ex = Explorer(store, method="pca")
    assert ex.links.links == list(Explorer.LINKS)  # a graph: no link skipped
    assert all(view.shared_selection is ex.selection for view in (ex.matrix, ex.projection, ex.instances, ex.why))
    slider = widgets.IntSlider(min=-1, max=9, value=-1)
    ex.links.add_views(neuron_slider=slider)
    ex.links.add([Link("neuron_slider", "value", to="selection.neuron")])
    slider.value = 4
    assert ex.selection.neuron == ex.projection.neuron == 4 and ex.projection.color_by == "neuron"

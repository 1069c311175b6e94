"""Stacked layers: every panel shows the main matrix's rows, each layer's neurons ordered on their own."""

import numpy as np
import pytest

from activis import Subsets, write_store
from activis.subsets import sort_neurons
from activis.widgets import ViewError
from activis.widgets.activation_matrix import ActivationMatrix
from activis.widgets.explorer import Explorer
from activis.widgets.matrix_stack import ADD_PROMPT, MatrixStack
from activis.widgets.selection import PROJECTION


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "s", seed=8)


def make_store(path, seed):
    rng = np.random.default_rng(seed)
    n = 600
    labels = rng.integers(0, 3, n)
    layers = {name: rng.standard_normal((n, width)).astype(np.float32) + labels[:, None] * rng.random(width)
              for name, width in (("conv", 9), ("fc1", 7), ("fc2", 5))}
    outputs = (np.eye(3)[labels] * 2 + rng.standard_normal((n, 3))).astype(np.float32)
    return write_store(path, layers, labels=labels, outputs=outputs)


def alone(store, layer, keys, index_rows):
    """The same rows in a matrix of its own, as a reference."""
    matrix = ActivationMatrix(store, layer, subsets=Subsets(store), rows=[k for k in keys if k not in index_rows])
    for key, (label, indices) in index_rows.items():
        matrix.add_rows_from_indices(key, label, indices)
    matrix.row_keys = list(keys)
    return matrix


def test_panels_share_the_rows_and_sort_on_their_own(store):
    main = ActivationMatrix(store, "fc2")
    stack = MatrixStack(main, ["conv"])
    assert stack.layers == ["fc2", "conv"] and stack.panels[0].row_keys == main.row_keys
    main.add_subset("wrong", "not correct")
    main.add_instance(5)
    main.add_rows_from_indices("selection", "selection (40)", np.arange(40))
    stack.add_layer("fc1")
    assert stack.layers == ["fc2", "conv", "fc1"]
    main.add_rows_from_indices("selection", "selection (41)", np.arange(41))  # a brush grows: every panel follows
    main.statistic = "std"
    main.sort_by("subset:wrong")
    for panel in stack.panels:
        assert panel.row_keys == main.row_keys
        reference = alone(store, panel.layer, main.row_keys, main.index_rows())
        reference.statistic = "std"
        np.testing.assert_allclose(panel.values, reference.values, rtol=1e-6)
        wrong = main.row_keys.index("subset:wrong")
        np.testing.assert_array_equal(panel.neuron_order, sort_neurons(panel.values[wrong]))  # its own neurons
    stack.panels[0].order_mode = "cluster"  # one panel's own order stays its own
    assert stack.panels[1].order_mode == "sort"


def test_a_row_removed_or_added_in_a_panel_changes_every_matrix(store):
    main = ActivationMatrix(store, "fc2")
    stack = MatrixStack(main, ["conv", "fc1"])
    first = main.row_keys[0]
    stack.panels[1].remove_row(first)  # its x button
    assert first not in main.row_keys and all(first not in p.row_keys for p in stack.panels)
    stack.panels[0].add_subset("wrong", "not correct")  # its "+ subset"
    assert main.row_keys[-1] == "subset:wrong" and all(p.row_keys == main.row_keys for p in stack.panels)
    stack.panels[0].row_keys = [*main.row_keys, "subset:nobody"]  # a bad key from the page: refused by the main one
    assert "subset:nobody" not in main.row_keys and all(p.row_keys == main.row_keys for p in stack.panels)


def test_panels_move_to_another_checkpoint_with_the_main_matrix(store, tmp_path):
    main = ActivationMatrix(store, "fc2")
    stack = MatrixStack(main, ["conv"])
    later = make_store(tmp_path / "later", seed=9)  # the same 600 instances, other activations
    main.subsets.store = later  # (an explorer moves its subsets with it)
    main.set_store(later)
    panel = stack.panels[0]
    assert panel.store is later
    reference = ActivationMatrix(later, "conv", subsets=main.subsets, rows=main.row_keys)
    np.testing.assert_allclose(panel.values, reference.values, rtol=1e-6)


def test_layers_are_set_and_checked(store):
    main = ActivationMatrix(store, "fc2")
    stack = MatrixStack(main)
    assert stack.control.options == (ADD_PROMPT, "conv", "fc1")
    stack.control.value = "fc1"  # the page's "+ layer…"
    assert stack.layers == ["fc2", "fc1"] and stack.control.value == ADD_PROMPT
    assert stack.control.options == (ADD_PROMPT, "conv")
    stack.layers = ["conv", "fc2", "fc1"]
    assert stack.layers == ["conv", "fc2", "fc1"] and main.layer == "conv"
    stack.layers = ["fc1"]
    assert stack.layers == ["fc1"] and not stack.panels and not stack.children
    for bad in (["fc1", "fc1"], [], ["nope"]):
        with pytest.raises(ViewError):
            stack.layers = bad
    with pytest.raises(ViewError, match="shown already"):
        stack.add_layer("fc1")
    with pytest.raises(ViewError, match="No stacked layer"):
        stack.remove_layer("conv")
    with pytest.raises(ViewError):
        MatrixStack("not a matrix")


def test_an_explorer_stacks_layers_under_its_matrix(store):
    explorer = Explorer(store, method="pca", layers=["conv"])
    assert explorer.stack.layers == ["fc2", "conv"] and explorer.stack in explorer.children
    explorer.selection.set_brush(np.arange(0, 300, 3), PROJECTION)
    panel = explorer.stack.panels[0]
    assert panel.row_keys == explorer.matrix.row_keys and panel.row_keys[-1] == explorer.matrix.row_keys[-1]
    brushed = store.activations("conv")[np.arange(0, 300, 3)].astype(np.float64)
    np.testing.assert_allclose(panel.values[-1], brushed.mean(0), rtol=1e-5, atol=1e-6)
    explorer.selection.set_brush(None, PROJECTION)
    assert panel.row_keys == explorer.matrix.row_keys
    explorer.selection.layer = "fc1"  # the main matrix follows the explorer's layer; the stacked one stays
    assert explorer.stack.layers == ["fc1", "conv"]

"""ActivationMatrix without a browser: rows, values, ordering, selections and bad input."""

import numpy as np
import pytest
import traitlets

from activis.store import LayerSpec, write_store
from activis.subsets import Subsets, cluster_neurons, sort_neurons
from activis.widgets._arrays import array_to_json
from activis.widgets.activation_matrix import ActivationMatrix


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    n = 240
    labels = np.arange(n) % 3
    acts = rng.random((n, 20)).astype(np.float32)
    acts[labels == 1, 7] += 5
    acts[:, 12] = acts[:, 3]  # twins
    conv = rng.standard_normal((n, 6)).astype(np.float32)
    outputs = np.eye(3, dtype=np.float32)[labels] * 3 + rng.standard_normal((n, 3)).astype(np.float32)
    return write_store(tmp_path / "s", {"fc": acts, "conv": conv}, labels=labels, outputs=outputs,
                       class_names=["a", "b", "c"],
                       layer_specs={"fc": LayerSpec(20, "float32"), "conv": LayerSpec(6, "float32", "channel", "mean")})


def test_defaults_are_class_rows_of_the_last_layer(store):
    m = ActivationMatrix(store)
    assert m.layer == "conv" and m.layers == ["fc", "conv"] and m.neuron_kind == "channel"
    assert m.row_keys == ["subset:true a", "subset:true b", "subset:true c"]
    assert [r["label"] for r in m.rows] == ["true a", "true b", "true c"]
    assert [r["size"] for r in m.rows] == [80, 80, 80]
    acts = np.asarray(store.activations("conv"))
    expected = np.stack([acts[store.instances.label == k].mean(0) for k in range(3)])
    np.testing.assert_allclose(m.values, expected, rtol=1e-5, atol=1e-6)
    assert m.values.dtype == np.float32 and m.neuron_order.dtype == np.int32
    # numbers cross as binary buffers, never JSON lists
    sent = array_to_json(m.values)
    assert isinstance(sent["buffer"], memoryview) and sent["shape"] == [3, 6] and sent["dtype"] == "float32"
    assert m.aggregate.std.shape == (3, 6)  # all statistics at hand: switching is instant


def test_rows_from_python(store):
    subsets = Subsets(store)
    m = ActivationMatrix(store, "fc", subsets=subsets)
    assert m.add_instance(5) == "instance:5"
    assert m.add_subset("confident", "confidence > 0.8") == "subset:confident"
    assert m.add_rows_from_indices("selection", "brushed", [1, 2, 3]) == "selection"
    assert m.row_keys[-3:] == ["instance:5", "subset:confident", "selection"]
    assert m.rows[3]["label"].startswith("#5 ") and "true c" in m.rows[3]["label"]
    assert m.rows[5] == {"key": "selection", "label": "brushed", "kind": "indices", "size": 3,
                         "description": "3 chosen instances"}
    acts = np.asarray(store.activations("fc"))
    np.testing.assert_allclose(m.values[3], acts[5], rtol=1e-6)
    np.testing.assert_allclose(m.values[5], acts[[1, 2, 3]].mean(0), rtol=1e-5)

    # the same key again replaces the row in place (a hover row)
    m.add_rows_from_indices("selection", "hovered #9", [9])
    assert len(m.row_keys) == 6 and m.rows[5]["label"] == "hovered #9"
    np.testing.assert_allclose(m.values[5], acts[9], rtol=1e-6)
    m.add_instance(5)  # already shown: no duplicate
    assert m.row_keys.count("instance:5") == 1

    m.remove_row("confident")       # by subset name
    m.remove_row(5)                 # by instance index
    m.remove_row("selection")       # by key
    assert m.row_keys == ["subset:true a", "subset:true b", "subset:true c"]
    assert m.values.shape == (3, 20)

    with pytest.raises(IndexError, match="out of range: the store holds 240"):
        m.add_instance(240)
    with pytest.raises(KeyError, match="No subset named 'nope'"):
        m.add_subset("nope")
    with pytest.raises(ValueError, match="must be a non-empty string not starting with"):
        m.add_rows_from_indices("subset:x", "x", [1])
    with pytest.raises(KeyError, match="No row"):
        m.remove_row("subset:true a" + "x")
    with pytest.raises(KeyError, match="No subset named 'missing'"):
        ActivationMatrix(store, rows=["subset:missing"])


def test_rows_from_the_browser_are_checked(store):
    m = ActivationMatrix(store, "fc")
    m.row_keys = [*m.row_keys, "instance:3", "instance:9999", "subset:nope", "instance:x", "instance:3"]
    assert m.row_keys == ["subset:true a", "subset:true b", "subset:true c", "instance:3"]
    assert "Instance 9999 is out of range" in m.status and "No subset named 'nope'" in m.status
    assert m.values.shape == (4, 20)


def test_statistic_threshold_and_layer(store):
    m = ActivationMatrix(store, "fc")
    means = m.values.copy()
    m.statistic = "active"
    assert (m.values == 1).all()  # activations in [0, 5.x) are all > 0
    m.threshold = 0.5
    assert 0.3 < m.values[0, 0] < 0.7
    m.statistic = "std"
    assert (m.values > 0).all()
    m.statistic = "mean"
    np.testing.assert_array_equal(m.values, means)

    m.selected_neuron = 15
    m.layer = "conv"
    assert m.values.shape == (3, 6) and m.selected_neuron == -1 and m.neuron_kind == "channel"
    with pytest.raises(traitlets.TraitError, match=r"Layer 'fcc' is not in the store. Did you mean 'fc'\?"):
        m.layer = "fcc"
    with pytest.raises(traitlets.TraitError, match="out of range for layer 'conv'"):
        m.selected_neuron = 6


def test_ordering_modes(store):
    m = ActivationMatrix(store, "fc")
    assert m.neuron_order.tolist() == list(range(20))
    m.sort_by("true b")
    assert m.order_mode == "sort" and m.sort_by_row == "subset:true b"
    assert m.neuron_order[0] == 7
    np.testing.assert_array_equal(m.neuron_order, sort_neurons(m.values[1]))

    m.difference_to = "subset:true a"
    diff = m.displayed_values()
    np.testing.assert_allclose(diff, m.values - m.values[0])
    np.testing.assert_array_equal(m.neuron_order, sort_neurons(diff[1]))

    m.cluster()
    np.testing.assert_array_equal(m.neuron_order, cluster_neurons(diff))
    position = np.argsort(m.neuron_order)
    assert abs(position[3] - position[12]) == 1
    m.add_instance(0)  # rows changed: clustered again over the new rows
    np.testing.assert_array_equal(m.neuron_order, cluster_neurons(m.displayed_values()))

    m.remove_row("true a")  # the reference row is gone: difference mode ends
    assert m.difference_to == ""
    m.order_mode = "index"
    assert m.neuron_order.tolist() == list(range(20))
    with pytest.raises(KeyError, match="'pred a' is neither a row key, a subset name nor an instance index"):
        m.sort_by("pred a")
    m.add_subset("unshown", "index < 5")
    m.remove_row("unshown")
    with pytest.raises(KeyError, match="No row 'unshown'"):
        m.sort_by("unshown")


def test_selections_give_instance_indices(store):
    m = ActivationMatrix(store, "fc")
    assert m.selected_indices.tolist() == []
    m.selected_row = "subset:true b"
    assert m.selected_indices.dtype == np.int32
    np.testing.assert_array_equal(m.selected_indices, np.flatnonzero(store.instances.label == 1))
    m.hovered_row = "subset:true c"
    assert len(m.hovered_indices) == 80
    m.add_instance(4)
    m.hovered_row = "instance:4"
    assert m.hovered_indices.tolist() == [4]
    m.remove_row("subset:true b")  # the selected row disappears: the selection is cleared
    assert m.selected_row == "" and m.selected_indices.tolist() == []


def test_follows_subset_changes(store):
    subsets = Subsets(store)
    m = ActivationMatrix(store, "fc", subsets=subsets)
    m.add_subset("picked", "index < 10")
    before = m.values[-1].copy()
    subsets.add("picked", "index >= 230")  # redefined elsewhere: the row is recomputed
    assert m.rows[-1]["size"] == 10
    assert not np.allclose(m.values[-1], before)
    assert "picked" in m.available_subsets
    subsets.remove("picked")
    assert "subset:picked" not in m.row_keys and "picked" not in m.available_subsets
    m.close()
    subsets.add("later", "index < 3")  # a closed view no longer follows
    assert "later" not in m.available_subsets


def test_row_members_for_a_shared_selection(store, monkeypatch):
    from activis.widgets import activation_matrix
    from activis.widgets.selection import Selection

    m = ActivationMatrix(store, "fc")
    assert m.row_members is None  # nothing to link: nothing sent
    m.shared_selection = Selection()
    m.add_instance(7)
    offsets, members = m.row_offsets.tolist(), m.row_members
    assert offsets == [0, 80, 160, 240, 241] and members.dtype == np.int32
    for r, key in enumerate(m.row_keys):
        np.testing.assert_array_equal(members[offsets[r]:offsets[r + 1]], m.subsets.indices(m._row_subset(key)))
    sent = m.row_members
    m.statistic = "std"  # same rows: the browser keeps what it has
    assert m.row_members is sent
    monkeypatch.setattr(activation_matrix, "MEMBERS_LIMIT", 100)
    m.add_instance(8)  # too many members for the browser: linking goes through Python
    assert m.row_members is None and m.row_offsets is None
    m.shared_selection = None
    assert m.row_members is None

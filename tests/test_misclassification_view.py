"""MisclassificationView without a browser: what it sends, what it follows, what it refuses."""

import numpy as np
import pytest
import traitlets

from activis.analysis import explain_instance
from activis.store import LayerSpec, write_store
from activis.widgets.colours import palette
from activis.widgets.misclassification_view import MisclassificationView
from activis.widgets.selection import Selection


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(1)
    n = 90
    labels = np.arange(n) % 3
    labels[-1] = -1  # one unlabelled instance
    acts = rng.normal(size=(n, 8)).astype(np.float32)
    acts[labels == 1, 3] += 4.0
    outputs = np.eye(3, dtype=np.float32)[np.maximum(labels, 0)] * 3
    acts[0, 3] = 3.5  # instance 0 (class 0) moved toward class 1 on neuron 3, and predicted as it
    outputs[0] = [0, 3, 0]
    return write_store(tmp_path_factory.mktemp("why") / "s", {"a": acts, "b": acts[:, :5] * 2}, labels=labels,
                       outputs=outputs, class_names=["x", "y", "z"],
                       layer_specs={"a": LayerSpec(8, "float32"), "b": LayerSpec(5, "float32")})


def test_bars_follow_the_instance_and_the_layer(store):
    view = MisclassificationView(store, top=4)
    assert view.layer == "b" and view.index == -1 and view.explanation is None
    assert view.status.startswith("Pin an instance") and view.neuron_ids is None and view.facts == {}
    assert view.colours["classes"] == palette(3)["classes"]  # the one palette, a colour per class

    view.index = 0
    expected = explain_instance(store, 0, "b").neurons.head(4)
    assert view.status == "" and view.facts["pred_name"] == "y" and view.facts["layer"] == "b"
    assert view.neuron_ids.dtype == np.int32 and view.neuron_ids.tolist() == expected.index.tolist()
    np.testing.assert_allclose(view.scores, expected["score"], rtol=1e-6)
    np.testing.assert_allclose(view.departures, expected["departure"], rtol=1e-6)
    np.testing.assert_allclose(view.evidences, expected["evidence"], rtol=1e-6)

    view.layer = "a"  # a layer switch re-explains the same instance
    assert view.explanation.layer == "a" and view.facts["layer"] == "a" and view.neuron_ids[0] == 3
    view.top = 8
    assert len(view.neuron_ids) == 8


def test_neurons_shown_are_the_selection_clause(store):
    selection = Selection(layer="a")
    view = MisclassificationView(store, "a", shared_selection=selection)
    assert selection.highlight_neurons is None
    view.explain(0)
    assert selection.highlight_neurons_source == "misclassification" and selection.highlight_neurons_layer == "a"
    assert selection.highlight_neurons.tolist() == view.neuron_ids.tolist()
    view.explain(0, "b")
    assert selection.highlight_neurons_layer == "b" and len(selection.highlight_neurons) == 5
    view.clear()
    assert selection.highlight_neurons is None and selection.highlight_neurons_layer == ""


def test_questions_the_store_cannot_answer(store):
    view = MisclassificationView(store)
    assert view.explain(store.n_instances - 1) is None  # unlabelled: the view says why instead of drawing
    assert "no true label" in view.status and view.neuron_ids is None
    with pytest.raises(traitlets.TraitError, match="out of range"):
        view.index = store.n_instances
    with pytest.raises(traitlets.TraitError, match="layers: a, b"):
        view.layer = "c"
    with pytest.raises(traitlets.TraitError, match="between 1 and"):
        view.top = 0
    assert view.index == store.n_instances - 1  # a refused value changes nothing

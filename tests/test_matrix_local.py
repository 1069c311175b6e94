"""The shown layer travels to the page for brushed rows drawn there first (`matrix_local`): in its stored dtype,
only under the byte budget, only with a shared selection, dropped before another layer's values are drawn."""

import numpy as np
import pytest

from activis.store import write_store
from activis.widgets.activation_matrix import ActivationMatrix
from activis.widgets.explorer import Explorer
from activis.widgets.matrix_local import page_layer
from activis.widgets.selection import PROJECTION, Selection


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    n = 200
    layers = {"half": rng.normal(size=(n, 6)), "wide": rng.normal(size=(n, 40))}
    return write_store(tmp_path / "s", layers, labels=rng.integers(0, 3, n),
                       outputs=rng.normal(size=(n, 3)).astype(np.float32))


def test_the_layer_crosses_in_its_stored_dtype_as_bits(store):
    values, dtype = page_layer(store, "half")
    assert dtype == "float16" and values.dtype == np.uint16 and values.shape == (200, 6)
    np.testing.assert_array_equal(values.view(np.float16), store.activations("half"))


def test_above_the_budget_nothing_is_sent_and_the_page_is_told(store):
    assert page_layer(store, "wide", budget=100) == (None, "float16")
    matrix = ActivationMatrix(store, "wide")
    matrix.page_layer.budget = 100
    matrix.shared_selection = Selection()
    assert matrix.page_activations is None and matrix.page_dtype == "float16"


def test_only_with_a_shared_selection_and_following_the_layer(store):
    matrix = ActivationMatrix(store, "half")
    assert matrix.page_activations is None and matrix.page_dtype == ""  # nothing can brush it
    matrix.shared_selection = Selection()
    assert matrix.page_activations.shape == (200, 6)
    seen = []
    matrix.observe(lambda c: seen.append(("page", c["new"] is None)), "page_activations")
    matrix.observe(lambda c: seen.append(("values", None)), "values")
    matrix.layer = "wide"
    # the old layer is dropped before the new layer's values go out (in a kernel the new layer follows the
    # frame; in a script at once)
    assert seen[0] == ("page", True) and ("values", None) in seen
    assert matrix.page_activations.shape == (200, 40)


def test_a_brush_the_page_wrote_is_not_applied_twice(store):
    ex = Explorer(store, method="pca")
    calls = []
    original = ex.matrix.add_rows_from_indices
    ex.matrix.add_rows_from_indices = lambda *a: calls.append(a) or original(*a)
    ex.selection.set_brush([3, 1, 2], PROJECTION)
    ex.selection.set_brush(np.array([3, 1, 2]), PROJECTION)  # the projection's own trait, arriving after
    assert len(calls) == 1
    ex.selection.set_brush([3, 1, 2], "data_map")  # another owner: a new clause
    assert ex.selection.brush_source == "data_map"

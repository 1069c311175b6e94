"""The explorer's first frame comes first: no thread starts, and no pass over every row runs, before it is out."""

import threading
import types

import numpy as np
import pytest

from activis import write_store
from activis.store import LayerSpec


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    labels = rng.integers(0, 3, n)
    acts = rng.standard_normal((n, 12)).astype(np.float16)
    outputs = (np.eye(3)[labels] * 2 + rng.standard_normal((n, 3))).astype(np.float32)
    return write_store(tmp_path / "s", {"l": acts}, labels=labels, outputs=outputs,
                       layer_specs={"l": LayerSpec(12, "float16")})


def test_the_explorer_starts_its_background_work_after_the_first_frame(store, monkeypatch):
    """In a kernel, the constructor (the first frame) starts no thread: the projection, the matrix's rows
    (when deferred) and the evaluation panel start from the kernel's loop once the cell has returned."""
    from activis.widgets import _base, evaluation_panel, matrix_deferred, projection_view
    from activis.widgets.explorer import Explorer

    pending = []  # the kernel's event loop: callbacks run after the cell has returned
    loop = types.SimpleNamespace(add_callback=lambda callback, *args: pending.append((callback, args)))
    for module in (_base, matrix_deferred, evaluation_panel, projection_view):
        monkeypatch.setattr(module, "kernel_loop", lambda: loop)
    monkeypatch.setattr(matrix_deferred, "DEFER_VALUES", 0)  # the matrix's class rows in a thread, as at scale
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda thread: (started.append(thread.name), start(thread))[1])

    explorer = Explorer(store, method="pca")
    assert started == []
    assert explorer.projection.job is None and explorer.projection.positions is None
    assert explorer.evaluation is None and explorer.matrix.progress.startswith("computing")
    while pending:
        callback, args = pending.pop(0)
        callback(*args)
    assert explorer.projection.job is not None
    explorer.projection.job.wait(60)
    explorer.matrix.deferred.wait(60)
    while pending:  # what the threads handed back to the kernel's loop
        callback, args = pending.pop(0)
        callback(*args)
    assert explorer.evaluation is not None
    assert explorer.projection.job.status == "done" and explorer.projection.job.positions.shape == (3000, 2)
    assert not explorer.matrix.progress and len(started) >= 2


def test_the_class_names_column_is_what_pandas_makes_of_the_names(tmp_path):
    """Taken in arrow for speed, the label_name and pred_name columns equal pandas' own conversion (missing where
    the label is unknown)."""
    import pandas as pd

    labels = np.array([0, 2, -1, 1, 2])
    outputs = np.eye(3, dtype=np.float32)[[0, 1, 2, 1, 0]]
    store = write_store(tmp_path / "s", {"l": np.zeros((5, 2), np.float32)}, labels=labels, outputs=outputs,
                        class_names=["cat", "dog", "bird"])
    table = store.instances
    lookup = np.array(["cat", "dog", "bird", None], dtype=object)
    pd.testing.assert_series_equal(table["label_name"], pd.Series(lookup[[0, 2, 3, 1, 2]], name="label_name"),
                                   check_index=False)
    pd.testing.assert_series_equal(table["pred_name"], pd.Series(lookup[[0, 1, 2, 1, 0]], name="pred_name"),
                                   check_index=False)


def test_a_projection_view_closed_before_its_first_frame_starts_nothing(store, monkeypatch):
    from activis.widgets import _base
    from activis.widgets.projection_view import ProjectionView

    pending = []
    monkeypatch.setattr(_base, "kernel_loop", lambda: types.SimpleNamespace(add_callback=pending.append))
    view = ProjectionView(store, "l", method="pca")
    view.close()
    pending.pop()()
    assert view.job is None

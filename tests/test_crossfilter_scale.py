"""A brush at scale: running sums that read only the rows that changed, and the order views answer in."""


import types

import numpy as np
import pytest

from activis import write_store
from activis.store import LayerSpec
from activis.subsets import STATS, RunningAggregate
from activis.widgets.activation_matrix import ActivationMatrix
from activis.widgets.evaluation_panel import EvaluationPanel
from activis.widgets.selection import PROJECTION, Selection


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(3)
    n = 4000
    labels = rng.integers(0, 4, n)
    acts = (rng.standard_normal((n, 13)) * 2 + 5).astype(np.float16)
    acts[:, 0] = np.maximum(acts[:, 0] - 5, 0)
    outputs = (np.eye(4)[labels] * 2 + rng.standard_normal((n, 4))).astype(np.float32)
    return write_store(tmp_path / "s", {"l": acts}, labels=labels, outputs=outputs,
                       layer_specs={"l": LayerSpec(13, "float16")})


def expected(activations, indices, threshold=0.0):
    rows = np.asarray(activations, dtype=np.float64)[indices]
    return {"mean": rows.mean(0), "std": rows.std(0), "active": (rows > threshold).mean(0)}


def assert_stats(got, want):
    for stat in STATS:
        assert got[stat].dtype == np.float32
        np.testing.assert_allclose(got[stat], want[stat], rtol=2e-5, atol=2e-5, err_msg=stat)


def test_running_aggregate_reads_only_what_changed(store):
    activations = store.activations("l")
    running = RunningAggregate(activations, threshold=0.5, chunk_bytes=800)  # several chunks per update
    first = np.arange(100, 1100)
    assert_stats(running.update(first), expected(activations, first, 0.5))
    assert running.rows_read == 1000
    grown = np.union1d(first, np.arange(3000, 3010))  # a lasso grown by ten points reads ten rows
    assert_stats(running.update(grown), expected(activations, grown, 0.5))
    assert running.rows_read == 1010
    shrunk = grown[5:]  # five points left it: five rows taken away
    assert_stats(running.update(shrunk), expected(activations, shrunk, 0.5))
    assert running.rows_read == 1015
    other = np.arange(2000, 2500)  # a new lasso elsewhere: summed afresh, the old rows are not re-read
    assert_stats(running.update(other), expected(activations, other, 0.5))
    assert running.rows_read == 1515
    assert np.isnan(running.update(np.zeros(0, np.int64))["mean"]).all()


def test_matrix_brush_row_grows_incrementally(store):
    matrix = ActivationMatrix(store, "l")
    matrix.shared_selection = Selection(layer="l")
    activations = store.activations("l")
    first = np.arange(0, 4000, 3)
    class_rows_sent = matrix.row_members
    matrix.add_rows_from_indices("brush", "selection", first)
    class_members = {row: members for row, members in matrix._members_of.items() if row[0] != "brush"}
    grown = np.union1d(first, [1, 2, 4])
    matrix.add_rows_from_indices("brush", "selection", grown[::-1])  # any order: the set is what counts
    row = matrix.row_keys.index("brush")
    assert matrix.index_keys == ["brush"] and matrix.member_keys == matrix.row_keys[:row]
    np.testing.assert_array_equal(matrix.index_members, grown)  # the brush's members travel alone
    assert matrix.row_members is class_rows_sent  # the class rows' members are not sent again
    for key, members in class_members.items():
        assert matrix._members_of[key] is members  # nor looked up again
    assert_stats({s: matrix.aggregate[s][row] for s in STATS}, expected(activations, grown))
    assert matrix.rows[row]["size"] == len(grown) and matrix.rows[row]["description"].startswith(f"{len(grown):,}")
    assert matrix._running["brush"][1].rows_read == len(grown)  # the second update read three rows
    np.testing.assert_array_equal(matrix._indices_of("brush"), grown)
    matrix.threshold = 1.0  # a new threshold: summed afresh, with it
    assert_stats({s: matrix.aggregate[s][row] for s in STATS}, expected(activations, grown, 1.0))
    matrix.remove_row("brush")
    assert "brush" not in matrix._running
    assert matrix.index_members is None and matrix.index_keys == [] and matrix.row_members is class_rows_sent


def test_evaluation_panel_compares_after_the_message_in_a_kernel(store, monkeypatch):
    import activis.widgets.evaluation_panel as panel_module

    selection = Selection()
    panel = EvaluationPanel(store, selection=selection)
    pending = []  # the kernel's event loop, as far as the panel sees it
    monkeypatch.setattr(panel_module, "kernel_loop", lambda: types.SimpleNamespace(add_callback=pending.append))
    selection.set_brush(np.arange(50), PROJECTION)
    selection.set_brush(np.arange(60), PROJECTION)
    assert panel.compared_n == 0 and len(pending) == 1  # the other views answer this message first; once
    pending.pop()()
    assert panel.compared_n == 60
    monkeypatch.setattr(panel_module, "kernel_loop", lambda: None)
    selection.set_brush(np.arange(10), PROJECTION)  # no kernel (a script): at once
    assert panel.compared_n == 10


def test_explorer_defers_every_pass_over_all_rows(store, monkeypatch):
    """The evaluation panel's curves and intervals and the projection run after the constructor returns."""
    import threading

    import activis.evaluation.ranking as ranking
    import activis.projection.jobs as jobs
    import activis.widgets.evaluation_panel as panel_module
    from activis.widgets.explorer import Explorer

    on_main_thread = []

    def counted(name, func):
        def wrapper(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():
                on_main_thread.append(name)
            return func(*args, **kwargs)
        return wrapper

    for name in ("roc", "precision_recall", "delong", "bucketed_auc"):
        monkeypatch.setattr(ranking, name, counted(name, getattr(ranking, name)))
    monkeypatch.setattr(jobs, "_pca", counted("pca", jobs._pca))
    deferred = []
    monkeypatch.setattr(panel_module, "run_in_background", deferred.append)

    explorer = Explorer(store, method="pca")
    assert on_main_thread == []  # nothing of the kind ran before the first frame
    panel = explorer.evaluation
    assert panel.roc is None and panel.summary is None and panel.score is not None  # distributions at once
    explorer.projection.job.wait(60)
    assert on_main_thread == []  # the PCA ran in the projection's thread

    assert len(deferred) == 1
    deferred[0]()  # what the background thread runs
    assert panel.roc is not None and panel.summary is not None and len(panel.class_metrics) == 4
    explorer.selection.set_brush(np.arange(100), PROJECTION)
    assert panel.compared_n == 100  # compared once ready

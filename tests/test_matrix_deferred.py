"""Subset rows of a large layer computed after the first frame: empty at first, then exactly the full computation."""

import types

import numpy as np
import pytest

from activis import Subsets, write_store
from activis.store import LayerSpec
from activis.subsets import STATS, aggregate_masks
from activis.subsets.progressive import Cancelled, aggregate_in_steps
from activis.widgets import matrix_deferred
from activis.widgets.activation_matrix import ActivationMatrix


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    labels = rng.integers(0, 4, n)
    acts = (rng.standard_normal((n, 11)) * 3 + 40).astype(np.float16)  # a large mean: the variance must not cancel
    acts[:, 0] = np.maximum(acts[:, 0] - 40, 0)
    other = rng.standard_normal((n, 6)).astype(np.float32)
    outputs = (np.eye(4)[labels] * 2 + rng.standard_normal((n, 4))).astype(np.float32)
    return write_store(tmp_path / "s", {"a": other, "l": acts}, labels=labels, outputs=outputs,
                       layer_specs={"l": LayerSpec(11, "float16"), "a": LayerSpec(6)})


@pytest.fixture
def held_back(monkeypatch):
    """Every layer counts as large; the background work is held until the test runs it (no thread, no timing)."""
    jobs = []
    monkeypatch.setattr(matrix_deferred, "run_in_background", jobs.append)
    monkeypatch.setattr(matrix_deferred, "DEFER_VALUES", 0)
    return jobs


# the one-pass kernel sums in float32 partials (its std is within ~3e-5 of the exact one here); the
# ranges' merge is in float64, so the two agree to the kernel's own error
KERNEL_TOLERANCE = {"rtol": 5e-5, "atol": 5e-5}


def assert_same(got, want, **tolerance):
    for stat in STATS:
        np.testing.assert_allclose(got[stat], want[stat], **(tolerance or KERNEL_TOLERANCE), err_msg=stat)


def test_steps_merge_to_the_one_pass_result(store):
    activations = store.activations("l")
    rng = np.random.default_rng(0)
    masks = rng.random((5, store.n_instances)) < [[0.5], [0.1], [0.001], [0.0], [1.0]]
    masks[2, :] = False
    masks[2, [7, 2999]] = True  # two members in two different ranges
    seen = []
    got = aggregate_in_steps(activations, masks, threshold=40.5, step_rows=700, progress=seen.append)
    assert_same(got, aggregate_masks(activations, masks, threshold=40.5))
    rows, kept = np.asarray(activations, np.float64), [0, 1, 2, 4]  # the non-empty ones, in float64
    exact = {"mean": np.array([rows[masks[k]].mean(0) for k in kept]),
             "std": np.array([rows[masks[k]].std(0) for k in kept]),
             "active": np.array([(rows[masks[k]] > 40.5).mean(0) for k in kept])}
    assert_same({s: got[s][kept] for s in STATS}, exact, rtol=1e-5, atol=1e-5)
    assert np.isnan(got["mean"][3]).all()  # an empty subset is NaN, as in one pass
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) == 5
    with pytest.raises(Cancelled):
        aggregate_in_steps(activations, masks, cancelled=lambda: True)


def test_rows_are_empty_then_equal_to_the_full_computation(store, held_back):
    reference = ActivationMatrix(store, "l", subsets=Subsets(store))
    matrix = ActivationMatrix(store, "l", subsets=Subsets(store), background=True)
    matrix.add_subset("big ones", "label >= 2")  # replaces the job for the class rows by one for all five
    held_back.pop(0)
    assert "computing 5 rows over 3,000 instances" in matrix.progress
    assert np.isnan(matrix.values).all()
    assert [r["size"] for r in matrix.rows] == [r["size"] for r in reference.rows] + [matrix.subsets.size("big ones")]
    brush = np.arange(10, 400)
    matrix.add_rows_from_indices("brush", "brush", brush)  # a brush row never waits for the subset rows
    assert np.isfinite(matrix.values[-1]).all() and np.isnan(matrix.values[:-1]).all()
    assert len(held_back) == 1  # one job for all waiting rows, not one per refresh
    held_back.pop()()
    assert matrix.deferred.wait(0)  # a script takes the rows here (a kernel, from its loop)
    assert matrix.progress == "" and not matrix.deferred.computing
    reference.add_subset("big ones", "label >= 2")
    reference.add_rows_from_indices("brush", "brush", brush)
    for stat in STATS:
        matrix.statistic = reference.statistic = stat
        np.testing.assert_allclose(matrix.values, reference.values, **KERNEL_TOLERANCE, err_msg=stat)
    # the rows now sit in the Subsets' cache: nothing is computed again
    matrix.threshold = matrix.threshold
    matrix.row_keys = list(reversed(matrix.row_keys))
    assert not held_back and not matrix.deferred.computing


def test_a_changed_request_replaces_the_job(store, held_back):
    matrix = ActivationMatrix(store, "l", background=True)
    first = held_back.pop()
    matrix.layer = "a"  # the first layer's rows are no longer wanted
    assert len(held_back) == 1
    first()  # cancelled: delivers nothing
    assert np.isnan(matrix.values).all() and matrix.deferred.computing
    held_back.pop()()
    assert matrix.deferred.wait(0) and np.isfinite(matrix.values).all()
    reference = ActivationMatrix(store, "a")
    np.testing.assert_allclose(matrix.values, reference.values, **KERNEL_TOLERANCE)
    matrix.layer = "l"  # back to the first layer, whose rows were never delivered
    assert matrix.deferred.computing
    matrix.close()
    assert not matrix.deferred.computing and matrix.progress == ""


def test_in_a_kernel_the_job_starts_and_lands_through_its_loop(store, held_back, monkeypatch):
    loop = []  # the kernel's event loop: callbacks run once the current message is answered
    monkeypatch.setattr(matrix_deferred, "kernel_loop",
                        lambda: types.SimpleNamespace(add_callback=lambda f, *a: loop.append((f, a))))
    matrix = ActivationMatrix(store, "l", background=True)
    assert not held_back and len(loop) == 1  # the thread starts after the first frame is out
    f, args = loop.pop()
    f(*args)
    held_back.pop()()  # the thread: progress and the result are handed to the loop
    assert np.isnan(matrix.values).all()
    while loop:
        f, args = loop.pop(0)
        f(*args)
    assert np.isfinite(matrix.values).all() and matrix.progress == "" and not matrix.deferred.computing
    np.testing.assert_allclose(matrix.values, ActivationMatrix(store, "l").values, **KERNEL_TOLERANCE)


def test_small_layers_and_plain_matrices_compute_at_once(store, held_back):
    assert np.isfinite(ActivationMatrix(store, "l").values).all()
    matrix_deferred.DEFER_VALUES = store.activations("l").size  # (restored by monkeypatch)
    assert np.isfinite(ActivationMatrix(store, "l", background=True).values).all()
    assert not held_back


def test_wait_delivers_the_rows_in_a_script(store, monkeypatch):
    monkeypatch.setattr(matrix_deferred, "DEFER_VALUES", 0)
    matrix = ActivationMatrix(store, "l", background=True)
    matrix.add_subset("big ones", "label >= 2")
    assert matrix.deferred.wait(60)
    np.testing.assert_allclose(matrix.values, ActivationMatrix(store, "l", rows=matrix.row_keys).values,
                               **KERNEL_TOLERANCE)

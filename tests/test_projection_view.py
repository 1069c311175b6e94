"""ProjectionView without a browser: what it sends, how it follows its job, colours and hover text."""

import time

import numpy as np
import pandas as pd
import pytest

from activis.projection import Projector
from activis.store import write_store
from activis.widgets.colours import categorical
from activis.widgets.format import format_number
from activis.widgets.projection_view import ProjectionView, color_encoding

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 900
    y = rng.integers(0, 3, n)
    x = (rng.standard_normal((3, 12))[y] * 3 + rng.standard_normal((n, 12))).astype(np.float32)
    logits = np.eye(3)[y] * 2 + rng.standard_normal((n, 3)) * 1.2
    meta = pd.DataFrame({
        "source": np.where(np.arange(n) % 4 == 0, "camera", "scan"),
        "brightness": rng.random(n),
        "batch": np.arange(n) % 5,
        "uid": [f"id{i}" for i in range(n)],  # 900 distinct strings: too many categories
        "age": np.where(np.arange(n) % 10 == 0, np.nan, rng.random(n) * 80),
    })
    return write_store(tmp_path_factory.mktemp("view") / "store", {"fc": x, "out": logits.astype(np.float32)},
                       labels=y, outputs=logits, class_names=["cat", "dog", XSS], metadata=meta)


def wait_for(condition, timeout=60):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def sent_messages(view):
    """Record the names of the traits the view sends to the browser."""
    sent = []
    original = view.send_state

    def record(key=None):
        sent.append(set(key) if isinstance(key, (list, set, tuple)) else {key})
        return original(key)

    view.send_state = record
    return sent


def test_view_follows_its_job_pca_first_then_umap(store):
    view = ProjectionView(store, "fc", "umap", params={"n_epochs": 60, "random_state": 3})
    shown = []
    view.observe(lambda c: shown.append(c["new"]), "shown_method")
    wait_for(lambda: view.shown_method == "umap")
    assert shown[:2] == ["pca", "umap"] or (shown == ["umap"] and view.job.from_cache)
    assert view.status == "done" and view.progress == 1.0
    assert view.positions.shape == (900, 2) and view.positions.dtype == np.float32
    assert np.array_equal(view.positions, view.job.positions)
    assert view.n_neurons == 12 and view.layers == ["fc", "out"]

    # switching layer starts a new job and supersedes the old one
    job = view.job
    view.layer = "out"
    assert view.job is not job and view.job.layer == "out"
    wait_for(lambda: view.shown_method == "umap" and view.job.status == "done")
    view.method = "pca"
    wait_for(lambda: view.shown_method == "pca")
    assert view.job.method == "pca"
    view.close()


def test_binary_payload_is_nine_bytes_per_point(store):
    view = ProjectionView(store, "fc", "pca")
    wait_for(lambda: view.shown_method == "pca")
    state = view.get_state()
    assert state["positions"]["dtype"] == "float32" and state["positions"]["shape"] == [900, 2]
    assert state["color_codes"]["dtype"] == "uint8"
    per_point = (state["positions"]["buffer"].nbytes + state["color_codes"]["buffer"].nbytes) / 900
    assert per_point == 9
    assert state["instance_ids"] is None  # all instances: no id column sent


def test_highlight_select_and_filter_do_not_resend_positions(store):
    view = ProjectionView(store, "fc", "pca")
    wait_for(lambda: view.shown_method == "pca")
    sent = sent_messages(view)
    view.highlight([5, 1, 5, 700])
    view.select(np.array([3, 2]))
    mask = np.zeros(900, bool)
    mask[:10] = True
    view.filter(mask)
    assert set().union(*sent) == {"highlighted_indices", "selected_indices", "filter_indices"}
    assert view.highlighted_indices.tolist() == [1, 5, 700] and view.highlighted_indices.dtype == np.int32
    assert view.selection.tolist() == [2, 3]
    assert view.filter_indices.tolist() == list(range(10))
    view.highlight(None)
    assert view.highlighted_indices is None
    with pytest.raises(IndexError, match="instance 900 is outside the store.s 900 instances"):
        view.highlight([899, 900])


def test_colour_encodings(store):
    codes, palette, legend = color_encoding(store, "label")
    assert codes.dtype == np.uint8 and len(palette) == 256
    assert [e["label"] for e in legend["entries"]] == ["cat", "dog", XSS]  # text, passed through untouched
    assert sum(e["count"] for e in legend["entries"]) == 900
    assert palette[:3] == categorical(3)

    codes, palette, legend = color_encoding(store, "correct")
    wrong = ~store.instances["correct"].to_numpy()
    assert (codes == wrong.astype(np.uint8)).all() and wrong.any()
    assert legend["title"] == "correct / misclassified"

    codes, palette, legend = color_encoding(store, "neuron", layer="fc", neuron=4)
    values = store.activations("fc")[:, 4]
    assert legend["kind"] == "continuous" and legend["scale"] == "diverging"  # values of both signs
    lo, hi = legend["domain"]
    assert lo == -hi
    assert np.corrcoef(codes.astype(float), np.clip(values, lo, hi))[0, 1] > 0.99

    codes, _, legend = color_encoding(store, "age")
    assert legend["kind"] == "continuous" and legend["missing"] == 90
    assert (codes[::10] == 255).all()  # missing values get the grey code

    _, _, legend = color_encoding(store, "batch")  # few integer values: categories
    assert legend["kind"] == "categorical" and len(legend["entries"]) == 5

    codes, palette, legend = color_encoding(store, "uid")  # 900 values: the largest 59 and "other"
    assert len(legend["entries"]) == 60 and legend["entries"][-1]["label"] == "other (841 values)"
    assert codes.max() == 59 and len(set(palette[:60])) == 60

    with pytest.raises(KeyError, match="Choose one of: label, pred, correct, neuron"):
        color_encoding(store, "colour")
    with pytest.raises(IndexError, match="12 neurons"):
        color_encoding(store, "neuron", layer="fc", neuron=12)


def test_colour_changes_and_bad_values_revert(store):
    view = ProjectionView(store, "fc", "pca", color_by="source")
    assert view.legend["title"] == "source" and "source" in view.color_options
    before = view.color_codes.copy()
    view.color_by = "neuron"
    view.neuron = 7
    assert view.legend["title"] == "neuron 7 of fc"
    assert not np.array_equal(before, view.color_codes)
    with pytest.raises(IndexError):
        view.neuron = 99
    assert view.neuron == 7 and view.legend["title"] == "neuron 7 of fc"
    with pytest.raises(KeyError):
        view.color_by = "nope"
    assert view.color_by == "neuron"
    # a layer with fewer neurons than the chosen one falls back to neuron 0
    view.neuron = 10
    view.layer = "out"
    assert view.neuron == 0 and view.legend["title"] == "neuron 0 of out"
    with pytest.raises(KeyError, match="captured layers"):
        view.layer = "conv"
    assert view.layer == "out"
    with pytest.raises(ValueError, match="Unknown projection method"):
        view.method = "mds"
    assert view.method == "pca"


def test_hover_details_describe_the_instance(store):
    view = ProjectionView(store, "fc", "pca", color_by="neuron", neuron=2)
    view.hovered_index = 10
    details = dict(view.hover_details["fields"])
    row = store.instances.iloc[10]
    assert view.hover_details["index"] == 10
    assert details["true class"] == row["label_name"] and details["prediction"] == row["pred_name"]
    assert details["source"] == row["source"] and details["uid"] == "id10"
    assert details["neuron 2"] == format_number(store.activations("fc")[10, 2])
    assert "confidence" in details and "correct" in details


def test_subset_view_sends_ids_and_maps_selection(store):
    rows = np.arange(0, 900, 3)
    view = ProjectionView(store, "fc", "pca", instances=rows)
    wait_for(lambda: view.shown_method == "pca")
    assert view.positions.shape == (300, 2)
    assert view.instance_ids.tolist() == rows.tolist() and view.instance_ids.dtype == np.int32
    assert len(view.color_codes) == 300
    assert sum(e["count"] for e in view.legend["entries"]) == 300
    view.select([3, 6])  # instance indices, whatever the subset
    assert view.selection.tolist() == [3, 6]


def test_failed_job_shows_its_error(store, monkeypatch):
    from activis.projection import jobs as projection

    def broken(*args, **kwargs):
        raise RuntimeError("no memory for neighbours")

    monkeypatch.setattr(projection, "_nearest_neighbors", broken)
    view = ProjectionView(store, "fc", "umap", params={"n_neighbors": 7, "random_state": 42})
    wait_for(lambda: view.status == "failed")
    assert "UMAP failed: no memory for neighbours" in view.error
    assert view.shown_method == "pca"  # the PCA layout is still there to look at


def test_shared_projector_and_close(store):
    projector = Projector(store)
    view = ProjectionView(store, "fc", "umap", projector=projector, params={"n_epochs": 50_000, "random_state": 8})
    assert view.projector is projector and projector.current is view.job
    running = view.job
    view.close()
    assert running.status == "running"  # a projector the view does not own is left alone
    projector.cancel()
    own = ProjectionView(store, "fc", "umap", params={"n_epochs": 50_000, "random_state": 9})
    job = own.job
    own.close()
    wait_for(lambda: job.status == "cancelled")


def test_store_without_layers_is_refused(tmp_path):
    empty = write_store(tmp_path / "s", {}, labels=np.zeros(3, int), outputs=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="no captured layers"):
        ProjectionView(empty)


def test_refresh_follows_a_store_that_is_still_being_captured(tmp_path):
    from activis.store import LayerSpec, StoreWriter, open_store

    rng = np.random.default_rng(1)
    x = rng.standard_normal((400, 6)).astype(np.float32)
    y = rng.integers(0, 3, 400)
    writer = StoreWriter(tmp_path / "s", layers={"fc": LayerSpec(neurons=6, dtype="float32")}, n_outputs=3)

    def append(rows):
        writer.append(activations={"fc": x[rows]}, label=y[rows], pred=y[rows], confidence=np.ones(len(rows)),
                      outputs=np.eye(3)[y[rows]])

    append(np.arange(0, 150))
    view = ProjectionView(open_store(tmp_path / "s"), "fc", "pca")
    wait_for(lambda: view.shown_method == "pca")
    assert view.positions.shape == (150, 2) and len(view.color_codes) == 150
    append(np.arange(150, 400))
    view.refresh()
    wait_for(lambda: view.job.status == "done" and view.positions.shape == (400, 2))
    assert len(view.color_codes) == 400 and sum(e["count"] for e in view.legend["entries"]) == 400

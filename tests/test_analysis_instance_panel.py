"""InstancePanel's Python side without a browser: what it sends, how it validates, thumbnails."""

import json

import numpy as np
import pandas as pd
import pytest
import traitlets
from ipywidgets.widgets.widget import _remove_buffers

from activis.store import write_store
from activis.widgets.instance_panel import InstancePanel, image_layout, make_thumbnails


def make_store(path, n=2000, inputs=None, metadata=None, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    pred = labels.copy()
    wrong = rng.random(n) < 0.05
    pred[wrong] = (labels[wrong] + 1) % n_classes
    logits = np.eye(n_classes, dtype=np.float32)[pred] * rng.uniform(0.5, 3, (n, 1)).astype(np.float32)
    store = write_store(path, {"fc": rng.standard_normal((n, 6))}, labels=labels, outputs=logits,
                        class_names=[f"c{k}" for k in range(n_classes)], inputs=inputs, metadata=metadata)
    return store, labels, pred


def numbers_in_json(value, path="state"):
    """Paths of JSON lists that hold more than a handful of numbers (numbers must travel as buffers)."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += numbers_in_json(v, f"{path}.{k}")
    elif isinstance(value, list):
        if sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value) > 8:
            found.append(path)
        for i, v in enumerate(value):
            found += numbers_in_json(v, f"{path}[{i}]")
    return found


def test_image_layouts():
    assert image_layout([8, 8]) == (1, 8, 8, "chw")
    assert image_layout([3, 32, 32]) == (3, 32, 32, "chw")
    assert image_layout([1, 28, 28]) == (1, 28, 28, "chw")
    assert image_layout([32, 32, 3]) == (3, 32, 32, "hwc")
    assert image_layout([64]) is None and image_layout([10, 20, 5]) is None
    assert image_layout([64], images=(8, 8)) == (1, 8, 8, "chw")
    assert image_layout([8, 8], images=False) is None
    with pytest.raises(ValueError, match="has 60 values per instance; the stored inputs have 64"):
        image_layout([64], images=(6, 10))
    with pytest.raises(ValueError, match="not an image shape"):
        image_layout([64], images=(4, 4, 4))


def test_thumbnails_scale_and_shrink():
    raw = np.arange(2 * 64, dtype=np.float32).reshape(2, 64) - 10  # values -10 .. 117
    thumbs = make_thumbnails(raw, (1, 8, 8, "chw"))
    assert thumbs.shape == (2, 8, 8, 1) and thumbs.dtype == np.uint8
    assert thumbs.min() == 0 and thumbs.max() == 255
    np.testing.assert_array_equal(thumbs[0, 0, :3, 0], np.rint(np.array([0, 1, 2]) / 127 * 255))
    # 64 x 64 -> 32 x 32 by 2 x 2 block means; uint8 values are kept as they are
    big = np.zeros((1, 64, 64), np.uint8)
    big[0, 0, 0] = 200
    big[0, 0, 1] = 100
    small = make_thumbnails(big.reshape(1, -1), (1, 64, 64, "chw"))
    assert small.shape == (1, 32, 32, 1) and small[0, 0, 0, 0] == 75 and small[0, 1, 1, 0] == 0
    # channels-last RGB keeps its channel order
    rgb = np.zeros((1, 4, 4, 3), np.uint8)
    rgb[..., 2] = 255
    out = make_thumbnails(rgb.reshape(1, -1), (3, 4, 4, "hwc"))
    assert out.shape == (1, 4, 4, 3) and (out[..., 2] == 255).all() and (out[..., :2] == 0).all()


def test_panel_sends_the_sample_as_binary_buffers(tmp_path):
    meta = pd.DataFrame({"age": np.arange(2000) % 90, "ratio": np.linspace(0, 1, 2000),
                         "flag": np.arange(2000) % 3 == 0, "city": ["<b>Lima</b>", None] * 1000})
    images = np.random.default_rng(1).random((2000, 8, 8)).astype(np.float32)
    store, labels, pred = make_store(tmp_path / "s", inputs=images, metadata=meta)
    panel = InstancePanel(store, max_instances=500, seed=2)
    shown = panel.shown
    assert len(shown) == 500 and np.isin(np.flatnonzero(labels != pred), shown).all()
    data = panel._sample
    np.testing.assert_array_equal(data["index"], shown)
    np.testing.assert_array_equal(data["label"], labels[shown])
    np.testing.assert_array_equal(data["pred"], pred[shown])
    assert data["index"].dtype == np.int32 and data["confidence"].dtype == np.float32
    assert data["thumbs"].shape == (500, 8, 8, 1)
    assert data["number_names"] == ["age", "ratio", "flag"] and data["number_integer"] == [True, False, True]
    np.testing.assert_array_equal(data["numbers"][:, 0], shown % 90)
    assert data["numbers"].dtype == np.float64  # the ratios need float64 (ids past 2**24 would too)
    city = data["texts"][0]
    assert city["name"] == "city" and city["values"][:2] == [["<b>Lima</b>", "—"][i % 2] for i in shown[:2]]
    assert data["class_totals"].tolist() == np.bincount(labels, minlength=4).tolist()
    assert data["class_wrong"].tolist() == np.bincount(labels[labels != pred], minlength=4).tolist()
    state, _, buffers = _remove_buffers(panel.get_state())
    assert numbers_in_json(state) == []
    assert len(buffers) >= 9  # index, label, pred, confidence, label_score, numbers, thumbs, class counts
    json.dumps(state)  # the rest is plain JSON


def test_tabular_inputs_go_to_the_card(tmp_path):
    store, _, _ = make_store(tmp_path / "s", n=300, inputs=np.arange(300 * 70, dtype=np.float32).reshape(300, 70))
    panel = InstancePanel(store)
    data = panel._sample
    assert "thumbs" not in data and data["numbers"].shape == (300, 64)
    assert data["numbers"].dtype == np.float32  # float32 inputs lose nothing in float32: half the bytes
    assert data["number_names"][:2] == ["input[0]", "input[1]"] and data["features_left_out"] == 6
    np.testing.assert_array_equal(data["numbers"][5], np.arange(5 * 70, 5 * 70 + 64))
    with pytest.raises(ValueError, match="keeps no inputs"):
        InstancePanel(make_store(tmp_path / "t", n=50)[0], images=(2, 3))


def test_pins_highlights_filters_and_sorting(tmp_path):
    store, labels, _ = make_store(tmp_path / "s")
    panel = InstancePanel(store, max_instances=300)
    before = panel.shown
    outside = int(np.setdiff1d(np.arange(2000), before)[0])
    inside = int(before[10])
    panel.pin(inside)
    np.testing.assert_array_equal(panel.shown, before)  # already shown: nothing is resampled
    panel.pin(outside, inside)
    assert panel.pinned == [inside, outside] and outside in panel.shown and len(panel.shown) == 301
    panel.unpin(inside)
    assert panel.pinned == [outside] and inside in panel.shown
    with pytest.raises(traitlets.TraitError, match="Instance 2000 is out of range: the store holds 2000 instances"):
        panel.pin(2000)
    assert panel.pinned == [outside]  # the bad pin lost nothing

    mask = labels == 2
    panel.highlight(mask)
    assert panel.highlighted_indices.dtype == np.int32
    np.testing.assert_array_equal(panel.highlighted_indices, np.flatnonzero(mask))
    panel.highlight([])
    assert panel.highlighted_indices is None
    with pytest.raises(IndexError, match="highlighted_indices: instance -1"):
        panel.highlight([-1, 3])

    panel.filter(np.arange(100))
    assert set(panel.shown) == set(range(100)) | {outside}
    assert panel._sample["filtered"] and panel._sample["candidates"] == 100
    # the pinned instance outside the filter is shown and counted in its class: the counts add up
    panel.pin(1999)  # outside the filter: shown, and counted in its class (not "1 shown of 0")
    assert 1999 in panel.shown and panel._sample["class_totals"].sum() == (labels[panel.shown] >= 0).sum()
    panel.unpin(1999)
    panel.filter(None)
    assert len(panel.shown) == 301

    values = np.random.default_rng(0).random(2000)
    panel.sort_by(values, "random")
    np.testing.assert_allclose(panel._sort_keys, values[panel.shown].astype(np.float32))
    assert panel.sort_label == "random"
    with pytest.raises(traitlets.TraitError, match="one value per store instance \\(2000\\), not 3"):
        panel.sort_by([1, 2, 3])
    neuron4 = np.asarray(store.activations("fc"))[:, 4].astype(np.float32)
    panel.sort_by_neuron("fc", 4)
    np.testing.assert_array_equal(panel._sort_keys, neuron4[panel.shown])
    assert panel.sort_label == "fc · neuron 4"
    panel.filter(np.arange(0, 2000, 7))  # sort keys follow a new sample
    np.testing.assert_array_equal(panel._sort_keys, neuron4[panel.shown])
    with pytest.raises(KeyError, match="captured layers: fc"):
        panel.sort_by_neuron("fc2", 0)
    with pytest.raises(IndexError, match="6 neurons"):
        panel.sort_by_neuron("fc", 6)
    panel.sort_by(None)
    assert panel._sort_keys is None and panel.sort_label == ""
    with pytest.raises(traitlets.TraitError, match="max_instances"):
        panel.max_instances = 0


def test_refresh_follows_a_growing_store(tmp_path):
    store, _, _ = make_store(tmp_path / "s", n=100)
    panel = InstancePanel(store, max_instances=1000)
    assert len(panel.shown) == 100
    write_store(tmp_path / "s", {"fc": np.zeros((400, 6))}, labels=np.arange(400) % 4,
                outputs=np.eye(4, dtype=np.float32)[np.arange(400) % 4], overwrite=True)
    panel.refresh()
    assert len(panel.shown) == 400 and panel._sample["total"] == 400

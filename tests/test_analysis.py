"""Misclassification analysis, confusion pairs and panel sampling against data where the answer is known."""

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from activis import analysis
from activis.analysis import (
    AnalysisError,
    class_statistics,
    confusion_pairs,
    explain_instance,
    sample_instances,
)
from activis.graph import UnknownLayerError
from activis.store import LayerSpec, write_store

CLASSES = ["zero", "one", "two"]


def logits_for(pred, n_classes, runner_up=None, margin=3.0):
    """Logits that make ``pred`` the prediction (and ``runner_up`` the second choice)."""
    out = np.zeros((len(pred), n_classes), dtype=np.float32)
    out[np.arange(len(pred)), pred] = margin
    if runner_up is not None:
        out[np.arange(len(pred)), runner_up] = margin / 2
    return out


def planted_store(path, dtype="float32", n_per_class=200, offset=0.0):
    """Three classes over 20 neurons; instance 0 is a 'zero' the model calls 'one'.

    Class 'one' differs from 'zero' on neurons 3, 7 (higher) and 11 (lower); 'two' on neuron 15.
    Instance 0 sits at the 'one' mean on neurons 3 and 11, most of the way there on 7, and is far
    off on neuron 5, where the classes do not differ.
    """
    rng = np.random.default_rng(0)
    n = 3 * n_per_class
    labels = np.repeat([0, 1, 2], n_per_class)
    means = np.zeros((3, 20))
    means[1, [3, 7]] = 4.0
    means[1, 11] = -3.0
    means[2, 15] = 5.0
    acts = means[labels] + rng.standard_normal((n, 20)) + offset
    acts[0] = offset + rng.standard_normal(20) * 0.1
    acts[0, 3], acts[0, 7], acts[0, 11], acts[0, 5] = offset + 4.0, offset + 3.0, offset - 3.0, offset + 10.0
    pred = labels.copy()
    pred[0] = 1
    runner = np.where(labels == 2, 1, 2)
    store = write_store(path, {"fc": acts, "relu": np.maximum(acts, 0)}, labels=labels,
                        outputs=logits_for(pred, 3, runner), class_names=CLASSES,
                        layer_specs={"fc": LayerSpec(neurons=20, dtype=dtype), "relu": LayerSpec(neurons=20)})
    return store, np.asarray(store.activations("fc"), dtype=np.float64)


def reference(acts, labels, i, true_k, other):
    """Leave-one-out true-class mean, other-class mean and pooled std, straight from the definition."""
    t = np.flatnonzero(labels == true_k)
    t = t[t != i]
    c = np.flatnonzero(labels == other)
    m_t, m_c = acts[t].mean(0), acts[c].mean(0)
    pooled = np.sqrt(((len(t) - 1) * acts[t].var(0, ddof=1) + (len(c) - 1) * acts[c].var(0, ddof=1))
                     / (len(t) + len(c) - 2))
    return m_t, m_c, pooled


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_planted_neurons_rank_first(tmp_path, dtype):
    store, acts = planted_store(tmp_path / "s", dtype=dtype)
    result = explain_instance(store, 0, "fc")
    assert not result.correct and result.compared_class == 1 and result.true_class == 0
    top = result.neurons.index[:3].tolist()
    assert sorted(top) == [3, 7, 11]
    assert result.neurons.index[0] in (3, 11)  # both fully at the 'one' mean, 3.0 and 4.0 std apart
    # neuron 5 is far off (10 std) but the two classes do not differ there: it explains nothing
    # (ranked by departure alone it would come first)
    n5 = result.neurons.loc[5]
    assert result.neurons["departure"].abs().idxmax() == 5 and n5["separation"] < 0.4
    assert abs(n5["score"]) < result.neurons["score"].iloc[2] / 3
    assert result.neurons.loc[3, "progress"] == pytest.approx(1.0, abs=0.1)
    assert result.neurons.loc[7, "progress"] == pytest.approx(0.75, abs=0.1)
    assert result.neurons.loc[11, "departure"] == pytest.approx(3.0, abs=0.3)
    # the layer says 'one': nearest class mean and a positive log-likelihood ratio
    assert result.summary["nearest_class"] == 1 and result.summary["nearest_name"] == "one"
    assert result.summary["log_likelihood_ratio"] > 5
    assert result.distances.index[0] == 1
    assert result.summary["std_distance_to_compared"] < result.summary["std_distance_to_true"]
    assert list(result.neurons.columns) == ["value", "true_mean", "compared_mean", "pooled_std", "progress",
                                            "departure", "separation", "score", "evidence"]
    text = repr(result)
    assert "misclassified as 'one'" in text and "Top neurons at 'fc'" in text


def definition_by_neuron(acts, labels, i, true_k, other):
    """Each neuron's row of the table from the docstring's words, one neuron at a time in plain Python.

    Class means and the pooled std from the values themselves (the instance left out of its class),
    departure as signed distance toward the compared mean, evidence as the log-ratio of two normal
    densities: nothing shared with the vectorised code under test.
    """
    rows = []
    for j in range(acts.shape[1]):
        own = [float(acts[r, j]) for r in range(len(labels)) if labels[r] == true_k and r != i]
        comp = [float(acts[r, j]) for r in range(len(labels)) if labels[r] == other]
        m_t, m_c = math.fsum(own) / len(own), math.fsum(comp) / len(comp)
        squares = math.fsum((v - m_t) ** 2 for v in own) + math.fsum((v - m_c) ** 2 for v in comp)
        s = math.sqrt(squares / (len(own) + len(comp) - 2))
        x = float(acts[i, j])
        toward = x - m_t if m_c > m_t else m_t - x  # how far x moved from m_t in the direction of m_c
        departure, separation = toward / s, abs(m_c - m_t) / s
        evidence = math.log(NormalDist(m_c, s).pdf(x)) - math.log(NormalDist(m_t, s).pdf(x))
        rows.append({"true_mean": m_t, "compared_mean": m_c, "pooled_std": s, "departure": departure,
                     "separation": separation, "score": departure * separation,
                     "progress": (x - m_t) / (m_c - m_t), "evidence": evidence})
    return pd.DataFrame(rows)


def test_scores_match_the_definition(tmp_path, monkeypatch):
    store, acts = planted_store(tmp_path / "s")
    monkeypatch.setattr(analysis, "CHUNK_BYTES", 8 * 20 * 37)  # 37 rows per chunk: many chunks, a ragged end
    result = explain_instance(store, 0, "fc")
    labels = np.repeat([0, 1, 2], 200)
    want = definition_by_neuron(acts, labels, 0, 0, 1)
    table = result.neurons.sort_index()
    for column in want.columns:
        np.testing.assert_allclose(table[column], want[column], rtol=1e-8, atol=1e-10, err_msg=column)
    assert result.summary["log_likelihood_ratio"] == pytest.approx(math.fsum(want["evidence"]), rel=1e-9)
    # the distances table: Euclidean to each class mean (the instance left out of its own class)
    for k in range(3):
        members = [r for r in range(600) if labels[r] == k and r != 0]
        mean = [math.fsum(float(acts[r, j]) for r in members) / len(members) for j in range(20)]
        distance = math.sqrt(math.fsum((float(acts[0, j]) - mean[j]) ** 2 for j in range(20)))
        assert result.distances.loc[k, "distance"] == pytest.approx(distance, rel=1e-9)
    assert (result.neurons["score"].diff().dropna() <= 0).all()  # sorted by score


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_large_offsets_do_not_cancel_the_variance(tmp_path, dtype):
    offset = 1e4 if dtype == "float32" else 200.0
    store, acts = planted_store(tmp_path / "s", dtype=dtype, offset=offset)
    result = explain_instance(store, 0, "fc")
    labels = np.repeat([0, 1, 2], 200)
    _, _, s = reference(acts, labels, 0, 0, 1)  # from the stored (rounded) values, in float64
    np.testing.assert_allclose(result.neurons.sort_index()["pooled_std"], s, rtol=1e-6)
    assert sorted(result.neurons.index[:3]) == [3, 7, 11]


def test_correctly_classified_instance_is_compared_with_the_runner_up(tmp_path):
    store, _ = planted_store(tmp_path / "s")
    result = explain_instance(store, 450, "fc")  # a 'two', runner-up 'one' by construction
    assert result.correct and result.compared_class == 1
    assert "correctly classified" in result.message and "runner-up class 'one'" in result.message
    assert result.neurons["separation"].nlargest(4).index.sort_values().tolist() == [3, 7, 11, 15]
    assert result.summary["nearest_class"] == 2 and result.summary["log_likelihood_ratio"] < 0
    asked = explain_instance(store, 450, "fc", compare_to="zero")
    assert asked.compared_class == 0 and "as asked" in asked.message
    assert asked.neurons["separation"].idxmax() == 15  # 'two' differs from 'zero' on neuron 15 only
    with pytest.raises(AnalysisError, match="own class 'two'"):
        explain_instance(store, 450, "fc", compare_to=2)
    with pytest.raises(AnalysisError, match="Did you mean 'two'"):
        explain_instance(store, 450, "fc", compare_to="tow")


def test_class_without_members(tmp_path):
    rng = np.random.default_rng(1)
    labels = np.array([0] * 30 + [1] * 30)
    pred = labels.copy()
    pred[:3] = 2  # the model predicts a class no instance has as its label
    store = write_store(tmp_path / "s", {"fc": rng.standard_normal((60, 8))}, labels=labels,
                        outputs=logits_for(pred, 3), class_names=["a", "b", "<c>"])
    with pytest.raises(AnalysisError, match=r"Class '<c>' has no instances .* compare_to= one of: b"):
        explain_instance(store, 0)
    result = explain_instance(store, 0, compare_to="b")
    assert result.distances.loc[2, "members"] == 0 and np.isnan(result.distances.loc[2, "distance"])
    assert result.summary["nearest_class"] in (0, 1)
    assert result.distances.index[-1] == 2  # empty classes sort last


def test_errors_are_clear(tmp_path):
    store, _ = planted_store(tmp_path / "s")
    with pytest.raises(UnknownLayerError, match=r"Layer 'fc1' is not in this store\. Did you mean 'fc'\?"
                                                r" The captured layers: fc, relu\."):
        explain_instance(store, 0, "fc1")
    with pytest.raises(IndexError, match="Instance 600 is outside the store's 600 instances"):
        explain_instance(store, 600)
    with pytest.raises(TypeError, match="integer"):
        explain_instance(store, "3")
    labels = np.array([0, 1, -1, 0, 1, 1])
    unlabelled = write_store(tmp_path / "u", {"fc": np.eye(6)}, labels=labels,
                             outputs=logits_for([0, 1, 1, 0, 1, 0], 2))
    with pytest.raises(AnalysisError, match="no true label"):
        explain_instance(unlabelled, 2)
    assert explain_instance(unlabelled, 0).layer == "fc"  # the default layer is the last captured


def test_non_finite_values(tmp_path):
    store, acts = planted_store(tmp_path / "base")
    acts = acts.copy()
    acts[10, 4] = np.nan  # another 'zero': left out of neuron 4 only
    acts[0, 6] = np.inf  # the instance itself: neuron 6 cannot be scored
    labels = np.repeat([0, 1, 2], 200)
    pred = labels.copy()
    pred[0] = 1
    bad = write_store(tmp_path / "bad", {"fc": acts}, labels=labels, outputs=logits_for(pred, 3),
                      layer_specs={"fc": LayerSpec(neurons=20, dtype="float32")})
    result = explain_instance(bad, 0)
    table = result.neurons
    assert np.isnan(table.loc[6, "score"]) and table.index[-1] == 6
    t = np.flatnonzero(labels == 0)[1:]
    t = t[t != 10]
    assert table.loc[4, "true_mean"] == pytest.approx(acts[t, 4].mean(), rel=1e-10)
    assert np.isfinite(table.drop(index=6)["score"]).all()
    assert sorted(table.index[:3]) == [3, 7, 11]


def test_class_statistics_are_cached_until_the_store_changes(tmp_path):
    store, acts = planted_store(tmp_path / "s")
    first = class_statistics(store, "fc")
    assert class_statistics(store, "fc") is first
    assert class_statistics(store, "relu") is not first
    labels = np.repeat([0, 1, 2], 200)
    write_store(tmp_path / "s", {"fc": acts * 2, "relu": acts}, labels=labels, outputs=logits_for(labels, 3),
                overwrite=True, layer_specs={"fc": LayerSpec(neurons=20, dtype="float32"),
                                             "relu": LayerSpec(neurons=20, dtype="float32")})
    store.reload()
    again = class_statistics(store, "fc")
    assert again is not first
    _, means, _ = again.moments()
    np.testing.assert_allclose(means[1], 2 * acts[labels == 1].mean(0), rtol=1e-6)


def confusion_store(path):
    labels = np.array([0] * 10 + [1] * 10 + [2] * 10 + [-1] * 3)
    pred = labels.copy()
    pred[[0, 1, 2]] = 1  # three 'a' -> 'b'
    pred[[10, 11]] = 2  # two 'b' -> 'c'
    pred[20] = 0  # one 'c' -> 'a'
    pred[[21, 22]] = 1  # two 'c' -> 'b'
    pred[30:] = 0  # unlabelled: never a mistake
    outputs = logits_for(pred, 3)
    outputs[[0, 1, 2], 1] = [1.0, 5.0, 3.0]  # instance 1 is the most confident 'a' -> 'b'
    outputs[[21, 22], 1] = [2.0, 6.0]
    return write_store(path, {"fc": np.zeros((33, 2))}, labels=labels, outputs=outputs, class_names=["a", "b", "c"])


def test_confusion_pairs(tmp_path):
    store = confusion_store(tmp_path / "s")
    table = confusion_pairs(store, examples=2)
    assert list(zip(table["true_name"], table["pred_name"], table["count"])) == [
        ("a", "b", 3), ("b", "c", 2), ("c", "b", 2), ("c", "a", 1)]
    first = table.iloc[0]
    assert first["examples"] == [1, 2]
    assert first["rate"] == pytest.approx(0.3) and first["share"] == pytest.approx(3 / 8)
    assert table.iloc[2]["examples"] == [22, 21]
    assert len(confusion_pairs(store, top=2)) == 2
    assert confusion_pairs(store, top=None)["count"].sum() == 8
    perfect = write_store(tmp_path / "p", {"fc": np.zeros((4, 2))}, labels=[0, 1, 0, 1],
                          outputs=logits_for(np.array([0, 1, 0, 1]), 2))
    empty = confusion_pairs(perfect)
    assert empty.empty and list(empty.columns) == list(table.columns)


def sampling_store(path, n=5000, n_classes=10, wrong_rate=0.02, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.choice(n_classes, n, p=np.r_[0.5, np.full(n_classes - 1, 0.5 / (n_classes - 1))])
    pred = labels.copy()
    wrong = rng.random(n) < wrong_rate
    pred[wrong] = (labels[wrong] + 1) % n_classes
    store = write_store(path, {"fc": np.zeros((n, 1))}, labels=labels, outputs=logits_for(pred, n_classes))
    return store, labels, pred


def test_sampling_keeps_the_misclassified_and_every_class(tmp_path):
    store, labels, pred = sampling_store(tmp_path / "s")
    sample = sample_instances(store, 1000, seed=3)
    assert len(sample) == 1000 and (np.diff(sample) > 0).all()
    wrong = np.flatnonzero(labels != pred)
    assert np.isin(wrong, sample).all()  # all ~100 kept
    counts = np.bincount(labels[sample], minlength=10)
    assert counts.min() >= 1000 // 20  # every class gets its floor share
    assert counts[0] > 2 * counts[1:].max()  # the big class stays the biggest
    np.testing.assert_array_equal(sample, sample_instances(store, 1000, seed=3))
    assert not np.array_equal(sample, sample_instances(store, 1000, seed=4))
    # pinned instances are always in, even past the budget or outside `within`
    outside = np.setdiff1d(np.arange(5000), sample)[:3]
    pinned = sample_instances(store, 1000, seed=3, include=outside)
    assert np.isin(outside, pinned).all() and len(pinned) == 1003
    within = np.arange(0, 5000, 2)
    narrowed = sample_instances(store, 300, within=within, include=[1])
    assert len(narrowed) == 301 and np.isin(np.setdiff1d(narrowed, [1]), within).all()
    mask = np.zeros(5000, bool)
    mask[:50] = True
    np.testing.assert_array_equal(sample_instances(store, 1000, within=mask), np.arange(50))


def test_sampling_caps_the_misclassified_at_half_the_budget(tmp_path):
    store, labels, pred = sampling_store(tmp_path / "s", n=3000, wrong_rate=0.4)
    sample = sample_instances(store, 500)
    wrong = labels[sample] != pred[sample]
    assert len(sample) == 500 and wrong.sum() == 250
    assert len(np.unique(labels[sample][wrong])) == 10


def test_sampling_rejects_bad_input(tmp_path):
    store, _, _ = sampling_store(tmp_path / "s", n=100)
    with pytest.raises(IndexError, match="instance 100 is outside the store's 100 instances"):
        sample_instances(store, 10, include=[100])
    with pytest.raises(ValueError, match="one entry per instance"):
        sample_instances(store, 10, within=np.ones(5, bool))
    with pytest.raises(ValueError, match="at least 1"):
        sample_instances(store, 0)
    with pytest.raises(ValueError, match="indices"):
        sample_instances(store, 10, within=["a"])


def test_analysis_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, activis.analysis; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_explanation_frames_are_plain_pandas(tmp_path):
    store, _ = planted_store(tmp_path / "s")
    result = explain_instance(store, 0)
    assert isinstance(result.neurons, pd.DataFrame) and result.neurons.index.name == "neuron"
    assert result.top(4).shape[0] == 4
    assert set(result.distances.columns) >= {"name", "members", "distance", "std_distance", "is_true"}


def test_float16_conversion_matches_numpy_bit_for_bit():
    every_half = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)  # NaN, Inf, subnormals, -0
    got = analysis.as_float64(every_half)
    want = every_half.astype(np.float64)
    assert got.dtype == np.float64 and got.shape == (256, 256)
    np.testing.assert_array_equal(got.view(np.uint64)[~np.isnan(want)], want.view(np.uint64)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()
    big_endian = every_half.astype(">f2")
    np.testing.assert_array_equal(analysis.as_float64(big_endian)[~np.isnan(want)], want[~np.isnan(want)])
    np.testing.assert_array_equal(analysis.as_float64(np.float32([1.5, -2])), [1.5, -2.0])

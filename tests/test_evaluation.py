"""Evaluation metrics against scikit-learn (random and tied scores) and small hand-computed cases."""

import numpy as np
import pytest
from sklearn import metrics
from sklearn.calibration import calibration_curve

from activis import EvaluationError
from activis.evaluation import auc, bucketed_auc, delong, delong_difference, evaluate
from activis.evaluation.classification import expected_calibration_error, reliability


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def multiclass():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 600)
    scores = softmax(rng.normal(size=(600, 4)) + 1.5 * np.eye(4)[y])
    return y, scores


@pytest.mark.parametrize("ties", [None, 1, 2])
def test_auc_equals_sklearn_on_random_and_tied_scores(ties):
    rng = np.random.default_rng(0)
    y = rng.random(5000) < 0.2
    s = rng.normal(size=5000) + y
    if ties is not None:
        s = np.round(s, ties)  # many tied groups mixing positives and negatives
    assert abs(auc(y, s) - metrics.roc_auc_score(y, s)) < 1e-12
    assert abs(delong(y, s).auc - metrics.roc_auc_score(y, s)) < 1e-12
    e = evaluate(labels=y.astype(int), scores=s)
    assert abs(e.auc() - metrics.roc_auc_score(y, s)) < 1e-12
    assert abs(e.precision_recall()["average_precision"] - metrics.average_precision_score(y, s)) < 1e-12
    curve = e.roc()
    fpr, tpr, _ = metrics.roc_curve(y, s)
    np.testing.assert_array_equal(curve["fpr"], fpr)
    np.testing.assert_array_equal(curve["tpr"], tpr)


def test_hand_computed_cases():
    # one tied positive-negative pair at 0.9 and one at 0.5: each counts one half -> 4/6
    assert auc([1, 0, 1, 0, 0], [.9, .9, .5, .5, .1]) == pytest.approx(2 / 3, abs=1e-15)
    e = evaluate(labels=[0, 0, 1, 1], scores=[.1, .4, .35, .8])
    assert e.auc() == pytest.approx(0.75)
    assert e.precision_recall()["average_precision"] == pytest.approx(5 / 6)  # a step sum, not the trapezoid
    # all tied: AUC one half, AP the prevalence
    e = evaluate(labels=[0, 1, 0, 1], scores=[.3, .3, .3, .3])
    assert e.auc() == 0.5
    assert e.precision_recall()["average_precision"] == 0.5
    # threshold 0.5 on [.1 .4 .35 .8] predicts only the last positive: TP 1, FN 1, FP 0
    e = evaluate(labels=[0, 0, 1, 1], scores=[.1, .4, .35, .8], threshold=0.5)
    assert e.confusion().to_numpy().tolist() == [[2, 0], [1, 1]]
    row = e.per_class.iloc[1]
    assert (row["precision"], row["recall"], row["f1"]) == (1.0, 0.5, pytest.approx(2 / 3))


def test_delong_variance_matches_the_pairwise_definition():
    rng = np.random.default_rng(1)
    y = rng.random(300) < 0.4
    s = np.round(rng.normal(size=300) + y, 1)
    x, z = s[y], s[~y]
    psi = (x[:, None] > z[None, :]) + 0.5 * (x[:, None] == z[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    d = delong(y, s)
    np.testing.assert_allclose(d.positives, v10, atol=1e-12)
    np.testing.assert_allclose(d.negatives, v01, atol=1e-12)
    assert d.variance == pytest.approx(v10.var(ddof=1) / x.size + v01.var(ddof=1) / z.size, rel=1e-12)
    lo, hi = d.interval()
    assert lo < d.auc < hi
    same = delong_difference(y, s, s)
    assert same["difference"] == 0 and same["p"] == 1.0
    better = delong_difference(y, s + 3 * y, s)
    assert better["difference"] > 0 and better["p"] < 1e-6


def test_multiclass_macro_micro_and_per_class_against_sklearn(multiclass):
    y, scores = multiclass
    e = evaluate(labels=y, scores=scores, class_names=["a", "b", "c", "d"])
    s = e.summary
    assert s["auc_macro"] == pytest.approx(metrics.roc_auc_score(y, scores, multi_class="ovr"), abs=1e-12)
    assert s["auc_micro"] == pytest.approx(
        metrics.roc_auc_score(y, scores, multi_class="ovr", average="micro"), abs=1e-12)
    assert s["average_precision_macro"] == pytest.approx(
        metrics.average_precision_score(np.eye(4)[y], scores, average="macro"), abs=1e-12)
    pred = scores.argmax(1)
    assert s["accuracy"] == metrics.accuracy_score(y, pred)
    assert s["f1_macro"] == pytest.approx(metrics.f1_score(y, pred, average="macro"))
    np.testing.assert_array_equal(e.confusion().to_numpy(), metrics.confusion_matrix(y, pred))
    np.testing.assert_allclose(e.per_class["recall"], metrics.recall_score(y, pred, average=None))
    for k in range(4):
        assert e.per_class["auc"].iloc[k] == pytest.approx(metrics.roc_auc_score(y == k, scores[:, k]), abs=1e-12)
    assert e.per_class.index.tolist() == ["a", "b", "c", "d"]
    assert e.auc("c") == e.per_class.loc["c", "auc"]


def test_threshold_moves_the_focus_class_predictions(multiclass):
    y, scores = multiclass
    loose = evaluate(labels=y, scores=scores, threshold=0.05, focus=2)
    strict = evaluate(labels=y, scores=scores, threshold=0.95, focus=2)
    assert loose.per_class["recall"].iloc[2] > strict.per_class["recall"].iloc[2]
    assert loose.confusion().to_numpy().sum() == y.size
    assert (loose.predictions[scores[:, 2] >= 0.05] == 2).all()


def test_calibration_against_sklearn():
    rng = np.random.default_rng(0)
    p = rng.random(2000)
    y = rng.random(2000) < p ** 1.5
    for strategy, bins in (("uniform", 10), ("quantile", 7)):
        frac, mean = calibration_curve(y, p, n_bins=bins, strategy=strategy)
        curve = reliability(y, p, bins, strategy)
        np.testing.assert_allclose(curve["frequency"], frac)
        np.testing.assert_allclose(curve["confidence"], mean)
    # by hand: two bins, one perfectly calibrated, one off by 0.3
    ece = expected_calibration_error([1, 0, 1, 1], [0.5, 0.5, 0.7, 0.7], n_bins=2)
    assert ece == pytest.approx(0.5 * 0 + 0.5 * 0.3)
    with pytest.raises(EvaluationError, match="uniform, quantile"):
        reliability([1], [0.5], strategy="equal")


def test_bucketed_auc_is_off_for_peaked_scores_and_bounds_the_exact_one():
    rng = np.random.default_rng(2)
    y = rng.random(50_000) < 0.02
    p = 1 / (1 + np.exp(-(rng.normal(size=y.size) * 1.5 - 5 + 1.5 * y)))  # most scores below 1/199
    exact, b = auc(y, p), bucketed_auc(y, p, 200)
    assert b["minoring"] <= exact <= b["majoring"]
    assert abs(b["auc"] - exact) > 1e-3
    assert abs(bucketed_auc(y, p, 200_000)["auc"] - exact) < abs(b["auc"] - exact)
    e = evaluate(labels=y.astype(int), scores=p)
    assert e.summary["bucket_auc_error"] == pytest.approx(b["auc"] - exact)


def test_score_distributions_split_positives_and_negatives(multiclass):
    y, scores = multiclass
    d = evaluate(labels=y, scores=scores).distributions(1, bins=20)
    assert d["positives"].sum() == (y == 1).sum() and d["negatives"].sum() == (y != 1).sum()
    assert d["edges"][0] == 0 and d["edges"][-1] == 1


def test_intervals_cover_the_values(multiclass):
    y, scores = multiclass
    table = evaluate(labels=y, scores=scores).intervals(n_resamples=40)
    assert (table["low"] <= table["value"] + 1e-12).all() and (table["value"] <= table["high"] + 1e-12).all()
    binary = evaluate(labels=(y == 0).astype(int), scores=scores[:, 0]).intervals(n_resamples=20)
    assert binary.loc["auc", "method"] == "DeLong"


def test_store_and_subset(tmp_path):
    from activis import write_store
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    logits = rng.normal(size=(400, 3)) + 2 * np.eye(3)[y]
    labels = y.copy()
    labels[:5] = -1  # unknown labels are left out
    store = write_store(tmp_path / "s", {"h": rng.normal(size=(400, 4)).astype(np.float32)}, labels=labels,
                        outputs=logits.astype(np.float32), class_names=["cat", "dog", "<b>x</b>"])
    from activis.evaluation import EvaluationWarning
    with pytest.warns(EvaluationWarning, match=r"5 of 400 instances have no label \(-1\) and are left out"):
        e = evaluate(store)
    assert e.n == 395 and e.per_class.index.tolist() == ["cat", "dog", "<b>x</b>"]
    sub = evaluate(store, subset=np.arange(100, 200))
    assert sub.n == 100 and sub.outcomes.indices.tolist() == list(range(100, 200))
    mask = np.zeros(400, bool)
    mask[:50] = True
    assert evaluate(store, subset=mask).n == 45
    probs = softmax(logits[5:])
    assert e.summary["auc_macro"] == pytest.approx(metrics.roc_auc_score(y[5:], probs, multi_class="ovr"), abs=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": [0, 1], "scores": [[0.5, 0.5, 0]]}, "2 labels but scores"),
    ({"labels": [0, 3], "scores": [[1, 0], [0, 1]]}, "label 3 is not a class"),
    ({"labels": ["a", "b"], "scores": [0.1, 0.2]}, "integer class indices"),
    ({"labels": [-1, -1], "scores": [0.1, 0.2]}, "nothing to evaluate"),
])
def test_bad_input_names_the_problem(kwargs, message):
    with pytest.raises(EvaluationError, match=message):
        evaluate(**kwargs)


def test_one_class_auc_is_a_clear_error():
    with pytest.raises(EvaluationError, match="all positive"):
        auc([1, 1, 1], [0.1, 0.2, 0.3])
    e = evaluate(labels=[0, 0, 0], scores=[0.1, 0.2, 0.9])
    assert np.isnan(e.summary["auc"])  # undefined, not an exception in a summary
    with pytest.raises(EvaluationError, match="unknown class 'z'"):
        e.roc("z")


def test_non_finite_scores_are_counted_as_failures_not_dropped(multiclass):
    """A broken model's NaN or infinite scores are its failures: leaving them out would report the
    accuracy and AUC of the instances it got through. By default they count as misclassified and
    ranked last; "drop" leaves them out and "raise" refuses, and every way they are counted."""
    from activis.evaluation import NonFiniteScoresWarning
    y, scores = multiclass
    broken = scores.copy()
    broken[:60] = np.nan  # ten per cent of the instances, most of which the model got right
    broken[60, 2] = np.inf
    with pytest.warns(NonFiniteScoresWarning, match=r"61 of 600 instances have NaN or infinite scores.*'wrong'"):
        e = evaluate(labels=y, scores=broken)
    healthy = evaluate(labels=y[61:], scores=scores[61:])
    assert e.n == 600 and e.summary["nonfinite"] == 61
    assert e.summary["accuracy"] == pytest.approx(healthy.summary["accuracy"] * 539 / 600)
    assert e.summary["auc_macro"] < healthy.summary["auc_macro"] - 0.05
    assert (e.predictions[:61] != y[:61]).all()
    assert e.confusion().to_numpy().sum() == 600
    with pytest.warns(NonFiniteScoresWarning, match="left out"):
        dropped = evaluate(labels=y, scores=broken, nonfinite="drop")
    assert dropped.n == 539 and dropped.summary["nonfinite"] == 61
    assert dropped.summary["accuracy"] == pytest.approx(healthy.summary["accuracy"])
    with pytest.raises(EvaluationError, match=r"61 of 600 .*instances 0, 1, 2, 3, 4, \.\.\..*nonfinite='wrong'"):
        evaluate(labels=y, scores=broken, nonfinite="raise")
    with pytest.raises(EvaluationError, match=r"nonfinite='skip' is not a choice; one of 'wrong', 'drop', 'raise'"):
        evaluate(labels=y, scores=scores, nonfinite="skip")
    assert evaluate(labels=y, scores=scores).summary["nonfinite"] == 0


def test_non_finite_scores_in_a_store_reach_the_panel_counted(tmp_path):
    from activis import EvaluationPanel, write_store
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200)
    outputs = (rng.normal(size=(200, 2)) + 2 * np.eye(2)[y]).astype(np.float32)
    outputs[:20] = np.nan
    store = write_store(tmp_path / "s", {"h": np.zeros((200, 2), np.float32)}, labels=y, outputs=outputs)
    with pytest.warns(UserWarning, match="20 of 200"):
        panel = EvaluationPanel(store)
    assert panel.outcomes.n_nonfinite == 20 and panel.outcomes.labels.size == 200
    with pytest.warns(UserWarning, match="10 of 20 instances"):  # counted within the subset
        summary = evaluate(store, subset=np.arange(10, 30)).summary
    assert summary["nonfinite"] == 10 and summary["accuracy"] <= 0.5


@pytest.mark.parametrize("kwargs, message", [
    ({"subset": np.ones(399, bool)}, r"subset= mask has 399 entries for 400 instances"),
    ({"subset": np.ones(401, bool)}, r"subset= mask has 401 entries for 400 instances"),
    ({"subset": [0, 400]}, r"subset= index 400 is out of range: there are 400 instances \(0\.\.399\)"),
    ({"subset": [-1, 3]}, r"subset= index -1 is out of range"),
    ({"subset": [0.5, 2]}, r"instance indices \(0\.\.399\), a boolean mask of 400.*not float64"),
    ({"subset": np.zeros((2, 2), int)}, r"shape \(2, 2\)"),
    ({"class_names": ["a", "b", "a"]}, r"class_names repeats 'a'"),
    ({"class_names": "abc"}, r"class_names is a list of 3 names"),
    ({"class_names": ["a", "b"]}, r"2 class names for 3 classes"),
    ({"threshold": float("nan")}, r"threshold is None .* or a finite number.*not nan"),
    ({"threshold": "0.5"}, r"threshold .*finite number.*not '0.5'"),
    ({"focus": True}, r"focus is a class name \(0, 1, 2\) or index.*not True"),
    ({"focus": 1.5}, r"focus is a class name.*not 1\.5"),
    ({"focus": 7}, r"focus 7 out of range: there are 3 classes"),
    ({"n_bins": 0}, r"n_bins is a whole number of at least 1, not 0"),
    ({"n_bins": 2.5}, r"n_bins is a whole number"),
    ({"bin_strategy": "kmeans"}, r"bin_strategy 'kmeans' is not a choice; one of uniform, quantile"),
])
def test_bad_arguments_are_refused_not_padded_cut_or_wrapped(kwargs, message):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    with pytest.raises(EvaluationError, match=message):
        evaluate(labels=y, scores=rng.random((400, 3)), **kwargs)


def test_bad_arguments_of_the_evaluation_calls_are_refused(multiclass):
    y, scores = multiclass
    e = evaluate(labels=y, scores=scores)
    for call, message in [(lambda: e.intervals(n_resamples=0), r"n_resamples is a whole number of at least 1"),
                          (lambda: e.intervals(level=95), r"level is .* in \(0, 1\)"),
                          (lambda: e.bucketed_auc(num_thresholds=1), r"num_thresholds .* at least 2"),
                          (lambda: e.distributions(bins=-3), r"bins is a whole number"),
                          (lambda: e.roc(True), r"class is a class name"),
                          (lambda: e.at(float("inf")), r"finite number")]:
        with pytest.raises(EvaluationError, match=message):
            call()

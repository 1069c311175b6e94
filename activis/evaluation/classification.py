"""Decisions and confidence: confusion matrix, per-class precision/recall/F1, calibration, and the
score distributions of positives and negatives (DeepInsight's view of a classifier)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .inputs import EvaluationError, Outcomes

BIN_STRATEGIES = ("uniform", "quantile")


def confusion(out: Outcomes, predictions: np.ndarray | None = None) -> pd.DataFrame:
    """Counts of (true class, predicted class): rows are true classes, columns predictions."""
    pred = out.predictions() if predictions is None else predictions
    k = out.n_classes
    counts = np.bincount(out.labels * k + pred, minlength=k * k).reshape(k, k)
    names = out.class_names
    return pd.DataFrame(counts, index=pd.Index(names, name="true"), columns=pd.Index(names, name="predicted"))


def per_class(out: Outcomes, predictions: np.ndarray | None = None) -> pd.DataFrame:
    """Precision, recall, F1 and support per class (0 where undefined: no prediction of that class)."""
    from sklearn import metrics  # imported on first use: seconds of an explorer's first import

    pred = out.predictions() if predictions is None else predictions
    p, r, f, s = metrics.precision_recall_fscore_support(out.labels, pred, labels=np.arange(out.n_classes),
                                                         zero_division=0)
    return pd.DataFrame({"precision": p, "recall": r, "f1": f, "support": s}, index=pd.Index(out.class_names,
                                                                                             name="class"))


def _bin_edges(confidence: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    if strategy not in BIN_STRATEGIES:
        raise EvaluationError(f"bin_strategy {strategy!r} is not a choice; one of {', '.join(BIN_STRATEGIES)}")
    if n_bins < 1:
        raise EvaluationError(f"n_bins must be at least 1, not {n_bins}")
    if strategy == "quantile":
        return np.percentile(confidence, np.linspace(0, 1, n_bins + 1) * 100)
    return np.linspace(0.0, 1.0, n_bins + 1)


def reliability(correct, confidence, n_bins: int = 15, strategy: str = "uniform") -> pd.DataFrame:
    """The reliability curve: per confidence bin, mean confidence, observed frequency and count
    (empty bins dropped, as `sklearn.calibration.calibration_curve` does)."""
    correct = np.asarray(correct, dtype=np.float64)
    confidence = np.asarray(confidence, dtype=np.float64)
    edges = _bin_edges(confidence, n_bins, strategy)
    # sklearn's binning: a value on an inner edge belongs to the bin below it
    bins = np.searchsorted(edges[1:-1], confidence)
    count = np.bincount(bins, minlength=len(edges) - 1)
    conf = np.bincount(bins, weights=confidence, minlength=len(edges) - 1)
    hits = np.bincount(bins, weights=correct, minlength=len(edges) - 1)
    used = count > 0
    return pd.DataFrame({"lower": edges[:-1][used], "upper": edges[1:][used],
                         "confidence": conf[used] / count[used], "frequency": hits[used] / count[used],
                         "count": count[used]})


def expected_calibration_error(correct, confidence, n_bins: int = 15, strategy: str = "uniform") -> float:
    """ECE = sum over bins of |bin| / N * |frequency - confidence| (the L1 binned estimator)."""
    curve = reliability(correct, confidence, n_bins, strategy)
    if not len(curve):
        raise EvaluationError("no instances to calibrate")
    weights = curve["count"] / curve["count"].sum()
    return float((weights * (curve["frequency"] - curve["confidence"]).abs()).sum())


def top_label(out: Outcomes) -> tuple[np.ndarray, np.ndarray]:
    """(correct, confidence) of the predicted class: the top-label calibration of Guo et al."""
    pred = out.predictions()
    return pred == out.labels, out.scores[np.arange(out.labels.size), pred]


def score_range(out: Outcomes) -> tuple[float, float]:
    """Where the scores live: [0, 1] for probabilities, else their own span."""
    lo, hi = float(out.scores.min()), float(out.scores.max())
    if lo >= 0 and hi <= 1:
        return 0.0, 1.0
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def distributions(out: Outcomes, cls: int, bins: int = 50, value_range: tuple[float, float] | None = None) -> dict:
    """Histograms (shared bins) of class ``cls``'s score for its positives and its negatives."""
    lo, hi = value_range or score_range(out)
    edges = np.linspace(lo, hi, bins + 1)
    score = out.scores[:, cls]
    positive = out.labels == cls
    return {"edges": edges, "positives": np.histogram(score[positive], edges)[0],
            "negatives": np.histogram(score[~positive], edges)[0]}

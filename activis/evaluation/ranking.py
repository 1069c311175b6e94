"""Exact ranking metrics: ROC and PR at every distinct score, their areas, DeLong's variance,
and how far a bucketed (TensorFlow-style) AUC would be off.

The AUC here is the Mann-Whitney statistic (tied positive-negative pairs count one half, as in
`sklearn.metrics.roc_auc_score`), counted exactly in integers from the sorted scores of each side,
so a million scores take a fraction of a second. Curves come from scikit-learn, which evaluates
one threshold per distinct score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import EvaluationError


def _binary(positive, scores) -> tuple[np.ndarray, np.ndarray]:
    positive = np.asarray(positive).astype(bool).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if positive.size != scores.size:
        raise EvaluationError(f"{positive.size} labels for {scores.size} scores")
    n_pos = int(positive.sum())
    if n_pos == 0 or n_pos == positive.size:
        raise EvaluationError("the AUC needs both positives and negatives; "
                              f"these {positive.size} instances are all {'positive' if n_pos else 'negative'}")
    return positive, scores


def _below(values: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    """Twice the number of ``sorted_ref`` entries below each value, ties counted one half each (int64)."""
    return np.searchsorted(sorted_ref, values, "left") + np.searchsorted(sorted_ref, values, "right")


def auc(positive, scores) -> float:
    """Exact ROC AUC: the share of positive-negative pairs ranked right, ties one half (Mann-Whitney U),
    counted in integers and divided once; equals sklearn's roc_auc_score."""
    positive, scores = _binary(positive, scores)
    pos, neg = np.sort(scores[positive]), np.sort(scores[~positive])
    return float(int(_below(pos, neg).sum()) / (2 * pos.size * neg.size))


@dataclass(frozen=True)
class DeLong:
    """An AUC with DeLong's variance, its structural components counted in O(n log n) (the quantities
    of Sun & Xu's midrank form, from sorted scores)."""

    auc: float
    variance: float
    positives: np.ndarray  # V10: each positive's share of negatives ranked below it
    negatives: np.ndarray  # V01: each negative's share of positives ranked above it

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        from scipy.stats import norm  # scipy.stats and sklearn: imported when first used (see roc)

        half = norm.ppf(0.5 + level / 2) * np.sqrt(self.variance)
        return max(0.0, self.auc - half), min(1.0, self.auc + half)


def delong(positive, scores) -> DeLong:
    positive, scores = _binary(positive, scores)
    pos, neg = scores[positive], scores[~positive]
    m, n = pos.size, neg.size
    v10 = _below(pos, np.sort(neg)) / (2 * n)  # each positive's share of negatives below it
    v01 = 1.0 - _below(neg, np.sort(pos)) / (2 * m)  # each negative's share of positives above it
    var = (v10.var(ddof=1) / m if m > 1 else 0.0) + (v01.var(ddof=1) / n if n > 1 else 0.0)
    return DeLong(float(v10.mean()), float(var), v10, v01)


def delong_difference(positive, scores_a, scores_b) -> dict:
    """Paired DeLong test of two models' AUCs on the same instances: difference, its SE, z and p."""
    a, b = delong(positive, scores_a), delong(positive, scores_b)
    m, n = a.positives.size, a.negatives.size
    s10 = np.cov(np.stack([a.positives, b.positives])) if m > 1 else np.zeros((2, 2))
    s01 = np.cov(np.stack([a.negatives, b.negatives])) if n > 1 else np.zeros((2, 2))
    cov = s10 / m + s01 / n
    var = cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]
    diff = a.auc - b.auc
    se = float(np.sqrt(max(var, 0.0)))
    z = diff / se if se > 0 else (0.0 if diff == 0 else np.inf)
    from scipy.stats import norm

    return {"auc_a": a.auc, "auc_b": b.auc, "difference": diff, "se": se, "z": float(z),
            "p": float(2 * norm.sf(abs(z)))}


def roc(positive, scores) -> dict:
    """The exact ROC curve: one point per distinct score (collinear points kept out, as sklearn does)."""
    from sklearn import metrics  # imported on first use: with scipy.stats, seconds of an explorer's first import

    positive, scores = _binary(positive, scores)
    fpr, tpr, thresholds = metrics.roc_curve(positive, scores)
    return {"fpr": fpr, "tpr": tpr, "thresholds": thresholds}


def precision_recall(positive, scores) -> dict:
    """The exact PR curve (recall decreasing, ending at recall 0, precision 1) and average precision."""
    from sklearn import metrics

    positive, scores = _binary(positive, scores)
    precision, recall, thresholds = metrics.precision_recall_curve(positive, scores)
    # the step sum sklearn's average_precision_score takes over this very curve (not the trapezoid)
    ap = -np.sum(np.diff(recall) * precision[:-1])
    return {"precision": precision, "recall": recall, "thresholds": thresholds, "average_precision": float(ap)}


def bucketed_auc(positive, scores, num_thresholds: int = 200) -> dict:
    """The AUC as ``tf.keras.metrics.AUC(num_thresholds)`` computes it (scores taken as probabilities):
    counts at evenly spaced thresholds, trapezoids between them, with its lower and upper Riemann
    bounds ("minoring", "majoring")."""
    positive, scores = _binary(positive, scores)
    eps = 1e-7
    inner = (np.arange(1, num_thresholds - 1)) / (num_thresholds - 1)
    thresholds = np.concatenate([[-eps], inner, [1 + eps]])
    # a prediction counts as positive at a threshold when it is strictly above it
    order = np.sort(scores[positive]), np.sort(scores[~positive])
    tp = positive.sum() - np.searchsorted(order[0], thresholds, side="right")
    fp = (~positive).sum() - np.searchsorted(order[1], thresholds, side="right")
    tpr, fpr = tp / positive.sum(), fp / (~positive).sum()
    dx = fpr[:-1] - fpr[1:]
    return {"auc": float(np.sum(dx * (tpr[:-1] + tpr[1:]) / 2)),
            "minoring": float(np.sum(dx * np.minimum(tpr[:-1], tpr[1:]))),
            "majoring": float(np.sum(dx * np.maximum(tpr[:-1], tpr[1:]))),
            "num_thresholds": num_thresholds}

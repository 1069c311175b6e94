"""What every metric reads: true labels and class scores of some instances, checked once.

A store (or a subset of it), or plain arrays: ``labels`` are class indices (unknown labels, -1,
are left out), ``scores`` are one score per instance (binary: the positive class's) or one per
class. Everything downstream works on an `Outcomes`, so the metrics never see a store.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np


class EvaluationError(ValueError):
    """Labels and scores that cannot be evaluated (mismatched, one class only, unknown class...)."""


class EvaluationWarning(UserWarning):
    """Instances left out of an evaluation (no label) or counted in a way the caller chose."""


class NonFiniteScoresWarning(EvaluationWarning):
    """Some instances' scores are NaN or infinite: how they were counted (see ``nonfinite=``)."""


# what an instance whose scores are NaN or infinite (a broken model's failure) counts as
NONFINITE = ("wrong", "drop", "raise")


@dataclass(frozen=True)
class Outcomes:
    """Labels (int64, n) and scores (float64, n x k) of the instances evaluated, with their store indices.

    ``nonfinite`` marks the rows whose scores were NaN or infinite and were kept as failures
    (``nonfinite="wrong"``: their scores are replaced by the worst ones, see `outcomes`); ``dropped``
    is how many such instances ``nonfinite="drop"`` left out.
    """

    labels: np.ndarray
    scores: np.ndarray
    class_names: list[str]
    indices: np.ndarray  # instance index in the source of each row (for subsets of the result)
    nonfinite: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    dropped: int = 0

    def __post_init__(self):
        if self.nonfinite.size != self.labels.size:
            object.__setattr__(self, "nonfinite", np.zeros(self.labels.size, bool))

    @property
    def n_classes(self) -> int:
        return self.scores.shape[1]

    @property
    def n_nonfinite(self) -> int:
        """Instances whose scores were NaN or infinite: kept as failures or dropped."""
        return int(self.nonfinite.sum()) + self.dropped

    @property
    def binary(self) -> bool:
        return self.n_classes == 2

    def predictions(self, threshold: float | None = None, focus: int | None = None) -> np.ndarray:
        """Predicted classes: argmax, or, given a threshold, ``focus`` (class 1 when binary) wherever its
        score reaches the threshold and the best other class elsewhere."""
        if threshold is None:
            return np.argmax(self.scores, axis=1)
        focus = (1 if self.binary else int(np.argmax(np.bincount(self.labels)))) if focus is None else focus
        others = self.scores.copy()
        others[:, focus] = -np.inf
        return np.where(self.scores[:, focus] >= threshold, focus, np.argmax(others, axis=1))

    def take(self, rows) -> Outcomes:
        """The outcomes of some rows (positions in this object, a boolean mask or positions)."""
        rows = np.asarray(rows)
        rows = np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.int64)
        return Outcomes(self.labels[rows], self.scores[rows], self.class_names, self.indices[rows],
                        self.nonfinite[rows])


def outcomes(source=None, *, labels=None, scores=None, subset=None, class_names=None,
             nonfinite: str = "wrong") -> Outcomes:
    """Resolve a store (optionally a subset: indices, a boolean mask or a `Subset`) or label/score arrays.

    Instances with an unknown label (-1) are left out, with an `EvaluationWarning` that counts them.
    An instance whose scores hold a NaN or an infinity is a failure of the model, and ``nonfinite``
    says how it counts: ``"wrong"`` (default) keeps it as misclassified and ranked last (its own class
    gets the lowest score seen, every other class the highest), ``"drop"`` leaves it out, ``"raise"``
    refuses; either way it is counted (`Outcomes.n_nonfinite`, ``summary["nonfinite"]``) and a
    `NonFiniteScoresWarning` says so.
    """
    if not isinstance(nonfinite, str) or nonfinite not in NONFINITE:
        raise EvaluationError(f"nonfinite={nonfinite!r} is not a choice; one of {', '.join(map(repr, NONFINITE))} "
                              "(how an instance with NaN or infinite scores counts)")
    if source is not None:
        if labels is not None or scores is not None:
            raise EvaluationError("pass a store or labels= and scores=, not both")
        if isinstance(source, Outcomes):
            if class_names is not None:
                raise EvaluationError("class_names= names the classes of a store or of scores=; an Outcomes "
                                      "has its own")
            return source if subset is None else source.take(_subset_rows(source, source, subset))
        if not hasattr(source, "scores") or not hasattr(source, "column") or not hasattr(source, "n_instances"):
            raise EvaluationError("evaluate a store (open_store(path)), an Outcomes or labels= and scores=, "
                                  f"not {type(source).__name__}")
        n = int(source.n_instances)
        labels, scores = source.column("label")[:n], source.scores[:n]
        class_names = source.class_names if class_names is None else class_names
    elif labels is None or scores is None:
        raise EvaluationError("give a store, or both labels= and scores=")
    labels, scores, names = _checked(labels, scores, class_names)
    member = np.ones(labels.size, bool) if subset is None else _subset_member(source, labels.size, subset)
    if subset is not None and not member.any():
        raise EvaluationError("subset= holds no instance: nothing to evaluate")
    unknown = int((member & (labels < 0)).sum())
    if unknown and unknown < member.sum():
        warnings.warn(f"{unknown} of {int(member.sum())} instances have no label (-1) and are left out",
                      EvaluationWarning, stacklevel=3)
    return _finite(labels, scores, names, np.flatnonzero(member & (labels >= 0)), nonfinite)


def _finite(labels, scores, names, rows, policy: str) -> Outcomes:
    """The outcomes of ``rows``, the non-finite ones counted and handled as ``policy`` says."""
    labels, scores = labels[rows], scores[rows]
    bad = ~np.isfinite(scores).all(axis=1)
    count = int(bad.sum())
    if not count:
        return Outcomes(labels, scores, names, rows)
    shown = ", ".join(map(str, rows[bad][:5])) + (", ..." if count > 5 else "")
    what = f"{count} of {rows.size} instances have NaN or infinite scores (instances {shown})"
    if policy == "raise":
        raise EvaluationError(f"{what}: a model that fails there. Pass nonfinite='wrong' to count them as "
                              "misclassified and ranked last, or nonfinite='drop' to leave them out (counted)")
    if policy == "drop":
        warnings.warn(f"{what}: left out of every metric (nonfinite='drop'); summary['nonfinite'] counts them",
                      NonFiniteScoresWarning, stacklevel=3)
        keep = ~bad
        return Outcomes(labels[keep], scores[keep], names, rows[keep], dropped=count)
    finite = scores[~bad]
    finite = finite[np.isfinite(finite)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if low == high:
        low, high = low - 1.0, high + 1.0
    scores = scores.copy()
    scores[bad] = high  # every other class the highest score seen, the instance's own class the lowest
    scores[np.flatnonzero(bad), labels[bad]] = low
    warnings.warn(f"{what}: counted as misclassified and ranked last for their class (nonfinite='wrong'); "
                  "nonfinite='drop' leaves them out, nonfinite='raise' refuses", NonFiniteScoresWarning,
                  stacklevel=3)
    return Outcomes(labels, scores, names, rows, bad)


def _checked(labels, scores, class_names) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Labels (int64, -1 unknown), scores (float64, n x k) and class names, every shape and value checked."""
    try:
        labels = np.asarray(labels)
        scores = np.asarray(scores)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise EvaluationError(f"labels and scores must be arrays (one row per instance): {exc}") from None
    if scores.dtype.kind not in "biuf":
        raise EvaluationError(f"scores must be numbers (one per instance, or one per instance and class), not "
                              f"{scores.dtype}")
    scores = scores.astype(np.float64)
    if labels.ndim != 1:
        raise EvaluationError(f"labels must be one class index per instance, got shape {labels.shape}")
    if labels.size and labels.dtype.kind not in "iub":
        if labels.dtype.kind == "f" and np.all(np.isnan(labels) | (labels == np.round(labels))):
            labels = np.where(np.isnan(labels), -1, labels)
        else:
            raise EvaluationError(f"labels must be integer class indices (-1 for unknown), got {labels.dtype}")
    labels = labels.astype(np.int64)
    if scores.ndim == 1:
        scores = np.stack([1.0 - scores, scores], axis=1) if _in_unit(scores) else np.stack([-scores, scores], axis=1)
    if scores.ndim != 2 or scores.shape[0] != labels.size:
        raise EvaluationError(f"{labels.size} labels but scores of shape {scores.shape}; scores are one per "
                              "instance (binary) or one per instance and class")
    if scores.shape[1] < 2:
        raise EvaluationError("scores need at least two classes (or one column of positive-class scores)")
    if (labels >= scores.shape[1]).any():
        bad = int(labels[labels >= scores.shape[1]][0])
        raise EvaluationError(f"label {bad} is not a class: scores have {scores.shape[1]} classes "
                              f"(0..{scores.shape[1] - 1})")
    if (labels < -1).any():
        raise EvaluationError("labels must be class indices (or -1 for unknown)")
    return labels, scores, _class_names(class_names, scores.shape[1])


def _class_names(class_names, k: int) -> list[str]:
    if class_names is None or (not isinstance(class_names, str) and len(class_names) == 0):
        return [str(i) for i in range(k)]
    if isinstance(class_names, str) or not hasattr(class_names, "__len__"):
        raise EvaluationError(f"class_names is a list of {k} names, one per class, not {type(class_names).__name__}")
    names = [str(c) for c in class_names]
    if len(names) != k:
        raise EvaluationError(f"{len(names)} class names for {k} classes: give one name per class")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise EvaluationError(f"class_names repeats {', '.join(map(repr, repeated))}: each class needs its own "
                              "name, or a class given by name would be ambiguous")
    return names


def _in_unit(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size == 0 or (finite.min() >= 0 and finite.max() <= 1))


def _subset_member(source, n: int, subset) -> np.ndarray:
    """Which of the ``n`` instances ``subset`` holds: instance indices, a boolean mask over all ``n``, or a
    `Subset` (or query) of the store. A wrong-length mask or an index out of range is an error, never
    padded, cut or wrapped."""
    if hasattr(subset, "definition") or isinstance(subset, str):
        if source is None:
            raise EvaluationError("a Subset or a query needs the store it belongs to; with labels= and scores= "
                                  "give subset= instance indices or a boolean mask")
        from ..subsets import Subsets
        return np.asarray(Subsets(source).mask(subset), dtype=bool)[:n]
    choices = (f"subset= is instance indices (0..{n - 1}), a boolean mask of {n} (one per instance) or a Subset")
    try:
        sub = np.asarray(subset)
    except (ValueError, TypeError):
        raise EvaluationError(f"{choices}, not {type(subset).__name__}") from None
    if sub.ndim != 1:
        raise EvaluationError(f"{choices}; got an array of shape {sub.shape}")
    if sub.dtype == bool:
        if sub.size != n:
            raise EvaluationError(f"subset= mask has {sub.size} entries for {n} instances: give one True/False "
                                  "per instance")
        return sub
    if sub.size == 0:
        return np.zeros(n, bool)
    if sub.dtype.kind not in "iu":
        raise EvaluationError(f"{choices}, not {sub.dtype} values")
    outside = sub[(sub < 0) | (sub >= n)]
    if outside.size:
        raise EvaluationError(f"subset= index {int(outside[0])} is out of range: there are {n} instances "
                              f"(0..{n - 1})")
    member = np.zeros(n, bool)
    member[sub] = True
    return member


def _subset_rows(source: Outcomes, out: Outcomes, subset) -> np.ndarray:
    """Rows of an `Outcomes` whose instance is in ``subset`` (source indices or a mask over them)."""
    total = int(out.indices.max()) + 1 if out.indices.size else 0
    sub = np.asarray(subset) if not hasattr(subset, "definition") and not isinstance(subset, str) else None
    if sub is not None and sub.dtype == bool and sub.size > total:
        total = sub.size  # a mask over the whole store, whose last instances may be unlabelled
    member = _subset_member(None, max(total, 1), subset)
    return np.flatnonzero(member[out.indices])

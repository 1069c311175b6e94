"""What every metric reads: true labels and class scores of some instances, checked once.

A store (or a subset of it), or plain arrays: ``labels`` are class indices (unknown labels, -1,
are left out), ``scores`` are one score per instance (binary: the positive class's) or one per
class. Everything downstream works on an `Outcomes`, so the metrics never see a store.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class EvaluationError(ValueError):
    """Labels and scores that cannot be evaluated (mismatched, one class only, unknown class...)."""


@dataclass(frozen=True)
class Outcomes:
    """Labels (int64, n) and scores (float64, n x k) of the instances evaluated, with their store indices."""

    labels: np.ndarray
    scores: np.ndarray
    class_names: list[str]
    indices: np.ndarray  # instance index in the source of each row (for subsets of the result)

    @property
    def n_classes(self) -> int:
        return self.scores.shape[1]

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
        return Outcomes(self.labels[rows], self.scores[rows], self.class_names, self.indices[rows])


def outcomes(source=None, *, labels=None, scores=None, subset=None, class_names=None) -> Outcomes:
    """Resolve a store (optionally a subset: indices, a boolean mask or a `Subset`) or label/score arrays."""
    if source is not None:
        if labels is not None or scores is not None:
            raise EvaluationError("pass a store or labels= and scores=, not both")
        if isinstance(source, Outcomes):
            out = source
        else:
            if not hasattr(source, "scores") or not hasattr(source, "column"):
                raise EvaluationError("evaluate a store, an Outcomes or labels= and scores=, "
                                      f"not {type(source).__name__}")
            out = _checked(source.column("label"), source.scores, class_names or source.class_names,
                           np.arange(source.n_instances))
        return out if subset is None else out.take(_subset_rows(source, out, subset))
    if labels is None or scores is None:
        raise EvaluationError("give a store, or both labels= and scores=")
    out = _checked(labels, scores, class_names, None)
    return out if subset is None else out.take(_subset_rows(None, out, subset))


def _checked(labels, scores, class_names, indices) -> Outcomes:
    labels = np.asarray(labels)
    scores = np.asarray(scores, dtype=np.float64)
    if labels.ndim != 1:
        raise EvaluationError(f"labels must be one class index per instance, got shape {labels.shape}")
    if labels.size and labels.dtype.kind not in "iub":
        if labels.dtype.kind == "f" and np.all(np.isnan(labels) | (labels == np.round(labels))):
            labels = np.where(np.isnan(labels), -1, labels)
        else:
            raise EvaluationError(f"labels must be integer class indices, got {labels.dtype}")
    labels = labels.astype(np.int64)
    if scores.ndim == 1:
        scores = np.stack([1.0 - scores, scores], axis=1) if _in_unit(scores) else np.stack([-scores, scores], axis=1)
    if scores.ndim != 2 or scores.shape[0] != labels.size:
        raise EvaluationError(f"{labels.size} labels but scores of shape {scores.shape}; scores are one per "
                              "instance (binary) or one per instance and class")
    if scores.shape[1] < 2:
        raise EvaluationError("scores need at least two classes (or one column of positive-class scores)")
    indices = np.arange(labels.size) if indices is None else np.asarray(indices)
    known = labels >= 0
    if (labels >= scores.shape[1]).any():
        bad = int(labels[labels >= scores.shape[1]][0])
        raise EvaluationError(f"label {bad} is not a class: scores have {scores.shape[1]} classes "
                              f"(0..{scores.shape[1] - 1})")
    if (labels < -1).any():
        raise EvaluationError("labels must be class indices (or -1 for unknown)")
    finite = np.isfinite(scores).all(axis=1)
    keep = known & finite
    names = list(class_names) if class_names else [str(i) for i in range(scores.shape[1])]
    if len(names) != scores.shape[1]:
        raise EvaluationError(f"{len(names)} class names for {scores.shape[1]} classes")
    return Outcomes(labels[keep], scores[keep], names, indices[keep])


def _in_unit(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size == 0 or (finite.min() >= 0 and finite.max() <= 1))


def _subset_rows(source, out: Outcomes, subset) -> np.ndarray:
    """Rows of ``out`` whose instance is in ``subset`` (indices into the source, a mask over it, a Subset)."""
    if hasattr(subset, "definition") or isinstance(subset, str):
        if source is None or isinstance(source, Outcomes):
            raise EvaluationError("a Subset needs the store it belongs to")
        from ..subsets import Subsets
        subset = Subsets(source).mask(subset)
    sub = np.asarray(subset)
    total = int(out.indices.max()) + 1 if out.indices.size else 0
    if sub.dtype == bool:
        member = sub
    else:
        if sub.size and sub.dtype.kind not in "iu":
            raise EvaluationError(f"subset must be instance indices, a boolean mask or a Subset, not {sub.dtype}")
        member = np.zeros(max(total, int(sub.max()) + 1 if sub.size else 0), dtype=bool)
        member[sub.astype(np.int64)] = True
    if member.size < total:
        member = np.concatenate([member, np.zeros(total - member.size, bool)])
    return np.flatnonzero(member[out.indices])

"""`evaluate`: every metric of a classifier on a store, a subset of it, or label/score arrays.

The `Evaluation` it returns computes lazily what a view asks for (a class's curves, the confusion
at a threshold) from the outcomes it holds, and gives a flat `summary` for the training log.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from . import classification, ranking
from .inputs import EvaluationError, Outcomes, outcomes

BUCKETS = 200  # tf.keras.metrics.AUC's default num_thresholds


class Evaluation:
    """The metrics of one set of outcomes. ``focus`` is the class a threshold applies to (class 1 when
    binary); ``threshold`` (None: argmax) decides the predictions behind confusion, precision, recall, F1."""

    def __init__(self, out: Outcomes, *, threshold: float | None = None, focus: int | None = None,
                 n_bins: int = 15, bin_strategy: str = "uniform"):
        if not isinstance(out, Outcomes):
            raise EvaluationError(f"Evaluation reads an Outcomes (see outcomes()); evaluate(store) makes one, "
                                  f"not {type(out).__name__}")
        if out.labels.size == 0:
            raise EvaluationError("nothing to evaluate: no instance with a known label"
                                  + (f" ({out.dropped} left out for non-finite scores)" if out.dropped else ""))
        self.outcomes = out
        self.threshold = checked_threshold(threshold)
        self.focus = (1 if out.binary else 0) if focus is None else self._class(focus, "focus")
        self.n_bins = _count(n_bins, "n_bins", 1)
        self.bin_strategy = bin_strategy
        classification._bin_edges(np.zeros(1), self.n_bins, bin_strategy)  # a bad binning fails here

    def _class(self, cls, what: str = "class") -> int:
        """A class by name or index, checked (a bool or a fraction is not a class)."""
        names = self.outcomes.class_names
        if isinstance(cls, str):
            if cls not in names:
                raise EvaluationError(f"unknown {what} {cls!r}; classes: {', '.join(names)}")
            return names.index(cls)
        if isinstance(cls, (bool, np.bool_)) or not isinstance(cls, (int, np.integer)):
            raise EvaluationError(f"{what} is a class name ({', '.join(names)}) or index (0..{len(names) - 1}), "
                                  f"not {cls!r}")
        if not 0 <= int(cls) < len(names):
            raise EvaluationError(f"{what} {cls} out of range: there are {len(names)} classes (0..{len(names) - 1})")
        return int(cls)

    @property
    def n(self) -> int:
        return self.outcomes.labels.size

    @cached_property
    def predictions(self) -> np.ndarray:
        return self.outcomes.predictions(self.threshold, self.focus)

    def _positive(self, cls: int) -> np.ndarray:
        return self.outcomes.labels == cls

    def _has_both(self, cls: int) -> bool:
        k = int(self._positive(cls).sum())
        return 0 < k < self.n

    # ------------------------------------------------------------- curves
    def _curve_input(self, cls) -> tuple[np.ndarray, np.ndarray]:
        if cls == "micro":
            out = self.outcomes
            onehot = out.labels[:, None] == np.arange(out.n_classes)[None, :]
            return onehot.ravel(), out.scores.ravel()
        cls = self._class(cls)
        return self._positive(cls), self.outcomes.scores[:, cls]

    def roc(self, cls=None) -> dict:
        """Exact ROC of class ``cls`` against the rest ("micro": all classes as one binary problem)."""
        return ranking.roc(*self._curve_input(self.focus if cls is None else cls))

    def precision_recall(self, cls=None) -> dict:
        return ranking.precision_recall(*self._curve_input(self.focus if cls is None else cls))

    def auc(self, cls=None) -> float:
        return ranking.auc(*self._curve_input(self.focus if cls is None else cls))

    def delong(self, cls=None) -> ranking.DeLong:
        return ranking.delong(*self._curve_input(self.focus if cls is None else cls))

    # ------------------------------------------------------------- tables
    @cached_property
    def per_class(self) -> pd.DataFrame:
        """Per class: precision, recall, F1, support at the current decision; one-vs-rest AUC with its
        DeLong 95 % interval, average precision, and the 200-bucket AUC's error (NaN without both sides)."""
        return classification.per_class(self.outcomes, self.predictions).assign(**self._ranking)

    @cached_property
    def _ranking(self) -> dict[str, list[float]]:
        """The threshold-free columns of `per_class` (shared by `at`)."""
        cols = {k: [] for k in ("auc", "auc_low", "auc_high", "average_precision", "bucket_auc_error")}
        for cls in range(self.outcomes.n_classes):
            if not self._has_both(cls):
                for values in cols.values():
                    values.append(np.nan)
                continue
            positive, scores = self._curve_input(cls)
            d = ranking.delong(positive, scores)
            lo, hi = d.interval()
            cols["auc"].append(d.auc)
            cols["auc_low"].append(lo)
            cols["auc_high"].append(hi)
            cols["average_precision"].append(ranking.precision_recall(positive, scores)["average_precision"])
            cols["bucket_auc_error"].append(self._bucket_error(positive, scores, d.auc))
        return cols

    def at(self, threshold: float | None, focus=None) -> Evaluation:
        """The same outcomes decided at another threshold (or focus class); the ranking metrics,
        which no threshold changes, are not computed again."""
        other = Evaluation(self.outcomes, threshold=threshold, focus=self.focus if focus is None else focus,
                           n_bins=self.n_bins, bin_strategy=self.bin_strategy)
        other.__dict__["_ranking"] = self._ranking
        return other

    def _bucket_error(self, positive, scores, exact: float) -> float:
        if scores.min() < 0 or scores.max() > 1:
            return np.nan  # a TF-style AUC assumes probabilities
        return ranking.bucketed_auc(positive, scores, BUCKETS)["auc"] - exact

    def bucketed_auc(self, cls=None, num_thresholds: int = BUCKETS) -> dict:
        """What a bucketed AUC would report for class ``cls``, beside the exact one."""
        num_thresholds = _count(num_thresholds, "num_thresholds", 2)
        positive, scores = self._curve_input(self.focus if cls is None else cls)
        result = ranking.bucketed_auc(positive, scores, num_thresholds)
        return {**result, "exact": ranking.auc(positive, scores)}

    def confusion(self) -> pd.DataFrame:
        return classification.confusion(self.outcomes, self.predictions)

    def _calibration_input(self, cls) -> tuple[np.ndarray, np.ndarray]:
        if cls is None:
            return classification.top_label(self.outcomes)
        cls = self._class(cls)
        return self._positive(cls), self.outcomes.scores[:, cls]

    def reliability(self, cls=None) -> pd.DataFrame:
        """The reliability curve: top-label (None) or class ``cls``'s probability against its frequency."""
        return classification.reliability(*self._calibration_input(cls), self.n_bins, self.bin_strategy)

    def expected_calibration_error(self, cls=None) -> float:
        return classification.expected_calibration_error(*self._calibration_input(cls), self.n_bins,
                                                         self.bin_strategy)

    def distributions(self, cls=None, bins: int = 50) -> dict:
        bins = _count(bins, "bins", 1)
        return classification.distributions(self.outcomes, self._class(self.focus if cls is None else cls), bins)

    # ------------------------------------------------------------- summaries
    @cached_property
    def summary(self) -> dict[str, float]:
        """The headline numbers as plain floats (what `Cockpit.log_eval` writes per step)."""
        table = self.per_class
        out = self.outcomes
        result = {"n": float(self.n), "nonfinite": float(out.n_nonfinite),
                  "accuracy": float(np.mean(self.predictions == out.labels)),
                  "f1_macro": float(table["f1"].mean()),
                  "ece": self.expected_calibration_error() if _probabilities(out) else np.nan}
        if out.binary:
            row = table.iloc[self.focus]
            result.update(auc=row["auc"], auc_low=row["auc_low"], auc_high=row["auc_high"],
                          average_precision=row["average_precision"], bucket_auc_error=row["bucket_auc_error"],
                          precision=row["precision"], recall=row["recall"], f1=row["f1"])
        else:
            result.update(auc_macro=float(np.nanmean(table["auc"])) if table["auc"].notna().any() else np.nan,
                          auc_micro=self.auc("micro") if _probabilities(out) else np.nan,
                          average_precision_macro=float(np.nanmean(table["average_precision"]))
                          if table["average_precision"].notna().any() else np.nan)
        return {k: float(v) for k, v in result.items()}

    def intervals(self, n_resamples: int = 200, level: float = 0.95, seed: int = 0) -> pd.DataFrame:
        """Confidence intervals of the summary: DeLong's for AUCs, a percentile bootstrap (instances
        resampled with replacement; resamples missing a class are left out) for the rest."""
        rng = np.random.default_rng(seed)
        out = self.outcomes
        n_resamples = _count(n_resamples, "n_resamples", 1)
        if not isinstance(level, (int, float, np.number)) or isinstance(level, bool) or not 0 < level < 1:
            raise EvaluationError(f"level is the interval's coverage, a number in (0, 1) such as 0.95, not {level!r}")
        keys = [k for k in self.summary if k not in ("n", "nonfinite", "auc", "auc_low", "auc_high")]
        samples = {k: [] for k in keys}
        for _ in range(n_resamples):
            rows = rng.integers(0, self.n, self.n)
            try:
                s = Evaluation(out.take(rows), threshold=self.threshold, focus=self.focus, n_bins=self.n_bins,
                               bin_strategy=self.bin_strategy).summary
            except EvaluationError:
                continue
            for k in keys:
                samples[k].append(s[k])
        alpha = (1 - level) / 2
        rows = []
        if "auc" in self.summary:
            rows.append({"metric": "auc", "value": self.summary["auc"], "low": self.summary["auc_low"],
                         "high": self.summary["auc_high"], "method": "DeLong"})
        for k in keys:
            values = np.asarray(samples[k], dtype=np.float64)
            values = values[np.isfinite(values)]
            low, high = (np.quantile(values, [alpha, 1 - alpha]) if values.size else (np.nan, np.nan))
            rows.append({"metric": k, "value": self.summary[k], "low": float(low), "high": float(high),
                         "method": f"bootstrap ({values.size} resamples)"})
        return pd.DataFrame(rows).set_index("metric")

    def __repr__(self) -> str:
        head = ", ".join(f"{k} {v:.4f}" for k, v in self.summary.items() if k not in ("n", "nonfinite")
                         and np.isfinite(v))
        if self.outcomes.n_nonfinite:
            head += f"; {self.outcomes.n_nonfinite} with non-finite scores"
        return f"Evaluation({self.n} instances, {self.outcomes.n_classes} classes: {head})"


def _probabilities(out: Outcomes) -> bool:
    return bool(out.scores.min() >= 0 and out.scores.max() <= 1)


def _count(value, name: str, least: int) -> int:
    """A whole number of at least ``least`` (not a bool, not a fraction)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < least:
        raise EvaluationError(f"{name} is a whole number of at least {least}, not {value!r}")
    return int(value)


def checked_threshold(threshold) -> float | None:
    """None (argmax decides) or a finite number: a NaN threshold would decide nothing."""
    if threshold is None:
        return None
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.number)) \
            or not np.isfinite(threshold):
        raise EvaluationError(f"threshold is None (the class with the highest score) or a finite number, the focus "
                              f"class's score from which it is predicted, not {threshold!r}")
    return float(threshold)


def evaluate(source=None, *, labels=None, scores=None, subset=None, class_names=None,
             threshold: float | None = None, focus=None, n_bins: int = 15, bin_strategy: str = "uniform",
             nonfinite: str = "wrong") -> Evaluation:
    """Evaluate a store (all of it or ``subset``: indices, a mask or a `Subset`) or ``labels``/``scores``.

    ``nonfinite`` says how an instance whose scores are NaN or infinite counts: "wrong" (misclassified,
    ranked last), "drop" or "raise" (see `outcomes`); ``summary["nonfinite"]`` counts them.
    """
    out = outcomes(source, labels=labels, scores=scores, subset=subset, class_names=class_names,
                   nonfinite=nonfinite)
    return Evaluation(out, threshold=threshold, focus=focus, n_bins=n_bins, bin_strategy=bin_strategy)

"""Two stores of the same instances (model A and model B, or two checkpoints), instance by instance:
where the predictions differ (a subset), which instances were fixed or broken, and the per-class
difference of every metric."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .inputs import EvaluationError, outcomes
from .ranking import delong_difference
from .report import Evaluation


class StoreComparison:
    """``b`` against ``a`` on the instances both labelled: ``differ`` (indices where the predicted
    classes differ), ``fixed`` / ``broken`` (wrong in a and right in b, and the reverse),
    ``per_class`` (b - a for every per-class metric) and ``summary`` (a, b, b - a)."""

    def __init__(self, a, b, *, subset=None, names: tuple[str, str] = ("A", "B"), nonfinite: str = "wrong"):
        if not isinstance(names, (tuple, list)) or len(names) != 2 \
                or not all(isinstance(n, str) and n for n in names) or names[0] == names[1]:
            raise EvaluationError(f"names= is two different, non-empty names for the stores, such as ('before', "
                                  f"'after'), not {names!r}")
        for name, store in zip(names, (a, b)):
            if not hasattr(store, "n_instances"):
                raise EvaluationError(f"compare_stores compares two stores (open_store(path)); {name} is "
                                      f"{type(store).__name__}")
        if a.n_instances != b.n_instances:
            raise EvaluationError(f"the two stores do not hold the same labelled instances ({a.n_instances} and "
                                  f"{b.n_instances} instances); compare stores captured from the same data")
        oa, ob = (outcomes(s, subset=subset, nonfinite=nonfinite) for s in (a, b))
        if not np.array_equal(oa.indices, ob.indices) or not np.array_equal(oa.labels, ob.labels):
            raise EvaluationError("the two stores do not hold the same labelled instances (their labels or "
                                  f"instance counts differ: {oa.labels.size} vs {ob.labels.size}); compare stores "
                                  "captured from the same data")
        if oa.n_classes != ob.n_classes:
            raise EvaluationError(f"the stores have {oa.n_classes} and {ob.n_classes} classes")
        self.names = names
        self.a, self.b = Evaluation(oa), Evaluation(ob)
        pa, pb, y = self.a.predictions, self.b.predictions, oa.labels
        self.differ = oa.indices[pa != pb]
        self.fixed = oa.indices[(pa != y) & (pb == y)]
        self.broken = oa.indices[(pa == y) & (pb != y)]

    @property
    def instances(self) -> pd.DataFrame:
        """The instances whose prediction changed: label and both predictions."""
        rows = np.isin(self.a.outcomes.indices, self.differ)
        a, b = self.names
        return pd.DataFrame({"label": self.a.outcomes.labels[rows], f"pred_{a}": self.a.predictions[rows],
                             f"pred_{b}": self.b.predictions[rows]},
                            index=pd.Index(self.differ, name="instance"))

    @property
    def per_class(self) -> pd.DataFrame:
        a, b = self.names
        ta, tb = self.a.per_class, self.b.per_class
        metrics = [c for c in ta.columns if c not in ("support", "auc_low", "auc_high")]
        return pd.concat({a: ta[metrics], b: tb[metrics], f"{b} - {a}": tb[metrics] - ta[metrics]}, axis=1)

    @property
    def summary(self) -> pd.DataFrame:
        a, b = self.names
        sa, sb = self.a.summary, self.b.summary
        keys = [k for k in sa if k != "n" and k in sb]
        return pd.DataFrame({a: [sa[k] for k in keys], b: [sb[k] for k in keys],
                             f"{b} - {a}": [sb[k] - sa[k] for k in keys]}, index=pd.Index(keys, name="metric"))

    def auc_test(self, cls=None) -> dict:
        """Paired DeLong test of the two AUCs of class ``cls`` (the focus class by default)."""
        cls = self.a.focus if cls is None else self.a._class(cls)
        positive = self.a.outcomes.labels == cls
        return delong_difference(positive, self.a.outcomes.scores[:, cls], self.b.outcomes.scores[:, cls])

    def subset(self, which: str = "differ"):
        """A `Subset` of the instances in ``differ``, ``fixed`` or ``broken``."""
        if not isinstance(which, str) or which not in ("differ", "fixed", "broken"):
            raise EvaluationError(f"unknown comparison subset {which!r}; choose differ, fixed or broken")
        from ..subsets import Subset
        a, b = self.names
        return Subset.from_indices(getattr(self, which), source=f"{which}: {a} vs {b}")

    def __repr__(self) -> str:
        a, b = self.names
        return (f"StoreComparison({a} vs {b}: {self.differ.size} of {self.a.n} predictions differ, "
                f"{self.fixed.size} fixed, {self.broken.size} broken)")


def compare_stores(a, b, *, subset=None, names: tuple[str, str] = ("A", "B"),
                   nonfinite: str = "wrong") -> StoreComparison:
    """``b`` against ``a``, instance by instance (``nonfinite``: see `evaluate`)."""
    return StoreComparison(a, b, subset=subset, names=names, nonfinite=nonfinite)

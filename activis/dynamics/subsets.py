"""Subsets of instances chosen by their training dynamics, usable wherever a `Subset` is.

Each is the index set it selects now (a data map does not change once computed), named so that a
panel or a legend reads it: "forgotten ≥ 2", "hard to learn", "prediction changed 300 → 900".
The indices are the data map's index (instance rows), so a filtered data map gives a smaller subset.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..subsets import Subset
from .cartography import REGIONS, checkpoint_logits, checkpoint_steps
from .errors import DynamicsError, whole_number


def _named(frame: pd.DataFrame, mask, name: str) -> Subset:
    subset = Subset.from_indices(np.asarray(frame.index[np.asarray(mask, dtype=bool)], dtype=np.int64))
    subset.name = name
    return subset


def _checked_map(data_map, columns) -> pd.DataFrame:
    if not isinstance(data_map, pd.DataFrame):
        raise DynamicsError(f"Expected the DataFrame activis.data_map returns, got {type(data_map).__name__}.")
    missing = [c for c in columns if c not in data_map.columns]
    if missing:
        raise DynamicsError(f"The data map has no column(s) {missing}; pass the DataFrame activis.data_map returns.")
    if data_map.index.dtype.kind not in "iu" or (len(data_map) and data_map.index.min() < 0):
        raise DynamicsError("The data map's index must be the instances' row numbers (as data_map returns it).")
    return data_map


def forgotten(data_map: pd.DataFrame, k: int = 1) -> Subset:
    """Instances learned and then forgotten at least ``k`` times (never-learned ones are `never_learned`)."""
    frame = _checked_map(data_map, ["forgetting", "learned"])
    k = whole_number(k, "k", 1)
    return _named(frame, frame["learned"].to_numpy() & (frame["forgetting"].to_numpy() >= int(k)),
                  f"forgotten ≥ {int(k)}")


def never_learned(data_map: pd.DataFrame) -> Subset:
    """Instances predicted right at no checkpoint."""
    frame = _checked_map(data_map, ["learned"])
    return _named(frame, ~frame["learned"].to_numpy(), "never learned")


def _region(data_map: pd.DataFrame, region: str) -> Subset:
    frame = _checked_map(data_map, ["region"])
    return _named(frame, (frame["region"] == region).to_numpy(), region)


def easy_to_learn(data_map: pd.DataFrame) -> Subset:
    """High confidence, low variability: the model got these early and kept them."""
    return _region(data_map, REGIONS[0])


def ambiguous(data_map: pd.DataFrame) -> Subset:
    """High variability: the model went back and forth on these."""
    return _region(data_map, REGIONS[1])


def hard_to_learn(data_map: pd.DataFrame) -> Subset:
    """Low confidence, low variability: never believed; often labelling errors (Swayamdipta et al.)."""
    return _region(data_map, REGIONS[2])


def prediction_changed(source, a: int, b: int) -> Subset:
    """Instances whose predicted class at ``a`` differs from the one at ``b``.

    ``source``: logits shaped (checkpoints, instances, classes), with ``a``/``b`` checkpoint positions
    (negative counts from the end); or a store with checkpoints, with ``a``/``b`` steps.
    """
    a, b = whole_number(a, "a (a checkpoint)"), whole_number(b, "b (a checkpoint)")
    if hasattr(source, "at") and hasattr(source, "checkpoints"):
        steps = checkpoint_steps(source)
        missing = [s for s in (a, b) if s not in steps]
        if missing:
            raise DynamicsError(f"No checkpoint at step {missing[0]}; the store's steps: {steps}.")
        first, second = source.at(a).outputs, source.at(b).outputs
    else:
        frames = checkpoint_logits(source)
        for position in (a, b):
            if not -len(frames) <= position < len(frames):
                raise DynamicsError(f"Checkpoint {position} is out of range for logits of {len(frames)} checkpoints.")
        first, second = frames[a], frames[b]
    changed = np.asarray(first).argmax(axis=1) != np.asarray(second).argmax(axis=1)
    return _named(pd.DataFrame(index=pd.RangeIndex(len(changed))), changed, f"prediction changed {a} → {b}")

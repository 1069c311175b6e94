"""Subset rows of a large layer computed range by range, so that a view can show progress and stay usable.

`Subsets.aggregate` is one pass over the whole layer: at a million instances several seconds in
which nothing else can be drawn. `aggregate_in_steps` computes the same statistics one contiguous
range of rows at a time (each range with `aggregate_masks`, the same kernel), merges the ranges'
means and variances exactly (Chan et al.'s pairwise update, in float64) and reports after each
range; `remember` then puts the rows in the Subsets' cache, so that `Subsets.aggregate` finds them
and computes nothing again. It runs in any thread: it only reads the layer and the masks it is given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .aggregation import STATS, Aggregate, _layer_signature, aggregate_masks
from .collection import Subsets
from .definition import Subset

STEP_ROWS = 131_072  # rows per step: a fraction of a second each, a few dozen progress reports at 1M


class Cancelled(Exception):  # noqa: N818 - a signal, not an error
    """The caller asked to stop (its request changed); nothing was remembered."""


def cache_key(subsets: Subsets, layer: str, subset: Subset, threshold: float) -> tuple:
    """The key `Subsets.aggregate` caches a row under (its layer's state and the row's members)."""
    activations = subsets.store.activations(layer)
    state = (layer, activations.shape[0], _layer_signature(activations), float(threshold))
    return state, subsets._membership(subset)[2]


def is_cached(subsets: Subsets, layer: str, subset: Subset, threshold: float) -> bool:
    """Whether `Subsets.aggregate` would answer this row from its cache (all three statistics)."""
    entry = subsets._rows.get(cache_key(subsets, layer, subset, threshold))
    return entry is not None and set(STATS) <= set(entry["stats"])


def aggregate_in_steps(activations, masks: np.ndarray, *, threshold: float = 0.0, step_rows: int = STEP_ROWS,
                       progress: Callable[[float], None] | None = None,
                       cancelled: Callable[[], bool] | None = None) -> dict[str, np.ndarray]:
    """Mean, fraction active and std of K masks, like `aggregate_masks`, computed ``step_rows`` rows at a time.

    ``progress(fraction)`` is called after each range; ``cancelled()``, when true before a range,
    raises `Cancelled`. Returns K x neurons float32 arrays (NaN rows for empty masks).
    """
    masks = np.asarray(masks, dtype=bool)
    n, n_neurons = activations.shape
    k = len(masks)
    count = np.zeros((k, 1))
    mean = np.zeros((k, n_neurons))
    squares = np.zeros((k, n_neurons))  # sums of squared deviations from the mean
    active = np.zeros((k, n_neurons))
    for lo in range(0, n, step_rows):
        if cancelled is not None and cancelled():
            raise Cancelled
        hi = min(n, lo + step_rows)
        part = masks[:, lo:hi]
        sizes = part.sum(axis=1, dtype=np.int64)[:, None].astype(np.float64)
        if sizes.any():
            stats = aggregate_masks(activations[lo:hi], part, stats=STATS, threshold=threshold)
            has = sizes[:, 0] > 0
            m, s, a = (np.nan_to_num(stats[x].astype(np.float64)) for x in ("mean", "std", "active"))
            total = count + sizes
            weight = np.divide(sizes, total, out=np.zeros_like(total), where=total > 0)
            delta = m - mean
            squares[has] += (s * s * sizes + delta * delta * count * weight)[has]
            mean[has] += (delta * weight)[has]
            active[has] += (a * sizes)[has]
            count = total
        if progress is not None:
            progress(hi / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"mean": np.where(count > 0, mean, np.nan), "std": np.sqrt(squares / count),
               "active": active / count}
    return {s: out[s].astype(np.float32) for s in STATS}


def remember(subsets: Subsets, layer: str, items: list[Subset], threshold: float, stats: dict[str, np.ndarray]) -> None:
    """Put rows computed here into the Subsets' cache, as `Subsets.aggregate` would have."""
    for i, subset in enumerate(items):
        subsets._remember(cache_key(subsets, layer, subset, threshold), subsets.size(subset),
                          {s: stats[s][i].copy() for s in STATS})


def placeholder(layer: str, names: list[str], sizes, n_neurons: int, threshold: float) -> Aggregate:
    """NaN rows (drawn empty) for rows still being computed."""
    empty = np.full((len(names), n_neurons), np.nan, np.float32)
    return Aggregate(layer=layer, names=list(names), sizes=np.asarray(sizes, np.int64), threshold=float(threshold),
                     mean=empty, active=empty.copy(), std=empty.copy())

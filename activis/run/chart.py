"""What a chart of many runs needs: each series over a step range, at most two points per pixel.

A line chart ``width`` pixels wide cannot show more than a low and a high per pixel column, so a
series with more points than pixels in the range is cut into ``width`` buckets of equal step
spans and each bucket keeps its minimum and maximum (in the order the line passes them): every
spike stays visible, whatever the zoom. When every series has at most ``width`` points in the
range, the chart holds the exact points (full zoom loses nothing).
"""

from __future__ import annotations

import bisect
import warnings
from dataclasses import dataclass

import numpy as np

from .series import sorted_unique


@dataclass(frozen=True)
class Chart:
    """``steps`` (the x positions) and ``values`` (runs x series x positions, NaN: no point there);
    ``exact``: the points as logged, else two per bucket (its min and max) at the bucket's edges."""

    steps: np.ndarray
    values: np.ndarray
    exact: bool


def in_range(steps: np.ndarray, values: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The points with ``start <= step <= stop`` of an ascending series (a slice: no copy of a memory map).
    A series that is not ascending after all (a damaged or foreign column) is sorted first, with a warning."""
    lo, hi = _search(steps, start), _search(steps, stop + 1)
    if hi - lo > 1 and not bool(np.all(steps[lo + 1:hi] > steps[lo:hi - 1])):
        warnings.warn("a series' steps are not ascending (a damaged or foreign column); sorted before use",
                      stacklevel=3)
        steps, values = sorted_unique(steps, values)
        lo, hi = np.searchsorted(steps, [start, stop + 1])
    return steps[lo:hi], values[lo:hi]


def _search(steps: np.ndarray, value: int) -> int:
    """Where ``value`` goes in ascending ``steps``. A column's steps are a strided view of a memory map,
    which np.searchsorted would first copy whole: bisect reads only the steps it compares, and, steps
    being distinct whole numbers, only the first ``value - steps[0]`` rows can lie below ``value``."""
    if steps.flags.c_contiguous or not len(steps):
        return int(np.searchsorted(steps, value))
    return bisect.bisect_left(steps, value, 0, int(min(len(steps), max(0, value - steps[0]))))


def chart(series: list[list[tuple[np.ndarray, np.ndarray]]], start: int, stop: int, width: int) -> Chart:
    """``series[run][k]`` = (steps, values) ascending; the chart of steps ``start..stop`` at ``width`` pixels."""
    parts = [[in_range(steps, values, start, stop) for steps, values in run] for run in series]
    n_series = max((len(run) for run in parts), default=0)
    if all(len(s) <= width for run in parts for s, _ in run):
        axis = np.unique(np.concatenate([s for run in parts for s, _ in run] or [np.zeros(0, np.int64)]))
        values = np.full((len(parts), n_series, len(axis)), np.nan)
        for r, run in enumerate(parts):
            for k, (steps, vals) in enumerate(run):
                values[r, k, np.searchsorted(axis, steps)] = vals
        return Chart(axis.astype(np.int64), values, True)
    edges = _edges(start, stop, width)
    axis = np.stack([edges[:-1], edges[1:] - 1], axis=1).reshape(-1)
    values = np.full((len(parts), n_series, len(axis)), np.nan)
    for r, run in enumerate(parts):
        for k, (steps, vals) in enumerate(run):
            values[r, k] = min_max(steps, vals, edges)
    return Chart(axis, values, False)


def _edges(start: int, stop: int, width: int) -> np.ndarray:
    """``width + 1`` integer bucket edges over steps start..stop, each bucket holding at least one step."""
    return np.unique(np.linspace(start, stop + 1, width + 1).round().astype(np.int64)) if stop >= start \
        else np.array([start, start + 1])


def min_max(steps: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Two values per bucket ``[edges[b], edges[b+1])``: its min and max, the one reached first first
    (NaN for an empty bucket; NaN values count only where a bucket has nothing else)."""
    n = len(edges) - 1
    out = np.full(2 * n, np.nan)
    if not len(steps):
        return out
    values = np.asarray(values, dtype=np.float64)
    bucket = np.searchsorted(edges, steps, side="right") - 1
    counts = np.bincount(bucket, minlength=n)[:n]
    full = np.flatnonzero(counts)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])[full]
    low = np.fmin.reduceat(values, first)
    high = np.fmax.reduceat(values, first)
    bucket_of = np.repeat(np.arange(len(full)), counts[full])
    low_first = _first(values == low[bucket_of], bucket_of, len(full))
    high_first = _first(values == high[bucket_of], bucket_of, len(full))
    rising = low_first <= high_first
    out[2 * full] = np.where(rising, low, high)
    out[2 * full + 1] = np.where(rising, high, low)
    return out


def _first(mask: np.ndarray, bucket_of: np.ndarray, n: int) -> np.ndarray:
    """Per bucket, the index of its first point where ``mask`` holds (buckets are contiguous, ascending)."""
    found = np.flatnonzero(mask)
    buckets, where = np.unique(bucket_of[found], return_index=True)
    first = np.full(n, np.iinfo(np.int64).max)
    first[buckets] = found[where]
    return first

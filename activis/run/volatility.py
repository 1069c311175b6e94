"""Each metric's volatility over training, and its sudden jumps (read from a run, without scikit-learn).

DeepInsight's "volatility" has no public definition; here it is the robust spread (MAD) of a metric's
step-to-step changes, and a change is flagged as a jump when it is far outside the changes around it
(before and after; and, for the AUC, outside its DeLong interval), which is what an
asynchronous-evaluation bug, a bad batch or a restart looks like, and what sampling noise and a smooth
decay are not (a plain standard deviation of the changes of a smooth curve is so small that it once
marked almost every step).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import RunError

PREFIX = "eval/"
COLUMNS = ["metric", "step", "value", "change", "spread", "jump"]


def _frame(source) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    if hasattr(source, "log"):
        source = source.log
    if hasattr(source, "frame"):
        return source.frame()
    raise RunError(f"volatility reads a CockpitLog, a Cockpit, a Run or a DataFrame, not {type(source).__name__}")


def _windows(d: np.ndarray, window: int, after: bool) -> np.ndarray:
    """Row i: the ``window`` changes just before change i (or just after it), NaN where there are none."""
    pad = np.full(window, np.nan)
    padded = np.concatenate([pad, d, pad])
    views = np.lib.stride_tricks.sliding_window_view(padded, window)
    return views[window + 1: window + 1 + d.size] if after else views[:d.size]


def _stand_out(d: np.ndarray, context: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How far each change is from the median of its context, in robust spreads of that context: the MAD
    (as a standard deviation), at least half the context's typical change (a smooth curve has no noise
    to speak of, and its slope alone must not make every wobble a jump) and at least ``floor``."""
    enough = np.sum(np.isfinite(context), axis=1) >= 3
    safe = np.where(enough[:, None], context, 0.0)
    with np.errstate(all="ignore"):
        med = np.nanmedian(safe, axis=1)
        mad = 1.4826 * np.nanmedian(np.abs(safe - med[:, None]), axis=1)
        typical = np.nanmedian(np.abs(safe), axis=1)
    spread = np.maximum(np.maximum(mad, 0.5 * typical), floor)
    size = np.abs(d - med)
    return np.where(enough, size / spread, np.nan), np.where(enough, size, np.nan), np.where(enough, spread, np.nan)


def jump_scores(values, *, window: int = 12, min_share: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Per value: how far the change into it stands out (0 where it cannot be told), and the robust
    spread of the changes before it. See `sudden_jumps`."""
    v = np.asarray(values, dtype=float)
    score, spread = np.zeros(v.size), np.full(v.size, np.nan)
    if v.size < 5:
        return score, spread
    d = np.diff(v)
    low, high = np.percentile(v, [1, 99])
    span = high - low
    floor = max(1e-12, 1e-4 * span)
    z_before, size_before, spread_before = _stand_out(d, _windows(d, window, after=False), floor)
    z_after, size_after, _ = _stand_out(d, _windows(d, window, after=True), floor)
    # against the changes before it AND after it (where both exist): a schedule that bends the curve
    # (a learning-rate decay, a cosine) starts a new run of changes like itself; a jump is like neither side
    # the changes before it are needed (the first steps' fast drop is no jump); those after it, when there
    z = np.where(np.isnan(z_before), np.nan, np.fmin(z_before, z_after))
    size = np.fmin(size_before, size_after)
    z = np.where(size >= min_share * span, z, 0.0)
    score[1:] = np.nan_to_num(z, nan=0.0)
    spread[1:] = spread_before
    return score, spread


def sudden_jumps(values, *, window: int = 12, threshold: float = 6.0, min_share: float = 0.01) -> np.ndarray:
    """Which values of a curve (one per step, NaNs dropped) a sudden jump leads to, as a boolean mask.

    The change into a value is a jump when it is more than ``threshold`` robust spreads (MAD) away
    from the median of the ``window`` changes before it and of those after it, and moves the curve by
    at least ``min_share`` of its range. One mark per event: the first of flagged steps within 2 of
    each other. A smooth curve (its changes follow its slope) and noise (its changes follow its
    spread) mark nothing; a level shift, a spike or a restart does.
    """
    score, _ = jump_scores(values, window=window, min_share=min_share)
    flagged = score > threshold
    keep = flagged.copy()
    for j in np.flatnonzero(flagged):  # the step where an event starts: a spike's way back is no second jump
        keep[j] = not flagged[max(0, j - 2):j].any()
    return keep


def changes(series: pd.Series, *, window: int = 12, threshold: float = 6.0, low=None, high=None) -> pd.DataFrame:
    """One metric (a Series by step, no NaN): its changes, their robust spread, and the jumps
    (`sudden_jumps`; with an interval, the change must also leave the previous step's interval)."""
    values = series.to_numpy(dtype=float)
    change = series.diff()
    _, spread = jump_scores(values, window=window)
    jump = pd.Series(sudden_jumps(values, window=window, threshold=threshold), index=series.index)
    if low is not None and high is not None:  # and outside the previous step's interval
        width = (high - low).reindex(series.index).shift(1)
        jump &= ~(change.abs() <= width)
    return pd.DataFrame({"step": series.index, "value": values, "change": change.to_numpy(),
                         "spread": spread, "jump": jump.to_numpy(bool)})


def volatility(source, metrics=None, *, window: int = 12, threshold: float = 6.0) -> pd.DataFrame:
    """Per metric and step: value, change since the previous evaluation, ``spread`` (the robust spread
    of the ``window`` changes before it) and ``jump`` (`sudden_jumps`; for a metric logged with an
    interval, the change must also leave the previous step's interval). ``metrics`` defaults to every
    ``eval/`` column of the log."""
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 3:
        raise RunError(f"window is a whole number of evaluations, at least 3, not {window!r}")
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.number)) \
            or not np.isfinite(threshold) or threshold <= 0:
        raise RunError(f"threshold is a positive number (how many spreads a jump is), not {threshold!r}")
    frame = _frame(source)
    metrics = [metrics] if isinstance(metrics, str) else metrics
    names = list(metrics) if metrics is not None else [c for c in frame.columns if c.startswith(PREFIX)
                                                       and not c.endswith(("_low", "_high", "/n"))]
    missing = [m for m in names if m not in frame.columns]
    if missing:
        raise RunError(f"not in the log: {missing}; columns: {', '.join(map(str, frame.columns))}")
    parts = []
    for name in names:
        series = pd.to_numeric(frame[name], errors="coerce").replace([np.inf, -np.inf], np.nan).dropna()
        table = changes(series, window=window, threshold=threshold,
                        low=frame.get(f"{name}_low"), high=frame.get(f"{name}_high"))
        table.insert(0, "metric", name)
        parts.append(table)
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)

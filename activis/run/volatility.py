"""Each metric's volatility over training, and its sudden jumps (read from a run, without scikit-learn).

DeepInsight's "volatility" has no public definition; here it is the rolling spread (standard
deviation) of a metric's step-to-step changes, and a change is flagged as a jump when it is far
outside the spread of the changes before it (and, for the AUC, outside its DeLong interval), which
is what an asynchronous-evaluation bug or a bad batch looks like, and what sampling noise is not.
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


def changes(series: pd.Series, *, window: int = 5, threshold: float = 4.0, low=None, high=None) -> pd.DataFrame:
    """One metric (a Series by step, no NaN): its changes, their rolling spread, and the jumps."""
    change = series.diff()
    spread = change.rolling(window, min_periods=2).std().shift(1)
    jump = change.abs() > threshold * spread
    if low is not None and high is not None:  # outside the previous step's interval
        width = (high - low).reindex(series.index).shift(1)
        jump |= change.abs() > width
    return pd.DataFrame({"step": series.index, "value": series.to_numpy(), "change": change.to_numpy(),
                         "spread": spread.to_numpy(), "jump": jump.fillna(False).to_numpy(bool)})


def volatility(source, metrics=None, *, window: int = 5, threshold: float = 4.0) -> pd.DataFrame:
    """Per metric and step: value, change since the previous evaluation, rolling spread of the
    ``window`` changes before it, and ``jump`` (|change| > threshold x that spread, or outside the
    AUC's interval). ``metrics`` defaults to every ``eval/`` column of the log."""
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 2:
        raise RunError(f"window is a whole number of evaluations, at least 2, not {window!r}")
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
        table = changes(frame[name].dropna(), window=window, threshold=threshold,
                        low=frame.get(f"{name}_low"), high=frame.get(f"{name}_high"))
        table.insert(0, "metric", name)
        parts.append(table)
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)

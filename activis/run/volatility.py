"""Each metric's volatility over training, and its sudden jumps (read from a run, without scikit-learn).

DeepInsight's "volatility" has no public definition; here it is the robust spread (MAD) of a metric's
step-to-step changes. A jump (`sudden_jumps`) is a change in a curve's level or scale that stands out from
the curve's own local noise (and, for the AUC, leaves its DeLong interval): what an asynchronous-evaluation
bug, a bad batch, a learning-rate drop, a restart or a divergence looks like, and what mini-batch noise, a
warm-up, a schedule's smooth bend and a slow trend are not. Single step-to-step changes are not enough to
tell: a drop that settles over a few steps, or one whose noise shrinks with the level, hides among them
(the first rule, built on them, found 7 of 27 jumps in curves written by someone else).
"""

from __future__ import annotations

import warnings
from statistics import NormalDist

import numpy as np
import pandas as pd

from .errors import RunError

PREFIX = "eval/"
COLUMNS = ["metric", "step", "value", "change", "spread", "jump"]
THRESHOLD = 5.0  # how many of the curve's own noise spreads a jump is
GAP = 3  # steps a change may take and still be sudden
SPIKE_TAIL = 0.99  # a spike is judged against the curve's largest 1 % of deviations, so heavy tails set the bar
SPIKE_BAR = 1.4  # ... and must stand 1.4 times further out than a level change


def _frame(source) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    if hasattr(source, "log"):
        source = source.log
    if hasattr(source, "frame"):
        return source.frame()
    raise RunError(f"volatility reads a CockpitLog, a Cockpit, a Run or a DataFrame, not {type(source).__name__}")


def _windows(d: np.ndarray, window: int) -> np.ndarray:
    """Row i: the ``window`` changes just before change i, NaN where there are none."""
    padded = np.concatenate([np.full(window, np.nan), d])
    return np.lib.stride_tricks.sliding_window_view(padded, window)[:d.size]


def _change_spread(d: np.ndarray, window: int, floor: float) -> np.ndarray:
    """Volatility: the robust spread of the ``window`` changes before each change, the MAD (as a standard
    deviation), at least half their typical size (a smooth curve's changes are its slope, not noise)
    and at least ``floor``; NaN with fewer than 3 changes before."""
    context = _windows(d, window)
    full = np.isfinite(context).all(axis=1)  # np.median where no NaN: nanmedian is ten times slower
    mad, typical = np.full(d.size, np.nan), np.full(d.size, np.nan)
    for rows, median in ((full, np.median), (~full, np.nanmedian)):
        part = context[rows]
        if not part.size:
            continue
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the first change has none before it
            med = median(part, axis=1)
            mad[rows] = 1.4826 * median(np.abs(part - med[:, None]), axis=1)
            typical[rows] = median(np.abs(part), axis=1)
    enough = np.sum(np.isfinite(context), axis=1) >= 3
    return np.where(enough, np.maximum(np.maximum(mad, 0.5 * typical), floor), np.nan)


def _rolling(x: np.ndarray, size: int, how: str, *, ahead: bool = False, center: bool = False) -> np.ndarray:
    """A rolling median, mean, max or quantile (``how`` = "q0.95") of the ``size`` values up to each
    one, from it on (``ahead``) or around it (``center``); pandas keeps a 100,000-step curve fast."""
    series = pd.Series(x[::-1] if ahead else x).rolling(size, min_periods=1, center=center)
    out = (series.quantile(float(how[1:])) if how.startswith("q") else getattr(series, how)()).to_numpy()
    return out[::-1] if ahead else out


def _either_side(x: np.ndarray, size: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """`_rolling` over the ``size`` values just before each value and over the ``size`` just after it
    (the value itself in neither), from one pass."""
    trailing = _rolling(np.concatenate([x, np.full(size, np.nan)]), size, how)
    return np.concatenate([[np.nan], trailing[:x.size - 1]]), trailing[size:size + x.size]


def _line_ends(y: np.ndarray, window: int, ahead: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per boundary t (value t the first of a new regime): a straight line fitted to the ``window``
    values before t (or from t on, ``ahead``), its level at t - 0.5 and its slope; NaN where fewer
    than 3 values (or the window) are there. Lines, not means: a curve's trend continues across t,
    and both sides' curvature errors cancel there, so a smooth decay or schedule leaves no gap."""
    n = y.size
    x = np.arange(window) + 0.5 if ahead else np.arange(window) - window + 0.5  # from the boundary
    level, slope = np.full(n, np.nan), np.full(n, np.nan)
    if n >= window:  # whole windows: two convolutions
        centred = x - x.mean()
        fitted = np.convolve(y, centred[::-1], "valid") / (centred ** 2).sum()
        fitted_level = np.convolve(y, np.full(window, 1 / window), "valid") - fitted * x.mean()
        at = np.arange(n - window + 1) + (0 if ahead else window)  # the boundary of window s
        inside = at < n
        level[at[inside]], slope[at[inside]] = fitted_level[inside], fitted[inside]
    # the windows cut by an end of the curve
    edge = np.flatnonzero(np.isnan(level))
    padded = np.concatenate([np.full(window, np.nan), y, np.full(window, np.nan)])
    values = np.lib.stride_tricks.sliding_window_view(padded, window)[edge + (window if ahead else 0)]
    ok = np.isfinite(values)
    count = ok.sum(axis=1)
    with np.errstate(all="ignore"):
        x_mean = np.where(ok, x, 0.0).sum(axis=1) / count
        y_mean = np.where(ok, values, 0.0).sum(axis=1) / count
        dx = np.where(ok, x - x_mean[:, None], 0.0)
        edge_slope = (dx * np.where(ok, values - y_mean[:, None], 0.0)).sum(axis=1) / (dx ** 2).sum(axis=1)
    enough = count >= min(3, window)
    level[edge] = np.where(enough, y_mean - edge_slope * x_mean, np.nan)
    slope[edge] = np.where(enough, edge_slope, np.nan)
    return level, slope


def _neighbours(y: np.ndarray, reach: int) -> np.ndarray:
    """The median of the ``reach`` values either side of each (itself left out): a spike's own level."""
    padded = np.concatenate([np.full(reach, np.nan), y, np.full(reach, np.nan)])
    views = np.lib.stride_tricks.sliding_window_view(padded, 2 * reach + 1)
    around = np.delete(views, reach, axis=1)
    median = np.full(y.size, np.nan)  # NaN at the ends: a spike needs values on both sides
    middle = np.sort(around[reach:y.size - reach], axis=1)  # sorting 6 values beats np.median 5x
    median[reach:y.size - reach] = 0.5 * (middle[:, reach - 1] + middle[:, reach])
    return median


def _ahead(a: np.ndarray, by: int) -> np.ndarray:
    return a if by == 0 else np.concatenate([a[by:], np.full(by, np.nan)])


def _stands_out(size: np.ndarray, bar: np.ndarray, least: float) -> np.ndarray:
    """|size| in units of ``bar``; 0 where it moves the curve by less than ``least`` or cannot be told."""
    with np.errstate(all="ignore"):
        z = np.abs(size) / bar
    return np.nan_to_num(np.where(np.abs(size) >= least, z, 0.0), nan=0.0)


def _noise_spread(x: np.ndarray, size: int) -> np.ndarray:
    """The robust spread (MAD, as a standard deviation) of a statistic over the ``size`` steps around
    each: the statistic's own spread, so noise that is autocorrelated or smoothed (an EMA), which
    moves the levels more than its step-to-step changes say, is judged by what it really does."""
    every = max(1, size // 32)  # read at every few steps: a spread over ~100 steps changes slowly
    sample = x[::every]
    distance = np.abs(sample - _rolling(sample, size // every, "median", center=True))
    return np.repeat(_rolling(distance, size // every, "median", center=True) / 0.6745, every)[:x.size]


def _tail_spread(x: np.ndarray, size: int) -> np.ndarray:
    """How far the largest `SPIKE_TAIL` of ``x`` lies from 0, over the ``size`` steps before
    each and the ``size`` after (the larger; the value itself left out), as a normal standard deviation."""
    distance = np.abs(x)  # an offset from the neighbours' median: centred on 0 already
    quantile = f"q{SPIKE_TAIL}"
    before, after = _either_side(distance, size, quantile)
    return np.fmax(before, after) / NormalDist().inv_cdf(0.5 + SPIKE_TAIL / 2)


def _window(n: int, window: int) -> int:
    """The lines' window: at most an eighth of the curve, so a short curve's jump has both sides."""
    return min(window, max(3, n // 8))


def jump_scores(values, *, window: int = 12, min_share: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Per value: how far the change into it stands out from the curve's local noise (0 where it
    cannot be told), and the robust spread of the changes before it (the volatility). See
    `sudden_jumps`."""
    v = np.asarray(values, dtype=float)
    spread = np.full(v.size, np.nan)
    if v.size >= 5:
        low, high = np.nanpercentile(v, [1, 99])
        spread[1:] = _change_spread(np.diff(v), window, max(1e-12, 1e-4 * (high - low)))
    return _scores(v, _window(v.size, window), min_share), spread


def _scores(v: np.ndarray, window: int, min_share: float) -> np.ndarray:
    """`jump_scores`' first half: how far each change stands out (NaN and infinite values: 0, left out)."""
    score = np.zeros(v.size)
    finite = np.isfinite(v)
    if not finite.all():
        score[finite] = _scores(v[finite], window, min_share)
        return score
    if v.size < 5:
        return score
    # positive curves (losses, norms, learning rates: noise that scales with the level) are read in log
    # space, so 1e-5 and 1e3 curves, a 20x gradient explosion and noise proportional to the loss read alike
    y = np.log(v) if np.all(v > 0) else v
    low, high = np.percentile(y, [1, 99])
    if not high > low:  # a constant curve (or all but 1 %): nothing stands out
        return score
    least = max(min_share * (high - low), 1e-9 * np.nanmax(np.abs(y)))  # and never float rounding
    left, left_slope = _line_ends(y, window, ahead=False)
    right, right_slope = _line_ends(y, window, ahead=True)
    context = 8 * window
    # the floor under the noise: the typical step either side (a smooth curve has no noise to speak of)
    # and the steepest slope near (a noiseless curve's bend is no jump); never below 1e-4 of the range
    step = np.abs(np.diff(y, prepend=y[0]))
    typical = np.fmax(*_either_side(step, window, "median"))
    floor = np.fmax(typical, 1e-4 * (high - low) + 1e-300)
    slope_before = _rolling(np.abs(left_slope), window + 1, "max")  # the lines that end by t
    slope_after = _rolling(np.abs(right_slope), window + 1, "max", ahead=True)  # that start at t or later
    slope = np.fmax(slope_before, slope_after)
    for gap in (0, GAP):
        # the level after t (or after a gap, for a change spread over a few steps) minus the level
        # before it, both read at the gap's middle; a slope error grows with the gap, so does its floor
        level = (_ahead(right, gap) - 0.5 * gap * _ahead(right_slope, gap)) - (left + 0.5 * gap * left_slope)
        bar = np.maximum(_noise_spread(level, context), np.fmax(floor, slope * (1 + 0.5 * gap)))
        score = np.fmax(score, _stands_out(level, bar, least))
    # a steepening (a divergence's onset): the lines from t on and from t + window on both climb (or
    # fall) far faster than the line before t did, judged against that slope and the slopes' own noise,
    # and by a tenth of the curve's range within a window (a schedule leaving its flat top is slower)
    after = np.fmin(np.abs(right_slope), np.abs(_ahead(right_slope, window)))
    lasting = np.sign(right_slope) == np.sign(_ahead(right_slope, window))
    steeper = np.where(lasting, np.fmax(after - np.abs(left_slope), 0.0), 0.0)
    bar = np.maximum(_noise_spread(right_slope - left_slope, context), np.abs(left_slope))
    score = np.fmax(score, _stands_out(steeper, bar, 0.1 * (high - low) / window))
    # a spike: value t off the median of the 3 values either side of it (the lines near: those without it)
    off = y - _neighbours(y, 3)
    near = np.fmax(slope_before, _ahead(slope_after, 1))
    bar = SPIKE_BAR * np.maximum(_tail_spread(off, context), np.fmax(floor, near))
    return np.fmax(score, _stands_out(off, bar, least))


def sudden_jumps(values, *, window: int = 12, threshold: float = THRESHOLD, min_share: float = 0.01) -> np.ndarray:
    """Which values of a curve (one per step; NaN and infinite values are left out, never marked) a
    sudden jump leads to, as a boolean mask.

    A jump is a change in level (for a positive curve, read in log space: in scale) that stands out
    from the curve's own local noise. The straight lines through the ``window`` values before a step
    and after it (or after a gap of 3 steps, for a change spread over a few) meet more than
    ``threshold`` spreads apart, the spread being that of the same difference over the steps around
    (so correlated or smoothed noise sets its own bar), at least the typical step and the nearby
    slope; or one value lies far off the values either side of it (a spike, judged against the
    curve's largest deviations, so heavy-tailed noise sets its own bar); or the lines from the step on
    climb far faster than the line before it (a divergence's onset). Each must move the curve by at
    least ``min_share`` of its range. One mark per event: the step that scores highest within
    ``window`` + 3 steps. A schedule's smooth bend, warm-up, mini-batch noise and slow trends mark
    nothing; a level shift, a learning-rate drop, a spike, a restart, a collapse, an explosion or a
    divergence does. The window is at most an eighth of the curve.
    """
    v = np.asarray(values, dtype=float)
    return _marks(_scores(v, _window(v.size, window), min_share), _window(v.size, window), threshold)


def _marks(score: np.ndarray, window: int, threshold: float) -> np.ndarray:
    """The steps whose score passes ``threshold`` and is the highest within ``window`` + `GAP` steps."""
    flagged = score > threshold
    keep = np.zeros(score.size, bool)
    if not flagged.any():
        return keep
    reach = window + GAP  # a window that holds the jump sees it: the peak of the event is the mark
    padded = np.concatenate([np.zeros(reach), score, np.zeros(reach)])
    peak = score >= np.lib.stride_tricks.sliding_window_view(padded, 2 * reach + 1).max(axis=1)
    last = -reach - 1
    for j in np.flatnonzero(flagged & peak):  # equal peaks (a noiseless step): the first
        if j - last > reach:
            keep[j], last = True, j
    return keep


def changes(series: pd.Series, *, window: int = 12, threshold: float = THRESHOLD, low=None, high=None) -> pd.DataFrame:
    """One metric (a Series by step, no NaN): its changes, their robust spread, and the jumps
    (`sudden_jumps`; with an interval, the change must also leave the previous step's interval)."""
    values = series.to_numpy(dtype=float)
    change = series.diff()
    score, spread = jump_scores(values, window=window)
    jump = pd.Series(_marks(score, _window(values.size, window), threshold), index=series.index)
    if low is not None and high is not None:  # and outside the previous step's interval
        width = (high - low).reindex(series.index).shift(1)
        jump &= ~(change.abs() <= width)
    return pd.DataFrame({"step": series.index, "value": values, "change": change.to_numpy(),
                         "spread": spread, "jump": jump.to_numpy(bool)})


def volatility(source, metrics=None, *, window: int = 12, threshold: float = THRESHOLD) -> pd.DataFrame:
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

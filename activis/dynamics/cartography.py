"""Data maps (Swayamdipta et al., 2020) and forgetting events (Toneva et al., 2019) from logits.

Definitions follow the published code (see the README's "Training dynamics"): the true-class softmax
probability in float64, its mean (``confidence``) and population standard deviation (``variability``),
the fraction of checkpoints predicted right (``correctness``), correct -> wrong transitions between
consecutive checkpoints (``forgetting``; an instance never predicted right counts as the number of
checkpoints, Toneva's convention) and ``learned``. The logits are read once, in blocks of instances, and
folded into running statistics: memory grows with the instances only (a memmap is never loaded whole).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .errors import DynamicsError

REGIONS = ("easy to learn", "ambiguous", "hard to learn")
_BLOCK_VALUES = 1 << 16  # logits converted to float64 per block: 512 KB, stays in cache


def checkpoint_logits(logits) -> list[np.ndarray]:
    """The logits as one (instances, classes) array per checkpoint, checked, without copying them."""
    if isinstance(logits, np.ndarray) or not isinstance(logits, Sequence):
        array = np.asarray(logits)
        if array.ndim != 3:
            raise DynamicsError(f"logits must be shaped (checkpoints, instances, classes), got shape {array.shape}; "
                                "stack one (instances, classes) array per checkpoint, or pass them as a list.")
        frames = list(array)
    else:
        frames = [np.asarray(f) for f in logits]
        bad = [i for i, f in enumerate(frames) if f.ndim != 2]
        if bad:
            raise DynamicsError(f"logits[{bad[0]}] has shape {frames[bad[0]].shape}; each checkpoint's logits must be "
                                "shaped (instances, classes).")
        if len({f.shape for f in frames}) > 1:
            raise DynamicsError(f"The checkpoints' logits differ in shape: {sorted({f.shape for f in frames})}; every "
                                "checkpoint must hold the same instances and classes.")
    if frames and frames[0].dtype.kind not in "fiu":
        raise DynamicsError(f"logits must be numbers, got dtype {frames[0].dtype}.")
    return frames


def checked_labels(labels, n: int, n_classes: int) -> np.ndarray:
    """Labels as int64, or a DynamicsError naming what is wrong with them."""
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != n:
        raise DynamicsError(f"labels must be one integer per instance: {n:,} of them, got shape {y.shape}.")
    if y.dtype.kind not in "iu":
        if y.dtype.kind != "f" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DynamicsError(f"labels must be integer class indices, got dtype {y.dtype}.")
    y = y.astype(np.int64)
    bad = np.flatnonzero((y < 0) | (y >= n_classes))
    if bad.size:
        raise DynamicsError(f"{bad.size:,} label(s) outside the {n_classes} classes [0, {n_classes - 1}], e.g. "
                            f"instance {int(bad[0])} has label {int(y[bad[0]])}.")
    return y


def _streamed_statistics(frames: list[np.ndarray], y: np.ndarray) -> dict[str, np.ndarray]:
    """One pass over the checkpoints, in blocks of instances: the true class's softmax probability (float64)
    folded into its running mean and squared deviations (Welford), and argmax's correctness into counts
    of right answers and of correct -> wrong transitions. Memory: a few values per instance.

    NaN and +inf logits raise (with their count); a -inf logit is a probability of zero, as softmax
    defines it (a masked class), and is allowed.
    """
    n, c = frames[0].shape
    mean, squares = np.zeros(n), np.zeros(n)
    right, events = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    previous = np.zeros(n, dtype=bool)
    block = max(1, _BLOCK_VALUES // c)
    cols = np.arange(block)
    for t, frame in enumerate(frames):
        for s in range(0, n, block):
            e = min(n, s + block)
            prob, correct = _block_dynamics(frame[s:e], y[s:e], cols[:e - s], frames)
            delta = prob - mean[s:e]
            mean[s:e] += delta / (t + 1)
            squares[s:e] += delta * (prob - mean[s:e])
            right[s:e] += correct
            events[s:e] += previous[s:e] & ~correct
            previous[s:e] = correct
    learned = right > 0
    return {"confidence": mean, "variability": np.sqrt(squares / len(frames)), "correctness": right / len(frames),
            "forgetting": np.where(learned, events, len(frames)), "learned": learned}


def _block_dynamics(logits: np.ndarray, y: np.ndarray, cols: np.ndarray, frames) -> tuple[np.ndarray, np.ndarray]:
    """One block of instances: classes along the first axis, so that every reduction runs across
    instances in SIMD (a reduction over 10 classes per row is 3-5x slower in numpy)."""
    x = np.array(logits.T, dtype=np.float64, order="C")
    peak = x.max(axis=0)
    if not np.isfinite(peak).all():
        _raise_nonfinite(frames)
    x -= peak
    true = x[y, cols]
    at_peak = x == 0
    correct = true == 0
    tied = np.flatnonzero(correct & (np.count_nonzero(at_peak, axis=0) > 1))
    correct[tied] = at_peak[:, tied].argmax(axis=0) == y[tied]  # argmax's rule: the first of tied classes
    np.exp(x, out=x)
    return np.exp(true) / x.sum(axis=0), correct


def _raise_nonfinite(frames) -> None:
    counts = [int(np.count_nonzero(np.isnan(f) | np.isposinf(f))) for f in frames]
    where = ", ".join(f"checkpoint {t}: {k:,}" for t, k in enumerate(counts) if k)
    raise DynamicsError(f"logits hold {sum(counts):,} NaN or +inf value(s) ({where}); a data map needs finite "
                        "logits: drop those checkpoints (training diverged there?) or those instances.")


def regions(confidence, variability, *, ambiguous_above: float = 0.2, easy_above: float = 0.5) -> pd.Categorical:
    """Cartography's three regions as one label per instance: "ambiguous" where variability is at least
    ``ambiguous_above``; otherwise "easy to learn" where confidence is at least ``easy_above``, else
    "hard to learn" (the region that "often corresponds to labelling errors")."""
    ambiguous_above, easy_above = _thresholds(ambiguous_above, easy_above)
    confidence, variability = np.asarray(confidence), np.asarray(variability)
    codes = np.where(variability >= ambiguous_above, 1, np.where(confidence >= easy_above, 0, 2)).astype(np.int8)
    return pd.Categorical.from_codes(codes, categories=REGIONS)


def _thresholds(ambiguous_above, easy_above) -> tuple[float, float]:
    """The regions' thresholds, checked: a variability of probabilities lies in [0, 0.5] and a confidence in
    [0, 1], so a threshold outside (or NaN, which no value passes) would put every instance in one region."""
    for name, value, top in (("ambiguous_above", ambiguous_above, 0.5), ("easy_above", easy_above, 1.0)):
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
                or not 0 <= value <= top:
            raise DynamicsError(f"{name} is a threshold between 0 and {top} (the range of "
                                f"{'variability' if top < 1 else 'confidence'}), not {value!r}.")
    return float(ambiguous_above), float(easy_above)


def data_map(logits, labels, *, ambiguous_above: float = 0.2, easy_above: float = 0.5) -> pd.DataFrame:
    """Per instance: confidence, variability, correctness, forgetting, learned and Cartography's region.

    ``logits``: shaped (checkpoints, instances, classes) — an array, a memmap or a list of one
    (instances, classes) array per checkpoint, in training order. ``labels``: (instances,) class indices.
    """
    _thresholds(ambiguous_above, easy_above)  # before the pass over the logits, not after it
    frames = checkpoint_logits(logits)
    if len(frames) < 2:
        raise DynamicsError(f"A data map needs the logits of at least 2 checkpoints, got {len(frames)}.")
    n, c = frames[0].shape
    if c < 2:
        raise DynamicsError(f"logits need at least 2 classes, got {c}.")
    columns = _streamed_statistics(frames, checked_labels(labels, n, c))
    frame = pd.DataFrame({**columns, "region": regions(columns["confidence"], columns["variability"],
                                                       ambiguous_above=ambiguous_above, easy_above=easy_above)})
    frame.index.name = "instance"
    return frame


def data_map_of(store, **kwargs) -> pd.DataFrame:
    """`data_map` over a store's checkpoints: each checkpoint's outputs as logits, the instances' labels.

    ``store``: anything with ``checkpoints`` (sorted steps) and ``at(step)`` giving ``outputs``
    (instances, classes) and ``instances`` with a ``label`` column (and optionally ``output_kind``:
    probabilities and a single binary column are read as the logits they stand for).
    """
    steps = checkpoint_steps(store)
    first = store.at(steps[0])
    if "label" not in first.instances.columns:
        raise DynamicsError("The store's instances have no 'label' column; a data map needs the true classes.")
    views = [store.at(step) for step in steps]
    logits = [_as_logits(view.outputs, getattr(view, "output_kind", "logits")) for view in views]
    return data_map(logits, first.instances["label"].to_numpy(), **kwargs)


def _as_logits(outputs, kind: str) -> np.ndarray:
    """Logits whose softmax is the outputs' class probabilities (the outputs themselves when they are logits)."""
    outputs = np.asarray(outputs)
    if outputs.ndim == 2 and outputs.shape[1] == 1:  # one column: a binary classifier's class-1 output
        x = outputs[:, 0].astype(np.float64)
        if kind == "logits":
            return np.stack([np.zeros_like(x), x], axis=1)
        p1 = np.exp(x) if kind == "log_probabilities" else x
        outputs, kind = np.stack([1.0 - p1, p1], axis=1), "probabilities"
    if kind == "probabilities":
        with np.errstate(divide="ignore"):
            return np.log(np.clip(outputs, 0, None))  # a probability of 0 is a logit of -inf
    return outputs


def checkpoint_steps(store) -> list[int]:
    """A store's checkpoint steps, or a DynamicsError when it has none to read."""
    steps = list(getattr(store, "checkpoints", None) or [])
    if not steps or not callable(getattr(store, "at", None)):
        raise DynamicsError(f"{type(store).__name__} has no checkpoints to read: it needs .checkpoints (the steps) "
                            "and .at(step); capture with activis.Checkpoints to record them.")
    return steps

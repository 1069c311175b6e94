"""Why was this instance misclassified? Per-class statistics, per-neuron departures, frequent mistakes.

Everything here reads a store's memory-mapped activations in chunks with numpy (no torch, no widget),
so it runs on a store of any size in bounded memory:

- `explain_instance` puts one instance's activation row at a layer beside the mean of its true class
  and of the class it was mistaken for, and ranks the neurons by how far the instance moved from its
  own class toward the other one;
- `confusion_pairs` lists the most frequent (true, predicted) mistakes with example instances, which
  is where users start;
- `sample_instances` picks the ~1,000 instances a panel can show: stratified per class, keeping the
  rare misclassified ones and whatever the user pinned.
"""

from __future__ import annotations

import difflib
import functools
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse

from .store import scores_from_outputs

# rows per chunk are chosen so that one float64 chunk is about this big:
CHUNK_BYTES = 4 << 20  # small enough to stay in cache between the conversion and the two products
# a pooled standard deviation is never taken below this fraction of the neuron's overall spread, so
# that a neuron constant inside both classes does not divide by zero (float16 stores round to ~1e-3)
STD_FLOOR = 1e-3


class AnalysisError(ValueError, IndexError, TypeError):
    """A question the store cannot answer as asked (no label, a class without members, a bad index, ...).

    Also an IndexError and a TypeError (an instance out of range, an index of the wrong type), so code
    that caught those before still does.
    """


# --------------------------------------------------------------------- helpers
def _layer_activations(store, layer: str | None) -> tuple[str, np.ndarray]:
    layers = store.layers
    if not layers:
        raise AnalysisError(f"The store {store.path} holds no layers.")
    if layer is None:
        layer = layers[-1]  # the last captured layer: nearest the output, where classes separate most
    return layer, store.activations(layer)  # an unknown layer: UnknownLayerError with the captured ones


def _n_classes(store, labels: np.ndarray, preds: np.ndarray) -> int:
    n_out = store.outputs.shape[1]
    known = [len(store.class_names), 2 if n_out == 1 else n_out]
    if len(labels):
        known += [int(labels.max()) + 1, int(preds.max()) + 1]
    return max(known)


def class_name(store, k: int) -> str:
    """Display name of class ``k`` (its index when the store has no names)."""
    names = store.class_names
    if k < 0:
        return "(no label)"
    return str(names[k]) if k < len(names) else str(k)


def _class_index(store, cls, n_classes: int) -> int:
    if isinstance(cls, (int, np.integer)) and not isinstance(cls, bool):
        if 0 <= cls < n_classes:
            return int(cls)
        raise AnalysisError(f"Class {cls} is outside the store's {n_classes} classes.")
    names = [str(n) for n in store.class_names]
    if cls in names:
        return names.index(cls)
    close = difflib.get_close_matches(str(cls), names, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise AnalysisError(f"Unknown class {cls!r}.{hint} Classes: {', '.join(names) or f'0..{n_classes - 1}'}.")


@functools.cache
def _half_table() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)


def as_float64(block) -> np.ndarray:
    """A float64 copy of a block of stored values.

    float16 goes through a 65,536-entry table: numpy's own float16 cast takes a slow path for
    zeros, which made it ~6x slower on ReLU outputs (half zeros), the most common thing stored.
    """
    block = np.asarray(block)
    if block.dtype.kind == "f" and block.dtype.itemsize == 2:
        return np.take(_half_table(), block.view(block.dtype.str.replace("f", "u")))
    return np.asarray(block, dtype=np.float64)


def _chunk_rows(n_neurons: int) -> int:
    return max(1, CHUNK_BYTES // (8 * max(1, n_neurons)))


def sorted_unique(arr: np.ndarray) -> np.ndarray:
    """np.unique, skipped for what already is sorted and unique (a selection passed between views)."""
    return arr if np.all(arr[1:] > arr[:-1]) else np.unique(arr)


def as_indices(values, n: int, what: str) -> np.ndarray:
    """Sorted unique int64 instance indices from indices or a boolean mask of length ``n``.

    Out-of-range indices, masks of the wrong length and non-integer values raise errors that name
    ``what``, so that a selection passed between views fails where it was made.
    """
    arr = np.asarray(values if values is not None else [])
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise AnalysisError(f"A boolean mask for {what} must have one entry per instance ({n}), "
                             f"not shape {arr.shape}.")
        return np.flatnonzero(arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise AnalysisError(f"{what} must be instance indices (integers) or a boolean mask, not {arr.dtype}.")
    arr = sorted_unique(arr.reshape(-1).astype(np.int64))
    if arr[0] < 0 or arr[-1] >= n:
        bad = arr[0] if arr[0] < 0 else arr[-1]
        raise AnalysisError(f"{what}: instance {bad} is outside the store's {n} instances.")
    return arr


# ------------------------------------------------------------ class statistics
@dataclass
class ClassStatistics:
    """Per-class sums of one layer's activations, enough for any class's mean and variance.

    Sums are kept around a per-neuron shift (the mean of the first rows) in float64, so that the
    variance does not cancel away when activations are large compared to their spread. ``counts``
    holds, per class and neuron, how many finite values went into the sums (a NaN or Inf is left out
    of its neuron only).
    """

    layer: str
    shift: np.ndarray  # (neurons,)
    counts: np.ndarray  # (classes, neurons) float64
    sums: np.ndarray  # (classes, neurons), of value - shift
    squares: np.ndarray  # (classes, neurons), of (value - shift) ** 2
    members: np.ndarray  # (classes,) labelled instances per class
    source: np.ndarray = field(repr=False)  # the memory map these came from (cache key)

    @property
    def n_classes(self) -> int:
        return len(self.members)

    def moments(self, leave_out: tuple[int, np.ndarray] | None = None):
        """(counts, means, unbiased variances) per class, optionally without one instance's row."""
        counts, sums, squares = self.counts, self.sums, self.squares
        if leave_out is not None:
            k, row = leave_out
            d = row - self.shift
            ok = np.isfinite(d)
            counts, sums, squares = counts.copy(), sums.copy(), squares.copy()
            counts[k, ok] -= 1
            sums[k, ok] -= d[ok]
            squares[k, ok] -= d[ok] ** 2
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / counts, np.nan)
            var = np.where(counts > 1, (squares - sums * means) / (counts - 1), np.nan)
        return counts, means + self.shift, np.maximum(var, 0.0)

    def overall_std(self) -> np.ndarray:
        """Each neuron's standard deviation over all labelled instances."""
        n = self.counts.sum(0)
        s = self.sums.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = s / n
            return np.sqrt(np.maximum((self.squares.sum(0) - s * m) / np.maximum(n - 1, 1), 0.0))


_STATS_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def class_statistics(store, layer: str | None = None) -> ClassStatistics:
    """Per-class activation sums at ``layer`` in one chunked pass (cached while the store is unchanged).

    The cache lives as long as the store object and is keyed by the memory map the store hands out,
    which `ActivationStore.reload` replaces: a store that grew or was rewritten is read again.
    """
    layer, acts = _layer_activations(store, layer)
    cache = _STATS_CACHE.setdefault(store, {})
    hit = cache.get(layer)
    if hit is not None and hit.source is acts:
        return hit
    labels = np.asarray(store.column("label"), dtype=np.int64)
    n_classes = _n_classes(store, labels, np.asarray(store.column("pred"), dtype=np.int64))
    n, d = acts.shape
    first = as_float64(acts[: min(n, 256)])
    with np.errstate(invalid="ignore"):
        shift = np.nanmean(np.where(np.isfinite(first), first, np.nan), axis=0) if len(first) else np.zeros(d)
    shift = np.nan_to_num(shift)
    sums = np.zeros((n_classes, d))
    squares = np.zeros((n_classes, d))
    missing = np.zeros((n_classes, d))
    step = _chunk_rows(d)
    for lo in range(0, n, step):
        lab = labels[lo:lo + step]
        rows = np.flatnonzero(lab >= 0)
        if len(rows) == 0:
            continue
        block = as_float64(acts[lo:lo + step])
        if len(rows) < len(lab):
            block, lab = block[rows], lab[rows]
        block -= shift
        # one-hot class membership as a sparse matrix: the product costs rows x neurons whatever the class count
        onehot = scipy.sparse.csr_matrix((np.ones(len(lab)), (lab, np.arange(len(lab)))), shape=(n_classes, len(lab)))
        finite = np.isfinite(block)
        if not finite.all():
            block[~finite] = 0.0
            missing += onehot @ (~finite).astype(np.float64)
        sums += onehot @ block
        np.square(block, out=block)
        squares += onehot @ block
    members = np.bincount(labels[labels >= 0], minlength=n_classes)[:n_classes].astype(np.int64)
    stats = ClassStatistics(layer=layer, shift=shift, counts=members[:, None] - missing, sums=sums,
                            squares=squares, members=members, source=acts)
    cache[layer] = stats
    return stats


# ----------------------------------------------------------- one instance
@dataclass
class InstanceExplanation:
    """One instance at one layer against its true class and the class it is compared with.

    ``neurons``: one row per neuron, sorted by ``score`` (highest first; see `explain_instance` for
    the columns). ``distances``: the instance's distance to every class mean, nearest first.
    ``summary``: the main facts as a dict; ``message`` says them in a sentence.
    """

    index: int
    layer: str
    true_class: int
    pred_class: int
    compared_class: int
    correct: bool
    confidence: float
    neurons: pd.DataFrame
    distances: pd.DataFrame
    summary: dict
    message: str

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` neurons that moved the instance most toward the compared class."""
        return self.neurons.head(n)

    def __repr__(self) -> str:
        cols = ["value", "true_mean", "compared_mean", "departure", "separation", "score"]
        table = self.top(10)[cols].to_string(float_format="{:.3g}".format)
        return f"{self.message}\n\nTop neurons at {self.layer!r}:\n{table}"


def explain_instance(store, index: int, layer: str | None = None, *, compare_to=None) -> InstanceExplanation:
    """Why instance ``index`` was classified as it was, seen at ``layer`` (default: the last captured).

    The instance is compared with the mean of its true class (the instance itself left out, so that
    in a small class it does not pull that mean toward itself) and with the mean of the compared
    class: the predicted class when the instance is misclassified; the runner-up class (the highest
    score after the true class) when it is classified correctly; or ``compare_to`` (an index or a
    class name) when given. Class means are taken over instances by their *true* label.

    Per neuron j, with x the instance's value, m_t and m_c the two class means, and s the pooled
    within-class standard deviation of the two classes (floored at 1e-3 of the neuron's overall std):

    - ``departure`` = (x - m_t) * sign(m_c - m_t) / s: how many standard deviations the instance
      moved away from its true class *toward* the compared class (negative: away from it);
    - ``separation`` = |m_c - m_t| / s: how well the neuron tells the two classes apart;
    - ``score`` = departure * separation = (x - m_t)(m_c - m_t) / s^2, the ranking: it is zero for
      neurons whose two class means are the same (an instance that is merely unusual on a neuron
      that does not distinguish the classes does not explain the mistake), and grows with both how
      far the instance moved and how much that neuron separates the classes;
    - ``progress`` = (x - m_t) / (m_c - m_t): 0 at the true-class mean, 1 at the compared-class mean;
    - ``evidence`` = score - separation^2 / 2: the neuron's term in the log-likelihood ratio
      log p(x | compared) - log p(x | true) of a Gaussian model with independent neurons and the
      pooled variances; positive when the value is closer (in standard deviations) to the compared
      mean. Its sum is ``summary["log_likelihood_ratio"]``.

    Neurons whose value is NaN/Inf, or whose class means are undefined, have NaN scores and come
    last. Raises `UnknownLayerError` for a layer not in the store, `IndexError` for an index outside
    it, and `AnalysisError` for an unlabelled instance or a compared class with no members.
    """
    n = store.n_instances
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
        raise AnalysisError(f"index must be an integer instance index, not {type(index).__name__}.")
    if not 0 <= index < n:
        raise AnalysisError(f"Instance {index} is outside the store's {n} instances.")
    index = int(index)
    stats = class_statistics(store, layer)
    layer = stats.layer
    true_k, pred_k = int(store.column("label")[index]), int(store.column("pred")[index])
    if true_k < 0:
        raise AnalysisError(f"Instance {index} has no true label, so it has no class to be compared with.")
    correct = true_k == pred_k
    confidence = float(store.column("confidence")[index])
    if compare_to is not None:
        other = _class_index(store, compare_to, stats.n_classes)
        if other == true_k:
            raise AnalysisError(f"compare_to is the instance's own class {class_name(store, true_k)!r}; "
                                "choose another class.")
        why = f"compared with {class_name(store, other)!r} as asked"
    elif not correct:
        other = pred_k
        why = f"misclassified as {class_name(store, pred_k)!r} (confidence {confidence:.3f})"
    else:
        other, runner_score = _runner_up(store, index, true_k, stats.members)
        why = (f"correctly classified (confidence {confidence:.3f}); compared with the runner-up class "
               f"{class_name(store, other)!r} (score {runner_score:.3f})")
    if stats.members[other] == 0:
        with_members = [class_name(store, k) for k in np.flatnonzero(stats.members) if k != true_k]
        raise AnalysisError(f"Class {class_name(store, other)!r} has no instances with that true label in the store, "
                            "so it has no mean to compare with; pass compare_to= one of: "
                            f"{', '.join(with_members) or '(no other class has members)'}.")

    x = as_float64(store.activations(layer)[index])
    counts, means, var = stats.moments(leave_out=(true_k, x))
    m_t, m_c = means[true_k], means[other]
    n_t, n_c = counts[true_k], counts[other]
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = np.maximum(n_t - 1, 0) + np.maximum(n_c - 1, 0)
        pooled = np.sqrt((np.nan_to_num(var[true_k]) * np.maximum(n_t - 1, 0)
                          + np.nan_to_num(var[other]) * np.maximum(n_c - 1, 0)) / dof)
        pooled = np.where(dof > 0, pooled, np.nan)
        floor = np.maximum(STD_FLOOR * stats.overall_std(), np.finfo(np.float64).tiny)
        s = np.fmax(pooled, floor)
        diff = m_c - m_t
        dev = np.where(np.isfinite(x), x - m_t, np.nan)  # an Inf value has no meaningful distance
        departure = dev * np.sign(diff) / s
        separation = np.abs(diff) / s
        score = dev * diff / s**2
        progress = np.where(separation > 1e-9, dev / diff, np.nan)
        evidence = score - separation**2 / 2
    neurons = pd.DataFrame({
        "neuron": np.arange(len(x)), "value": x, "true_mean": m_t, "compared_mean": m_c, "pooled_std": pooled,
        "progress": progress, "departure": departure, "separation": separation, "score": score,
        "evidence": evidence,
    })
    neurons = neurons.sort_values("score", ascending=False, na_position="last", kind="stable").set_index("neuron")

    distances = _distances(store, x, means, var, counts, stats.members, true_k)
    nearest = int(distances.index[0]) if len(distances) and np.isfinite(distances["std_distance"].iloc[0]) else -1
    finite_evidence = evidence[np.isfinite(evidence)]
    summary = {
        "index": index, "layer": layer, "correct": correct, "confidence": confidence,
        "true_class": true_k, "true_name": class_name(store, true_k),
        "pred_class": pred_k, "pred_name": class_name(store, pred_k),
        "compared_class": other, "compared_name": class_name(store, other),
        "nearest_class": nearest, "nearest_name": class_name(store, nearest) if nearest >= 0 else None,
        "distance_to_true": float(distances.loc[true_k, "distance"]),
        "distance_to_compared": float(distances.loc[other, "distance"]),
        "std_distance_to_true": float(distances.loc[true_k, "std_distance"]),
        "std_distance_to_compared": float(distances.loc[other, "std_distance"]),
        "log_likelihood_ratio": float(finite_evidence.sum()),
        "neurons_toward_compared": int(np.sum(score > 0)),
        "neurons": len(x),
    }
    near = (f"its activations are nearest the mean of {summary['nearest_name']!r}" if nearest >= 0
            else "no class mean is defined")
    message = (f"Instance {index} (true class {summary['true_name']!r}) is {why}. At layer {layer!r} {near} "
               f"(standardised distance {summary['std_distance_to_true']:.3g} to its true class, "
               f"{summary['std_distance_to_compared']:.3g} to {summary['compared_name']!r}); "
               f"{summary['neurons_toward_compared']} of {len(x)} neurons moved toward {summary['compared_name']!r}.")
    return InstanceExplanation(index=index, layer=layer, true_class=true_k, pred_class=pred_k, compared_class=other,
                               correct=correct, confidence=confidence, neurons=neurons, distances=distances,
                               summary=summary, message=message)


def _runner_up(store, index: int, true_k: int, members: np.ndarray) -> tuple[int, float]:
    """The highest-scoring class other than the true one that has members to compare with."""
    scores = scores_from_outputs(np.asarray(store.outputs[index:index + 1]), store.output_kind)[0].astype(np.float64)
    scores = np.pad(scores, (0, max(0, len(members) - len(scores))), constant_values=-np.inf)[: len(members)]
    scores = np.where(np.isnan(scores), -np.inf, scores)
    scores[true_k] = -np.inf
    scores[members == 0] = -np.inf
    if not np.isfinite(scores).any():
        raise AnalysisError(f"Instance {index} is correctly classified and no other class has members to compare "
                            "it with.")
    k = int(np.argmax(scores))
    return k, float(scores[k])


def _distances(store, x, means, var, counts, members, true_k) -> pd.DataFrame:
    """Distance of ``x`` to every class mean: Euclidean, and in pooled within-class standard deviations."""
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = np.maximum(counts - 1, 0)
        pooled_all = np.sqrt(np.nansum(np.nan_to_num(var) * dof, axis=0) / np.maximum(dof.sum(0), 1))
        # neurons constant within every class (dead or saturated) carry no distance information
        usable = np.isfinite(x) & (pooled_all > 0)
        dev = means - x
        euclid = np.sqrt(np.nansum(np.where(np.isfinite(x), dev, np.nan) ** 2, axis=1))
        std = np.sqrt(np.nansum((dev[:, usable] / pooled_all[usable]) ** 2, axis=1))
    empty = members == 0
    euclid[empty] = np.nan
    std[empty] = np.nan
    table = pd.DataFrame({"class": np.arange(len(members)),
                          "name": [class_name(store, k) for k in range(len(members))],
                          "members": members, "distance": euclid, "std_distance": std})
    table["is_true"] = table["class"] == true_k
    return table.sort_values("std_distance", na_position="last", kind="stable").set_index("class")


# ---------------------------------------------------------- store-wide errors
def confusion_pairs(store, top: int | None = 10, *, examples: int = 5) -> pd.DataFrame:
    """The most frequent mistakes: one row per (true, predicted) pair, most common first.

    Columns: ``true``, ``pred`` (class indices), ``true_name``, ``pred_name``, ``count``, ``rate``
    (the share of the true class's instances that went to this prediction), ``share`` (of all
    mistakes), and ``examples``: up to ``examples`` instance indices, most confident mistakes first
    (the ones the model was surest about are usually the most telling). Unlabelled instances are left
    out. ``top=None`` lists every pair.
    """
    for name, value in (("top", top), ("examples", examples)):
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0):
            raise AnalysisError(f"{name} must be a number of {'pairs' if name == 'top' else 'instances'} (>= 0"
                                f"{', or None for all' if name == 'top' else ''}), not {value!r}.")
    labels = np.asarray(store.column("label"), dtype=np.int64)
    preds = np.asarray(store.column("pred"), dtype=np.int64)
    confidence = np.asarray(store.column("confidence"), dtype=np.float64)
    columns = ["true", "pred", "true_name", "pred_name", "count", "rate", "share", "examples"]
    wrong = np.flatnonzero((labels >= 0) & (labels != preds))
    if len(wrong) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c.endswith(("name", "examples")) else float)
                             for c in columns})
    n_classes = _n_classes(store, labels, preds)
    class_totals = np.bincount(labels[labels >= 0], minlength=n_classes)
    pair = labels[wrong] * n_classes + preds[wrong]
    # most confident first inside each pair: sort by (pair, -confidence) once
    order = np.lexsort((-np.nan_to_num(confidence[wrong], nan=-np.inf), pair))
    pair_sorted, wrong_sorted = pair[order], wrong[order]
    keys, starts, counts = np.unique(pair_sorted, return_index=True, return_counts=True)
    rank = np.lexsort((keys, -counts))
    if top is not None:
        rank = rank[:top]
    rows = []
    for r in rank:
        t, p = divmod(int(keys[r]), n_classes)
        start = starts[r]
        rows.append({"true": t, "pred": p, "true_name": class_name(store, t), "pred_name": class_name(store, p),
                     "count": int(counts[r]), "rate": counts[r] / class_totals[t], "share": counts[r] / len(wrong),
                     "examples": [int(i) for i in wrong_sorted[start:start + min(examples, counts[r])]]})
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------- sampling
def sample_instances(store, max_instances: int = 1000, *, seed: int = 0, include: Iterable[int] = (),
                     within=None) -> np.ndarray:
    """Up to ``max_instances`` instance indices for a panel, sorted, plus every index in ``include``.

    Drawn from ``within`` (indices or a boolean mask; default all instances). When there are more
    candidates than fit, the misclassified ones, which are rare and what users look for, are kept
    first (all of them, up to half the budget), and the rest of the budget goes to the correctly
    classified ones; both are stratified by true class: every class gets a fair floor share and the
    remainder is split in proportion to class size. ``include`` (pinned instances) is always added,
    even beyond the budget or outside ``within``. The same arguments give the same sample.
    """
    if isinstance(max_instances, (bool, np.bool_)) or not isinstance(max_instances, (int, np.integer)) \
            or max_instances < 1:
        raise AnalysisError(f"max_instances must be a whole number, at least 1, not {max_instances!r}.")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise AnalysisError(f"seed is a whole number 0 or more, not {seed!r}.")
    n = store.n_instances
    candidates = np.arange(n) if within is None else as_indices(within, n, "within")
    include = as_indices(list(include), n, "include")
    if len(candidates) > max_instances:
        labels = np.asarray(store.column("label"), dtype=np.int64)[candidates]
        wrong = (labels >= 0) & (labels != np.asarray(store.column("pred"), dtype=np.int64)[candidates])
        rng = np.random.default_rng(seed)
        kept_wrong = _stratified(candidates[wrong], labels[wrong], min(int(wrong.sum()), max_instances // 2), rng)
        kept_right = _stratified(candidates[~wrong], labels[~wrong], max_instances - len(kept_wrong), rng)
        candidates = np.concatenate([kept_wrong, kept_right])
    # candidates are sorted and unique unless sampled above; a union with no pins would sort a brush again
    return np.union1d(candidates, include).astype(np.int64) if include.size else np.sort(candidates).astype(np.int64)


def _stratified(indices: np.ndarray, groups: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` of ``indices``, each group getting min(size, k / (2 groups)) and the rest by size."""
    if k >= len(indices):
        return indices
    if k <= 0:
        return indices[:0]
    keys, sizes = _group_sizes(groups)
    quota = np.minimum(sizes, k // (2 * len(keys)))
    left = k - quota.sum()
    spare = sizes - quota
    if left > 0:
        share = left * spare / spare.sum()
        extra = np.floor(share).astype(np.int64)
        # largest remainders get the last few places
        for g in np.argsort(-(share - extra), kind="stable")[: left - extra.sum()]:
            extra[g] += 1
        quota = quota + np.minimum(extra, spare)
    picked = [rng.choice(indices[groups == keys[g]], size=int(q), replace=False) for g, q in enumerate(quota) if q]
    return np.concatenate(picked) if picked else indices[:0]


def _group_sizes(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct groups, sorted, and their sizes: counted by class (labels from -1 up) rather than sorted,
    which took a tenth of a second of an explorer's first frame at a million instances."""
    low, high = int(groups.min()), int(groups.max())
    if low < -1 or high > 1 << 16:
        return np.unique(groups, return_counts=True)
    counts = np.bincount(groups + 1, minlength=high + 2)
    present = np.flatnonzero(counts)
    return present - 1, counts[present]

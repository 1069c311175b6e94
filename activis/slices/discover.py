"""`discover_slices`: the slices of a store where the model does worse than on the whole, ranked.

Two searches, each its own family of tests: conjunctions of predicates over metadata columns
(SliceLine's exact lattice search, `lattice`), and, given a layer, groups in its activation space
where errors concentrate (an error-aware mixture and error regions, `activations`). The slices of
one predicate, of two, ..., and the activation groups are each a family of tests with an equal
share of alpha (Bonferroni across families, see `significance`), so the level holds for the report
as a whole.
Slices are ranked by SliceLine's score, near-duplicates (Jaccard overlap above ``max_overlap`` with
a better slice) are dropped, and each comes with a `Subset` definition that gives exactly its
members: a query for a metadata slice, the member indices for an activation group.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..subsets import Subset
from . import activations as space
from .errors import SliceError, SliceWarning
from .lattice import ErrorBits, Scoring, pack, pair_sizes, popcount, search
from .predicates import Predicate, check_columns, default_columns, predicates
from .significance import CORRECTIONS, adjust, families, p_bounds, p_values

METRICS = ("error", "loss")
RANKINGS = ("significance", "score")
DESCRIBE_WITH = 16  # single predicates tried in pairs when describing an activation group
POOL = 160  # best-scoring slices compared with each other before the top ones are picked
CONTAINED = 0.95  # a slice with this share of its members in another lies inside it
REDUNDANT_P = 1e-3  # a sub-slice must be worse than the rest of its super-slice at this p to be kept
COHERENT_P = 0.05  # a super-slice is kept when, outside its worse part, it is still worse than the whole at this p


@dataclass(frozen=True)
class Slice:
    """A group of instances where the model does worse, and how sure that is.

    ``value`` is the slice's mean metric (its error rate for ``metric="error"``), ``overall`` the
    whole set's, ``lift`` their ratio. ``p_adjusted`` is the p-value corrected for every candidate
    the search tried; ``significant`` says whether it is at most the level. ``definition`` is a
    `Subset` with exactly ``members``: adopt it with ``subsets.add(name, slice.definition)`` or
    `adopt`.
    """

    name: str
    kind: str  # "metadata" or "activations"
    description: str
    definition: Subset
    members: np.ndarray = field(repr=False)
    size: int
    fraction: float
    metric: str
    value: float
    overall: float
    lift: float
    score: float
    p_value: float
    p_adjusted: float
    significant: bool
    predicates: tuple[str, ...] = ()
    layer: str | None = None
    neurons: tuple[tuple[int, float], ...] = ()  # (neuron, standardised difference), strongest first
    rule: str | None = None  # for an activation group: the metadata conjunction that best matches it
    rule_precision: float | None = None
    rule_recall: float | None = None

    def adopt(self, subsets, name: str | None = None) -> Subset:
        """Define this slice as a named subset of ``subsets`` (a matrix row, a highlight in every view)."""
        return subsets.add(name or self.name, self.definition)

    def to_dict(self) -> dict:
        """Plain values for display (the members are left out)."""
        return {"name": self.name, "kind": self.kind, "description": self.description, "size": self.size,
                "fraction": self.fraction, "metric": self.metric, "value": self.value, "overall": self.overall,
                "lift": self.lift, "score": self.score, "p_value": self.p_value, "p_adjusted": self.p_adjusted,
                "significant": self.significant, "layer": self.layer, "rule": self.rule,
                "neurons": [[int(k), float(d)] for k, d in self.neurons]}


@dataclass
class SliceReport(Sequence):
    """The ranked slices and how they were found: tests per family, correction, completeness."""

    slices: list[Slice]
    metric: str
    alpha: float
    correction: str
    min_support: int
    tested: dict[str, int]  # family -> candidates the correction counted
    complete: bool
    seconds: float
    notes: list[str]

    def __getitem__(self, i):
        return self.slices[i]

    def __len__(self) -> int:
        return len(self.slices)

    def to_frame(self) -> pd.DataFrame:
        columns = ["name", "kind", "size", "fraction", "value", "overall", "lift", "p_value", "p_adjusted",
                   "significant", "description"]
        return pd.DataFrame([{k: s.to_dict()[k] for k in columns} for s in self.slices], columns=columns)

    def __repr__(self) -> str:
        lines = [f"<SliceReport: {len(self)} slice(s) where {self.metric} is worse, {self.correction} over "
                 f"{sum(self.tested.values()):,} candidates at alpha={self.alpha}"
                 f"{'' if self.complete else ', search incomplete'}>"]
        lines += [f"  {i + 1}. {s.description}: {s.size} instances, {self.metric} {s.value:.3g} vs {s.overall:.3g}"
                  f" (x{s.lift:.2f}), p_adj={s.p_adjusted:.2g}" for i, s in enumerate(self.slices)]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


@dataclass
class _Candidate:
    kind: str
    mask: np.ndarray  # over the searched rows
    size: int
    errors: float
    score: float
    p_value: float
    p_adjusted: float
    items: tuple[int, ...] = ()
    group: int = -1


def discover_slices(store, layer: str | None = None, *, columns: Sequence[str] | None = None,
                    metric: str | np.ndarray = "error", top_k: int = 10, max_level: int = 3,
                    min_support: int | None = None, n_bins: int = 5, alpha: float = 0.05,
                    correction: str = "holm", error_weight: float = 0.95, max_overlap: float = 0.7,
                    significant_only: bool = True, drop_redundant: bool = True, n_components: int | None = None,
                    pca_dims: int = 32, rank_by: str = "significance", time_limit: float = 60.0,
                    max_candidates: int = 1_000_000, seed: int = 0,
                    progress: Callable[[float, str], None] | None = None, stop=None) -> SliceReport:
    """Rank the slices where the model underperforms: metadata conjunctions, and groups at ``layer``.

    ``metric`` is "error" (1 for a misclassified instance), "loss" (cross-entropy of the true
    class) or an array with one non-negative value per instance. ``columns`` default to the store's
    metadata and the true class. A slice holds at least ``min_support`` instances (default 1 % of
    them, at least 10) and at most ``max_level`` predicates; numeric columns are cut into ``n_bins``
    quantile bins. ``correction`` ("holm" or "bh") is applied within each family (the slices of one
    predicate, of two, ..., the activation groups: ``report.tested``), each at an equal share of
    ``alpha``; with ``significant_only`` only slices that pass are returned, and with ``drop_redundant``
    a slice explained by a larger or a smaller one is left out (see `_rank`). ``error_weight`` is
    SliceLine's alpha (error against size). The search stops after ``time_limit`` seconds, or when
    ``stop.is_set()``, and says so; ``progress(fraction, message)`` is called as it goes. Slices are
    ranked by ``rank_by``: "significance" (adjusted p-value: the surest failures first) or "score".
    """
    _check_arguments(locals())
    started = time.perf_counter()
    deadline = started + float(time_limit)
    n_all = store.n_instances
    if n_all == 0:
        raise SliceError(f"The store {store.path} has no instances yet: capture some before looking for slices.")
    if layer is not None and layer not in store.layers:
        raise SliceError(f"Unknown layer {layer!r}; captured layers: {', '.join(store.layers) or 'none'}.")
    table = store.instances
    labels = table["label"].to_numpy()
    rows = np.flatnonzero(labels >= 0)
    if not len(rows):
        raise SliceError("No instance of this store has a label, so no error can be measured: capture with "
                         "labels=... (or pass metric= an array of per-instance errors).")
    values, metric_name = _metric(store, table, metric)
    missing = rows[~np.isfinite(values[rows])]
    rows = rows[np.isfinite(values[rows])]
    errors = values[rows]
    columns = default_columns(table) if columns is None else check_columns(table, columns)
    support = int(min_support) if min_support is not None else max(10, math.ceil(0.01 * len(rows)))
    report = SliceReport([], metric_name, float(alpha), correction, support, {}, True, 0.0, [])
    if missing.size:  # no value: out of the search and of every definition, and said so
        shown = ", ".join(map(str, missing[:5])) + (", ..." if missing.size > 5 else "")
        note = (f"metric= has no finite value for {missing.size} labelled instance(s) (instances {shown}): they are "
                "left out of the search and of every slice's definition")
        warnings.warn(f"Slice discovery: {note}", SliceWarning, stacklevel=2)
        report.notes.append(note)
    total = float(errors.sum())
    if total <= 0:
        report.notes.append(f"the model's {metric_name} is 0 on every instance: there is no slice to find")
        report.seconds = time.perf_counter() - started
        return report
    scoring = Scoring(n=len(rows), mean_error=total / len(rows), min_support=support, weight=float(error_weight))
    binary = bool(np.isin(errors, (0.0, 1.0)).all())
    keep = max(4 * int(top_k), 20)
    share = 0.6 if layer is not None else 1.0
    say = progress or (lambda fraction, message: None)

    found, notes = predicates(table, columns, n_bins=int(n_bins), min_support=support, rows=rows)
    report.notes.extend(notes)
    features = np.array([columns.index(p.column) for p in found], np.int64)
    # the families, fixed by the metadata alone before any error is looked at (see `significance`)
    family_sizes = [n for n in families(pair_sizes(np.stack([p.mask for p in found])), features, support,
                                        int(max_level)) if n > 0] if found else []
    n_families = len(family_sizes) + (layer is not None)
    candidates: list[_Candidate] = []
    if found:
        masks = np.stack([p.mask for p in found])
        lattice = search(masks, features, errors, scoring, max_level=int(max_level), keep=keep,
                         max_candidates=int(max_candidates), deadline=deadline, stop=stop,
                         progress=lambda f, m: say(share * f, f"metadata {m}"))
        report.complete &= lattice.complete
        report.notes.extend(lattice.notes)
        report.tested.update({_family_name(level): n for level, n in enumerate(family_sizes, 1)})
        candidates += _lattice_candidates(lattice, masks, errors, scoring, binary, correction, keep, family_sizes,
                                          n_families)
    else:
        report.notes.append("no metadata predicate holds enough instances: no metadata slice was searched")
    groups = None
    if layer is not None:
        say(share, f"activation groups at {layer}")
        groups = _activation_groups(store, layer, rows, labels[rows], errors, scoring, binary, correction,
                                    n_components, int(pca_dims), seed, n_families)
        report.tested["activation-group"] = groups["tested"]
        candidates += groups["candidates"]
    chosen = _rank(candidates, errors, scoring, binary, float(alpha), significant_only, drop_redundant, max_overlap,
                   int(top_k), rank_by)
    searched = _searched_rows(labels, rows, n_all)
    for candidate in chosen:
        report.slices.append(_make_slice(candidate, layer, rows, found, groups, metric_name, scoring, float(alpha),
                                         searched, _holds(table, rows[candidate.mask], store.class_names)))
    say(1.0, f"{len(report.slices)} slice(s) found")
    report.seconds = time.perf_counter() - started
    return report


def check_options(options) -> dict:
    """``discover_slices`` keyword arguments given ahead of a search (a view's ``options=``), checked now:
    unknown names and bad values are refused before any search starts."""
    import inspect

    parameters = inspect.signature(discover_slices).parameters
    allowed = [k for k in parameters if k not in ("store", "layer", "progress", "stop")]
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise SliceError(f"options= is a dict of discover_slices arguments ({', '.join(allowed)}), "
                         f"not {type(options).__name__}.")
    unknown = [k for k in options if k not in allowed]
    if unknown:
        raise SliceError(f"Unknown option(s) {', '.join(map(repr, unknown))}; discover_slices takes "
                         f"{', '.join(allowed)}.")
    given = {k: p.default for k, p in parameters.items()}
    given.update(store=_AnyStore, layer=None, progress=None, stop=None, **options)
    _check_arguments(given)
    return dict(options)


class _AnyStore:  # stands for the store while options are checked without one
    instances = n_instances = None


def _check_arguments(given: dict) -> None:
    """Every argument of `discover_slices` checked before any work, each error naming it and its choices."""
    if not hasattr(given["store"], "instances") or not hasattr(given["store"], "n_instances"):
        raise SliceError(f"discover_slices searches a store (open_store(path)), not {type(given['store']).__name__}.")
    for name, choices in (("correction", CORRECTIONS), ("rank_by", RANKINGS)):
        if not isinstance(given[name], str) or given[name] not in choices:
            raise SliceError(f"Unknown {name} {given[name]!r}; one of {', '.join(choices)}.")
    for name, low, high, closed in (("alpha", 0, 1, False), ("error_weight", 0, 1, True),
                                    ("max_overlap", 0, 1, True), ("time_limit", 0, math.inf, False)):
        value = given[name]
        number = isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
        if not number or math.isnan(value) or not (low < value < high or (closed and value == high)):
            raise SliceError(f"{name} must lie in ({low}, {high}{']' if closed else ')'}, got {value!r}.")
    for name, least in (("top_k", 1), ("max_level", 1), ("n_bins", 2), ("pca_dims", 1), ("max_candidates", 1),
                        ("min_support", 1), ("n_components", 1), ("seed", 0)):
        value = given[name]
        if value is None and name in ("min_support", "n_components"):
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < least:
            raise SliceError(f"{name} is a whole number of at least {least}, not {value!r}.")
    for name in ("significant_only", "drop_redundant"):
        if not isinstance(given[name], (bool, np.bool_)):
            raise SliceError(f"{name} is True or False, not {given[name]!r}.")
    if given["progress"] is not None and not callable(given["progress"]):
        raise SliceError(f"progress= is a function progress(fraction, message), not {given['progress']!r}.")
    if given["stop"] is not None and not callable(getattr(given["stop"], "is_set", None)):
        raise SliceError(f"stop= is a threading.Event (anything with is_set()), not {given['stop']!r}.")
    layer = given["layer"]
    if layer is not None and not isinstance(layer, str):
        raise SliceError(f"layer= is the name of a captured layer (or None), not {layer!r}.")


def _metric(store, table: pd.DataFrame, metric) -> tuple[np.ndarray, str]:
    if isinstance(metric, str):
        if metric == "error":
            return (~table["correct"].to_numpy(bool)).astype(np.float64), "error"
        if metric == "loss":
            if "label_score" in table.columns:
                score = table["label_score"].to_numpy(np.float64)
            else:
                labels = table["label"].to_numpy()
                scores = store.scores
                score = np.where(labels >= 0, scores[np.arange(len(labels)), np.maximum(labels, 0)], np.nan)
            return -np.log(np.clip(score, 1e-7, 1.0)), "loss"
        raise SliceError(f"Unknown metric {metric!r}; one of {', '.join(map(repr, METRICS))}, or an array with one "
                         "non-negative value per instance.")
    values = np.asarray(metric, dtype=np.float64)
    if values.shape != (len(table),):
        raise SliceError(f"metric= as an array needs one value per instance ({len(table)}), got shape {values.shape}.")
    if (values[np.isfinite(values)] < 0).any():
        raise SliceError("metric= values must be non-negative (larger = worse), like an error or a loss.")
    return values, "metric"


def _family_name(level: int) -> str:
    return f"{level}-predicate"


def _lattice_candidates(lattice, masks, errors, scoring, binary, correction, keep, family_sizes,
                        n_families) -> list[_Candidate]:
    starts = np.cumsum([0] + [len(level.sizes) for level in lattice.levels])
    sizes = np.concatenate([level.sizes for level in lattice.levels])
    sums = np.concatenate([level.errors for level in lattice.levels])
    if not len(sizes):
        return []
    scores = scoring.score(sizes, sums)
    total = scoring.mean_error * scoring.n
    variance = float(errors.var())
    bounds = p_bounds(sizes, sums, n=scoring.n, total=total) if binary else \
        p_values(sizes, sums, n=scoring.n, total=total, binary=False, variance=variance)
    # the best by score and the surest by (a bound of) the p-value: either ranking may be asked for
    top = [int(i) for i in dict.fromkeys([*np.argsort(-scores, kind="stable")[: 4 * keep],
                                          *np.argsort(bounds, kind="stable")[: 4 * keep]]) if scores[i] > 0]
    exact_sizes, exact_sums, out = [], [], []
    for i in top:
        level = int(np.searchsorted(starts, i, side="right")) - 1
        item = tuple(int(k) for k in lattice.levels[level].items[i - starts[level]])
        mask = np.logical_and.reduce([masks[k] for k in item])
        exact_sizes.append(int(mask.sum()))
        exact_sums.append(float(errors[mask].sum()))  # exact, whatever the bit planes rounded
        out.append(_Candidate("metadata", mask, exact_sizes[-1], exact_sums[-1],
                              float(scoring.score(exact_sizes[-1], exact_sums[-1])), 1.0, 1.0, items=item))
    # a bound for every candidate evaluated, the exact value for those that can be reported
    p = bounds.copy()
    exact = p_values(exact_sizes, exact_sums, n=scoring.n, total=total, binary=binary, variance=variance)
    p[top] = np.minimum(p[top], exact) if binary else exact
    # each level is its own family, corrected over all its conjunctions, at alpha / n_families
    adjusted = np.ones_like(p)
    for level, family in enumerate(family_sizes[: len(starts) - 1]):
        part = slice(starts[level], starts[level + 1])
        adjusted[part] = np.minimum(1.0, n_families * adjust(p[part], family, correction))
    for c, i in zip(out, top):
        c.p_value, c.p_adjusted = float(p[i]), float(adjusted[i])
    return out


def _activation_groups(store, layer, rows, labels, errors, scoring, binary, correction, n_components,
                       pca_dims, seed, n_families) -> dict:
    rng = np.random.default_rng(seed)
    fit = np.zeros(len(rows), bool)
    fit[rng.permutation(len(rows))[: len(rows) // 2]] = True
    test = ~fit
    fit_sample = np.flatnonzero(fit)
    if len(fit_sample) > 20_000:
        fit_sample = np.sort(rng.choice(fit_sample, 20_000, replace=False))
    activations = store.activations(layer)
    k = n_components or int(np.clip(len(rows) // (4 * scoring.min_support), 4, 16))
    z = space.embed(activations, rows, dims=pca_dims, fit_rows=rows[fit_sample], seed=seed)
    failing = (errors > scoring.mean_error).astype(np.float64) if not binary else errors
    codes = pd.factorize(labels)[0]
    mixture = space.ErrorAwareMixture(k, error_weight=max(1.0, z.shape[1] / 4), seed=seed)
    mixture.fit(z[fit_sample], codes[fit_sample], failing[fit_sample], n_labels=int(codes.max()) + 1)
    merged = mixture.merged()
    assigned = merged[mixture.assign(z, codes)]
    groups = [assigned == g for g in range(int(merged.max()) + 1)]
    names = [(f"activation group {g}", "") for g in range(len(groups))]
    for i, (mask, level) in enumerate(space.error_regions(z, fit_sample, errors, min_size=scoring.min_support,
                                                          seed=seed)):
        groups.append(mask)
        names.append((f"error region {i}", f" (smoothed {_metric_word(binary)} >= {level:g}x the overall)"))
    groups = np.stack(groups)
    n_groups = len(groups)
    sizes = groups.sum(axis=1)
    test_sizes = groups[:, test].sum(axis=1)
    test_errors = groups[:, test].astype(np.float64) @ errors[test]
    p = p_values(np.maximum(test_sizes, 1), test_errors, n=int(test.sum()), total=float(errors[test].sum()),
                 binary=binary, variance=float(errors[test].var()))
    p = np.where(test_sizes > 0, p, 1.0)
    adjusted = np.minimum(1.0, n_families * adjust(p, n_groups, correction))
    contrast = space.neuron_contrast(activations, rows, groups)
    candidates = []
    for g in range(n_groups):
        if sizes[g] < scoring.min_support:
            continue
        total = float(errors[groups[g]].sum())
        score = float(scoring.score(int(sizes[g]), total))
        if score > 0:
            candidates.append(_Candidate("activations", groups[g], int(sizes[g]), total, score, float(p[g]),
                                         float(adjusted[g]), group=g))
    return {"candidates": candidates, "tested": n_groups, "contrast": contrast, "names": names}


def _metric_word(binary: bool) -> str:
    return "error rate" if binary else "metric"


def _rank(candidates: list[_Candidate], errors: np.ndarray, scoring: Scoring, binary: bool, alpha: float,
          significant_only: bool, drop_redundant: bool, max_overlap: float, top_k: int,
          rank_by: str) -> list[_Candidate]:
    """The best slices that say something the others do not.

    A slice nearly inside a larger one is dropped when it is not clearly worse than the rest of
    that one (a sub-slice picked for its noise); a slice around a smaller one is dropped when it is
    no worse than the whole set outside that one (it is bad only because of what it contains). The
    bar for keeping the larger one is lower: a group whose errors are uneven (a corrupted kind of
    input fails more often in one part) is still one coherent failure, and its worst part alone
    misses most of it. A slice is dropped only in favour of one that is shown (`_shown`).
    The rest are ranked (by adjusted p-value, or by SliceLine's score) and a slice overlapping a
    better-ranked one by more than ``max_overlap`` (Jaccard) is skipped.
    """
    pool = [c for c in candidates if c.p_adjusted <= alpha or not significant_only]
    if rank_by == "significance":
        pool.sort(key=lambda c: (c.p_adjusted, c.p_value, -c.score, len(c.items)))
    else:
        pool.sort(key=lambda c: (-c.score, c.p_value, len(c.items)))
    pool = pool[:POOL]
    if not pool:
        return []
    spread = np.array([errors[c.mask].var() for c in pool])  # within each slice: the test of its parts
    bits = pack(np.stack([c.mask for c in pool]))
    sizes = np.array([c.size for c in pool])
    sums = np.array([c.errors for c in pool])
    inter = np.stack([popcount(bits & row) for row in bits])  # pairwise intersection sizes
    small, large = np.nonzero((inter >= CONTAINED * sizes[:, None]) & (sizes[None, :] > sizes[:, None]))
    shared = ErrorBits(errors).sums(bits[small] & bits[large]) if len(small) else np.zeros(0)
    # the smaller slice against the rest of the larger one; the larger one, outside the smaller, against all
    worse_than_rest = p_values(inter[small, large], shared, n=sizes[large], total=sums[large], binary=binary,
                               variance=spread[large])
    outside = sizes[large] - inter[small, large]
    worse_outside = p_values(np.maximum(outside, 1), np.maximum(sums[large] - shared, 0), n=scoring.n,
                             total=scoring.mean_error * scoring.n, binary=binary, variance=float(errors.var()))
    worse_outside[outside == 0] = 1.0
    small_explained = worse_than_rest >= REDUNDANT_P  # per pair, one of the two says it all
    large_explained = ~small_explained & (worse_outside >= COHERENT_P)
    explained_by = [[] for _ in pool]  # i -> the slices that say all that i says
    for i, j in [*zip(small[small_explained], large[small_explained]),
                 *zip(large[large_explained], small[large_explained])]:
        explained_by[int(i)].append(int(j))
    kept = _shown(explained_by) if drop_redundant else np.arange(len(pool))
    chosen: list[int] = []
    for i in kept:
        if all(inter[i, j] / (sizes[i] + sizes[j] - inter[i, j]) <= max_overlap for j in chosen):
            chosen.append(int(i))
            if len(chosen) == top_k:
                break
    return [pool[i] for i in chosen]


def _shown(explained_by: list[list[int]]) -> np.ndarray:
    """The slices left once each slice explained by a shown one is dropped, best-ranked first.

    Dropping every slice that some other one explains can drop them all: in a chain where a slice
    is explained by a second, the second by a third and the third by the first, each has its
    reason to go. A slice is dropped only in favour of one that is itself shown; where a cycle
    leaves that open, the better-ranked slice is shown.
    """
    state = [0] * len(explained_by)  # 0 undecided, 1 deciding, 2 shown, 3 dropped

    def decide(i: int) -> None:
        state[i] = 1
        for j in sorted(explained_by[i]):
            if state[j] == 0:
                decide(j)
            if state[j] == 2:
                state[i] = 3
                return
        state[i] = 2

    for i in range(len(explained_by)):
        if state[i] == 0:
            decide(i)
    return np.array([i for i in range(len(explained_by)) if state[i] == 2], np.int64)


def _searched_rows(labels: np.ndarray, rows: np.ndarray, n_all: int):
    """What a metadata slice's query is joined with so that it selects only the searched instances:
    nothing, the labelled ones (``label >= 0``), or, when a metric array left others out, their indices."""
    if len(rows) == n_all:
        return None
    if len(rows) == int((labels >= 0).sum()):
        return Subset.query("label >= 0")
    return Subset.from_indices(rows)


def _holds(table: pd.DataFrame, members: np.ndarray, class_names) -> str:
    """Which true (and predicted) classes a slice holds most: what a description needs to be read
    without opening the slice ("holds true 8 61%, 1 22%; predicted 1 48%")."""
    def name(k: int) -> str:
        return str(class_names[k]) if k < len(class_names) else str(k)

    parts = []
    for column, word in (("label", "true"), ("pred", "predicted")):
        if column not in table.columns or not len(members):
            continue
        values = table[column].to_numpy()[members]
        kinds, counts = np.unique(values[values >= 0], return_counts=True)
        order = np.argsort(-counts, kind="stable")[:2]
        top = [(int(kinds[i]), counts[i] / len(members)) for i in order if counts[i] / len(members) >= 0.15]
        if top:
            parts.append(f"{word} " + ", ".join(f"{name(k)} {share:.0%}" for k, share in top))
    return f"holds {'; '.join(parts)}" if parts else ""


def _make_slice(c: _Candidate, layer, rows, found: list[Predicate], groups, metric_name, scoring, alpha,
                searched: Subset | None, holds: str = "") -> Slice:
    members = rows[c.mask]
    value = c.errors / c.size
    common = dict(members=members, size=c.size, fraction=c.size / scoring.n, metric=metric_name, value=value,
                  overall=scoring.mean_error, lift=value / scoring.mean_error, score=c.score, p_value=c.p_value,
                  p_adjusted=c.p_adjusted, significant=c.p_adjusted <= alpha)
    if c.kind == "metadata":
        texts = tuple(found[i].text for i in c.items)
        text = " and ".join(texts)
        query = Subset.query(text if searched is None or searched.kind != "query" else f"label >= 0 and {text}")
        definition = query & searched if searched is not None and searched.kind == "indices" else query
        return Slice(name=text, kind="metadata", description=f"{text}; {holds}" if holds else text,
                     definition=definition,
                     predicates=texts, **common)
    effect = groups["contrast"][c.group]
    strongest = np.argsort(-np.abs(effect), kind="stable")[:5]
    neurons = tuple((int(k), float(effect[k])) for k in strongest)
    rule, precision, recall = _describe(c.mask, found)
    shown = ", ".join(f"{k}{'↑' if d > 0 else '↓'}" for k, d in neurons[:3])
    name, detail = groups["names"][c.group]
    description = f"{name} at {layer}{detail}: neurons {shown}"
    if holds:
        description += f"; {holds}"
    if rule:
        description += f"; mostly {rule} (precision {precision:.0%}, recall {recall:.0%})"
    return Slice(name=f"{layer} {name.removeprefix('activation ')}", kind="activations", description=description,
                 definition=Subset.from_indices(members), layer=layer, neurons=neurons, rule=rule,
                 rule_precision=precision, rule_recall=recall, **common)


def _describe(target: np.ndarray, found: list[Predicate]) -> tuple[str | None, float | None, float | None]:
    """The conjunction of one or two predicates that best matches a group (by Jaccard overlap)."""
    if not found:
        return None, None, None
    bits = pack(np.stack([p.mask for p in found]))
    goal = pack(target)[0]
    size, want = popcount(bits), int(target.sum())
    inter = popcount(bits & goal)
    jaccard = inter / np.maximum(size + want - inter, 1)
    best = (float(jaccard.max()), (int(jaccard.argmax()),))
    top = np.argsort(-jaccard, kind="stable")[:DESCRIBE_WITH]
    for i in top:
        for j in top:
            if found[i].column < found[j].column:
                both = bits[i] & bits[j]
                hit = int(popcount(both & goal))
                score = hit / max(int(popcount(both)) + want - hit, 1)
                if score > best[0]:
                    best = (score, (int(i), int(j)))
    if best[0] < 0.2:
        return None, None, None
    mask = np.logical_and.reduce([found[i].mask for i in best[1]])
    hit = int((mask & target).sum())
    return " and ".join(found[i].text for i in best[1]), hit / max(int(mask.sum()), 1), hit / max(want, 1)

"""SliceLine's exact search over conjunctions of base predicates, with its size and score bounds.

Sagadeeva & Boehm (SIGMOD 2021) score a slice S of n rows by
``sc = w * ((e_S / |S|) / e_mean - 1) - (1 - w) * (n / |S| - 1)``: the whole set scores 0, and a
slice must hold ``min_support`` rows and score above 0. The lattice is walked one level (one more
predicate) at a time; a candidate is made only when all its parents survived, and is dropped
unevaluated when the upper bound of its score, from its parents' sizes, error sums and largest
errors (which only shrink down the lattice), cannot beat the current k-th score. Rows are bitsets
(64 per word), so a candidate's size and error sum are an AND and a popcount of its parent and
its new predicate; a non-binary metric is summed through its 10-bit fixed-point bit planes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

BATCH_WORDS = 4 << 20  # words ANDed between two looks at the clock (and the progress bar)
PARENT_BYTES = 256 << 20  # bitsets of the slices one level may extend
PLANES = 10  # bits of a non-binary metric's fixed-point value
PAIR_WORDS = 16 << 20  # words ANDed, at most, to size every pair of base predicates for the families


def pack(masks: np.ndarray) -> np.ndarray:
    """Boolean rows (k x n) as bitsets (k x ceil(n / 64) uint64 words)."""
    masks = np.atleast_2d(np.asarray(masks, dtype=bool))
    words = (masks.shape[1] + 63) // 64
    packed = np.zeros((masks.shape[0], words * 8), np.uint8)
    packed[:, : (masks.shape[1] + 7) // 8] = np.packbits(masks, axis=1, bitorder="little")
    return packed.view(np.uint64)


def popcount(bits: np.ndarray) -> np.ndarray:
    return np.bitwise_count(bits).sum(axis=-1, dtype=np.int64)


def pair_sizes(masks: np.ndarray, budget: int = PAIR_WORDS) -> np.ndarray | None:
    """The size of every pair of base predicates (k x k), or None when that would AND more than
    ``budget`` words (the family is then bounded without them, see `significance.families`)."""
    bits = pack(masks)
    if len(bits) ** 2 * bits.shape[1] // 2 > budget:
        return None
    sizes = np.zeros((len(bits), len(bits)), np.int64)
    for i in range(len(bits)):
        sizes[i, i:] = sizes[i:, i] = popcount(bits[i] & bits[i:])
    return sizes


@functools.cache
def _kernel():
    """Compile (once, cached on disk) the AND-and-count kernel; numba is imported only here."""
    import numba

    def jit(func):
        try:
            return numba.njit(cache=True, nogil=True)(func)
        except RuntimeError:  # no writable cache location: compile in each process instead
            return numba.njit(nogil=True)(func)

    @jit
    def and_counts(parent_bits, parents, single_bits, singles, planes, weights, sizes, errors):
        # one pass per candidate over (its parent AND its new predicate): no bitset is materialised.
        # Slot 0 counts the members, slot p + 1 the members in error bit plane p (SWAR popcount).
        n_planes, n_words = planes.shape
        counts = np.zeros(n_planes + 1, np.uint64)
        m1, m2, m4 = np.uint64(0x5555555555555555), np.uint64(0x3333333333333333), np.uint64(0x0F0F0F0F0F0F0F0F)
        h01, one, two, four, top = (np.uint64(0x0101010101010101), np.uint64(1), np.uint64(2), np.uint64(4),
                                    np.uint64(56))
        for c in range(parents.shape[0]):
            a = parent_bits[parents[c]]
            b = single_bits[singles[c]]
            if n_planes == 1:  # a 0/1 error: members and failing members in one pass
                plane = planes[0]
                members = np.uint64(0)
                failing = np.uint64(0)
                for k in range(n_words):
                    x = a[k] & b[k]
                    y = x & plane[k]
                    x = x - ((x >> one) & m1)
                    y = y - ((y >> one) & m1)
                    x = (x & m2) + ((x >> two) & m2)
                    y = (y & m2) + ((y >> two) & m2)
                    members += (((x + (x >> four)) & m4) * h01) >> top
                    failing += (((y + (y >> four)) & m4) * h01) >> top
                sizes[c] = members
                errors[c] = weights[0] * failing
                continue
            for slot in range(n_planes + 1):
                total = np.uint64(0)
                if slot == 0:
                    for k in range(n_words):
                        x = a[k] & b[k]
                        x = x - ((x >> one) & m1)
                        x = (x & m2) + ((x >> two) & m2)
                        total += (((x + (x >> four)) & m4) * h01) >> top
                else:
                    plane = planes[slot - 1]
                    for k in range(n_words):
                        x = a[k] & b[k] & plane[k]
                        x = x - ((x >> one) & m1)
                        x = (x & m2) + ((x >> two) & m2)
                        total += (((x + (x >> four)) & m4) * h01) >> top
                counts[slot] = total
            sizes[c] = counts[0]
            errors[c] = (weights * counts[1:]).sum()

    return and_counts


class ErrorBits:
    """Per-row errors as bit planes, so that the error sum of any bitset is a few popcounts."""

    def __init__(self, errors: np.ndarray):
        errors = np.asarray(errors, dtype=np.float64)
        self.binary = bool(np.isin(errors, (0.0, 1.0)).all())
        if self.binary:
            self.planes, self.weights = pack(errors > 0.5), np.ones(1)
        else:
            top = float(errors.max()) or 1.0
            levels = np.rint(errors / top * ((1 << PLANES) - 1)).astype(np.int64)
            self.planes = pack(np.stack([(levels >> b) & 1 for b in range(PLANES)]).astype(bool))
            self.weights = (2.0 ** np.arange(PLANES)) * top / ((1 << PLANES) - 1)

    def sums(self, bits: np.ndarray) -> np.ndarray:
        total = np.zeros(len(bits))
        for plane, weight in zip(self.planes, self.weights):
            total += weight * popcount(bits & plane)
        return total


@dataclass
class Scoring:
    n: int
    mean_error: float
    min_support: int
    weight: float  # SliceLine's alpha: error against size

    def score(self, size, errors):
        size = np.maximum(np.asarray(size, dtype=np.float64), 1.0)
        return self.weight * ((errors / size) / self.mean_error - 1) - (1 - self.weight) * (self.n / size - 1)

    def upper_bound(self, size, errors, largest):
        """The best score any sub-slice could reach: tried at sizes sigma, e/m and the parents' size."""
        size, errors = np.asarray(size, np.float64), np.asarray(errors, np.float64)
        largest = np.maximum(np.asarray(largest, np.float64), 1e-12)
        sigma = float(self.min_support)
        best = np.full(size.shape, -np.inf)
        for s in (np.full(size.shape, sigma), np.clip(errors / largest, sigma, np.maximum(size, sigma)), size):
            best = np.maximum(best, self.score(s, np.minimum(errors, s * largest)))
        return np.where(size >= sigma, best, -np.inf)


@dataclass
class Level:
    items: np.ndarray  # candidates x level predicate ids, in feature order
    sizes: np.ndarray
    errors: np.ndarray


@dataclass
class LatticeResult:
    levels: list[Level]
    tried: int  # candidates made (evaluated or pruned by their bound): the family the test corrects for
    complete: bool
    notes: list[str] = field(default_factory=list)


def search(masks: np.ndarray, features: np.ndarray, errors: np.ndarray, scoring: Scoring, *, max_level: int,
           keep: int, max_candidates: int, deadline: float,
           progress: Callable[[float, str], None] | None = None, stop=None) -> LatticeResult:
    """Every slice of up to ``max_level`` predicates (of distinct features) that could make the top ``keep``."""
    report = progress or (lambda fraction, message: None)
    bits1 = pack(masks)
    error_bits = ErrorBits(errors)
    sizes1 = popcount(bits1)
    errors1 = error_bits.sums(bits1)
    largest1 = (errors1 > 0).astype(np.float64) if error_bits.binary else \
        np.array([np.max(errors, where=m, initial=0.0) for m in masks])
    valid = sizes1 >= scoring.min_support
    levels = [Level(np.flatnonzero(valid)[:, None], sizes1[valid], errors1[valid])]
    result = LatticeResult(levels, tried=int(valid.sum()), complete=True)
    best = _Best(keep, scoring.score(sizes1[valid], errors1[valid]))
    alive = valid & (scoring.upper_bound(sizes1, errors1, largest1) > best.threshold)
    singles = np.flatnonzero(alive)
    singles = singles[np.argsort(features[singles], kind="stable")]
    parents = (singles[:, None], bits1[singles], sizes1[singles], errors1[singles], largest1[singles])
    n_pred = len(masks)
    pair_alive = np.zeros((n_pred, n_pred), bool)
    pair_size = np.zeros((n_pred, n_pred), np.int64)
    pair_errors = np.zeros((n_pred, n_pred))
    survivors = set()
    report(1 / max_level, f"level 1: {len(singles)} of {len(masks)} predicates can start a slice")
    for level in range(2, max_level + 1):
        items, bits, sizes, errs, largest = parents
        if not len(items):
            break
        parent, new = _extensions(items, singles, features)
        if level >= 3 and len(parent):
            ok = np.logical_and.reduce([pair_alive[items[parent, i], new] for i in range(items.shape[1])])
            parent, new = parent[ok], new[ok]
        if level >= 4 and len(parent):  # every other parent (drop one item, add the new one) survived too
            width = items.shape[1]
            ok = np.array([all((*items[c, :i], *items[c, i + 1:], p) in survivors for i in range(width))
                           for c, p in zip(parent.tolist(), new.tolist())], bool)
            parent, new = parent[ok], new[ok]
        result.tried += len(parent)
        size_ub = np.minimum(sizes[parent], sizes1[new])
        error_ub = np.minimum(errs[parent], errors1[new])
        if level >= 3 and len(parent):
            for i in range(items.shape[1]):
                size_ub = np.minimum(size_ub, pair_size[items[parent, i], new])
                error_ub = np.minimum(error_ub, pair_errors[items[parent, i], new])
        largest_ub = np.minimum(largest[parent], largest1[new])
        bound = scoring.upper_bound(size_ub, error_ub, largest_ub)
        promising = np.flatnonzero(bound > best.threshold)
        if len(promising) > max_candidates:
            result.complete = False
            result.notes.append(f"level {level}: {len(promising):,} candidates, the {max_candidates:,} with the "
                                "highest bounds were evaluated (raise max_candidates for an exhaustive search)")
            promising = promising[np.argsort(-bound[promising], kind="stable")[:max_candidates]]
        parent, new = parent[promising], new[promising]
        child_sizes = np.empty(len(parent), np.int64)
        child_errors = np.empty(len(parent))
        step = max(1, BATCH_WORDS // max(1, bits1.shape[1]))
        kernel = _kernel()
        done = 0
        for lo in range(0, len(parent), step):
            if time.perf_counter() > deadline or (stop is not None and stop.is_set()):
                result.complete = False
                result.notes.append(f"level {level}: stopped after {lo:,} of {len(parent):,} candidates "
                                    "(time limit or stop requested)")
                break
            hi = min(lo + step, len(parent))
            kernel(bits, parent[lo:hi], bits1, new[lo:hi], error_bits.planes, error_bits.weights,
                   child_sizes[lo:hi], child_errors[lo:hi])
            done = hi
            report((level - 1 + hi / len(parent)) / max_level, f"level {level}: {hi:,} of {len(parent):,} candidates")
        parent, new = parent[:done], new[:done]
        child_sizes, child_errors = child_sizes[:done], child_errors[:done]
        child_items = np.concatenate([items[parent], new[:, None]], axis=1)
        large = child_sizes >= scoring.min_support
        levels.append(Level(child_items[large], child_sizes[large], child_errors[large]))
        best.add(scoring.score(child_sizes[large], child_errors[large]))
        child_largest = np.minimum(largest_ub[promising][:done], np.where(child_errors > 0, np.inf, 0.0))
        alive = large & (scoring.upper_bound(child_sizes, child_errors, child_largest) > best.threshold)
        if level == 2:
            a, b = child_items[:, 0], child_items[:, 1]
            pair_size[a, b] = pair_size[b, a] = child_sizes
            pair_errors[a, b] = pair_errors[b, a] = child_errors
            pair_alive[a, b] = pair_alive[b, a] = alive
        if max_level >= 4:
            survivors.update(map(tuple, child_items[alive].tolist()))
        if level == max_level:
            break
        kept = np.flatnonzero(alive)  # their bitsets, for the next level (only the survivors are kept)
        most = max(1, PARENT_BYTES // (bits1.shape[1] * 8))
        if len(kept) > most:
            result.complete = False
            result.notes.append(f"level {level}: {len(kept):,} slices could grow, the {most:,} with the highest "
                                "bounds were extended (memory bound)")
            child_bound = scoring.upper_bound(child_sizes[kept], child_errors[kept], child_largest[kept])
            kept = kept[np.argsort(-child_bound, kind="stable")[:most]]
        parents = (child_items[kept], bits[parent[kept]] & bits1[new[kept]], child_sizes[kept], child_errors[kept],
                   child_largest[kept])
        if not result.complete:
            break
    report(1.0, "search done")
    return result


def _extensions(items: np.ndarray, singles: np.ndarray, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, predicate) pairs that add a predicate of a later feature to each parent."""
    single_features = features[singles]
    start = np.searchsorted(single_features, features[items[:, -1]], side="right")
    counts = len(singles) - start
    parent = np.repeat(np.arange(len(items)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return parent, singles[np.repeat(start, counts) + offsets]


class _Best:
    """The ``keep`` best scores seen so far; a candidate must beat the k-th (and 0) to matter."""

    def __init__(self, keep: int, scores: np.ndarray):
        self.keep = keep
        self.scores = np.zeros(0)
        self.add(scores)

    def add(self, scores: np.ndarray) -> None:
        merged = np.concatenate([self.scores, np.asarray(scores, np.float64)])
        self.scores = np.sort(merged[merged > 0])[::-1][: self.keep]

    @property
    def threshold(self) -> float:
        return float(self.scores[-1]) if len(self.scores) >= self.keep else 0.0

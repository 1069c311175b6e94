"""Is a slice worse than the whole set by more than chance, after every candidate that was tried?

The null hypothesis is the one a permutation test checks: the metric's values are exchangeable
across rows, whatever the slice. For a 0/1 error the number of errors in a slice of size s is then
hypergeometric (N rows, K errors, s drawn), which gives an exact one-sided p-value; for another
metric the slice mean is compared with its permutation distribution's mean and variance (a z-test
with the finite-population correction).

The tests form families fixed before the errors are looked at: the slices of one predicate, of
two, of three (every conjunction of base predicates of distinct columns, each holding at least the
minimum support; only the metadata decides which), and the activation groups. Each family gets an
equal share of alpha (Bonferroni across families: the level holds for the report as a whole), so a
short slice is not drowned by the millions of long ones. Within a family the correction counts
every member, the ones the search pruned unevaluated included (as p = 1, which only makes it
stricter): a count that depended on the errors (say, the candidates the search happened to make)
would not be a valid family. ``holm`` (the default) controls the family-wise error rate under any
dependence between the tests, and overlapping slices are strongly dependent: with probability
1 - alpha no reported slice is a fluke, so on data without a slice nothing is reported in (at least)
1 - alpha of the cases. ``bh`` (Benjamini-Hochberg) controls the expected fraction of false slices
among those reported (under positive dependence) and finds more when many slices are real; the
shares add up for it too, as the false share of all reports is at most the sum of each family's.
"""

from __future__ import annotations

import numpy as np

CORRECTIONS = ("holm", "bh")


def p_values(sizes, errors, *, n, total, binary: bool, variance) -> np.ndarray:
    """One-sided p-values: is the slice's mean error larger than that of the set of ``n`` it is drawn from?"""
    from scipy import stats  # imported on first use: seconds of an explorer's first import

    sizes = np.asarray(sizes, np.float64)
    errors = np.asarray(errors, np.float64)
    n, total = np.asarray(n, np.float64), np.asarray(total, np.float64)
    if binary:
        return stats.hypergeom.sf(np.rint(errors) - 1, n, np.rint(total), sizes)
    spread = np.sqrt(np.maximum(variance, 1e-300) / sizes * np.maximum(n - sizes, 0) / np.maximum(n - 1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (errors / sizes - total / n) / spread
    return np.where(sizes < n, stats.norm.sf(np.nan_to_num(z, nan=0.0)), 1.0)


def p_bounds(sizes, errors, *, n: int, total: float) -> np.ndarray:
    """Cheap upper bounds of the exact 0/1-error p-values: Chernoff's exp(-s KL(e/s || K/N)).

    Hoeffding (1963) showed a hypergeometric tail is at most the binomial one, which this bounds;
    a number never below a valid p-value is itself a valid (conservative) p-value, so the many
    candidates the search tried get this and only the few that can be reported the exact value.
    """
    sizes = np.maximum(np.asarray(sizes, np.float64), 1.0)
    rate = np.clip(np.asarray(errors, np.float64) / sizes, 0.0, 1.0)
    base = min(max(total / n, 1e-300), 1 - 1e-16)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = rate * np.log(rate / base) + (1 - rate) * np.log((1 - rate) / (1 - base))
    kl = np.nan_to_num(kl, nan=0.0, posinf=0.0)
    kl = np.where(rate == 1.0, -np.log(base), np.where(rate == 0.0, -np.log(1 - base), kl))
    return np.where(rate > base, np.exp(-sizes * kl), 1.0)


def conjunctions(counts, max_level: int) -> list[int]:
    """How many conjunctions of 1..``max_level`` predicates of distinct columns there are, given each
    column's number of predicates: the elementary symmetric polynomials of ``counts``."""
    sums = [1] + [0] * max_level
    for c in counts:
        for level in range(max_level, 0, -1):
            sums[level] += sums[level - 1] * int(c)
    return sums[1:]


def families(pair_sizes: np.ndarray | None, features: np.ndarray, min_support: int, max_level: int) -> list[int]:
    """Upper bounds of the number of slices of 1..``max_level`` predicates that hold ``min_support`` rows.

    Only the metadata decides them (a conjunction's size does not depend on the errors), so they are
    a valid family whatever the errors turn out to be. With ``pair_sizes`` (the size of every pair of
    base predicates) the pairs are counted exactly and the triples by those whose three pairs are
    all large enough (a triple is no larger than any of its pairs); otherwise, and beyond three,
    every conjunction of distinct columns counts.
    """
    counts = conjunctions(np.bincount(features), max_level)
    if pair_sizes is None:
        return counts
    large = (pair_sizes >= min_support) & (features[:, None] != features[None, :])
    np.fill_diagonal(large, False)
    large = large.astype(np.float64)
    exact = [int((np.diag(pair_sizes) >= min_support).sum()), int(large.sum()) // 2]
    if max_level >= 3:
        exact.append(int(round(float(((large @ large) * large).sum()))) // 6)
    return [min(a, b) for a, b in zip(exact, counts)] + counts[len(exact):]


def adjust(p: np.ndarray, tried: int, method: str) -> np.ndarray:
    """Adjusted p-values of ``p`` in a family of ``tried`` tests (the untested ones have p = 1)."""
    p = np.asarray(p, np.float64)
    m = max(int(tried), len(p))
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(len(p))) * ranked))
    elif method == "bh":
        adjusted = np.minimum.accumulate((m * ranked / np.arange(1, len(p) + 1))[::-1])[::-1]
        adjusted = np.minimum(adjusted, 1.0)
    else:
        raise ValueError(f"Unknown correction {method!r}; one of {', '.join(CORRECTIONS)}.")
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out

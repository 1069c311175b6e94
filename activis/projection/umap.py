"""UMAP, implemented here (see the package docstring for why): neighbours, fuzzy graph, SGD layout."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable

import numpy as np

_EXACT_KNN_MAX = 16_384  # above this many instances, neighbours come from a random-projection forest
_FOREST_TREES = 8
_FOREST_LEAF = 512


# beyond this many rows, UMAP is fitted on a sample of this size and the others are placed by
# their nearest sampled neighbours: the layout's cost (minutes and gigabytes at a million) stays bounded
FIT_ROWS = 50_000
PLACE_DIMS = 10  # PCA coordinates in which the other rows find their sampled neighbours
PLACE_NEIGHBOURS = 10
def _knn_within(z: np.ndarray, sq: np.ndarray, members: np.ndarray, k: int,
                report: Callable[[float], None] | None = None, chunk: int = 2048):
    """Exact k nearest neighbours (self first) among ``members``: global indices, squared distances."""
    zm, sqm = z[members], sq[members]
    k = min(k, len(members))
    idx = np.empty((len(members), k), dtype=np.int64)
    dist = np.empty((len(members), k), dtype=np.float32)
    for s in range(0, len(members), chunk):
        e = min(len(members), s + chunk)
        d2 = sqm[s:e, None] + sqm[None, :] - 2 * (zm[s:e] @ zm.T)
        d2[np.arange(e - s), np.arange(s, e)] = -1  # each point is its own first neighbour
        part = np.argpartition(d2, k - 1, axis=1)[:, :k] if k < len(members) else np.tile(
            np.arange(len(members)), (e - s, 1))
        pd = np.take_along_axis(d2, part, axis=1)
        order = np.argsort(pd, axis=1)
        idx[s:e] = members[np.take_along_axis(part, order, axis=1)]
        dist[s:e] = np.maximum(np.take_along_axis(pd, order, axis=1), 0)
        if report is not None:
            report(e / len(members))
    return idx, dist


def _best_unique(cand_idx: np.ndarray, cand_d2: np.ndarray, k: int):
    """Per row, the k closest distinct candidates (sorted), from possibly repeated candidates."""
    order = np.argsort(cand_idx, axis=1, kind="stable")
    ci = np.take_along_axis(cand_idx, order, axis=1)
    cd = np.take_along_axis(cand_d2, order, axis=1)
    repeat = np.zeros(ci.shape, dtype=bool)
    repeat[:, 1:] = ci[:, 1:] == ci[:, :-1]
    cd = np.where(repeat | (ci < 0), np.inf, cd)
    part = np.argpartition(cd, k - 1, axis=1)[:, :k]
    ci, cd = np.take_along_axis(ci, part, axis=1), np.take_along_axis(cd, part, axis=1)
    order = np.argsort(cd, axis=1)
    return np.take_along_axis(ci, order, axis=1), np.take_along_axis(cd, order, axis=1)


def _nearest_neighbors(z: np.ndarray, k: int, seed: int, stage: Callable[[float], None]):
    """k nearest neighbours of every row of ``z`` (self included first): indices and distances.

    Exact up to ``_EXACT_KNN_MAX`` rows. Beyond, candidates come from a forest of random-projection
    trees (as in pynndescent's initialisation), each leaf searched exactly with BLAS, then one
    round of neighbour-of-neighbour refinement (the NN-descent step); recall against exact search
    is about 0.98 at 100,000 points.
    """
    n = len(z)
    sq = np.einsum("ij,ij->i", z, z)
    if n <= _EXACT_KNN_MAX:
        idx, d2 = _knn_within(z, sq, np.arange(n), k, stage)
        return idx, np.sqrt(d2)
    rng = np.random.default_rng(seed)
    leaf = max(_FOREST_LEAF, 4 * k)  # halves of a split leaf always hold k points
    cand_idx = np.full((n, _FOREST_TREES * k), -1, dtype=np.int64)
    cand_d2 = np.full((n, _FOREST_TREES * k), np.inf, dtype=np.float32)
    for t in range(_FOREST_TREES):
        cols = slice(t * k, (t + 1) * k)
        order = np.arange(n)
        segments = [(0, n)]
        while segments:
            split = []
            for s, e in segments:
                members = order[s:e]
                if e - s <= leaf:
                    cand_idx[members, cols], cand_d2[members, cols] = _knn_within(z, sq, members, k)
                    continue
                a, b = rng.choice(members, 2, replace=False)
                side = z[members] @ (z[a] - z[b])
                mid = (e - s) // 2
                order[s:e] = members[np.argpartition(side, mid)]
                split += [(s, s + mid), (s + mid, e)]
            segments = split
        stage(0.7 * (t + 1) / _FOREST_TREES)
    idx, d2 = _best_unique(cand_idx, cand_d2, k)
    idx, d2 = _refine(z, sq, idx, d2, k, lambda f: stage(0.7 + 0.3 * f))
    return idx, np.sqrt(d2)


def _refine(z, sq, idx, d2, k, stage, chunk=1024):
    """One NN-descent round: a neighbour's neighbour that is closer replaces a neighbour."""
    n = len(z)
    out_i, out_d = np.empty_like(idx), np.empty_like(d2)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        cand = np.concatenate([idx[s:e], idx[idx[s:e]].reshape(e - s, -1)], axis=1)
        dist = sq[s:e, None] + sq[cand] - 2 * np.einsum("cmd,cd->cm", z[cand], z[s:e])
        dist[cand == np.arange(s, e)[:, None]] = -1
        out_i[s:e], out_d[s:e] = _best_unique(cand, dist.astype(np.float32), k)
        stage(e / n)
    return out_i, np.maximum(out_d, 0)


# ----------------------------------------------------------------------------- UMAP
def _smooth_knn_dist(dist: np.ndarray, k: int, n_iter: int = 64, tol: float = 1e-5):
    """umap-learn's smooth_knn_dist (local_connectivity=1, bandwidth=1), vectorised over rows."""
    n = dist.shape[0]
    target = np.log2(k)
    positive = np.where(dist > 0, dist, np.inf)
    rho = positive.min(axis=1)
    rho[~np.isfinite(rho)] = 0
    shifted = dist[:, 1:] - rho[:, None]
    lo, hi, mid = np.zeros(n), np.full(n, np.inf), np.ones(n)
    active = np.arange(n)
    for _ in range(n_iter):
        x = shifted[active]
        psum = np.where(x > 0, np.exp(-x / mid[active, None]), 1.0).sum(axis=1)
        searching = np.abs(psum - target) >= tol  # a converged row keeps the sigma it converged at
        active, psum = active[searching], psum[searching]
        if not len(active):
            break
        over = psum > target
        hi[active[over]] = mid[active[over]]
        lo[active[~over]] = mid[active[~over]]
        mid[active] = np.where(np.isfinite(hi[active]), (lo[active] + hi[active]) / 2, mid[active] * 2)
    floor = 1e-3 * np.where(rho > 0, dist.mean(axis=1), dist.mean())
    return np.maximum(mid, floor).astype(np.float32), rho.astype(np.float32)


def _fuzzy_graph(idx: np.ndarray, dist: np.ndarray, n: int):
    """umap-learn's fuzzy simplicial set: local memberships, then their fuzzy union (symmetric)."""
    import scipy.sparse

    k = idx.shape[1]
    sigma, rho = _smooth_knn_dist(dist, k)
    with np.errstate(over="ignore", divide="ignore"):  # tiny sigmas (duplicates) give exp(-inf) = 0
        strength = np.exp(-np.maximum(dist - rho[:, None], 0) / sigma[:, None])
    strength = np.where((dist - rho[:, None] <= 0) | (sigma[:, None] == 0), 1.0, strength)
    strength[idx == np.arange(n)[:, None]] = 0
    local = scipy.sparse.coo_matrix((strength.ravel().astype(np.float32), (np.repeat(np.arange(n), k), idx.ravel())),
                                    shape=(n, n)).tocsr()
    local.eliminate_zeros()
    transpose = local.T.tocsr()
    graph = (local + transpose - local.multiply(transpose)).tocoo()
    graph.sum_duplicates()
    graph.eliminate_zeros()
    return graph


def _ab_params(spread: float, min_dist: float) -> tuple[float, float]:
    """umap-learn's find_ab_params: the smooth curve 1/(1+a d^2b) closest to the offset exponential."""
    from scipy.optimize import curve_fit

    x = np.linspace(0, spread * 3, 300)
    y = np.where(x < min_dist, 1.0, np.exp(-(x - min_dist) / spread))
    (a, b), _ = curve_fit(lambda d, a, b: 1.0 / (1.0 + a * d ** (2 * b)), x, y)
    return float(a), float(b)


def _sgd_epochs_py(emb, head, tail, epochs_per_sample, next_sample, epochs_per_negative, next_negative,
                   rng_state, a, b, gamma, initial_alpha, n_epochs, start, stop):
    """umap-learn's optimize_layout_euclidean epochs [start, stop) (move_other=True, 2D output).

    Runs compiled (nogil): the notebook keeps its GIL while a layout is computed in a thread.
    """
    n_vertices = emb.shape[0]
    dim = emb.shape[1]
    for epoch in range(start, stop):
        alpha = initial_alpha if epoch == 0 else initial_alpha * (1.0 - (epoch - 1) / n_epochs)
        for i in range(epochs_per_sample.shape[0]):
            if next_sample[i] > epoch:
                continue
            j = head[i]
            k = tail[i]
            dist_squared = np.float32(0.0)  # float32 like umap's rdist
            for d in range(dim):
                diff = emb[j, d] - emb[k, d]
                dist_squared += diff * diff
            if dist_squared > 0.0:
                grad_coeff = -2.0 * a * b * dist_squared ** (b - 1.0) / (a * dist_squared ** b + 1.0)
            else:
                grad_coeff = 0.0
            for d in range(dim):
                grad = grad_coeff * (emb[j, d] - emb[k, d])
                grad = 4.0 if grad > 4.0 else (-4.0 if grad < -4.0 else grad)
                emb[j, d] += grad * alpha
                emb[k, d] -= grad * alpha
            next_sample[i] += epochs_per_sample[i]
            n_negative = int((epoch - next_negative[i]) / epochs_per_negative[i])
            for _ in range(n_negative):
                s = rng_state[j]
                s[0] = (((s[0] & 4294967294) << 12) & 0xFFFFFFFF) ^ ((((s[0] << 13) & 0xFFFFFFFF) ^ s[0]) >> 19)
                s[1] = (((s[1] & 4294967288) << 4) & 0xFFFFFFFF) ^ ((((s[1] << 2) & 0xFFFFFFFF) ^ s[1]) >> 25)
                s[2] = (((s[2] & 4294967280) << 17) & 0xFFFFFFFF) ^ ((((s[2] << 3) & 0xFFFFFFFF) ^ s[2]) >> 11)
                k = np.int32(s[0] ^ s[1] ^ s[2]) % n_vertices  # umap's tau_rand_int returns int32
                dist_squared = np.float32(0.0)
                for d in range(dim):
                    diff = emb[j, d] - emb[k, d]
                    dist_squared += diff * diff
                if dist_squared > 0.0:
                    grad_coeff = 2.0 * gamma * b / ((0.001 + dist_squared) * (a * dist_squared ** b + 1.0))
                elif j == k:
                    continue
                else:
                    grad_coeff = 0.0
                if grad_coeff > 0.0:
                    for d in range(dim):
                        grad = grad_coeff * (emb[j, d] - emb[k, d])
                        grad = 4.0 if grad > 4.0 else (-4.0 if grad < -4.0 else grad)
                        emb[j, d] += grad * alpha
            next_negative[i] += n_negative * epochs_per_negative[i]


@functools.lru_cache(maxsize=1)
def _sgd_kernel():
    """The compiled SGD, loaded from numba's disk cache after the first compile on a machine."""
    import numba

    options = {"nogil": True, "fastmath": True}
    try:
        return numba.njit(cache=True, **options)(_sgd_epochs_py)
    except RuntimeError as exc:  # no writable cache location at all: compile per process instead
        warnings.warn(f"numba cannot cache the UMAP layout code ({exc}); each new process will compile "
                      "it (a few seconds). Set NUMBA_CACHE_DIR to a writable directory to avoid this.",
                      stacklevel=2)
        return numba.njit(**options)(_sgd_epochs_py)


def _initial_layout(pca2: np.ndarray, seed: int) -> np.ndarray:
    """umap-learn's PCA initialisation: scaled to +-10 with a little noise, then each axis to [0, 10]."""
    rng = np.random.default_rng(seed)
    coords = pca2.astype(np.float64)
    top = np.abs(coords).max()
    coords = coords * (10.0 / top) if top > 0 else rng.uniform(-10, 10, coords.shape)
    coords += rng.normal(scale=1e-4, size=coords.shape)
    low, span = coords.min(axis=0), np.ptp(coords, axis=0)
    return np.ascontiguousarray(10.0 * (coords - low) / np.where(span > 0, span, 1), dtype=np.float32)


def _umap_layout(graph, init: np.ndarray, params: dict, stage: Callable[[float], None]) -> np.ndarray:
    n_epochs = params["n_epochs"]
    weights = graph.data.astype(np.float64)
    keep = weights >= weights.max() / n_epochs
    head = graph.row[keep].astype(np.int32)
    tail = graph.col[keep].astype(np.int32)
    weights = weights[keep]
    epochs_per_sample = weights.max() / weights  # the strongest edge is sampled every epoch
    epochs_per_negative = epochs_per_sample / 5.0  # negative_sample_rate
    next_sample, next_negative = epochs_per_sample.copy(), epochs_per_negative.copy()
    rng = np.random.default_rng(params["random_state"])
    rng_state = rng.integers(-(2**31), 2**31 - 1, size=(len(init), 3), dtype=np.int64)
    a, b = _ab_params(params["spread"], params["min_dist"])
    emb = init.copy()
    kernel = _sgd_kernel()
    start, step = 0, 1
    while start < n_epochs:  # in slices of about 0.1 s: prompt cancellation and progress
        stop = min(n_epochs, start + step)
        t0 = time.perf_counter()
        kernel(emb, head, tail, epochs_per_sample, next_sample, epochs_per_negative, next_negative,
               rng_state, a, b, 1.0, 1.0, n_epochs, start, stop)
        elapsed = time.perf_counter() - t0
        stage(stop / n_epochs)
        start = stop
        step = max(1, min(2 * step, int(step * 0.1 / max(elapsed, 1e-4))))
    return emb


def _place_by_neighbours(sample_z: np.ndarray, sample_layout: np.ndarray, z: np.ndarray, k: int,
                         stage: Callable[[float], None], chunk: int = 65536) -> np.ndarray:
    """Positions for rows ``z`` in a layout fitted on ``sample_z``: the mean of their ``k`` nearest
    sampled neighbours' positions, weighted by 1 / distance (umap-learn's ``transform`` starts
    from this same weighted mean; its refining epochs are left out). Distances in the first
    `PLACE_DIMS` PCA coordinates, through a k-d tree (fast in few dimensions)."""
    from scipy.spatial import cKDTree

    dims = min(PLACE_DIMS, z.shape[1])
    tree = cKDTree(np.ascontiguousarray(sample_z[:, :dims], dtype=np.float64))
    k = min(k, len(sample_z))
    out = np.empty((len(z), 2), np.float32)
    for lo in range(0, len(z), chunk):
        dist, idx = tree.query(np.asarray(z[lo:lo + chunk, :dims], dtype=np.float64), k=k)
        dist, idx = dist.reshape(len(dist), k), idx.reshape(len(idx), k)
        weights = 1.0 / np.maximum(dist, 1e-12)
        weights /= weights.sum(axis=1, keepdims=True)
        out[lo:lo + chunk] = np.einsum("ij,ijd->id", weights, sample_layout[idx])
        stage(min(1.0, (lo + chunk) / len(z)))
    return out

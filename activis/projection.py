"""2D maps of a layer's instance activations: PCA, UMAP and t-SNE, in the background, cached.

``project(store, layer, method)`` returns a `ProjectionJob` at once; the layout is computed in a
background thread (t-SNE in a child process, so that it can be stopped and never holds the
kernel's GIL) and reported through ``job.progress`` / ``job.on_change``. UMAP and t-SNE jobs publish
the PCA layout as ``job.preview`` within seconds, so a view has something true to show while the
slow layout runs. `Projector` keeps one running job and cancels it when a newer request arrives.

Layouts are cached in the store's ``projections`` section as ``.npy`` + ``.json`` (never pickled),
keyed by layer, method, parameters, instance set and a fingerprint of the activations, so they
are reused across sessions and dropped when the store is rewritten.

Why UMAP is implemented here rather than called through ``umap.UMAP``: a fresh process spends
40-90 s compiling umap-learn's and pynndescent's numba code before it fits anything, and numba's
cache does not keep most of it. This module runs the same algorithm (umap-learn 0.5: the same
fuzzy simplicial set, the same a/b curve, the same negative-sampling SGD with the same learning
rate schedule) from parts that cost no compile: neighbours from PCA + exact or random-projection-
forest search in numpy, the fuzzy graph in vectorised numpy, and only the SGD in numba, compiled
once per machine and kept in numba's on-disk cache (``cache=True``: next to this file, or in the
user cache dir when the package directory is read-only; ``NUMBA_CACHE_DIR`` overrides both, as
numba documents). ``benchmarks/bench_projection.py`` compares time and layout quality with
``umap.UMAP().fit_transform``.

This module imports neither torch nor any widget, nor anything else from activis: a store is any
object with ``activations(layer)``, ``n_instances``, ``layers`` and ``section(name)``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable

import numpy as np

ENGINE_VERSION = 1  # part of every cache key: bump when a layout algorithm changes
METHODS = ("pca", "umap", "tsne")
SECTION = "projections"

_DEFAULTS = {
    "pca": {},
    "umap": {"n_neighbors": 15, "min_dist": 0.1, "spread": 1.0, "n_epochs": None, "pca_dims": 50,
             "random_state": 0},
    "tsne": {"perplexity": 30.0, "max_iter": 1000, "early_exaggeration": 12.0, "pca_dims": 50,
             "random_state": 0},
}
_CHUNK_BYTES = 32 << 20  # rows read from the memory map per step
_EXACT_KNN_MAX = 16_384  # above this many instances, neighbours come from a random-projection forest
_FOREST_TREES = 8
_FOREST_LEAF = 512
_POWER_ITERATIONS = 4
_COVARIANCE_MAX_WIDTH = 2048  # wider layers: randomized PCA (covariance costs n x width^2)
_NOTIFY_EVERY_S = 0.1


class ProjectionError(RuntimeError):
    """A projection that could not be computed; the message says why."""


class ProjectionCancelled(ProjectionError):
    """The job was cancelled (for example superseded by a newer request) before it finished."""


class _Cancelled(Exception):
    pass


# ----------------------------------------------------------------------------- parameters
def _resolve_params(method: str, params: dict, n: int) -> dict:
    """Fill defaults and validate, so that equal requests get equal cache keys."""
    if method not in METHODS:
        raise ValueError(f"Unknown projection method {method!r}; choose one of {', '.join(METHODS)}.")
    defaults = _DEFAULTS[method]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        valid = ", ".join(defaults) or "none"
        raise TypeError(f"Unknown parameter(s) {', '.join(unknown)} for {method}; valid: {valid}.")
    p = {**defaults, **params}
    if method == "pca":
        return p
    if n < 4:
        raise ProjectionError(f"{method.upper()} needs at least 4 instances; this set has {n}.")
    p["pca_dims"] = int(p["pca_dims"])
    p["random_state"] = int(p["random_state"])
    if p["pca_dims"] < 2:
        raise ValueError(f"pca_dims must be at least 2, not {p['pca_dims']}.")
    if method == "umap":
        k = int(p["n_neighbors"])
        if k < 2:
            raise ValueError(f"n_neighbors must be at least 2, not {k}.")
        if k >= n:
            warnings.warn(f"n_neighbors={k} is not less than the {n} instances; using {n - 1}.", stacklevel=3)
            k = n - 1
        p["n_neighbors"] = k
        p["min_dist"], p["spread"] = float(p["min_dist"]), float(p["spread"])
        if not 0 <= p["min_dist"] <= p["spread"]:
            raise ValueError(f"min_dist must lie in [0, spread={p['spread']}], not {p['min_dist']}.")
        if p["n_epochs"] is None:
            p["n_epochs"] = _default_epochs(n)
        p["n_epochs"] = int(p["n_epochs"])
        if p["n_epochs"] < 1:
            raise ValueError(f"n_epochs must be positive, not {p['n_epochs']}.")
    else:
        p["perplexity"] = float(p["perplexity"])
        p["max_iter"] = int(p["max_iter"])
        p["early_exaggeration"] = float(p["early_exaggeration"])
        if p["perplexity"] <= 0:
            raise ValueError(f"perplexity must be positive, not {p['perplexity']}.")
        if p["perplexity"] >= n:
            warnings.warn(f"perplexity={p['perplexity']} is not less than the {n} instances; "
                          f"using {(n - 1) / 3:.1f}.", stacklevel=3)
            p["perplexity"] = (n - 1) / 3
        if p["max_iter"] < 250:
            raise ValueError(f"max_iter must be at least 250 for t-SNE, not {p['max_iter']}.")
    return p


def _default_epochs(n: int) -> int:
    """umap-learn's defaults (500 up to 10,000 points, 200 above), and 100 above 50,000 points.

    From a PCA start the large layouts settle early: on 100,000 x 128 synthetic activations,
    100 and 200 epochs gave the same trustworthiness (0.9723 / 0.9724) and kNN label agreement
    (0.9996 / 0.9997), and each epoch costs a third of a second or more there.
    """
    if n <= 10_000:
        return 500
    return 200 if n <= 50_000 else 100


# ----------------------------------------------------------------------------- store access
class _Rows:
    """The rows of one layer for one instance set, read from the memory map in float32 chunks."""

    def __init__(self, activations: np.ndarray, rows: np.ndarray | None, tick: Callable[[], None]):
        self.a = activations
        self.rows = rows
        self.n = len(rows) if rows is not None else activations.shape[0]
        self.d = activations.shape[1]
        self.chunk = max(256, _CHUNK_BYTES // max(1, self.d * 4))
        self.tick = tick

    def blocks(self):
        for s in range(0, self.n, self.chunk):
            e = min(self.n, s + self.chunk)
            self.tick()
            block = self.a[self.rows[s:e]] if self.rows is not None else self.a[s:e]
            yield s, e, np.array(block, dtype=np.float32)  # a copy: callers centre it in place

    def moments(self, covariance: bool) -> tuple[np.ndarray, float, np.ndarray | None]:
        """Column means, total variance and (if asked) the covariance matrix, in one pass.

        Sums are taken around the first chunk's mean, so that a large common offset (activations
        all near 50, say) does not cancel away float32 precision. Non-finite activations are
        refused, naming the instances they belong to.
        """
        shift = None
        total = np.zeros(self.d)
        total_sq = np.zeros(self.d)
        cross = np.zeros((self.d, self.d)) if covariance else None
        bad: list[int] = []
        for s, _, block in self.blocks():
            finite = np.isfinite(block).all(axis=1)
            if not finite.all():
                bad.extend((s + np.flatnonzero(~finite)).tolist()[:10 - len(bad)])
                block[~np.isfinite(block)] = 0
            if shift is None:
                shift = block.mean(axis=0)
            block -= shift
            total += block.sum(axis=0, dtype=np.float64)
            if covariance:
                cross += block.T @ block
            else:
                total_sq += np.square(block, dtype=np.float64).sum(axis=0)
        if bad:
            ids = self.rows[bad] if self.rows is not None else bad
            raise ProjectionError(f"Activations contain NaN or infinite values (instances {list(map(int, ids))}"
                                  f"{' ...' if len(bad) == 10 else ''}); a 2D map of them would be meaningless. "
                                  "Pass instances= without them, or fix the model.")
        centre = total / self.n
        dof = max(1, self.n - 1)
        if covariance:
            cov = (cross - self.n * np.outer(centre, centre)) / dof
            return shift + centre, float(np.trace(cov)), cov
        variance = np.maximum(total_sq - self.n * centre * centre, 0).sum() / dof
        return shift + centre, float(variance), None

    def times(self, m: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """(A - mean) @ m, n x l."""
        out = np.empty((self.n, m.shape[1]), dtype=np.float64)
        m32, mean32 = m.astype(np.float32), mean.astype(np.float32)
        for s, e, block in self.blocks():
            block -= mean32
            out[s:e] = block @ m32
        return out

    def transpose_times(self, q: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """(A - mean).T @ q, d x l."""
        out = np.zeros((self.d, q.shape[1]))
        mean32 = mean.astype(np.float32)
        for s, e, block in self.blocks():
            block -= mean32
            out += block.T @ q[s:e].astype(np.float32)
        return out


def _pca(rows: _Rows, k: int, seed: int, stage: Callable[[float], None]) -> tuple[np.ndarray, np.ndarray]:
    """Top-k principal component scores (n x k float32) and explained-variance ratios.

    Streams the memory map in chunks, so a million-row float16 layer is never held as float32.
    Exact (eigenvectors of the covariance, two passes) for layers up to
    ``_COVARIANCE_MAX_WIDTH`` neurons; wider layers use a streaming randomized SVD (Halko,
    Martinsson & Tropp) whose cost grows with the width only linearly. Signs are fixed (largest
    loading positive) so that a layout does not flip between runs.
    """
    k = min(k, rows.d, rows.n)
    if rows.d <= _COVARIANCE_MAX_WIDTH:
        stage(0.0)
        mean, total_var, cov = rows.moments(covariance=True)
        stage(0.5)
        values, vectors = np.linalg.eigh(cov)
        top = np.argsort(values)[::-1][:k]
        components, variances = vectors[:, top].T, np.maximum(values[top], 0)
    else:
        components, variances, mean, total_var = _randomized_components(rows, k, seed, stage)
    signs = np.sign(components[np.arange(k), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1, signs)[:, None]
    scores = rows.times(components.T, mean)
    stage(1.0)
    ratio = variances / total_var if total_var > 0 else np.zeros(k)
    return np.ascontiguousarray(scores, dtype=np.float32), ratio


def _randomized_components(rows: _Rows, k: int, seed: int, stage: Callable[[float], None]):
    passes = 3 + 2 * _POWER_ITERATIONS
    stage(0 / passes)
    mean, total_var, _ = rows.moments(covariance=False)
    width = min(k + 20, rows.d, rows.n)
    rng = np.random.default_rng(seed)
    q = rows.times(rng.standard_normal((rows.d, width)), mean)
    for i in range(_POWER_ITERATIONS):
        q, _ = np.linalg.qr(q)
        stage((1 + 2 * i) / passes)
        w, _ = np.linalg.qr(rows.transpose_times(q, mean))
        stage((2 + 2 * i) / passes)
        q = rows.times(w, mean)
    q, _ = np.linalg.qr(q)
    b = rows.transpose_times(q, mean).T
    _, s, vt = np.linalg.svd(b, full_matrices=False)
    return vt[:k], s[:k] ** 2 / max(1, rows.n - 1), mean, total_var


def _as_layout(scores: np.ndarray) -> np.ndarray:
    """n x 2 float32 from the first two score columns (a 1-neuron layer gets y = 0)."""
    out = np.zeros((scores.shape[0], 2), dtype=np.float32)
    out[:, : min(2, scores.shape[1])] = scores[:, :2]
    return out


# ----------------------------------------------------------------------------- neighbours
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


# ----------------------------------------------------------------------------- t-SNE (child process)
_TSNE_ITERATION = re.compile(r"\[t-SNE\] Iteration (\d+):")


def _tsne_in_child(x: np.ndarray, init: np.ndarray, params: dict, job: ProjectionJob,
                   stage: Callable[[float], None]) -> np.ndarray:
    """scikit-learn's t-SNE in a child process: it can be stopped, and it never holds our GIL.

    Progress comes from the iteration lines scikit-learn prints with ``verbose=2``.
    """
    folder = pathlib.Path(tempfile.mkdtemp(prefix="activis-tsne-"))
    try:
        np.save(folder / "input.npy", x)
        np.save(folder / "init.npy", init)
        child = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "tsne", str(folder),
                                  json.dumps(params)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job._attach_child(child)
        tail: list[str] = []
        for line in child.stdout:
            tail = (tail + [line.rstrip()])[-20:]
            match = _TSNE_ITERATION.search(line)
            if match:
                stage(int(match.group(1)) / params["max_iter"])
        code = child.wait()
        job._tick()
        if code != 0:
            raise ProjectionError(f"t-SNE stopped with exit code {code}:\n" + "\n".join(tail))
        return np.load(folder / "output.npy", allow_pickle=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tsne_child_main(folder: str, params_json: str) -> None:
    import inspect

    from sklearn.manifold import TSNE

    folder_path = pathlib.Path(folder)
    p = json.loads(params_json)
    x = np.load(folder_path / "input.npy", allow_pickle=False)
    init = np.load(folder_path / "init.npy", allow_pickle=False)
    # scikit-learn < 1.5 calls max_iter n_iter
    iterations = "max_iter" if "max_iter" in inspect.signature(TSNE).parameters else "n_iter"
    layout = TSNE(n_components=2, perplexity=p["perplexity"], early_exaggeration=p["early_exaggeration"],
                  init=init, learning_rate="auto", random_state=p["random_state"], verbose=2,
                  **{iterations: p["max_iter"]}).fit_transform(x)
    np.save(folder_path / "output.npy", layout.astype(np.float32))


# ----------------------------------------------------------------------------- cache
def _fingerprint(a: np.ndarray) -> str:
    """Shape, dtype and 256 evenly spaced rows: changes when a store is rewritten or grows."""
    h = hashlib.sha1(json.dumps([list(a.shape), a.dtype.str]).encode())
    if len(a):
        rows = np.unique(np.linspace(0, len(a) - 1, min(len(a), 256)).astype(np.int64))
        h.update(np.ascontiguousarray(a[rows]).tobytes())
    return h.hexdigest()


def _digest(instances: np.ndarray | None) -> str:
    if instances is None:
        return "all"
    return hashlib.sha1(instances.astype("<i8").tobytes()).hexdigest()


class _Cache:
    """``.npy`` arrays + ``.json`` descriptions in the store's projections section; never pickled."""

    def __init__(self, store):
        self.folder = pathlib.Path(store.section(SECTION))

    def load(self, name: str, shape: tuple[int, int]) -> np.ndarray | None:
        path = self.folder / f"{name}.npy"
        if not path.exists():
            return None
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            warnings.warn(f"Ignoring unreadable cached projection {path.name}: {exc}", stacklevel=3)
            return None
        if arr.shape != shape or (arr.dtype.kind == "f" and not np.isfinite(arr).all()):
            warnings.warn(f"Ignoring cached projection {path.name}: it has shape {arr.shape}, "
                          f"not {shape}, or non-finite values.", stacklevel=3)
            return None
        arr.flags.writeable = False
        return arr

    def meta(self, name: str) -> dict:
        try:
            return json.loads((self.folder / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}

    def save(self, name: str, arr: np.ndarray, meta: dict | None = None) -> None:
        """Write atomically; the .json (when given) marks a layout that list_projections shows."""
        files = [(".npy", lambda f: np.save(f, arr, allow_pickle=False))]
        if meta is not None:
            files.append((".json", lambda f: f.write(json.dumps(meta, indent=1).encode())))
        for suffix, write in files:
            target = self.folder / f"{name}{suffix}"
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                with open(tmp, "wb") as f:
                    write(f)
                os.replace(tmp, target)
            except OSError as exc:  # a read-only store still projects; it just cannot remember
                tmp.unlink(missing_ok=True)
                warnings.warn(f"Could not cache {target.name} in {self.folder}: {exc}", stacklevel=3)
                return


def list_projections(store) -> list[dict]:
    """What the store has cached: one description per layout (layer, method, params, instances...)."""
    folder = pathlib.Path(store.section(SECTION))
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("method") in METHODS and (folder / f"{path.stem}.npy").exists():
            out.append(meta)
    return out


def clear_projections(store, layer: str | None = None) -> int:
    """Delete cached layouts (of one layer, or all); returns how many were removed."""
    folder = pathlib.Path(store.section(SECTION))
    removed = 0
    for path in folder.glob("*.json"):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            meta = {}
        if layer is None or meta.get("layer") == layer:
            for stale in (path, folder / f"{path.stem}.npy", folder / f"{path.stem}-dist.npy"):
                stale.unlink(missing_ok=True)
            removed += meta.get("method") in METHODS
    return removed


# ----------------------------------------------------------------------------- jobs
def _single_threaded_blas():
    """One BLAS thread while a job runs: the job is background work, and the other core stays free.

    Measured on a shared 2-core machine: OpenBLAS's two spinning threads made the covariance of
    100,000 x 512 activations take 1.4-1.7 s instead of 0.3 s with one thread whenever other
    processes competed for the cores (and they do, in a notebook: the kernel, the browser).
    The limit is process-wide while it holds (OpenBLAS has one setting), so the notebook's own
    numpy calls run single-threaded during a projection too.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def instance_rows(instances, n_total: int) -> np.ndarray | None:
    """Validated instance indices (int64, order kept) from indices or a boolean mask; None = all."""
    if instances is None:
        return None
    arr = np.asarray(instances)
    if arr.dtype == bool:
        if arr.shape != (n_total,):
            raise ValueError(f"A boolean instances mask must have one entry per instance ({n_total}), "
                             f"not shape {arr.shape}.")
        arr = np.flatnonzero(arr)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError("instances must be a 1-D array of instance indices or a boolean mask.")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n_total):
        raise IndexError(f"instances must lie in [0, {n_total}); got {arr.min()}..{arr.max()}.")
    if len(np.unique(arr)) != len(arr):
        raise ValueError("instances contains repeated indices; each instance can be placed once.")
    return arr


class ProjectionJob:
    """One 2D layout of a layer's instances, computed in the background or loaded from the cache.

    ``status`` is pending, running, done, failed or cancelled; ``stage`` and ``progress`` (0-1) say
    how far it is; ``preview`` holds the PCA layout as soon as a UMAP or t-SNE job has it;
    ``positions`` (n x 2 float32, read-only, rows in the order of ``instances``) the result.
    ``on_change(callback)`` calls ``callback(job)`` from the worker thread, at most ten times a
    second plus once for every new status, stage or preview.
    """

    def __init__(self, store, layer: str, method: str = "umap", *, instances=None, **params):
        self.store = store
        self.layer = layer
        self.method = method
        self._activations = store.activations(layer)  # a clear KeyError listing the layers
        self.instances = instance_rows(instances, self._activations.shape[0])
        self.n = len(self.instances) if self.instances is not None else self._activations.shape[0]
        if self.n == 0:
            raise ProjectionError(f"Layer {layer!r} has no instances to project yet.")
        self.params = _resolve_params(method, params, self.n)
        self._fingerprint = _fingerprint(self._activations)
        self.key = self._key(method, self.params)
        self.status = "pending"
        self.stage = ""
        self.progress = 0.0
        self.preview: np.ndarray | None = None
        self.positions: np.ndarray | None = None
        self.info: dict = {}
        self.error: BaseException | None = None
        self.from_cache = False
        self.elapsed: float | None = None
        self._cache = _Cache(store)
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._cancel = threading.Event()
        self._observers: list[Callable[[ProjectionJob], None]] = []
        self._last_notify = 0.0
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None

    def _key(self, method: str, params: dict) -> str:
        description = {"engine": ENGINE_VERSION, "layer": self.layer, "method": method, "params": params,
                       "data": self._fingerprint, "instances": _digest(self.instances)}
        return hashlib.sha1(json.dumps(description, sort_keys=True).encode()).hexdigest()[:24]

    def _name(self, method: str, key: str) -> str:
        return f"{method}-{key}"

    # ------------------------------------------------------------------ public
    @property
    def done(self) -> bool:
        return self.status in ("done", "failed", "cancelled")

    def start(self) -> ProjectionJob:
        """Load the layout from the cache, or compute it in a background thread; returns self."""
        with self._lock:  # against a concurrent cancel(): a job starts once, or not at all
            if self.status != "pending":
                return self
            cached = self._cache.load(self._name(self.method, self.key), (self.n, 2))
            if cached is not None:
                self.info = self._cache.meta(self._name(self.method, self.key)).get("info", {})
                self.from_cache = True
                self.positions, self.progress, self.stage = cached, 1.0, "done"
                self.status, self.elapsed = "done", 0.0
                self._done.set()
            else:
                if self.method != "pca":
                    self.preview = self._cache.load(self._name("pca", self._key("pca", {})), (self.n, 2))
                self.status = "running"
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"activis-{self.method}-{self.layer}")
                self._thread.start()
        self._notify(force=True)
        return self

    def cancel(self) -> None:
        """Stop the job at its next checkpoint (a t-SNE child process is terminated at once)."""
        self._cancel.set()
        with self._lock:
            child = self._child
            if self.status == "pending":
                self._finish("cancelled")
        if child is not None and child.poll() is None:
            child.terminate()

    def wait(self, timeout: float | None = None) -> np.ndarray:
        """Block until the layout is ready and return it (raises if it failed or was cancelled)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.wait(0.2):  # short waits keep Ctrl-C / kernel interrupt working
            if self.status == "pending":
                raise ProjectionError("This job was never started; call job.start() or use project().")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self!r} did not finish within {timeout} s.")
        if self.status == "failed":
            raise ProjectionError(f"{self.method.upper()} of layer {self.layer!r} failed: {self.error}") \
                from self.error
        if self.status == "cancelled":
            raise ProjectionCancelled(f"{self.method.upper()} of layer {self.layer!r} was cancelled.")
        return self.positions

    def on_change(self, callback: Callable[[ProjectionJob], None]) -> Callable[[], None]:
        """Call ``callback(job)`` on progress (once, however often it is added); returns an unsubscriber."""
        with self._lock:
            if callback not in self._observers:
                self._observers.append(callback)

        def unsubscribe():
            with self._lock:
                if callback in self._observers:
                    self._observers.remove(callback)
        return unsubscribe

    def __repr__(self) -> str:
        state = self.status
        if self.status == "running":
            state += f" · {self.stage} {self.progress:.0%}"
        elif self.status == "done":
            state += " (cached)" if self.from_cache else f" in {self.elapsed:.1f} s"
        return f"<ProjectionJob {self.method} of {self.layer!r} ({self.n:,} instances): {state}>"

    # ------------------------------------------------------------------ worker
    def _tick(self) -> None:
        if self._cancel.is_set():
            raise _Cancelled

    def _attach_child(self, child: subprocess.Popen) -> None:
        with self._lock:
            self._child = child
        if self._cancel.is_set():
            child.terminate()

    def _stage(self, name: str, low: float, high: float) -> Callable[[float], None]:
        def report(fraction: float) -> None:
            self._tick()
            with self._lock:
                new_stage = self.stage != name
                self.stage = name
                self.progress = max(self.progress, low + (high - low) * min(1.0, max(0.0, fraction)))
            self._notify(force=new_stage)
        return report

    def _notify(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last_notify < _NOTIFY_EVERY_S:
                return
            self._last_notify = now
            observers = list(self._observers)
        for callback in observers:
            try:
                callback(self)
            except Exception:  # a broken view must not kill the computation
                import logging

                logging.getLogger(__name__).exception("projection observer failed")

    def _finish(self, status: str, positions: np.ndarray | None = None, error: BaseException | None = None,
                elapsed: float | None = None) -> None:
        with self._lock:
            if positions is not None:
                self.positions = positions
                self.progress = 1.0
                self.stage = "done"
            self.status, self.error, self.elapsed = status, error, elapsed
            self._done.set()
        self._notify(force=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        self._notify(force=True)
        try:
            with _single_threaded_blas():
                layout = getattr(self, f"_compute_{self.method}")()
            layout = np.ascontiguousarray(layout, dtype=np.float32)
            layout.flags.writeable = False
            self._tick()
            self._save(self.method, self.key, self.params, layout, time.perf_counter() - t0)
            self._finish("done", positions=layout, elapsed=time.perf_counter() - t0)
        except _Cancelled:
            self._finish("cancelled", elapsed=time.perf_counter() - t0)
        except Exception as exc:
            if self._cancel.is_set():  # a terminated t-SNE child, for example
                self._finish("cancelled", elapsed=time.perf_counter() - t0)
            else:
                self._finish("failed", error=exc, elapsed=time.perf_counter() - t0)

    def _save(self, method: str, key: str, params: dict, layout: np.ndarray, seconds: float) -> None:
        meta = {"layer": self.layer, "method": method, "params": params, "n": self.n,
                "instances": _digest(self.instances), "data": self._fingerprint, "engine": ENGINE_VERSION,
                "seconds": round(seconds, 3), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "info": self.info if method == self.method else {}}
        self._cache.save(self._name(method, key), layout, meta)

    def _rows(self) -> _Rows:
        return _Rows(self._activations, self.instances, self._tick)

    def _pca_scores(self, k: int, seed: int, high: float) -> np.ndarray:
        """PCA scores; publishes (and caches) their first two columns as the preview."""
        t0 = time.perf_counter()
        scores, ratio = _pca(self._rows(), k, seed, self._stage("PCA", 0.0, high))
        if self.method == "pca":
            self.info = {"explained_variance": [round(float(r), 6) for r in ratio[:2]]}
        if self.method != "pca" and self.preview is None:
            preview = _as_layout(scores)
            preview.flags.writeable = False
            self._save("pca", self._key("pca", {}), {}, preview, time.perf_counter() - t0)
            with self._lock:
                self.preview = preview
            self._notify(force=True)
        return scores

    def _compute_pca(self) -> np.ndarray:
        return _as_layout(self._pca_scores(2, 0, 1.0))

    def _compute_umap(self) -> np.ndarray:
        p = self.params
        knn_params = {"n_neighbors": p["n_neighbors"], "pca_dims": p["pca_dims"], "random_state": p["random_state"]}
        knn_name = self._name("knn", self._key("knn", knn_params))
        shape = (self.n, p["n_neighbors"])
        idx = self._cache.load(knn_name, shape)
        dist = self._cache.load(f"{knn_name}-dist", shape) if idx is not None else None
        if dist is None:  # neighbours are kept: changing min_dist or n_epochs then skips this part
            scores = self._pca_scores(p["pca_dims"], p["random_state"], 0.15)
            idx, dist = _nearest_neighbors(scores, p["n_neighbors"], p["random_state"],
                                           self._stage("neighbours", 0.15, 0.45))
            self._cache.save(knn_name, idx.astype(np.int32), {"layer": self.layer, "method": "knn",
                                                              "params": knn_params, "n": self.n})
            self._cache.save(f"{knn_name}-dist", dist.astype(np.float32))
        if self.preview is None:
            self._pca_scores(2, p["random_state"], 0.15)
        self._stage("fuzzy graph", 0.45, 0.5)(0.0)
        graph = _fuzzy_graph(idx.astype(np.int64), dist.astype(np.float32), self.n)
        init = _initial_layout(self.preview, p["random_state"])
        return _umap_layout(graph, init, p, self._stage("layout", 0.5, 1.0))

    def _compute_tsne(self) -> np.ndarray:
        p = self.params
        scores = self._pca_scores(p["pca_dims"], p["random_state"], 0.1)
        first = self.preview[:, 0].astype(np.float64)
        scale = first.std() or 1.0
        init = (self.preview / scale * 1e-4).astype(np.float32)  # scikit-learn's scaling of a PCA init
        child_params = {k: p[k] for k in ("perplexity", "max_iter", "early_exaggeration", "random_state")}
        return _tsne_in_child(scores, init, child_params, self, self._stage("t-SNE", 0.1, 1.0))


def project(store, layer: str, method: str = "umap", *, instances=None, **params) -> ProjectionJob:
    """Start a 2D layout of ``layer``'s activations; returns the running (or cached) job.

    ``method`` is "pca" (seconds even for a million instances), "umap" (default; parameters
    n_neighbors=15, min_dist=0.1, spread=1.0, n_epochs=auto, pca_dims=50, random_state=0) or
    "tsne" (perplexity=30, max_iter=1000, early_exaggeration=12, pca_dims=50, random_state=0).
    ``instances`` (indices or a boolean mask) restricts the map to a subset. ``job.wait()``
    returns the n x 2 positions.
    """
    return ProjectionJob(store, layer, method, instances=instances, **params).start()


class Projector:
    """The projection behind one view: a new request cancels the one still running.

    Requesting what is already running (or done) returns that job instead of starting again.
    """

    def __init__(self, store):
        self.store = store
        self._current: ProjectionJob | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> ProjectionJob | None:
        return self._current

    def request(self, layer: str, method: str = "umap", *, instances=None,
                on_change: Callable[[ProjectionJob], None] | None = None, **params) -> ProjectionJob:
        """The job for this layout, started; ``on_change`` is subscribed before it starts."""
        job = ProjectionJob(self.store, layer, method, instances=instances, **params)
        with self._lock:
            current = self._current
            if current is not None and current.key == job.key and current.status in ("running", "done"):
                job = current
            else:
                if current is not None and not current.done:
                    current.cancel()
                self._current = job
        if on_change is not None:
            job.on_change(on_change)
        return job.start()

    def cancel(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current.cancel()


if __name__ == "__main__":  # the t-SNE child process: python projection.py tsne FOLDER PARAMS
    # run as a script, so that the child imports neither activis nor its dependencies; drop this
    # file's folder from the path so that activis's own module names cannot shadow others
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    if len(sys.argv) != 4 or sys.argv[1] != "tsne":
        sys.exit("usage: projection.py tsne FOLDER PARAMS_JSON")
    _tsne_child_main(sys.argv[2], sys.argv[3])

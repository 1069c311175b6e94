"""Chunked reads of a layer's rows and PCA (covariance or streaming randomized SVD) over them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import ProjectionError

_CHUNK_BYTES = 32 << 20  # rows read from the memory map per step
_POWER_ITERATIONS = 4
_COVARIANCE_MAX_WIDTH = 2048  # wider layers: randomized PCA (covariance costs n x width^2)


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

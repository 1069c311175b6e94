"""Centred kernel alignment (Kornblith et al., 2019), as the authors' demo computes it, in float64.

Linear CKA over many rows uses the feature-space form ‖YᵀX‖² / (‖XᵀX‖ ‖YᵀY‖) (debiased: the same
U-statistic corrections written on feature products), which is exact, takes time linear in n and holds
only feature x feature products (one BLAS syrk of [X Y] per block of rows). The Gram (n x n) form is
used where it is the cheaper one (fewer rows than features, or features too wide for their products),
and RBF always needs it; Gram forms read at most ``max_rows`` rows, a uniform sample drawn with
``random_state`` (the same rows for x and y).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .cartography import checkpoint_steps
from .errors import DynamicsError, whole_number

KERNELS = ("linear", "rbf")
MAX_ROWS = 4096  # a Gram matrix of 4,096 rows is 134 MB in float64
_FEATURE_PRODUCT_MAX = 1 << 24  # entries of XᵀX, YᵀX or YᵀY the feature-space form may hold (128 MB each)


def _features(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim < 2:
        raise DynamicsError(f"{name} must be shaped (instances, features...), got shape {a.shape}.")
    if a.dtype.kind not in "fiub":
        raise DynamicsError(f"{name} must be numbers, got dtype {a.dtype}.")
    return a.reshape(len(a), -1)


def _checked_pair(x, y, kernel: str, threshold: float, debiased: bool):
    x, y = _features(x, "x"), _features(y, "y")
    if len(x) != len(y):
        raise DynamicsError(f"x and y must hold the same instances: x has {len(x):,} rows, y has {len(y):,}.")
    if kernel not in KERNELS:
        raise DynamicsError(f"Unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}.")
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        threshold = float("nan")
    if not (np.isfinite(threshold) and threshold > 0):
        raise DynamicsError(f"threshold must be a positive number (the RBF width, in median distances), "
                            f"not {threshold}.")
    if not isinstance(debiased, bool | np.bool_):
        raise DynamicsError(f"debiased is True or False, not {debiased!r}.")
    least = 4 if debiased else 2
    if len(x) < least:
        raise DynamicsError(f"{'Debiased ' if debiased else ''}CKA needs at least {least} instances, got {len(x)}.")
    for a, name in ((x, "x"), (y, "y")):
        if not np.isfinite(a).all():
            raise DynamicsError(f"{name} holds {np.count_nonzero(~np.isfinite(a)):,} NaN or infinite value(s); "
                                "CKA needs finite activations.")
    return x, y, threshold


def cka(x, y, kernel: str = "linear", threshold: float = 1.0, debiased: bool = False, *,
        max_rows: int = MAX_ROWS, random_state: int = 0) -> float:
    """CKA between two representations of the same instances (rows): 1 = the same up to rotation and scale.

    ``kernel``: "linear" or "rbf" (width ``threshold`` x the median distance). ``debiased``: the unbiased
    HSIC estimator (Székely & Rizzo's U-centring), fair across different numbers of instances.
    """
    x, y, threshold = _checked_pair(x, y, kernel, threshold, debiased)
    max_rows, random_state = whole_number(max_rows, "max_rows", 4), whole_number(random_state, "random_state", 0)
    n, p, q = len(x), x.shape[1], y.shape[1]
    if kernel == "linear" and n > max(p, q) and max(p, q) ** 2 <= _FEATURE_PRODUCT_MAX:
        return _feature_space_linear(x, y, debiased)
    rows = _sample_rows(n, max_rows, random_state)
    if rows is not None:
        x, y = x[rows], y[rows]
    gram = _gram_linear if kernel == "linear" else (lambda a: _gram_rbf(a, threshold))
    return _gram_cka(gram(x), gram(y), debiased)


def _sample_rows(n: int, max_rows: int, random_state: int) -> np.ndarray | None:
    if n <= max_rows:
        return None
    return np.sort(np.random.default_rng(random_state).choice(n, int(max_rows), replace=False))


def _debiased_product(xty: float, rows_x: np.ndarray, rows_y: np.ndarray, total_x: float, total_y: float,
                      n: int) -> float:
    """The unbiased HSIC of two linear kernels from feature products (the demo's helper)."""
    return xty - n / (n - 2.0) * rows_x.dot(rows_y) + total_x * total_y / ((n - 1) * (n - 2))


def _feature_space_linear(x: np.ndarray, y: np.ndarray, debiased: bool, block: int = 8192) -> float:
    """XᵀX, YᵀX and YᵀY of the centred features, in float64, as one symmetric rank-k update (BLAS syrk)
    of [X Y]ᵀ[X Y] per block of rows: half the products of three separate ones, and memory stays at a
    block (a memmap is never loaded whole)."""
    from scipy.linalg.blas import dsyrk

    n, p, q = len(x), x.shape[1], y.shape[1]
    mean_x, mean_y = x.mean(axis=0, dtype=np.float64), y.mean(axis=0, dtype=np.float64)
    products = np.zeros((p + q, p + q), order="F")
    rows_x, rows_y = np.empty(n), np.empty(n)
    for s in range(0, n, block):
        e = min(n, s + block)
        z = np.empty((p + q, e - s), order="F")  # this block's centred features, one column per instance
        np.subtract(x[s:e], mean_x, out=z[:p].T)
        np.subtract(y[s:e], mean_y, out=z[p:].T)
        products = dsyrk(1.0, z, beta=1.0, c=products, overwrite_c=1)  # upper triangle of z zᵀ, accumulated
        rows_x[s:e], rows_y[s:e] = np.einsum("ij,ij->j", z[:p], z[:p]), np.einsum("ij,ij->j", z[p:], z[p:])
    similarity = np.linalg.norm(products[:p, p:]) ** 2
    norm_x, norm_y = _symmetric_norm(products[:p, :p]), _symmetric_norm(products[p:, p:])
    if debiased:
        total_x, total_y = rows_x.sum(), rows_y.sum()
        similarity = _debiased_product(similarity, rows_x, rows_y, total_x, total_y, n)
        norm_x = np.sqrt(max(_debiased_product(norm_x ** 2, rows_x, rows_x, total_x, total_x, n), 0.0))
        norm_y = np.sqrt(max(_debiased_product(norm_y ** 2, rows_y, rows_y, total_y, total_y, n), 0.0))
    return _ratio(similarity, norm_x * norm_y)


def _symmetric_norm(upper: np.ndarray) -> float:
    """The Frobenius norm of a symmetric matrix of which only the upper triangle is filled."""
    triangle = np.triu(upper)
    return float(np.sqrt(max(2 * np.vdot(triangle, triangle) - np.vdot(np.diag(upper), np.diag(upper)), 0.0)))


def _ratio(similarity: float, norms: float) -> float:
    """A constant representation has no alignment with anything: 0, not NaN."""
    return float(similarity / norms) if norms > 0 else 0.0


def _gram_linear(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a @ a.T


def _gram_rbf(a: np.ndarray, threshold: float) -> np.ndarray:
    gram = _gram_linear(a)
    sq = np.diag(gram).copy()
    gram *= -2
    gram += sq[:, None]
    gram += sq[None, :]  # squared distances
    median = np.median(gram)
    if median <= 0:
        return np.ones_like(gram)  # (nearly) all rows equal: every pair is as close as can be
    gram *= -1.0 / (2 * threshold ** 2 * median)
    return np.exp(gram, out=gram)


def _centre_gram(gram: np.ndarray, debiased: bool) -> np.ndarray:
    """H K H, or the U-centring of the unbiased estimator; in place."""
    n = len(gram)
    if debiased:
        np.fill_diagonal(gram, 0)
        means = gram.sum(axis=0) / (n - 2)
        means -= means.sum() / (2 * (n - 1))
    else:
        means = gram.mean(axis=0)
        means -= means.mean() / 2
    gram -= means[:, None]
    gram -= means[None, :]
    if debiased:
        np.fill_diagonal(gram, 0)
    return gram


def _gram_cka(gram_x: np.ndarray, gram_y: np.ndarray, debiased: bool) -> float:
    gram_x, gram_y = _centre_gram(gram_x, debiased), _centre_gram(gram_y, debiased)
    return _ratio(np.vdot(gram_x, gram_y), np.linalg.norm(gram_x) * np.linalg.norm(gram_y))


def cka_matrix(store, layers=None, *, other=None, other_layers=None, **options) -> pd.DataFrame:
    """Which layers settle first, or how two models' layers correspond.

    Without ``other``: rows are ``layers`` (default: all the store's), columns the checkpoint steps,
    each value the CKA of the layer at that step with the same layer at the final checkpoint.
    With ``other`` (another store of the same instances: a second run, another model): rows are this
    store's layers, columns ``other``'s, at each store's latest checkpoint. ``options`` go to `cka`.
    """
    if other is None:
        steps = checkpoint_steps(store)
        views = [store.at(step) for step in steps]
        layers = _layers(store, layers, "layers")
        values = [[cka(view.activations(layer), views[-1].activations(layer), **options) for view in views]
                  for layer in layers]
        frame = pd.DataFrame(values, index=pd.Index(layers, name="layer"), columns=pd.Index(steps, name="step"))
        return frame
    first, second = _latest(store), _latest(other)
    layers = _layers(store, layers, "layers")
    other_layers = _layers(other, other_layers, "other_layers")
    _check_same_instances(first.instances, second.instances)
    values = [[cka(first.activations(a), second.activations(b), **options) for b in other_layers] for a in layers]
    return pd.DataFrame(values, index=pd.Index(layers, name="layer"), columns=pd.Index(other_layers, name="other"))


def _check_same_instances(first: pd.DataFrame, second: pd.DataFrame) -> None:
    if len(first) != len(second):
        raise DynamicsError(f"The two stores must hold the same instances: {len(first):,} and {len(second):,} rows.")
    if "label" in first.columns and "label" in second.columns:
        differ = np.count_nonzero(first["label"].to_numpy() != second["label"].to_numpy())
        if differ:
            raise DynamicsError(f"The two stores' labels differ at {differ:,} of {len(first):,} instances: CKA needs "
                                "the same instances in the same order.")


def _latest(store):
    """The store as at its last checkpoint (a store without checkpoints is its own latest state)."""
    steps = list(getattr(store, "checkpoints", None) or [])
    return store.at(steps[-1]) if steps and callable(getattr(store, "at", None)) else store


def _layers(store, layers, name: str) -> list[str]:
    available = list(getattr(store, "layers", None) or [])
    if layers is None:
        if not available:
            raise DynamicsError(f"Name the {name} to compare: the store does not list its layers.")
        return available
    layers = [layers] if isinstance(layers, str) else list(layers)
    unknown = [layer for layer in layers if available and layer not in available]
    if unknown:
        raise DynamicsError(f"Unknown layer(s) {unknown} in {name}; the store has: {', '.join(available)}.")
    return layers

"""Aligned 2-D layouts across checkpoints: an instance moves only when its representation moves.

umap-learn's AlignedUMAP optimises every checkpoint's layout jointly (436 s for 10 x 1,797 here). The
representations of consecutive checkpoints mostly share their neighbourhoods (85-95 % of each instance's
10 nearest neighbours on the digits MLP), so this takes the shorter road, with the project's own UMAP
(`activis.projection.umap`: the same fuzzy graph, a/b curve and SGD):

1. the final checkpoint gets a full UMAP layout (it is the most structured, and the one the model ends at);
2. walking back one checkpoint at a time, each layout starts from the next one's (an instance whose
   neighbours changed starts partly at the mean position of its new neighbours there, in proportion to
   the change) and is refined with the UMAP SGD of its own neighbour graph, at a learning rate that grows
   with how much the neighbourhoods changed between the two checkpoints (1 - the mean overlap of the
   neighbour sets), while each instance is pulled back towards that start in proportion to how much of
   *its own* neighbourhood stayed the same;
3. each layout is rotated onto the next by orthogonal Procrustes (least squares), removing any rotation.

``benchmarks/bench_aligned.py`` compares it with AlignedUMAP on the same frames.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..projection.params import _default_epochs
from ..projection.pca import _as_layout, _pca, _Rows
from ..projection.umap import _ab_params, _fuzzy_graph, _initial_layout, _nearest_neighbors, _sgd_kernel
from .errors import DynamicsError, whole_number

_PCA_DIMS = 50
_HOLD = 0.1  # per-epoch pull towards the next layout of an instance whose neighbours did not change
_LEARNING_RATE = (0.03, 0.5)  # bounds of the refinement's initial learning rate (UMAP's own is 1)


def _checked_frames(arrays) -> list[np.ndarray]:
    if isinstance(arrays, np.ndarray) and arrays.ndim == 3:
        arrays = list(arrays)
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence) or not len(arrays):
        raise DynamicsError("arrays must be a list of one (instances, features) array per checkpoint, in training "
                            "order (or one array shaped (checkpoints, instances, features)).")
    frames = []
    for t, a in enumerate(arrays):
        a = np.asarray(a)
        if a.ndim < 2 or a.dtype.kind not in "fiub":
            raise DynamicsError(f"arrays[{t}] must be numbers shaped (instances, features), got {a.dtype} "
                                f"{a.shape}.")
        a = a.reshape(len(a), -1)
        if len(a) != len(frames[0] if frames else a):
            raise DynamicsError(f"Every checkpoint must hold the same instances: arrays[0] has {len(frames[0]):,} "
                                f"rows, arrays[{t}] has {len(a):,}.")
        if not np.isfinite(a).all():
            raise DynamicsError(f"arrays[{t}] holds {np.count_nonzero(~np.isfinite(a)):,} NaN or infinite "
                                "value(s); a layout needs finite activations.")
        frames.append(a)
    if len(frames[0]) < 4:
        raise DynamicsError(f"An aligned projection needs at least 4 instances, got {len(frames[0])}.")
    return frames


def _frame_graph(x: np.ndarray, k: int, seed: int):
    """One checkpoint's UMAP fuzzy graph, its neighbour lists (self first) and its PCA-2 scores."""
    scores, _ = _pca(_Rows(x, None, lambda: None), _PCA_DIMS, seed, lambda _: None)
    idx, dist = _nearest_neighbors(scores, k, seed, lambda _: None)
    return _fuzzy_graph(idx.astype(np.int64), dist.astype(np.float32), len(x)), idx, _as_layout(scores)


def _optimise(graph, init: np.ndarray, n_epochs: int, learning_rate: float, curve: tuple[float, float], seed: int,
              anchor: np.ndarray | None = None, hold: np.ndarray | None = None) -> np.ndarray:
    """UMAP's SGD from ``init`` (the compiled kernel, one epoch per call), with an optional per-epoch
    pull of each instance towards ``anchor`` of strength ``hold`` x the epoch's learning rate."""
    weights = graph.data.astype(np.float64)
    keep = weights >= weights.max() / n_epochs
    head, tail = graph.row[keep].astype(np.int32), graph.col[keep].astype(np.int32)
    epochs_per_sample = weights.max() / weights[keep]
    epochs_per_negative = epochs_per_sample / 5.0
    next_sample, next_negative = epochs_per_sample.copy(), epochs_per_negative.copy()
    rng_state = np.random.default_rng(seed).integers(-(2**31), 2**31 - 1, size=(len(init), 3), dtype=np.int64)
    emb = np.array(init, dtype=np.float32)
    kernel = _sgd_kernel()
    for epoch in range(n_epochs):
        kernel(emb, head, tail, epochs_per_sample, next_sample, epochs_per_negative, next_negative, rng_state,
               curve[0], curve[1], 1.0, learning_rate, n_epochs, epoch, epoch + 1)
        if anchor is not None:
            rate = learning_rate * (1.0 - max(epoch - 1, 0) / n_epochs)  # the kernel's own schedule
            emb += (rate * hold)[:, None] * (anchor - emb)
    return emb


def _neighbour_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per instance, the fraction of its neighbours (self excluded) shared by two neighbour lists."""
    both = np.sort(np.concatenate([a[:, 1:], b[:, 1:]], axis=1), axis=1)
    return np.count_nonzero(both[:, 1:] == both[:, :-1], axis=1) / max(a.shape[1] - 1, 1)


def _procrustes(layout: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``layout`` rotated (or reflected) about its centre onto ``target``, in the least-squares sense."""
    centre, target_centre = layout.mean(axis=0), target.mean(axis=0)
    u, _, vt = np.linalg.svd((layout - centre).T.astype(np.float64) @ (target - target_centre))
    return ((layout - centre) @ (u @ vt) + centre).astype(np.float32)


def aligned_projection(arrays, random_state: int = 0, *, n_neighbors: int = 10, min_dist: float = 0.1,
                       n_epochs: int | None = None) -> list[np.ndarray]:
    """One (instances, 2) layout per checkpoint, aligned so that an instance moves only when its
    representation moves.

    ``arrays``: one (instances, features) array per checkpoint, in training order, the same instances in
    the same rows (e.g. ``[store.at(s).activations("fc1") for s in store.checkpoints]``).
    ``n_neighbors=10`` (UMAP's is 15) keeps the nearest neighbours most faithfully; ``n_epochs`` is the
    final layout's (default as UMAP's: 500 up to 10,000 instances); each earlier checkpoint is refined
    for a fifth of it.
    """
    frames = _checked_frames(arrays)
    n = len(frames[0])
    seed = whole_number(random_state, "random_state", 0)
    k = max(2, min(whole_number(n_neighbors, "n_neighbors", 2), n - 1))  # a handful of instances: all of them
    epochs = _default_epochs(n) if n_epochs is None else whole_number(n_epochs, "n_epochs", 5)
    if isinstance(min_dist, bool) or not isinstance(min_dist, int | float | np.integer | np.floating) \
            or not 0 <= min_dist <= 1:
        raise DynamicsError(f"min_dist must lie in [0, 1], not {min_dist!r}.")
    min_dist = float(min_dist)
    curve = _ab_params(1.0, min_dist)
    graph, neighbours, pca2 = _frame_graph(frames[-1], k, seed)
    layouts = [_optimise(graph, _initial_layout(pca2, seed), epochs, 1.0, curve, seed)]
    for x in frames[-2::-1]:
        later = layouts[0]
        graph, earlier_neighbours, _ = _frame_graph(x, k, seed)
        kept = _neighbour_overlap(earlier_neighbours, neighbours)
        rate = float(np.clip(1.0 - kept.mean(), *_LEARNING_RATE))
        # an instance among new neighbours starts where they are: the mean of their later positions
        moved = (1.0 - kept)[:, None]
        start = (1.0 - moved) * later + moved * later[earlier_neighbours[:, 1:]].mean(axis=1)
        layout = _optimise(graph, start, max(epochs // 5, 5), rate, curve, seed, anchor=start, hold=_HOLD * kept)
        layouts.insert(0, _procrustes(layout, later))
        neighbours = earlier_neighbours
    return layouts

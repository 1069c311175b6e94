"""Groups in a layer's activation space where errors concentrate: an error-aware mixture (Domino).

Domino (Eyuboglu et al., ICLR 2022) fits a mixture over an embedding Z, the label Y and the model's
error, P(S) P(Z|S) P(Y|S)^g P(E|S)^h, so that components follow the activations but are pulled
toward instances that fail together. Here Z is the layer's standardised activations reduced by PCA,
P(Z|S) a diagonal Gaussian, Y and E categorical. The error term weighs as much as a quarter of the
Gaussian's dimensions (h = dims / 4), so that errors shape the groups; the label term has Domino's
weight g = 1, so that a group may span classes (a corrupted kind of input fails whatever its
class). Components start from k-means run separately on the failing and the other instances
(Domino's confusion initialisation).

Fitting on the errors and then testing the same rows would find "significant" error groups in any
data, so the rows are split: the mixture is fitted on one half, every row is then assigned by its
activations and label only (never its error), and a group's test uses the other half alone.

The mixture's error term is strong, and it tends to cut a failing region into its failing and
its passing rows, which the label then keeps apart; a region where 60 % fail is one failure, not
two groups. So a second, simpler kind of group is offered beside it: error regions (`error_regions`),
the connected parts of activation space where the fitting half's errors, smoothed over each row's
nearest neighbours, run at a multiple of the overall rate. They too are drawn from the fitting
half's errors only and tested on the other half.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import logsumexp

CHUNK_ROWS = 8192
MERGE_DISTANCE = 1.0  # Bhattacharyya distance under which two components are one region
REFERENCE_ROWS = 4096  # fitting rows whose errors are smoothed over (the nearest-neighbour search is against them)
REGION_LEVELS = (1.5, 2.0, 3.0)  # smoothed error rates, as multiples of the overall rate, that bound a region


def embed(activations: np.ndarray, rows: np.ndarray, *, dims: int, fit_rows: np.ndarray, seed: int) -> np.ndarray:
    """Standardised activations of ``rows`` reduced to ``dims`` principal components (float32).

    A non-finite value (a NaN or an overflow the store recorded) counts as its neuron's mean, so
    one diverged neuron neither breaks the embedding nor places its rows far from the others."""
    from sklearn.decomposition import PCA

    sample = np.asarray(activations[np.sort(fit_rows)], dtype=np.float32)
    finite = np.isfinite(sample)
    count = np.maximum(finite.sum(axis=0), 1)
    values = np.where(finite, sample, 0.0).astype(np.float64)
    centre = values.sum(axis=0) / count
    scale = np.sqrt((np.where(finite, values - centre, 0.0) ** 2).sum(axis=0) / count)
    scale[~(scale > 1e-8)] = 1.0
    centre, scale = centre.astype(np.float32), scale.astype(np.float32)
    dims = max(1, min(dims, sample.shape[1], len(sample) - 1))
    with np.errstate(invalid="ignore", divide="ignore"):  # a layer without variance has no variance ratios
        pca = PCA(n_components=dims, svd_solver="randomized" if sample.shape[1] > 2 * dims else "full",
                  random_state=seed).fit(_standardise(sample, centre, scale))
    out = np.empty((len(rows), dims), np.float32)
    for lo in range(0, len(rows), CHUNK_ROWS):
        block = np.asarray(activations[rows[lo:lo + CHUNK_ROWS]], dtype=np.float32)
        out[lo:lo + CHUNK_ROWS] = pca.transform(_standardise(block, centre, scale))
    return out


def _standardise(block: np.ndarray, centre: np.ndarray, scale: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        z = (block - centre) / scale
    z[~np.isfinite(z)] = 0.0
    return z


class ErrorAwareMixture:
    """Diagonal-Gaussian mixture over Z with categorical label and error terms, fitted by EM."""

    def __init__(self, n_components: int, *, error_weight: float, label_weight: float = 1.0, max_iter: int = 60,
                 seed: int = 0):
        self.n_components = n_components
        self.error_weight = error_weight
        self.label_weight = label_weight
        self.max_iter = max_iter
        self.seed = seed

    def fit(self, z: np.ndarray, labels: np.ndarray, errors: np.ndarray, n_labels: int | None = None
            ) -> ErrorAwareMixture:
        """``n_labels``: how many label codes rows assigned later may have (default: those seen here)."""
        self.n_labels = int(labels.max()) + 1 if n_labels is None else int(n_labels)
        resp = self._initial(z, errors)
        previous = -np.inf
        for _ in range(self.max_iter):
            self._m_step(z, labels, errors, resp)
            log = self._log_joint(z, labels, errors)
            total = logsumexp(log, axis=1)
            resp = np.exp(log - total[:, None])
            mean = float(total.mean())
            if mean - previous < 1e-4 * abs(mean):
                break
            previous = mean
        return self

    def _initial(self, z, errors) -> np.ndarray:
        from sklearn.cluster import KMeans
        from sklearn.exceptions import ConvergenceWarning

        failing = errors > 0.5
        n_fail = max(1, min(self.n_components // 2, int(failing.sum()) // 2)) if failing.any() else 0
        assign = np.zeros(len(z), np.int64)
        start = 0
        for part, k in ((failing, n_fail), (~failing, self.n_components - n_fail)):
            k = min(k, int(part.sum()))
            if k <= 0:
                continue
            with warnings.catch_warnings():  # repeated points leave fewer clusters: that is fine here
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = KMeans(n_clusters=k, n_init=1, random_state=self.seed).fit(z[part])
            assign[part] = start + fit.labels_
            start += k
        self.n_components = start
        resp = np.zeros((len(z), start))
        resp[np.arange(len(z)), assign] = 1.0
        return resp

    def _m_step(self, z, labels, errors, resp) -> None:
        weights = resp.sum(axis=0) + 1e-9
        self.log_prior = np.log(weights / weights.sum())
        self.means = (resp.T @ z) / weights[:, None]
        spread = (resp.T @ (z * z)) / weights[:, None] - self.means ** 2
        self.variances = np.maximum(spread, 1e-3 * z.var(axis=0).mean() + 1e-6)
        onehot = np.eye(self.n_labels)[labels]
        self.log_label = np.log((resp.T @ onehot + 0.5) / (weights[:, None] + 0.5 * self.n_labels))
        fail = (resp.T @ errors + 0.5) / (weights + 1.0)
        self.log_error = np.log(np.stack([1 - fail, fail], axis=1))

    def _log_joint(self, z, labels, errors=None) -> np.ndarray:
        log = self.log_prior + self._log_gaussian(z) + self.label_weight * self.log_label[:, labels].T
        if errors is not None:
            log = log + self.error_weight * self.log_error[:, (errors > 0.5).astype(np.int64)].T
        return log

    def _log_gaussian(self, z) -> np.ndarray:
        inv = 1.0 / self.variances
        quad = (z * z) @ inv.T - 2 * z @ (self.means * inv).T + (self.means ** 2 * inv).sum(axis=1)
        return -0.5 * (quad + np.log(2 * np.pi * self.variances).sum(axis=1))

    def merged(self, distance: float = MERGE_DISTANCE) -> np.ndarray:
        """Group id per component: components whose Gaussians overlap (Bhattacharyya distance below
        ``distance``) are one group. The error term splits a region into a failing and a passing
        component with nearly the same Gaussian; a group is the region, so they are joined again."""
        k = self.n_components
        mean_var = (self.variances[:, None, :] + self.variances[None, :, :]) / 2
        diff = self.means[:, None, :] - self.means[None, :, :]
        log_det = np.log(self.variances).sum(axis=1)
        bhattacharyya = (diff * diff / mean_var).sum(axis=2) / 8 + 0.5 * (
            np.log(mean_var).sum(axis=2) - (log_det[:, None] + log_det[None, :]) / 2)
        parent = np.arange(k)

        def root(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, j in zip(*np.nonzero(np.triu(bhattacharyya < distance, 1))):
            parent[root(i)] = root(j)
        return np.unique([root(i) for i in range(k)], return_inverse=True)[1]

    def assign(self, z: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Each row's most likely component, from its activations and label only (not its error)."""
        out = np.empty(len(z), np.int64)
        for lo in range(0, len(z), CHUNK_ROWS):
            out[lo:lo + CHUNK_ROWS] = self._log_joint(z[lo:lo + CHUNK_ROWS], labels[lo:lo + CHUNK_ROWS]).argmax(1)
        return out


def error_regions(z: np.ndarray, reference: np.ndarray, errors: np.ndarray, *, min_size: int,
                  seed: int) -> list[tuple[np.ndarray, float]]:
    """Connected regions of ``z`` where the errors of the ``reference`` rows run high: (mask over z's rows, level).

    Each row's smoothed error is the mean error of its k nearest reference rows (itself left out),
    so only the reference rows' errors decide a row's membership. For each level in
    `REGION_LEVELS` (times the reference rows' mean error), the reference rows above it are linked
    to those of their neighbours that are too; each row above it joins the part of its nearest
    such neighbour. Parts holding fewer than ``min_size`` rows are dropped, and so are repeats.
    """
    from sklearn.neighbors import NearestNeighbors

    rng = np.random.default_rng(seed)
    if len(reference) > REFERENCE_ROWS:
        reference = np.sort(rng.choice(reference, REFERENCE_ROWS, replace=False))
    base = float(errors[reference].mean())
    k = int(np.clip(np.ceil(min_size * len(reference) / len(z)), 10, max(1, len(reference) - 1)))
    if base <= 0 or len(reference) <= k:
        return []
    search = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(z[reference])
    # positions in ``reference`` (fewer than 2**15 of them), nearest first, the row itself left out
    near = np.empty((len(z), k), np.int16)
    smoothed = np.empty(len(z))
    reference_errors = errors[reference]
    for lo in range(0, len(z), CHUNK_ROWS):
        found = search.kneighbors(z[lo:lo + CHUNK_ROWS], return_distance=False)
        itself = reference[found] == np.arange(lo, lo + len(found))[:, None]
        keep = ~itself
        keep[keep.sum(axis=1) > k, -1] = False  # a row that is no reference row keeps its k nearest
        near[lo:lo + CHUNK_ROWS] = found[keep].reshape(len(found), k)
        smoothed[lo:lo + CHUNK_ROWS] = reference_errors[near[lo:lo + CHUNK_ROWS]].mean(axis=1)
    links = near[reference]  # reference -> reference neighbours
    sources = np.repeat(np.arange(len(reference)), k)
    regions, seen = [], set()
    for level in REGION_LEVELS:
        high = smoothed >= level * base
        high_reference = high[reference]
        if high.sum() < min_size or not high_reference.any():
            continue
        keep = high_reference[:, None] & high_reference[links]
        graph = _graph(sources[keep.ravel()], links[keep], len(reference))
        part = np.full(len(reference), -1)
        part[high_reference] = _components(graph)[high_reference]
        nearest_high = np.where(high_reference[near], np.arange(k), k).min(axis=1)
        member = high & (nearest_high < k)
        label = np.full(len(z), -1)
        label[member] = part[near[member, nearest_high[member]]]
        for value in np.unique(label[label >= 0]):
            mask = label == value
            key = np.packbits(mask).tobytes()
            if mask.sum() >= min_size and key not in seen:
                seen.add(key)
                regions.append((mask, level))
    return regions


def _graph(sources: np.ndarray, targets: np.ndarray, n: int):
    from scipy.sparse import coo_matrix

    return coo_matrix((np.ones(len(sources)), (sources, targets)), shape=(n, n)).tocsr()


def _components(graph) -> np.ndarray:
    from scipy.sparse.csgraph import connected_components

    return connected_components(graph, directed=False)[1]


def neuron_contrast(activations: np.ndarray, rows: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group and neuron, the standardised mean difference between the group and the other rows.

    ``groups`` holds one boolean mask over ``rows`` per group; groups may overlap. Non-finite values
    are left out of their neuron's means and spreads."""
    n_groups, n_neurons = len(groups), activations.shape[1]
    inside = np.zeros((3, n_groups, n_neurons))  # finite count, sum, sum of squares within each group
    everywhere = np.zeros((3, n_neurons))
    for lo in range(0, len(rows), CHUNK_ROWS):
        block = np.asarray(activations[rows[lo:lo + CHUNK_ROWS]], dtype=np.float64)
        finite = np.isfinite(block)
        block = np.where(finite, block, 0.0)
        parts = np.stack([finite.astype(np.float64), block, block * block])
        member = groups[:, lo:lo + CHUNK_ROWS].astype(np.float64)
        inside += np.einsum("gr,krn->kgn", member, parts, optimize=True)
        everywhere += parts.sum(axis=1)
    outside = everywhere[:, None, :] - inside
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean_in, mean_out = inside[1] / inside[0], outside[1] / outside[0]
        var_in = inside[2] / inside[0] - mean_in ** 2
        var_out = outside[2] / outside[0] - mean_out ** 2
        effect = (mean_in - mean_out) / np.sqrt(np.maximum((var_in + var_out) / 2, 1e-12))
    return np.nan_to_num(effect, posinf=0.0, neginf=0.0)

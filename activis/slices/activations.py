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
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

CHUNK_ROWS = 8192
MERGE_DISTANCE = 1.0  # Bhattacharyya distance under which two components are one region


def embed(activations: np.ndarray, rows: np.ndarray, *, dims: int, fit_rows: np.ndarray, seed: int) -> np.ndarray:
    """Standardised activations of ``rows`` reduced to ``dims`` principal components (float32)."""
    from sklearn.decomposition import PCA

    sample = np.asarray(activations[np.sort(fit_rows)], dtype=np.float32)
    centre = sample.mean(axis=0)
    scale = sample.std(axis=0)
    scale[~(scale > 1e-8)] = 1.0
    dims = max(1, min(dims, sample.shape[1], len(sample) - 1))
    pca = PCA(n_components=dims, svd_solver="randomized" if sample.shape[1] > 2 * dims else "full",
              random_state=seed).fit((sample - centre) / scale)
    out = np.empty((len(rows), dims), np.float32)
    for lo in range(0, len(rows), CHUNK_ROWS):
        block = np.asarray(activations[rows[lo:lo + CHUNK_ROWS]], dtype=np.float32)
        out[lo:lo + CHUNK_ROWS] = pca.transform(np.nan_to_num((block - centre) / scale))
    return out


class ErrorAwareMixture:
    """Diagonal-Gaussian mixture over Z with categorical label and error terms, fitted by EM."""

    def __init__(self, n_components: int, *, error_weight: float, label_weight: float = 1.0, max_iter: int = 60,
                 seed: int = 0):
        self.n_components = n_components
        self.error_weight = error_weight
        self.label_weight = label_weight
        self.max_iter = max_iter
        self.seed = seed

    def fit(self, z: np.ndarray, labels: np.ndarray, errors: np.ndarray) -> ErrorAwareMixture:
        self.n_labels = int(labels.max()) + 1
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

        failing = errors > 0.5
        n_fail = max(1, min(self.n_components // 2, int(failing.sum()) // 2)) if failing.any() else 0
        assign = np.zeros(len(z), np.int64)
        start = 0
        for part, k in ((failing, n_fail), (~failing, self.n_components - n_fail)):
            k = min(k, int(part.sum()))
            if k <= 0:
                continue
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


def neuron_contrast(activations: np.ndarray, rows: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group and neuron, the standardised mean difference between the group and the other rows."""
    n_neurons = activations.shape[1]
    sums = np.zeros((n_groups, n_neurons))
    squares = np.zeros((n_groups, n_neurons))
    for lo in range(0, len(rows), CHUNK_ROWS):
        block = np.nan_to_num(np.asarray(activations[rows[lo:lo + CHUNK_ROWS]], dtype=np.float64))
        onehot = np.eye(n_groups)[groups[lo:lo + CHUNK_ROWS]]
        sums += onehot.T @ block
        squares += onehot.T @ (block * block)
    counts = np.bincount(groups, minlength=n_groups).astype(np.float64)[:, None]
    total, total_sq, n = sums.sum(0), squares.sum(0), float(len(rows))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = sums / counts
        var_in = squares / counts - mean_in ** 2
        rest = np.maximum(n - counts, 1.0)
        mean_out = (total - sums) / rest
        var_out = (total_sq - squares) / rest - mean_out ** 2
        effect = (mean_in - mean_out) / np.sqrt(np.maximum((var_in + var_out) / 2, 1e-12))
    return np.nan_to_num(effect)

"""Neuron orderings for the activation matrix: by one row, or clustered by profile."""

from __future__ import annotations

import numpy as np

from .errors import SubsetError

# optimal leaf ordering costs ~O(n^3); above this many neurons the plain dendrogram order is used
LEAF_ORDERING_LIMIT = 768
# above this many neurons, hierarchical clustering (quadratic memory) runs on k-means centroids
EXACT_CLUSTER_LIMIT = 4096


def sort_neurons(values: np.ndarray, descending: bool = True) -> np.ndarray:
    """Neuron order by one row's values: largest first (or smallest), NaN last, ties by index."""
    values = np.asarray(values, dtype=np.float64)
    key = -values if descending else values.copy()
    key[np.isnan(key)] = np.inf
    return np.lexsort((np.arange(len(values)), key)).astype(np.int32)


def difference(values: np.ndarray, reference: int) -> np.ndarray:
    """Every row minus the reference row: what differs from, say, the class a row is confused with."""
    values = np.asarray(values)
    return values - values[reference][None, :]


def cluster_neurons(values: np.ndarray, *, metric: str = "euclidean", method: str = "average",
                    seed: int = 0) -> np.ndarray:
    """Neuron order that puts neurons with similar profiles across the rows side by side.

    Hierarchical clustering of the neurons' column profiles, leaves in dendrogram order (with
    optimal leaf ordering for up to 768 neurons). Rows that are entirely NaN (empty subsets) are
    ignored. Beyond 4,096 neurons the dendrogram is built over k-means centroids and each cluster's
    neurons follow their centroid, ordered by distance to it.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise SubsetError(f"values must be rows x neurons, got shape {values.shape}")
    profiles = values[~np.isnan(values).all(axis=1)].T  # neurons x rows
    n = profiles.shape[0]
    if n < 3 or profiles.shape[1] == 0:
        return np.arange(n, dtype=np.int32)
    profiles = np.nan_to_num(profiles, nan=0.0)
    if n <= EXACT_CLUSTER_LIMIT:
        return _seriate(profiles, metric, method).astype(np.int32)
    from sklearn.cluster import MiniBatchKMeans

    n_clusters = EXACT_CLUSTER_LIMIT // 16
    km = MiniBatchKMeans(n_clusters=n_clusters, random_state=seed, n_init=3).fit(profiles)
    centroid_order = _seriate(km.cluster_centers_, metric, method)
    distance = np.linalg.norm(profiles - km.cluster_centers_[km.labels_], axis=1)
    rank = np.empty(n_clusters, np.int64)
    rank[centroid_order] = np.arange(n_clusters)
    return np.lexsort((np.arange(n), distance, rank[km.labels_])).astype(np.int32)


def _seriate(points: np.ndarray, metric: str, method: str) -> np.ndarray:
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import pdist

    distances = pdist(points, metric=metric)
    distances[~np.isfinite(distances)] = np.nanmax(distances, initial=1.0) if np.isfinite(distances).any() else 1.0
    tree = hierarchy.linkage(distances, method=method)
    if len(points) <= LEAF_ORDERING_LIMIT:
        tree = hierarchy.optimal_leaf_ordering(tree, distances)
    return hierarchy.leaves_list(tree)
